#!/usr/bin/env bash
# Runs every test suite of fsdpgen and sums their closing `N passed, N failed` lines.
#
#   tests/run_all.sh          the fast tier: what CI runs (target: 15 minutes on 2 cores)
#   tests/run_all.sh --all    also the slow tier (FSDPGEN_SLOW=1 in every suite: the
#                             emulator's ASan+UBSan and ThreadSanitizer builds, every spec
#                             on the CUDA emulator, the long fuzzing; tests/README.md
#                             lists it)
#
# The suites are listed in tests/README.md (what each proves, needs and costs). The
# generator's Lua suites and the benchmark's checks only plan, writing temporary files, so
# they run in a second lane, at a lower priority, beside the suites that build into build/,
# which run one after another (two ninja processes must never share a build log). Each suite's output is
# printed when it ends; the summary gives each suite's seconds, and the last line is
# `N passed, N failed`.
# FSDPGEN_BUDGET_S=S: a run longer than S seconds counts as one more failure.
set -u
cd "$(dirname "$0")/.."

slow=0
for a in "$@"; do
  case $a in
    --all) slow=1 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "tests/run_all.sh: unknown option '$a' (allowed: --all)"; exit 2 ;;
  esac
done
export FSDPGEN_SLOW=$slow

out=$(mktemp -d "${TMPDIR:-/tmp}/fsdpgen_tests.XXXXXX")
trap 'rm -rf "$out"' EXIT
start=$SECONDS

# run_suite ID NAME COMMAND...: runs one suite into $out/ID.log, then prints its output
# (without the PASS lines) under the print lock and writes `pass fail secs note` to ID.res.
run_suite() {
  local id=$1 name=$2
  shift 2
  local log=$out/$id.log t0=$SECONDS rc cpu TIMEFORMAT='%0U+%0S'
  { time "$@" >"$log" 2>&1; } 2>"$out/$id.cpu"
  rc=$?
  cpu=$(($(tail -n 1 "$out/$id.cpu")))
  local secs=$((SECONDS - t0)) last note="" p=0 f=1
  last=$(grep -E '^([A-Za-z_]+: )?[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
  if [[ $last =~ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
    p=${BASH_REMATCH[1]} f=${BASH_REMATCH[2]}
    if [[ $rc -ne 0 && $f -eq 0 ]]; then note="exit $rc"; f=1; fi
  else
    note="no summary line, exit $rc"
  fi
  echo "$p $f $secs $cpu $name${note:+ ($note)}" >"$out/$id.res"
  {
    flock 9
    echo "=== $name ($secs s)"
    grep -v '^PASS' "$log"
  } 9>"$out/print.lock"
}

# The planning lane: no build. It runs at a lower priority (nice 10): the build lane, which
# holds the longer path, keeps both cores when it can use them, and the planning suites
# fill the gaps (a build lane suite running one program at a time). Their CPU seconds are
# their cost; their wall seconds stretch with the gaps.
plan_lane() {
  local i=0 s
  renice -n 10 -p "$BASHPID" >/dev/null
  for s in \
    "layout units:unit_layout" \
    "memory plan first fit:unit_memory_place" \
    "model FLOPs per step:unit_flops" \
    "seed conformance:seed_conformance" \
    "bad specs:spec_errors" \
    "plan == build:plan_builds" \
    "golden schedules:golden_schedules" \
    "forward all-gathers:forward_all_gathers" \
    "mixed-precision rounding:mp_rounding" \
    "gradient initialisation:grad_init" \
    "attention sites (cuDNN or fsdpgen's kernels):attention_sites" \
    "attention dropout (its kernels, sites and twin):attention_dropout" \
    "frozen parameters (requires_grad_(false)):frozen_params" \
    "a tensor times a number (x * 0.37):scale_op" \
    "scales folded into their linear (x * 2):scaled_linears" \
    "LoRA (nn.LoRALinear, lora_modules, nn.init):lora" \
    "forward tensors kept for the backward:saved_activations" \
    "linears of one input stacked in backward:stacked_linears" \
    "gradient dataflow:grad_flow" \
    "direct reductions:direct_reduction" \
    "reduce-scatters of the params with grads:reduce_subsets" \
    "reductions in parts (one rank):reduce_parts" \
    "optimizer steps by token rows (one rank):token_rows" \
    "gradients stored in param_dtype (one rank):packed_grads" \
    "one rank's all-gathers waited for at their first reader:late_waits" \
    "parameters read from the shards (one rank):shard_reads" \
    "unsharded parameters kept for the next all-gather (one rank):keep_unsharded" \
    "a residual add and its norm in one call:fused_norms" \
    "an attention's q and k rotations in one call:rope_pairs" \
    "side-stream buffer lifetimes:stream_lifetimes" \
    "no host reads of the arena:device_pointers" \
    "microbatching counts (FSDP2's tests):microbatching" \
    "random step programs:step_fuzz" \
    "eval program:eval_program" \
    "reviewing a change (.schedule diffs, fsdpgen diff, git diff):schedule_diff" \
    "every example plans:examples" \
    "simulate and show (the step on a GPU):simulate"; do
    i=$((i + 1))
    run_suite "$(printf 'g%02d' $i)" "generator: ${s%%:*}" lua5.4 "tests/generator/${s#*:}.lua"
  done
  # 1,000 mutated specs (the slow tier: 10,000, and those that plan emitted)
  run_suite g98 "generator: mutated specs never crash or hang" lua5.4 tests/generator/spec_fuzz.lua \
    $([[ $slow = 1 ]] && echo --count 10000 --emit)
  run_suite g99 "bench: checks without a GPU" tests/bench/run.sh
  run_suite g96 "gpu: the device script's steps without a GPU (DRY_RUN)" tests/gpu/test_run_on_device.sh
  run_suite g95 "gpu: the simulator's figures refitted to made-up measurements" python3 tests/gpu/test_refit.py
  # SKIP without chromium (CI does not install it)
  run_suite g97 "show: the SVG in a headless browser" tests/show/run.sh
}

# The build lane: the C runtime, the generated binaries, PyTorch and the CUDA backend.
build_lane() {
  local i=0 s
  # the command line's test builds examples/tiny.lua, so it runs in this lane
  run_suite r00 "generator: command line" lua5.4 tests/generator/cli.lua
  # fsdp2 last: its FSDP2 ranks (processes meeting in gloo collectives) slow down most when
  # they share the cores with the planning lane, which has finished by then
  for s in runtime kernels io train conformance examples cuda cuda_step torch hf fsdp2; do
    i=$((i + 1))
    run_suite "$(printf 'r%02d' $i)" "runtime: $s" "tests/$s/run.sh"
  done
}

# Both lanes are subshells: a suite's CPU seconds are those of its lane's children only
# (bash reaps a finished background lane at once, which would add its CPU to the suite
# running in the shell at that moment).
plan_lane &
lane=$!
build_lane &
wait "$lane" $!

total_pass=0
total_fail=0
echo "=== seconds per suite (wall, and CPU: user + system of the suite and its children)"
for res in "$out"/*.res; do
  read -r p f secs cpu name <"$res"
  total_pass=$((total_pass + p))
  total_fail=$((total_fail + f))
  printf '%5d s %6d s CPU  %s%s\n' "$secs" "$cpu" "$name" "$([[ $f -ne 0 ]] && echo "  FAILED ($f)")"
done
elapsed=$((SECONDS - start))
echo "total: $elapsed s (tier: $([[ $slow = 1 ]] && echo "fast + slow" || echo fast))"
if [[ -n ${FSDPGEN_BUDGET_S:-} && $elapsed -gt $FSDPGEN_BUDGET_S ]]; then
  echo "FAIL tests/run_all.sh took $elapsed s, over the budget of $FSDPGEN_BUDGET_S s (FSDPGEN_BUDGET_S)"
  total_fail=$((total_fail + 1))
fi
echo "${total_pass} passed, ${total_fail} failed"
[[ $total_fail -eq 0 ]]
