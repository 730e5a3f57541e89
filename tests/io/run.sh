#!/usr/bin/env bash
# Builds and runs the runtime I/O tests: every suite in a normal build and in an
# AddressSanitizer + UBSan build, then the PyTorch interop check (skipped, not failed,
# when torch cannot be imported). Prints one line per suite (full output with
# VERBOSE=1, and always for a suite that fails) and ends with the summed
# `N passed, N failed`. Exit status is non-zero if anything failed.
set -u
cd "$(dirname "$0")/../.."

work=$(mktemp -d "${TMPDIR:-/tmp}/fsdpgen_io_tests.XXXXXX")
trap 'rm -rf "$work"' EXIT
export TMPDIR="$work"  # the suites make their own temp dirs under it

suite_tag="[io]"
. tests/common/suite.sh

# ---- build --------------------------------------------------------------------------

if ! ninja -f runtime/io.ninja io_lib io_tests io_asan >"$work/build.log" 2>&1; then
    cat "$work/build.log"
    echo "[io] build failed"
    echo "0 passed, 1 failed"
    exit 1
fi

# ---- suites -------------------------------------------------------------------------

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
for t in test_safetensors test_data test_checkpoint test_trace; do
    run_suite "$t" "build/io/tests/$t"
    run_suite "asan/$t" "build/io/asan/tests/$t"
done

# ---- PyTorch interop ----------------------------------------------------------------

find_python
if [ -z "$py" ]; then
    skipped+=("torch_interop: SKIP no python3 found")
    echo "[io] torch_interop: skipped"
else
    mkdir -p "$work/interop" "$work/interop_asan"
    run_suite torch_interop "$py" tests/io/torch_interop.py build/io/tests/st_interop "$work/interop"
    run_suite asan/torch_interop "$py" tests/io/torch_interop.py build/io/asan/tests/st_interop \
        "$work/interop_asan"
fi

# ---- summary ------------------------------------------------------------------------

suite_summary
