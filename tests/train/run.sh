#!/usr/bin/env bash
# Builds the training driver (runtime/train.ninja) with the libraries it links, and runs
# its test suite (tests/train/test_train.c: in-process checks plus the tiny training and
# conformance binaries as subprocesses) in a normal build and in an AddressSanitizer +
# UBSan build, then tests/train/test_interrupts.sh (kill -9 during checkpoint saves, a
# full disk, data files changed during a run) on each build's training binary, then the
# stream and event ordering of the CUDA step backend on the CPU
# (tests/train/test_stream_order.c; needs the CUDA headers only, skipped without them),
# then the PyTorch load_state_dict check of a saved file (skipped, not failed, when torch
# cannot be imported). Prints one line per suite (full output with
# VERBOSE=1, and always for a suite that fails) and ends with the summed
# `N passed, N failed`. Exit status is non-zero if anything failed.
set -u
cd "$(dirname "$0")/../.."

work=$(mktemp -d "${TMPDIR:-/tmp}/fsdpgen_train_tests.XXXXXX")
trap 'rm -rf "$work"' EXIT

suite_tag="[train]"
. tests/common/suite.sh

# ---- build --------------------------------------------------------------------------

build() {
    ninja -f runtime/core.ninja build/runtime/librt_core.a build/runtime/asan/librt_core.a &&
        ninja -f runtime/io.ninja build/io/librt_io.a build/io/asan/librt_io.a &&
        ninja -f runtime/kernels.ninja build/kernels/librt_kernels.a build/kernels/asan/librt_kernels.a &&
        ninja -f runtime/step.ninja build/step/librt_step.a &&
        ninja -f runtime/train.ninja train_lib train_tests train_asan
}
if ! build >"$work/build.log" 2>&1; then
    cat "$work/build.log"
    echo "[train] build failed"
    echo "0 passed, 1 failed"
    exit 1
fi

# ---- suites -------------------------------------------------------------------------

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
mkdir -p "$work/normal" "$work/asan" "$work/torch"
run_suite test_train build/train/tests/test_train build/train/tests/tiny_train \
    build/train/tests/tiny_conformance "$work/normal"
run_suite asan/test_train build/train/asan/tests/test_train build/train/asan/tests/tiny_train \
    build/train/asan/tests/tiny_conformance "$work/asan"

# kill -9 during checkpoint saves, a full disk, data files that change under the run: the
# training binary of each build (FSDPGEN_SLOW=1: more kill iterations).
mkdir -p "$work/interrupts" "$work/interrupts_asan"
run_suite interrupts tests/train/test_interrupts.sh build/train/tests/tiny_train "$work/interrupts"
run_suite asan/interrupts tests/train/test_interrupts.sh build/train/asan/tests/tiny_train \
    "$work/interrupts_asan"

# ---- CUDA step backend: stream order (CPU) ---------------------------------------------

cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda_home/include/cuda_runtime.h" ]; then
    skipped+=("stream_order: SKIP no CUDA headers in $cuda_home/include")
    echo "[train] stream_order: skipped"
elif ! cc -std=c11 -Wall -Wextra -Werror -O1 -g -D_GNU_SOURCE -pthread \
        -fsanitize=address,undefined -fno-sanitize-recover=all -Iruntime/include -Iruntime/step \
        -Iruntime/cuda/step -I"$cuda_home/include" -Itests/common tests/train/test_stream_order.c \
        runtime/cuda/step/backend.c -o "$work/test_stream_order" -lm >"$work/stream_order.log" 2>&1; then
    cat "$work/stream_order.log"
    echo "[train] stream_order: build failed, counted as 1 failure"
    failed=$((failed + 1))
else
    run_suite stream_order "$work/test_stream_order"
fi

# ---- PyTorch load_state_dict ----------------------------------------------------------

find_python
if [ -z "$py" ]; then
    skipped+=("torch_load: SKIP no python3 found")
    echo "[train] torch_load: skipped"
else
    run_suite torch_load "$py" tests/train/torch_load.py build/train/tests/tiny_train "$work/torch"
fi

# ---- summary ------------------------------------------------------------------------

suite_summary
