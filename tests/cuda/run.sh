#!/usr/bin/env bash
# Builds the CUDA kernels and their test (runtime/cuda.ninja) and runs the test. The build
# needs nvcc and cuBLAS under /usr/local/cuda but no GPU, so CI compiles everything; the
# test itself skips cleanly (`SKIP cuda kernels: no GPU`, `0 passed, 0 failed`) where
# cudaGetDeviceCount finds no device, and compares every CUDA kernel with the CPU kernel
# where it does. The last line is `N passed, N failed`; the exit status is non-zero when
# anything failed.
set -u
cd "$(dirname "$0")/../.."

nvcc=/usr/local/cuda/bin/nvcc
if [ ! -x "$nvcc" ]; then
    echo "tests/cuda: error: $nvcc not found (hint: install the CUDA toolkit with cuBLAS under /usr/local/cuda)"
    echo "0 passed, 1 failed"
    exit 1
fi

start=$(date +%s)
if ! ninja -f runtime/cuda.ninja cuda cuda_tests; then
    echo "tests/cuda: error: build failed"
    echo "0 passed, 1 failed"
    exit 1
fi
echo "tests/cuda: build up to date after $(( $(date +%s) - start ))s"

out=$(build/cuda/test_cuda_kernels 2>&1)
rc=$?
printf '%s\n' "$out"
last=$(printf '%s\n' "$out" | tail -n 1)
if [[ "$last" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
    passed=${BASH_REMATCH[1]}
    failed=${BASH_REMATCH[2]}
else
    passed=0
    failed=0
fi
# a crash or an aborted check without a failed line still counts as a failure
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
    echo "tests/cuda: test_cuda_kernels exited with status $rc"
    failed=1
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
