#!/usr/bin/env bash
# The fused cross-entropy alone: fsdpgen's loss and gradient with each row staged in shared
# memory (read from DRAM once) against read twice, on the bench models' shapes, in one run on
# one GPU (bench/loss_rows.c: ms, ratio, GB/s and #wrong per shape; exit 1 when any element
# differs). Without a GPU it builds the binary, which prints "loss_rows: no GPU: nothing
# measured".
#   bench/loss.sh [ITERS]
set -u
cd "$(dirname "$0")/.."
ninja -f runtime/cuda.ninja build/bench/loss_rows >/dev/null || { echo "bench/loss.sh: build failed"; exit 1; }
exec build/bench/loss_rows "$@"
