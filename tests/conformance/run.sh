#!/usr/bin/env bash
# Generated end-to-end conformance tests: for every spec (the seed's scenarios, the
# feature specs, the conformance specs at world sizes 1, 2 and 4, the small examples
# (`-- Size: small`; the GPU-sized ones only plan: tests/generator/examples.lua), and 8
# random microbatch step programs written by tests/generator/step_fuzz.lua --write),
# `fsdpgen test SPEC` emits the C, builds the binary and its test, and runs the test
# (events, counts, parity with a non-sharded reference over 10 steps, arena peak); then a
# second `fsdpgen build` of the unchanged spec must rewrite none of the generated files;
# then checkpoints of the specs with frozen parameters resume bit-identically, and one
# rank's kept unsharded parameters change no weight.
# Counts every check of every spec's test (a spec that does not build counts as one
# failure); ends with `N passed, N failed`.
set -u
# SPECS="a.lua b.lua" runs only those.
cd "$(dirname "$0")/../.."

pass=0
fail=0
fuzz_dir=build/fuzz_specs
if [[ -z ${SPECS:-} ]]; then
  rm -rf "$fuzz_dir" && mkdir -p "$fuzz_dir"
  lua5.4 tests/generator/step_fuzz.lua --write "$fuzz_dir" 8
fi
read -r -a specs <<< "${SPECS:-$(echo tests/specs/seed/*_*.lua tests/specs/features/*.lua tests/specs/conformance/*.lua $(grep -l '^-- Size: small' examples/*.lua) "$fuzz_dir"/*.lua)}"
for spec in "${specs[@]}"; do
  log=$(mktemp)
  ./fsdpgen test "$spec" >"$log" 2>&1
  rc=$?
  last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
  if [[ $last =~ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
    pass=$((pass + BASH_REMATCH[1]))
    fail=$((fail + BASH_REMATCH[2]))
  else
    fail=$((fail + 1))
  fi
  if [[ $rc -eq 0 ]]; then
    echo "PASS $spec: $(grep -E '^loss:' "$log")"
  else
    [[ $last =~ ([0-9]+)\ passed,\ 0\ failed ]] && fail=$((fail + 1))
    echo "FAIL $spec (exit $rc)"
    sed 's/^/    /' "$log" | grep -v '^    PASS' | tail -n 20
  fi
  name=$(sed -n 's/^conformance: \([^ ]*\) .*/\1/p' "$log" | head -n 1)
  rm -f "$log"
  if [[ -n $name ]]; then
    marker=$(mktemp)
    ./fsdpgen build "$spec" >/dev/null 2>&1
    rewritten=$(find "build/$name" -maxdepth 1 -type f -newer "$marker" | tr '\n' ' ')
    rm -f "$marker"
    if [[ -z $rewritten ]]; then
      pass=$((pass + 1))
    else
      fail=$((fail + 1))
      echo "FAIL $spec: rebuilding the unchanged spec rewrote $rewritten"
    fi
  fi
done

# verdict OK PASS_LINE FAIL_LINE: counts and prints one check of the runs below (OK: exit 0)
verdict() {
  if [[ $1 -eq 0 ]]; then
    pass=$((pass + 1))
    echo "PASS $2"
  else
    fail=$((fail + 1))
    echo "FAIL $3"
  fi
}
# ran NAME: the spec NAME was in this run and its binary is there
ran() { [[ -z ${SPECS:-} || " ${SPECS} " == *$1.lua* ]] && [[ -x build/$1/$1 ]]; }

# A checkpoint of frozen parameters (no optimizer state saved for a frozen group; a group
# with trainable ones too saves theirs alone; LoRA: the adapters' alone, their dropout masks
# drawn again): 4 steps, then 4 more resumed, equal an uninterrupted run of 8 byte for byte.
for name in frozen_params frozen_between lora_llama_bf16; do
  ran "$name" || continue
  bin=build/$name/$name ck=$(mktemp -d)
  "$bin" --steps 8 --save "$ck/full.st" >/dev/null 2>&1 &&
    "$bin" --steps 4 --checkpoint "$ck/ck" >/dev/null 2>&1 &&
    "$bin" --resume "$ck/ck" --steps 4 --save "$ck/resumed.st" >/dev/null 2>&1 &&
    cmp -s "$ck/full.st" "$ck/resumed.st"
  verdict $? "$name: resumed from a checkpoint at step 4, step 8's weights equal an uninterrupted run's" \
    "$name: a run resumed at step 4 differs from an uninterrupted one (or failed)"
  rm -rf "$ck"
done
# One rank's kept unsharded parameters (generator/plan/keep.lua) change no bit: 8 steps with
# an eval every 3 give w1_keep_microbatch the weights of w1_keep_off, which frees them.
if ran w1_keep_microbatch && ran w1_keep_off; then
  ck=$(mktemp -d)
  build/w1_keep_microbatch/w1_keep_microbatch --steps 8 --val-every 3 --save "$ck/keep.st" >/dev/null 2>&1 &&
    build/w1_keep_off/w1_keep_off --steps 8 --val-every 3 --save "$ck/off.st" >/dev/null 2>&1 &&
    python3 tests/common/same_tensors.py "$ck/keep.st" "$ck/off.st"
  verdict $? "w1_keep_microbatch: 8 steps give the weights of w1_keep_off (unsharded params freed) bit for bit" \
    "w1_keep_microbatch: its weights after 8 steps differ from w1_keep_off's (or a run failed)"
  # kept across steps: a resumed run casts the loaded shards into them before its first step
  build/w1_keep_microbatch/w1_keep_microbatch --steps 4 --checkpoint "$ck/ck" >/dev/null 2>&1 &&
    build/w1_keep_microbatch/w1_keep_microbatch --resume "$ck/ck" --steps 4 --val-every 3 \
      --save "$ck/resumed.st" >/dev/null 2>&1 &&
    build/w1_keep_microbatch/w1_keep_microbatch --steps 8 --val-every 3 --save "$ck/full.st" >/dev/null 2>&1 &&
    cmp -s "$ck/full.st" "$ck/resumed.st"
  verdict $? "w1_keep_microbatch: resumed from a checkpoint at step 4, step 8's weights equal an uninterrupted run's" \
    "w1_keep_microbatch: a run resumed at step 4 differs from an uninterrupted one (or failed)"
  rm -rf "$ck"
fi
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
