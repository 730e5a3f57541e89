#!/usr/bin/env bash
# Everything that needs a GPU, in one device call (device time is scarce):
#   tests/gpu/run_on_device.sh [STAGE...]     the stages below, run in the order given (default:
#   cudnn bench attention tests profile example: the cuDNN attention first, then the
#   end-to-end figures the issue is judged by, the correctness suites after them; about
#   twice as long as one call allows, so the last ones are skipped: a second call runs
#   `tests profile example`)
# Logs and a summary go to ./gpu_logs, or under $OUT (the device tool's folder) to
# summary.txt and logs.tar.gz (the logs). Each step has a time limit, and the whole run
# stops starting steps after $BUDGET seconds (default 540), so it ends inside one 10-minute
# call. Needs tests/gpu/fetch_tools.sh's .devtools.
#   cudnn    the cuDNN attention's tests (test_cudnn_host, test_cudnn_attention: plans built,
#            forward and backward against the CPU kernel, CUDA-graph capture)
#   tests    ninja, the CUDA kernel and stream tests, NCCL and local-mode comm tests, PyTorch
#            FSDP2's post-forward order after an eval (tests/gpu/fsdp2_eval.py), and
#            tests/cuda_step/run.sh (CUDA conformance, CUDA vs CPU, compute-sanitizer)
#   example  the README's example on the GPU (300 steps), and 20 steps with --trace, whose
#            compute-stream waits for collectives tests/gpu/trace_waits.py sums per step
#            (trace_waits_gpt_bytes.txt: forward all-gather waits near zero = overlapped)
#   bench    bench/run.sh for GPT-2 124M, then for Llama 1B, then 4 traced Llama 1B steps
#            (trace_waits_llama_1b.txt), and 4 with RT_SM_MARGIN=16 (trace_waits_llama_1b_sm16.txt);
#            the table of both configs (bench_table.txt, and in the summary)
#   profile  GPU time per kernel (ncu, one metric, 2 steps of each bench binary, no graph),
#            summed per category and kernel by tests/gpu/kernel_times.py into kernels_<config>.txt,
#            with `fsdpgen simulate`'s prediction (its `kernels` line) below, and the
#            simulator's figures refitted to both (tests/gpu/refit.py: refit.txt); then ncu's
#            throughput, memory, warp-stall and occupancy sections for the three tensor-core
#            attention kernels of one GPT-2 bench layer (RT_ATTENTION=fsdpgen;
#            ncu_attention.txt). Skipped, not failed, where ncu cannot read the counters (as
#            under gVisor: "LibraryNotLoaded")
#   attention  bench/attention.sh (cuDNN and the flash kernels against PyTorch's SDPA on
#            the bench shapes: the issue's attention target), bench/norm.sh (the norms'
#            row-per-warp kernels against the block-per-row ones, a residual add and its
#            norm in one call against two), bench/loss.sh (the fused cross-entropy's rows
#            staged in shared memory against read twice)
#   sweep    bench/attention_sweep.sh --iters 50 (the tile-configuration variants against
#            SDPA; not in the default set)
# Ends with the summed `N passed, N failed` of the test stages.
# DRY_RUN=1 runs nothing of it: each step prints `DRY NAME: COMMAND` instead, with no tools
# unpacked (tests/gpu/test_run_on_device.sh checks, without a GPU, what the steps would run).
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-gpu_logs}
mkdir -p "$out"
stages=${*:-cudnn bench attention tests profile example}
deadline=$(( $(date +%s) + ${BUDGET:-540} ))
dry=${DRY_RUN:-0}
passed=0 failed=0

# step NAME LOG LIMIT CMD...: runs CMD with LIMIT seconds (less if the budget is nearly
# spent), appends to LOG, adds a `N passed, N failed` line it prints to the totals.
step() {
    local name=$1 log=$out/$2 max=$3
    shift 3
    if [ "$dry" = 1 ]; then echo "DRY $name: $*" | tee -a "$out/summary.txt"; return; fi
    local left=$(( deadline - $(date +%s) ))
    [ "$max" -gt "$left" ] && max=$left
    if [ "$max" -lt 15 ]; then echo "SKIPPED $name: no time left" | tee -a "$out/summary.txt"; return; fi
    echo "=== $name (limit ${max}s)" >>"$log"
    local t0 rc last from
    t0=$(date +%s)
    from=$(wc -l <"$log")
    timeout -k 5 "$max" "$@" >>"$log" 2>&1
    rc=$?
    tail -n +"$((from + 1))" "$log" | grep -E '^FAIL' | head -n 20 >>"$out/summary.txt"
    # this step's lines only: several steps share a log
    last=$(tail -n +"$((from + 1))" "$log" | tail -n 5 | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [[ $last =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
        passed=$((passed + BASH_REMATCH[1])) failed=$((failed + BASH_REMATCH[2]))
    fi
    # a crash, a timeout or a failed build without a failure count is one failure
    if [ "$rc" -ne 0 ] && [[ ! $last =~ [1-9][0-9]*\ failed ]]; then failed=$((failed + 1)); fi
    echo "$name: exit $rc after $(( $(date +%s) - t0 ))s ${last:+| $last}" | tee -a "$out/summary.txt"
}

# waits NAME: tests/gpu/trace_waits.py on $out/NAME.trace.json into trace_waits_NAME.txt
waits() {
    [ -s "$out/$1.trace.json" ] && python3 tests/gpu/trace_waits.py "$out/$1.trace.json" \
        >"$out/trace_waits_$1.txt" 2>&1
}

for s in $stages; do
    case $s in
    cudnn | tests | example | bench | profile | attention | sweep) ;;
    *) echo "run_on_device.sh: unknown stage '$s' (stages: cudnn tests example bench profile attention sweep)"; exit 2 ;;
    esac
done
if [ "$dry" != 1 ]; then
    [ -d .devtools/debs ] || { echo "run_on_device.sh: no .devtools/debs: run tests/gpu/fetch_tools.sh here and carry .devtools"; exit 2; }
    . tests/gpu/device_env.sh
fi
nvidia-smi -L >"$out/env.txt" 2>&1
# where the build finds cuDNN's and NCCL's headers (device_env.sh), and the compilers
{ ls /usr/local/cuda/include/cudnn.h /usr/include/cudnn.h /usr/local/cuda/include/nccl.h \
    /usr/include/nccl.h; echo "C_INCLUDE_PATH=${C_INCLUDE_PATH:-}"; gcc --version | head -n 1; \
    /usr/local/cuda/bin/nvcc --version | tail -n 1; } >>"$out/env.txt" 2>&1
echo "cuDNN: ${RT_CUDNN_SO:-libcudnn.so.9 through the rpath (/usr/local/cuda/lib64)}" | tee -a "$out/env.txt" \
    "$out/summary.txt"
# what the stages run (not the emulator's slow-tier builds: ASan+UBSan, TSan, other tiles);
# -k 0: a target that fails to build (e.g. no cuDNN headers) does not stop the others
step "build" build.log 240 ninja -k 0 -j"$(nproc)" runtime_core runtime_core_tests kernels io_lib \
    train_lib cuda build/cuda/test_cuda_kernels build/cuda/test_cuda_streams build/cuda/test_mma_layout \
    build/cuda/test_dtype_bits build/cuda/test_cudnn_attention build/cuda/test_cudnn_host \
    build/bench/attention_fsdpgen build/bench/attention_cudnn build/bench/norm_rows build/bench/loss_rows
step "build cuda_step" build.log 120 ninja -j"$(nproc)" -f runtime/cuda_step.ninja cuda_step
for s in $stages; do
    case $s in
    cudnn)
        # the cuDNN attention (rt_cudnn.h): its graphs, then on the GPU against the CPU kernel
        step "test test_cudnn_host" cudnn.log 60 build/cuda/test_cudnn_host
        step "test test_cudnn_attention" cudnn.log 180 build/cuda/test_cudnn_attention ;;
    tests)
        for t in test_dtype_bits test_mma_layout test_cuda_kernels test_cuda_streams; do
            step "test $t" tests.log 120 build/cuda/$t
        done
        for t in test_nccl test_cuda_local; do step "test $t" tests.log 60 build/runtime/$t; done
        step "fsdp2 eval rule" tests.log 90 python3 tests/gpu/fsdp2_eval.py
        VERBOSE=1 step "test cuda_step" cuda_step.log 300 tests/cuda_step/run.sh ;;
    example)
        step "example" example.log 90 ./fsdpgen run examples/gpt_bytes.lua --cuda -- \
            --data .devtools/GPL-3 --steps 300
        step "example --trace" example.log 40 ./fsdpgen run examples/gpt_bytes.lua --cuda -- \
            --data .devtools/GPL-3 --steps 20 --trace "$out/gpt_bytes.trace.json"
        waits gpt_bytes ;;
    bench)
        # a config per step: a cut run keeps the other's table
        step "bench gpt2_124m" bench.log 120 bench/run.sh gpt2_124m
        step "bench llama_1b" bench.log 240 bench/run.sh llama_1b
        # how long compute waits for each collective in the bench step (bench/run.sh built it)
        step "bench llama_1b --trace" bench.log 60 build/bench_llama_1b/bench_llama_1b_cuda \
            --steps 4 --trace "$out/llama_1b.trace.json"
        waits llama_1b
        # ... and with 16 SMs left to the side streams: how much more of the optimizer
        # overlaps the backward (trace_waits' optimizer line) against the run above
        step "bench llama_1b --trace, RT_SM_MARGIN=16" bench.log 60 env RT_SM_MARGIN=16 \
            build/bench_llama_1b/bench_llama_1b_cuda --steps 4 --trace "$out/llama_1b_sm16.trace.json"
        waits llama_1b_sm16
        # both configs' rows in one table, in the summary too (also from a run cut short)
        [ "$dry" = 1 ] && continue
        peak=$(python3 bench/flops.py peak "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)")
        python3 bench/flops.py table --peak-tflops "${peak:-989}" <"$out/bench.log" >"$out/bench_table.txt" 2>&1
        tee -a "$out/summary.txt" <"$out/bench_table.txt" ;;
    profile)
        # ncu's counters at all (a run that cannot read them fails with this in its output)
        if [ "$dry" != 1 ] && timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum \
            build/cuda/test_dtype_bits 2>&1 | grep -q LibraryNotLoaded; then
            echo "SKIPPED profile: ncu cannot read the GPU's counters on this machine (LibraryNotLoaded)" |
                tee -a "$out/summary.txt"
            continue
        fi
        for b in gpt2_124m llama_1b; do
            step "build bench_$b" build.log 60 ./fsdpgen build bench/specs/$b.lua --cuda
            # the attention chosen (not `auto`: its start-up timing would run under ncu too)
            step "profile $b" profile.log 120 env RT_ATTENTION=cudnn ncu --clock-control none \
                --metrics gpu__time_duration.sum \
                --csv --page raw --log-file "$out/ncu_$b.csv" build/bench_$b/bench_${b}_cuda --steps 2 --no-graph
            [ -s "$out/ncu_$b.csv" ] && python3 tests/gpu/kernel_times.py "$out/ncu_$b.csv" 2 25 \
                >"$out/kernels_$b.txt" 2>&1
            # the simulator's split by kind (its `kernels` line), to set beside the measured one
            kind=h100
            grep -q H200 "$out/env.txt" && kind=h200
            ./fsdpgen simulate bench/specs/$b.lua --gpu $kind >>"$out/kernels_$b.txt" 2>&1
            ./fsdpgen simulate bench/specs/$b.lua --gpu $kind --json >"$out/sim_$b.json" 2>&1
        done
        # the simulator's kernel figures refitted to both configs' kernels (and, after the
        # bench stage, their steps): proposals for generator/simulate/gpus/<gpu>.lua
        if [ -s "$out/kernels_gpt2_124m.txt" ] && [ -s "$out/kernels_llama_1b.txt" ]; then
            python3 tests/gpu/refit.py "$out/kernels_gpt2_124m.txt" "$out/sim_gpt2_124m.json" \
                "$out/kernels_llama_1b.txt" "$out/sim_llama_1b.json" \
                $([ -s "$out/bench_table.txt" ] && echo --bench-table "$out/bench_table.txt") \
                >"$out/refit.txt" 2>&1
            tee -a "$out/summary.txt" <"$out/refit.txt"
        fi
        # the last layer's forward, then its dK/dV and dQ (the 12 forwards launch first)
        step "attention sections" profile.log 150 env RT_ATTENTION=fsdpgen ncu -k regex:rtc_fa_tc \
            --launch-skip 11 --launch-count 3 --section SpeedOfLight --section MemoryWorkloadAnalysis \
            --section WarpStateStats --section Occupancy --log-file "$out/ncu_attention.txt" \
            build/bench_gpt2_124m/bench_gpt2_124m_cuda --steps 1 --no-graph ;;
    attention)
        step "attention vs sdpa" attention.log 90 bench/attention.sh
        step "norms: a row per warp vs a block" attention.log 60 bench/norm.sh
        step "loss: rows staged vs read twice" attention.log 60 bench/loss.sh ;;
    sweep)
        step "attention sweep" sweep.log 240 bench/attention_sweep.sh --iters 50 ;;
    esac
done
echo "$passed passed, $failed failed" | tee -a "$out/summary.txt"
# The device tool brings back at most 8 files of $OUT (a full run writes about 20): all but
# the summary go into one archive, written outside $OUT first (tar fails, "file changed as
# we read it", on a folder its own archive grows in) and moved in once the rest is gone.
if [ -n "${OUT:-}" ]; then
    logs=$(mktemp "${TMPDIR:-/tmp}/fsdpgen_logs.XXXXXX")
    tar -C "$out" -czf "$logs" --exclude=./summary.txt . &&
        find "$out" -mindepth 1 ! -name summary.txt -delete && chmod 644 "$logs" && mv "$logs" "$out/logs.tar.gz"
fi
[ "$failed" -eq 0 ]
