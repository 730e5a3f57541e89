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

passed=0
failed=0
skipped=()

# ---- build --------------------------------------------------------------------------

if ! ninja -f runtime/io.ninja io_lib io_tests io_asan >"$work/build.log" 2>&1; then
    cat "$work/build.log"
    echo "[io] build failed"
    echo "0 passed, 1 failed"
    exit 1
fi

# ---- suites -------------------------------------------------------------------------

# run_suite LABEL COMMAND...: runs a program that ends with `N passed, N failed`.
run_suite() {
    local label=$1
    shift
    local log="$work/${label//\//_}.log"
    "$@" >"$log" 2>&1
    local rc=$?
    local line
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    if [ "$rc" -eq 77 ] && grep -q '^SKIP' "$log"; then
        skipped+=("$label: $(grep '^SKIP' "$log" | head -n 1)")
        echo "[io] $label: skipped"
        return
    fi
    if [ -z "$line" ]; then
        cat "$log"
        echo "[io] $label: CRASHED (exit $rc, no summary line), counted as 1 failure"
        failed=$((failed + 1))
        return
    fi
    local p=${line%% passed*} f
    f=${line#*passed, }
    f=${f%% failed}
    passed=$((passed + p))
    failed=$((failed + f))
    if [ "$f" -ne 0 ] || [ "$rc" -ne 0 ]; then
        cat "$log"
        echo "[io] $label: FAILED ($f of $((p + f)) checks, exit $rc)"
        [ "$f" -eq 0 ] && failed=$((failed + 1))
    else
        [ "${VERBOSE:-0}" = 1 ] && cat "$log"
        echo "[io] $label: ok ($p checks)"
    fi
}

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
for t in test_safetensors test_data test_checkpoint test_trace; do
    run_suite "$t" "build/io/tests/$t"
    run_suite "asan/$t" "build/io/asan/tests/$t"
done

# ---- PyTorch interop ----------------------------------------------------------------

# Prefer an interpreter that has torch (Debian's python3-torch lives in /usr/bin/python3,
# which may not be the python3 first on PATH).
py=""
for cand in python3 /usr/bin/python3; do
    if command -v "$cand" >/dev/null 2>&1; then
        [ -z "$py" ] && py=$cand
        if "$cand" -c 'import torch' >/dev/null 2>&1; then
            py=$cand
            break
        fi
    fi
done
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

if [ ${#skipped[@]} -gt 0 ]; then
    echo "[io] ${#skipped[@]} suite(s) skipped (not failures):"
    for s in "${skipped[@]}"; do echo "[io]   $s"; done
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
