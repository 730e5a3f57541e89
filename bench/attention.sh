#!/usr/bin/env bash
# Attention alone: fsdpgen's CUDA flash kernels (bf16, causal; bench/attention_fsdpgen.c)
# against PyTorch's scaled_dot_product_attention (bench/attention_torch.py) on the two
# bench models' attention shapes, in one run on one GPU. Prints ms and TFLOP/s per pass
# and how many times faster fsdpgen is. Without a GPU it builds the binary and prints
# "bench/attention.sh: no GPU: nothing measured".
#   bench/attention.sh [--iters N]
set -u
cd "$(dirname "$0")/.."
iters=20
if [[ $# -eq 2 && $1 == --iters && $2 =~ ^[1-9][0-9]*$ ]]; then
  iters=$2
elif [[ $# -ne 0 ]]; then
  echo "usage: bench/attention.sh [--iters N]" >&2
  exit 2
fi
ninja build/bench/attention_fsdpgen >/dev/null || { echo "bench/attention.sh: build failed"; exit 1; }
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "bench/attention.sh: no GPU: nothing measured"
  exit 0
fi
# name, B, T, NH, NKV, HD (bench/specs: GPT-2 124M at 16 x 1024, Llama 1B at 4 x 2048)
shapes=("gpt2_124m 16 1024 12 12 64" "llama_1b 4 2048 32 8 64")
printf '%-10s %-9s %12s %12s %10s %10s %9s\n' shape pass "fsdpgen ms" "sdpa ms" "fsdpgen TF" "sdpa TF" "fsdpgen x"
status=0
for s in "${shapes[@]}"; do
  set -- $s
  name=$1; shift
  ours=$(build/bench/attention_fsdpgen "$@" "$iters") || { echo "$name: attention_fsdpgen failed"; status=1; continue; }
  theirs=$(python3 bench/attention_torch.py "$@" "$iters") || { echo "$name: attention_torch.py failed"; status=1; continue; }
  for pass in forward backward; do
    get() { sed -n "s/^RESULT impl=$1 pass=$pass ms=\([0-9.]*\) tflops=\([0-9.]*\)$/\1 \2/p" <<<"$2"; }
    read -r oms otf <<<"$(get fsdpgen "$ours")"
    read -r tms ttf <<<"$(get torch_sdpa "$theirs")"
    [[ -n $oms && -n $tms ]] || { echo "$name $pass: no RESULT line"; status=1; continue; }
    printf '%-10s %-9s %12s %12s %10s %10s %8.2fx\n' "$name" "$pass" "$oms" "$tms" "$otf" "$ttf" \
      "$(awk -v a="$tms" -v b="$oms" 'BEGIN { print a / b }')"
  done
done
exit $status
