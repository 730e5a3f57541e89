#!/usr/bin/env bash
# Builds the CPU kernels, optimizers and their tests (runtime/kernels.ninja) and runs
# every suite twice: the normal build (build/kernels/) and the AddressSanitizer + UBSan
# build (build/kernels/asan/). The normal run prints everything each suite compared; the
# sanitizer run prints only failures and each suite's closing line. The last line is the
# summed `N passed, N failed`; the exit status is non-zero when anything failed.
set -u
cd "$(dirname "$0")/../.."

# OpenBLAS is the one external dependency (GEMMs); install it where we can.
if ! printf '#include <cblas.h>\n' | cc -E -x c - >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "tests/kernels: installing libopenblas-dev"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenblas-dev; } >/dev/null 2>&1
    fi
    if ! printf '#include <cblas.h>\n' | cc -E -x c - >/dev/null 2>&1; then
        echo "tests/kernels: error: cblas.h not found (hint: apt-get install -y libopenblas-dev)"
        echo "0 passed, 1 failed"
        exit 1
    fi
fi

if ! ninja -f runtime/kernels.ninja kernels_tests kernels_asan_tests; then
    echo "tests/kernels: error: build failed"
    echo "0 passed, 1 failed"
    exit 1
fi

suites="test_dense test_norm test_activation test_round test_assign test_rope test_attention test_dropout test_attention_dropout test_loss test_packed test_scaled_linear test_optim test_threads test_vmath"
passed=0
failed=0
# halt_on_error + no recovery: a sanitizer report fails the suite
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:halt_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
for variant in normal asan; do
    dir=build/kernels
    [ "$variant" = asan ] && dir=build/kernels/asan
    for s in $suites; do
        echo "== $variant $s"
        out=$("$dir/$s" 2>&1)
        rc=$?
        if [ "$variant" = normal ]; then
            printf '%s\n' "$out"
        else
            printf '%s\n' "$out" | grep -v '^PASS '
        fi
        last=$(printf '%s\n' "$out" | tail -n 1)
        if [[ "$last" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
            p=${BASH_REMATCH[1]}
            f=${BASH_REMATCH[2]}
        else
            p=0
            f=0
        fi
        # a crash or sanitizer abort without a failed check still counts as a failure
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
            echo "tests/kernels: $variant $s exited with status $rc"
            f=1
        fi
        passed=$((passed + p))
        failed=$((failed + f))
    done
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
