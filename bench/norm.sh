#!/usr/bin/env bash
# The norms alone: fsdpgen's RMSNorm and LayerNorm kernels that take a row per warp against
# the ones that take a block per row, and a residual add with the norm of its sum in one
# call against the two calls, on the bench models' shapes, in one run on one GPU
# (bench/norm_rows.c: ms, ratio, GB/s and #wrong per shape and pass; exit 1 when any
# element disagrees). Without a GPU it builds the binary, which prints "norm_rows: no GPU:
# nothing measured".
#   bench/norm.sh [ITERS]
set -u
cd "$(dirname "$0")/.."
ninja -f runtime/cuda.ninja build/bench/norm_rows >/dev/null || { echo "bench/norm.sh: build failed"; exit 1; }
exec build/bench/norm_rows "$@"
