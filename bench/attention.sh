#!/usr/bin/env bash
# Attention alone: fsdpgen's CUDA flash kernels (bf16, causal; bench/attention_fsdpgen.c)
# against PyTorch's scaled_dot_product_attention (bench/attention_torch.py) on the two
# bench models' attention shapes, in one run on one GPU. Prints ms and TFLOP/s per pass
# (backward_fused: fsdpgen's backward with dQ in its dK/dV kernel, against the same SDPA
# backward) and how many times faster fsdpgen is. Without a GPU it builds the binary and prints
# "bench/attention.sh: no GPU: nothing measured".
#   bench/attention.sh [--iters N]
set -u
cd "$(dirname "$0")/.."
. bench/attention_common.sh
attention_iters bench/attention.sh "$@"
ninja build/bench/attention_fsdpgen >/dev/null || { echo "bench/attention.sh: build failed"; exit 1; }
if ! have_gpu; then
  echo "bench/attention.sh: no GPU: nothing measured"
  exit 0
fi
printf '%-10s %-14s %12s %12s %10s %10s %9s\n' shape pass "fsdpgen ms" "sdpa ms" "fsdpgen TF" "sdpa TF" "fsdpgen x"
status=0
for s in "${attention_shapes[@]}"; do
  set -- $s
  name=$1; shift
  ours=$(build/bench/attention_fsdpgen "$@" "$iters") || { echo "$name: attention_fsdpgen failed"; status=1; continue; }
  theirs=$(python3 bench/attention_torch.py "$@" "$iters") || { echo "$name: attention_torch.py failed"; status=1; continue; }
  for pass in "${attention_passes[@]}"; do
    read -r oms otf <<<"$(attention_result fsdpgen "$pass" "$ours")"
    read -r tms ttf <<<"$(attention_result torch_sdpa "${pass%_fused}" "$theirs")"
    [[ -n $oms && -n $tms ]] || { echo "$name $pass: no RESULT line"; status=1; continue; }
    printf '%-10s %-14s %12s %12s %10s %10s %8.2fx\n' "$name" "$pass" "$oms" "$tms" "$otf" "$ttf" \
      "$(awk -v a="$tms" -v b="$oms" 'BEGIN { print a / b }')"
  done
done
exit $status
