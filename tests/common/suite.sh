# Shared pieces of the C suites' run.sh scripts (sourced, not run). The caller sets
# `suite_tag` (the "[io]" / "[train]" prefix of its lines) and `work` (a temp dir), then
# uses run_suite, find_python and suite_summary; `passed`, `failed` and `skipped` hold
# the totals.

passed=0
failed=0
skipped=()

# run_suite LABEL COMMAND...: runs a program that ends with `N passed, N failed`. Prints
# one line (the full output with VERBOSE=1, and always for a failure); a crash or a
# missing summary line counts as one failure; exit 77 with a SKIP line is a skip.
run_suite() {
    local label=$1
    shift
    local log="$work/${label//\//_}.log" t0=$SECONDS
    "$@" >"$log" 2>&1
    local rc=$? secs
    secs=$((SECONDS - t0))
    local line
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    if [ "$rc" -eq 77 ] && grep -q '^SKIP' "$log"; then
        skipped+=("$label: $(grep '^SKIP' "$log" | head -n 1)")
        echo "$suite_tag $label: skipped"
        return
    fi
    if [ -z "$line" ]; then
        cat "$log"
        echo "$suite_tag $label: CRASHED (exit $rc, no summary line), counted as 1 failure"
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
        echo "$suite_tag $label: FAILED ($f of $((p + f)) checks, exit $rc)"
        [ "$f" -eq 0 ] && failed=$((failed + 1))
    else
        [ "${VERBOSE:-0}" = 1 ] && cat "$log"
        echo "$suite_tag $label: ok ($p checks, $secs s)"
    fi
}

# Sets `py` to a python3 that can import torch, else to the first python3 found (its
# scripts then print SKIP), else to "". Debian's python3-torch lives in /usr/bin/python3,
# which may not be the python3 first on PATH.
find_python() {
    py=""
    local cand
    for cand in python3 /usr/bin/python3; do
        if command -v "$cand" >/dev/null 2>&1; then
            [ -z "$py" ] && py=$cand
            if "$cand" -c 'import torch' >/dev/null 2>&1; then
                py=$cand
                return
            fi
        fi
    done
}

# Lists the skipped suites and prints the closing `N passed, N failed`; returns non-zero
# when anything failed.
suite_summary() {
    if [ ${#skipped[@]} -gt 0 ]; then
        echo "$suite_tag ${#skipped[@]} suite(s) skipped (not failures):"
        local s
        for s in "${skipped[@]}"; do echo "$suite_tag   $s"; done
    fi
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
