#!/usr/bin/env bash
# Builds the CUDA kernels and their tests (runtime/cuda.ninja) and runs the tests. The
# build needs nvcc and cuBLAS under /usr/local/cuda but no GPU, so CI compiles everything.
# Tests needing a GPU skip cleanly (`SKIP ...: no GPU`, `0 passed, 0 failed`) where
# cudaGetDeviceCount finds no device; where it does, test_cuda_kernels compares every CUDA
# kernel with the CPU kernel, test_cuda_streams checks streams and CUDA-graph capture, and
# test_dtype_bits the GPU's 16-bit conversions against the host's bits for every input.
# test_optim_math, test_mma_layout_emu, test_flash_emu and test_flash_tc_emu (slow tier:
# their _tsan builds and test_flash_tc_emu_others) run everywhere: the optimizer math
# shared by host and device compiled for the host, the mma.sync fragment helpers on the
# emulator (test_mma_layout runs the same checks on the GPU), and the fp32 and tensor-core
# (mma.sync) flash-attention kernels emulated on the CPU (CUDA threads as fibers under
# ASan+UBSan, a pthread each under TSan), each against the CPU kernels; and
# test_cuda_kernels_emu / test_cuda_streams_emu, test_cuda_kernels and test_cuda_streams
# themselves linked against every runtime/cuda/kernels kernel on the CPU emulator (tests/cuda/emu:
# the CUDA runtime, cuBLAS and graph capture on the host, CUDA threads as fibers; lazy stream
# modes), so every GPU check also runs here; test_cuda_streams_emu also in the emulator's
# lazy mode, which test_lazy_emu checks (both lazy modes). test_cudnn_host checks the cuDNN
# attention's host parts and lowers its graphs to cuDNN descriptors (no GPU needed);
# test_cudnn_attention runs it on a GPU against the CPU kernel (skips without one). The
# emulated programs are built without sanitizers; the slow tier runs each again built with
# ASan+UBSan (`_san`).
# The last line is the summed `N passed, N failed`; the exit status is non-zero when
# anything failed.
set -u
cd "$(dirname "$0")/../.."

nvcc=/usr/local/cuda/bin/nvcc
if [ ! -x "$nvcc" ]; then
    echo "tests/cuda: error: $nvcc not found (hint: install the CUDA toolkit with cuBLAS under /usr/local/cuda)"
    echo "0 passed, 1 failed"
    exit 1
fi

# FSDPGEN_SLOW=1 (tests/run_all.sh --all) adds the slow tier: the flash kernels under
# ThreadSanitizer, the tensor-core kernels' other tile configurations and the emulated
# kernels under ASan+UBSan.
slow=${FSDPGEN_SLOW:-0}
targets="cuda cuda_tests cuda_resources"
[ "$slow" = 1 ] && targets="$targets cuda_tests_slow"
start=$(date +%s)
if ! ninja -f runtime/cuda.ninja $targets; then
    echo "tests/cuda: error: build failed"
    echo "0 passed, 1 failed"
    exit 1
fi
echo "tests/cuda: build up to date after $(( $(date +%s) - start ))s"

# MODE:NAME runs NAME with the emulator's lazy mode CUDA_EMU_LAZY=MODE (1: each stream's work
# delayed until something needs it; low: only those below the highest priority), so a missing
# stream dependency changes the results; nobgrad:NAME with an emulated cuBLASLt that has no
# bias-gradient epilogue (EMU_CUBLASLT_NO_BGRAD=1: the linear backward's column sums instead,
# as on a GPU whose cuBLASLt declines it)
tests="test_optim_math test_mma_layout_emu test_flash_emu test_flash_tc_emu test_mma_layout
test_dtype_bits test_cuda_kernels test_cuda_streams test_cuda_kernels_emu test_cuda_streams_emu
1:test_cuda_streams_emu 1:test_lazy_emu low:test_lazy_emu nobgrad:test_cuda_kernels_emu
test_cudnn_host test_cudnn_attention"
[ "$slow" = 1 ] && tests="$tests test_flash_emu_tsan test_flash_tc_emu_tsan test_flash_tc_emu_others
test_cuda_kernels_emu_san test_cuda_streams_emu_san 1:test_cuda_streams_emu_san 1:test_lazy_emu_san
low:test_lazy_emu_san"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:halt_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1}"

# The programs run two at a time (the longest first), each into its own files; their
# output is printed and counted in the list's order.
work=$(mktemp -d "${TMPDIR:-/tmp}/fsdpgen_cuda.XXXXXX")
trap 'rm -rf "$work"' EXIT
order="test_cuda_kernels_emu $(echo $tests | tr ' ' '\n' | grep -vx test_cuda_kernels_emu | tr '\n' ' ')"
n=0
for t in $order; do
    n=$((n + 1))
    [ "$n" -gt 2 ] && wait -n
    (
        lazy=0 nobgrad=0
        case $t in
            nobgrad:*) nobgrad=1 ;;
            *:*) lazy=${t%%:*} ;;
        esac
        t0=$SECONDS
        CUDA_EMU_LAZY=$lazy EMU_CUBLASLT_NO_BGRAD=$nobgrad "build/cuda/${t#*:}" >"$work/$t.out" 2>&1
        echo "$? $((SECONDS - t0))" >"$work/$t.rc"
    ) &
done
wait

# Every kernel launchable at its largest block (registers against an SM's register file,
# from ptxas's report: tests/cuda/kernel_resources.py); no GPU needed.
t0=$SECONDS
python3 tests/cuda/kernel_resources.py --control build/cuda/res/resources_control.ptxas \
    $(ls build/cuda/res/*.ptxas | grep -v /resources_control) >"$work/kernel_resources.out" 2>&1
echo "$? $((SECONDS - t0))" >"$work/kernel_resources.rc"

passed=0
failed=0
for t in $tests kernel_resources; do
    echo "== $t"
    read -r rc secs <"$work/$t.rc" || { rc=1 secs=0; }
    cat "$work/$t.out"
    echo "tests/cuda: $t took $secs s"
    last=$(tail -n 1 "$work/$t.out")
    if [[ "$last" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
        p=${BASH_REMATCH[1]}
        f=${BASH_REMATCH[2]}
    else
        p=0
        f=0
    fi
    # a crash or an aborted check without a failed line still counts as a failure
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "tests/cuda: $t exited with status $rc"
        f=1
    fi
    passed=$((passed + p))
    failed=$((failed + f))
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
