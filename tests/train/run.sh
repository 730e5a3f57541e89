#!/usr/bin/env bash
# Builds the training driver (runtime/train.ninja) with the libraries it links, and runs
# its test suite (tests/train/test_train.c: in-process checks plus the tiny training and
# conformance binaries as subprocesses) in a normal build and in an AddressSanitizer +
# UBSan build, then the PyTorch load_state_dict check of a saved file (skipped, not
# failed, when torch cannot be imported). Prints one line per suite (full output with
# VERBOSE=1, and always for a suite that fails) and ends with the summed
# `N passed, N failed`. Exit status is non-zero if anything failed.
set -u
cd "$(dirname "$0")/../.."

work=$(mktemp -d "${TMPDIR:-/tmp}/fsdpgen_train_tests.XXXXXX")
trap 'rm -rf "$work"' EXIT

passed=0
failed=0
skipped=()

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
        echo "[train] $label: skipped"
        return
    fi
    if [ -z "$line" ]; then
        cat "$log"
        echo "[train] $label: CRASHED (exit $rc, no summary line), counted as 1 failure"
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
        echo "[train] $label: FAILED ($f of $((p + f)) checks, exit $rc)"
        [ "$f" -eq 0 ] && failed=$((failed + 1))
    else
        [ "${VERBOSE:-0}" = 1 ] && cat "$log"
        echo "[train] $label: ok ($p checks)"
    fi
}

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
mkdir -p "$work/normal" "$work/asan" "$work/torch"
run_suite test_train build/train/tests/test_train build/train/tests/tiny_train \
    build/train/tests/tiny_conformance "$work/normal"
run_suite asan/test_train build/train/asan/tests/test_train build/train/asan/tests/tiny_train \
    build/train/asan/tests/tiny_conformance "$work/asan"

# ---- PyTorch load_state_dict ----------------------------------------------------------

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
    skipped+=("torch_load: SKIP no python3 found")
    echo "[train] torch_load: skipped"
else
    run_suite torch_load "$py" tests/train/torch_load.py build/train/tests/tiny_train "$work/torch"
fi

# ---- summary ------------------------------------------------------------------------

if [ ${#skipped[@]} -gt 0 ]; then
    echo "[train] ${#skipped[@]} suite(s) skipped (not failures):"
    for s in "${skipped[@]}"; do echo "[train]   $s"; done
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
