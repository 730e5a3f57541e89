#!/usr/bin/env bash
# Attention alone: fsdpgen's CUDA flash kernels (bf16, causal; bench/attention_fsdpgen.c) and
# cuDNN's fused flash attention (bench/attention_cudnn.c, rt_cudnn.h) against PyTorch's
# scaled_dot_product_attention (bench/attention_torch.py) on the two bench models' attention
# shapes, in one run on one GPU. Prints ms and TFLOP/s per pass and how many times faster
# each is than SDPA (x > 1: faster). Without a GPU it builds the binaries and prints
# "bench/attention.sh: no GPU: nothing measured".
#   bench/attention.sh [--iters N]
set -u
cd "$(dirname "$0")/.."
. bench/attention_common.sh
attention_iters bench/attention.sh "$@"
ninja -f runtime/cuda.ninja build/bench/attention_fsdpgen build/bench/attention_cudnn >/dev/null ||
  { echo "bench/attention.sh: build failed"; exit 1; }
if ! have_gpu; then
  echo "bench/attention.sh: no GPU: nothing measured"
  exit 0
fi
printf '%-10s %-14s %10s %10s %10s %9s %9s %9s %9s %9s\n' shape pass "sdpa ms" "fsdpgen ms" \
  "cudnn ms" "sdpa TF" "fsdpgen TF" "cudnn TF" "fsdpgen x" "cudnn x"
status=0
for s in "${attention_shapes[@]}"; do
  set -- $s
  name=$1; shift
  ours=$(build/bench/attention_fsdpgen "$@" "$iters") || { echo "$name: attention_fsdpgen failed"; status=1; continue; }
  cudnn=$(build/bench/attention_cudnn "$@" "$iters") || { echo "$name: attention_cudnn failed"; status=1; }
  grep '^REFUSED\|^# cudnn' <<<"$cudnn" | sed "s/^# //; s/^/$name: /"
  theirs=$(python3 bench/attention_torch.py "$@" "$iters") || { echo "$name: attention_torch.py failed"; status=1; continue; }
  for pass in "${attention_passes[@]}"; do
    read -r oms otf <<<"$(attention_result fsdpgen "$pass" "$ours")"
    read -r cms ctf <<<"$(attention_result cudnn "$pass" "$cudnn")"
    read -r tms ttf <<<"$(attention_result torch_sdpa "$pass" "$theirs")"
    [[ -n $oms && -n $tms ]] || { echo "$name $pass: no RESULT line"; status=1; continue; }
    printf '%-10s %-14s %10s %10s %10s %9s %9s %9s %8.2fx %9s\n' "$name" "$pass" "$tms" "$oms" \
      "${cms:--}" "$ttf" "$otf" "${ctf:--}" "$(awk -v a="$tms" -v b="$oms" 'BEGIN { print a / b }')" \
      "$([[ -n $cms ]] && awk -v a="$tms" -v b="$cms" 'BEGIN { printf "%.2fx", a / b }' || echo -)"
  done
done
exit $status
