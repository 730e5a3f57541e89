#!/usr/bin/env bash
# Tile-configuration sweep of the tensor-core attention kernels (runtime/cuda/kernels/
# flash_attention_tc.cuh, HD <= 64: rtc_tc_cfg<64>, set value by value with -DRTC_TC64_*).
# Compiles runtime/cuda/kernels/attention.cu once per variant below, in parallel (sm_90a
# only), links each into its own bench/attention_fsdpgen, prints ptxas's registers and
# spills of the bf16 kernels per variant, then times every variant on bench/attention.sh's
# shapes against PyTorch's SDPA (run once per shape). Every variant keeps FBC (the forward's
# key tile, the online softmax's step), so all give the default's bits
# (tests/cuda/test_flash_tc_emu.cc checks these configurations on the emulator). Without a GPU it builds and prints the
# registers, then "bench/attention_sweep.sh: no GPU: nothing measured".
#   bench/attention_sweep.sh [--iters N]
set -u
cd "$(dirname "$0")/.."
. bench/attention_common.sh
attention_iters bench/attention_sweep.sh "$@"
# name: macros. Per kernel BR x BC tile, MT row tiles (of 16) per warp, MB blocks per SM
# (__launch_bounds__); defaults: forward FBR 128 FBC 64 FMT 1 FMB 2, dK/dV KBC 64 KBR 32
# KMT 1 KMB 4, dQ QBR 64 QBC 32 QMT 1 QMB 4. The backward's time is dK/dV's plus dQ's (and
# D's), so kb*/qb* change one of them.
variants=(
  "default:"
  "mt2:-DRTC_TC64_FMT=2 -DRTC_TC64_KBC=128 -DRTC_TC64_KMT=2 -DRTC_TC64_KMB=2
    -DRTC_TC64_QBR=128 -DRTC_TC64_QMT=2 -DRTC_TC64_QMB=2"
  "mt2_big:-DRTC_TC64_FBR=256 -DRTC_TC64_FMT=2 -DRTC_TC64_FMB=1 -DRTC_TC64_KBC=256
    -DRTC_TC64_KMT=2 -DRTC_TC64_KMB=1 -DRTC_TC64_QBR=256 -DRTC_TC64_QMT=2 -DRTC_TC64_QMB=1"
  "mt2_small:-DRTC_TC64_FBR=64 -DRTC_TC64_FMT=2 -DRTC_TC64_FMB=4 -DRTC_TC64_KMT=2
    -DRTC_TC64_QMT=2"
  "kb2:-DRTC_TC64_KBC=128 -DRTC_TC64_KMT=2 -DRTC_TC64_KMB=2"
  "qb2:-DRTC_TC64_QBR=128 -DRTC_TC64_QMT=2 -DRTC_TC64_QMB=2"
)
nvcc=/usr/local/cuda/bin/nvcc
flags="-std=c++17 -O2 -fmad=false -lineinfo -Iruntime/include -gencode arch=compute_90a,code=sm_90a
  -Xcompiler -Wall,-Wextra -Werror all-warnings -Xptxas -v"
ldflags="-L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcublas -lcublasLt -lcudart
  -lopenblas -lm -pthread -lstdc++"
ninja build/bench/obj/attention_fsdpgen.o build/cuda/librt_kernels_cuda.a build/cuda/ref/check.o \
  >/dev/null || { echo "bench/attention_sweep.sh: build failed"; exit 1; }
# one variant: attention.o with its macros, the library with that member replaced, the binary
build_variant() {
  local dir=build/bench/sweep/$1
  mkdir -p "$dir" && cp build/cuda/librt_kernels_cuda.a "$dir/lib.a" &&
    $nvcc $flags $2 -c runtime/cuda/kernels/attention.cu -o "$dir/attention.o" >"$dir/ptxas.txt" 2>&1 &&
    ar rs "$dir/lib.a" "$dir/attention.o" 2>/dev/null &&
    cc build/bench/obj/attention_fsdpgen.o "$dir/lib.a" build/cuda/ref/check.o \
      -o "$dir/attention_fsdpgen" $ldflags
}
pids=()
for v in "${variants[@]}"; do
  build_variant "${v%%:*}" "${v#*:}" & pids+=($!)
done
status=0
for i in "${!pids[@]}"; do
  name=${variants[$i]%%:*}
  wait "${pids[$i]}" ||
    { echo "$name: build failed (build/bench/sweep/$name/ptxas.txt)"; status=1; }
done
[[ $status -eq 0 ]] || exit 1
# registers and spill bytes (stores/loads) of the bf16 HDP 64 kernels without dropout (their
# bool template argument false: Lb0E; the dropout instantiations are Lb1E), from ptxas -v
echo "ptxas (sm_90a), bf16 kernels of HD <= 64: registers, spill stores/loads in bytes"
for v in "${variants[@]}"; do
  name=${v%%:*}
  printf '%-10s %s\n' "$name" "$(awk '
    /Compiling entry function/ { k = "" }
    /Compiling entry function .*rtc_fa_tc_.*bfloat16.*rtc_tc_cfgILi64E/ && !/Lb1E/ {
      if ($0 ~ /forward/) k = "forward"; else if ($0 ~ /dkdv/) k = "dK/dV"; else k = "dQ" }
    k != "" && /spill stores/ { st = $5; ld = $9 }
    k != "" && /Used [0-9]+ registers/ {
      for (i = 1; i <= NF; i++) if ($i == "Used") r = $(i + 1)
      printf "%s %s regs %s/%s  ", k, r, st, ld; k = "" }' "build/bench/sweep/$name/ptxas.txt")"
done
if ! have_gpu; then
  echo "bench/attention_sweep.sh: no GPU: nothing measured"
  exit 0
fi
printf '%-10s %-10s %-14s %12s %12s %9s\n' variant shape pass "fsdpgen ms" "sdpa ms" "fsdpgen x"
for s in "${attention_shapes[@]}"; do
  set -- $s
  name=$1; shift
  theirs=$(python3 bench/attention_torch.py "$@" "$iters") ||
    { echo "$name: attention_torch.py failed"; status=1; continue; }
  for v in "${variants[@]}"; do
    vn=${v%%:*}
    ours=$(build/bench/sweep/$vn/attention_fsdpgen "$@" "$iters") ||
      { echo "$vn $name: attention_fsdpgen failed"; status=1; continue; }
    for pass in "${attention_passes[@]}"; do
      read -r oms _ <<<"$(attention_result fsdpgen "$pass" "$ours")"
      read -r tms _ <<<"$(attention_result torch_sdpa "$pass" "$theirs")"
      [[ -n $oms && -n $tms ]] || { echo "$vn $name $pass: no RESULT line"; status=1; continue; }
      printf '%-10s %-10s %-14s %12s %12s %8.2fx\n' "$vn" "$name" "$pass" "$oms" "$tms" \
        "$(awk -v a="$tms" -v b="$oms" 'BEGIN { print a / b }')"
    done
  done
done
exit $status
