#!/usr/bin/env bash
# Builds the runtime core (runtime/core.ninja) and runs its test suites twice: the normal
# build and the AddressSanitizer+UBSan build (build/runtime/asan/), plus a smoke run of
# bench_comm, and, where mpicc/mpirun exist, the MPI bootstrap (runtime/mpi.ninja) under
# mpirun -np 2. Passes every suite's output through and ends with the summed
# `N passed, N failed` line; exits non-zero on any failure.
set -u
cd "$(dirname "$0")/../.."

passed=0
failed=0

if ! ninja -f runtime/core.ninja runtime_core runtime_core_tests runtime_core_asan_tests; then
    echo "run.sh: build failed"
    echo "0 passed, 1 failed"
    exit 1
fi

# Runs one suite, echoes its output and adds its closing counts (a crash or a missing
# summary line counts as one failure).
run_suite() {
    local name=$1
    shift
    echo "==== $name"
    local out rc
    out=$("$@" 2>&1)
    rc=$?
    printf '%s\n' "$out"
    local last
    last=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$last" ]; then
        echo "run.sh: $name exited with status $rc without a summary line"
        failed=$((failed + 1))
        return
    fi
    local p f
    p=${last%% passed*}
    f=${last#*, }
    f=${f%% failed*}
    passed=$((passed + p))
    failed=$((failed + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "run.sh: $name exited with status $rc"
        failed=$((failed + 1))
    fi
}

suites="test_dtype test_arena test_comm test_comm_errors test_fsdp_layout test_fsdp_collectives test_fsdp_copy test_mpi_stub"
# The CUDA-linked suites run once, not under ASan; without a GPU they print a SKIP line.
for t in $suites test_nccl test_cuda_local; do
    run_suite "$t" "build/runtime/$t"
done
# ASan: leaks are errors too; UBSan aborts on the first finding (-fno-sanitize-recover).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
for t in $suites; do
    run_suite "asan/$t" "build/runtime/asan/$t"
done

# bench_comm smoke: small sizes, every element checked, exit 0 only if #wrong is 0.
echo "==== bench_comm (smoke)"
for dt in fp32 bf16 fp16; do
    if build/runtime/bench_comm --world 3 --dtype $dt --min-bytes 1K --max-bytes 256K --iters 3 --warmup 1; then
        echo "PASS bench_comm --world 3 --dtype $dt: tables printed, no wrong elements"
        passed=$((passed + 1))
    else
        echo "FAIL bench_comm --world 3 --dtype $dt"
        failed=$((failed + 1))
    fi
done
if build/runtime/bench_comm --world 0 >/dev/null 2>&1; then
    echo "FAIL bench_comm --world 0 should be rejected"
    failed=$((failed + 1))
else
    echo "PASS bench_comm --world 0 is rejected"
    passed=$((passed + 1))
fi
# a bad option or value: exit 2, and the first line says what is allowed
for args in "--frobnicate 1|unknown option --frobnicate (options: --world, --backend," \
            "--op scatter|bad value 'scatter' for --op (allowed: all, all_gather or reduce_scatter)"; do
    err=$(build/runtime/bench_comm ${args%%|*} 2>&1 >/dev/null); rc=$?
    if [ "$rc" -eq 2 ] && [[ $(head -n 1 <<<"$err") == *"${args#*|}"* ]]; then
        echo "PASS bench_comm ${args%%|*}: exit 2, $(head -n 1 <<<"$err")"
        passed=$((passed + 1))
    else
        echo "FAIL bench_comm ${args%%|*}: exit $rc, $(head -n 1 <<<"$err")"
        failed=$((failed + 1))
    fi
done

# MPI bootstrap: built with mpicc by its own fragment, run on 2 processes (bounded by a
# timeout: a hang is a failure, not a stuck CI job).
echo "==== test_mpi_boot (mpirun -np 2)"
if ! command -v mpicc >/dev/null 2>&1; then
    echo "SKIP test_mpi_boot: mpicc not found (install libopenmpi-dev to build librt_mpi.a)"
elif ! ninja -f runtime/mpi.ninja runtime_mpi; then
    echo "FAIL build of runtime/mpi.ninja (librt_mpi.a, test_mpi_boot)"
    failed=$((failed + 1))
elif ! command -v mpirun >/dev/null 2>&1; then
    echo "SKIP test_mpi_boot: mpirun not found (install libopenmpi-dev)"
else
    mpirun_np2=(timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2)
    run_suite "test_mpi_boot" "${mpirun_np2[@]}" build/runtime/test_mpi_boot
    run_suite "test_mpi_boot --self" "${mpirun_np2[@]}" build/runtime/test_mpi_boot --self 2
    out=$("${mpirun_np2[@]}" build/runtime/test_mpi_boot --abort 2 2>&1)
    rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "rank 1 of 2: the rank function failed; aborting the MPI job" <<<"$out"; then
        echo "PASS test_mpi_boot --abort: a failing rank aborts the whole job (mpirun status $rc, no hang)"
        passed=$((passed + 1))
    else
        printf '%s\n' "$out"
        echo "FAIL test_mpi_boot --abort: mpirun status $rc (want non-zero, not the timeout's 124) and the abort line"
        failed=$((failed + 1))
    fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
