#!/usr/bin/env bash
# Runs every test suite of fsdpgen and sums their closing `N passed, N failed` lines.
# Suites: generator (Lua: unit (layout, first fit), seed conformance, bad specs, golden schedules, rounding,
# gradient-buffer initialisation in the step C, direct reductions, reduce-scatters of the
# parameters with gradients, side-stream buffer lifetimes, no host reads of the arena, microbatching counts, random step programs, the eval program) and the C runtime (runtime core
# and comm, kernels, I/O, training driver; each also under ASan/UBSan) and the generated
# conformance tests of every spec.
set -u
cd "$(dirname "$0")/.."

total_pass=0
total_fail=0
broken=()
times=()

run_suite() {
  local name=$1
  shift
  local log t0=$SECONDS
  log=$(mktemp)
  echo "=== $name"
  "$@" 2>&1 | tee "$log" | grep -v '^PASS' || true
  local rc=${PIPESTATUS[0]}
  local last
  last=$(grep -E '^([A-Za-z_]+: )?[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
  rm -f "$log"
  times+=("$(printf '%5d s  %s' $((SECONDS - t0)) "$name")")
  if [[ $last =~ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
    total_pass=$((total_pass + BASH_REMATCH[1]))
    total_fail=$((total_fail + BASH_REMATCH[2]))
    if [[ $rc -ne 0 && ${BASH_REMATCH[2]} -eq 0 ]]; then
      broken+=("$name (exit $rc)")
      total_fail=$((total_fail + 1))
    fi
  else
    broken+=("$name (no summary line, exit $rc)")
    total_fail=$((total_fail + 1))
  fi
}

run_suite "generator: layout units" lua5.4 tests/generator/unit_layout.lua
run_suite "generator: memory plan first fit" lua5.4 tests/generator/unit_memory_place.lua
run_suite "generator: seed conformance" lua5.4 tests/generator/seed_conformance.lua
run_suite "generator: bad specs" lua5.4 tests/generator/spec_errors.lua
run_suite "generator: golden schedules" lua5.4 tests/generator/golden_schedules.lua
run_suite "generator: forward all-gathers" lua5.4 tests/generator/forward_all_gathers.lua
run_suite "generator: mixed-precision rounding" lua5.4 tests/generator/mp_rounding.lua
run_suite "generator: gradient initialisation" lua5.4 tests/generator/grad_init.lua
run_suite "generator: gradient dataflow" lua5.4 tests/generator/grad_flow.lua
run_suite "generator: direct reductions" lua5.4 tests/generator/direct_reduction.lua
run_suite "generator: reduce-scatters of the params with grads" lua5.4 tests/generator/reduce_subsets.lua
run_suite "generator: side-stream buffer lifetimes" lua5.4 tests/generator/stream_lifetimes.lua
run_suite "generator: no host reads of the arena" lua5.4 tests/generator/device_pointers.lua
run_suite "generator: microbatching counts (FSDP2's tests)" lua5.4 tests/generator/microbatching.lua
run_suite "generator: random step programs" lua5.4 tests/generator/step_fuzz.lua
run_suite "generator: eval program" lua5.4 tests/generator/eval_program.lua
for suite in runtime kernels io train conformance torch cuda cuda_step; do
  if [[ -x tests/$suite/run.sh ]]; then
    run_suite "runtime: $suite" tests/$suite/run.sh
  fi
done
run_suite "bench: checks without a GPU" tests/bench/run.sh

echo "=== seconds per suite"
printf '%s\n' "${times[@]}"
for b in "${broken[@]+"${broken[@]}"}"; do echo "suite failed: $b"; done
echo "${total_pass} passed, ${total_fail} failed"
[[ $total_fail -eq 0 ]]
