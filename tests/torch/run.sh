#!/usr/bin/env bash
# PyTorch load test: "a model trained by fsdpgen and saved with --save loads into PyTorch
# and gives the same loss there". For each spec in tests/torch/specs/:
#   1. ./fsdpgen run SPEC -- --steps 5 --save W/trained.safetensors [--data FILE]
#   2. ./fsdpgen run SPEC -- --load W/trained.safetensors --steps 1 [--data FILE]
#      prints `step 1 loss X`: the trained weights' loss on step 0's batches (mean over ranks)
#   3. tests/torch/check_load.py rebuilds the model in PyTorch (same math as models/*.lua),
#      loads the file with load_state_dict(strict=True), computes the loss on the same
#      batches (token data: rt_data.h's offsets; float inputs: rt_train.h's synthetic
#      inputs) and compares it with X (rtol 1e-4).
# Then tests/torch/step_programs/check.py: two training steps of each spec there (step
# programs, HSDP and divide factors, the Transformer and Llama decoders) against PyTorch's
# autograd.
# Needs PyTorch (Debian: apt-get install python3-torch). Without it, prints one SKIP line
# and `0 passed, 0 failed` (exit 0): skipped, not failed. Ends with `N passed, N failed`.
set -u
cd "$(dirname "$0")/../.."
start=$SECONDS

# Prefer an interpreter that has torch (Debian's python3-torch lives in /usr/bin/python3,
# which may not be the python3 first on PATH).
py=""
for cand in python3 /usr/bin/python3; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import torch' >/dev/null 2>&1; then
    py=$cand
    break
  fi
done
if [[ -z $py ]]; then
  echo "SKIP tests/torch: no python3 can import torch (apt-get install python3-torch to run it)"
  echo "0 passed, 0 failed"
  exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/fsdpgen_torch.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Token data: a text file every Debian system has (bytes < 256 = the specs' vocab), or a
# generated one.
data=""
for f in /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0; do
  if [[ -r $f && -s $f ]]; then data=$f; break; fi
done
if [[ -z $data ]]; then
  data=$work/tokens.bin
  "$py" -c 'import sys; open(sys.argv[1], "wb").write(bytes((i * 7919 + i // 13) % 256 for i in range(20000)))' "$data"
fi

seed=42
pass=0
fail=0

# One spec. Its line `-- check_load: ARGS` gives check_load.py's model arguments; a bare
# `--data` there marks a token model (trained and checked on $data). The world size is
# read from the binary's header line.
run_case() {
  local spec=$1
  local name
  name=$(basename "$spec" .lua)
  local w=$work/$name
  mkdir -p "$w"
  local line
  line=$(sed -n 's/^-- check_load: //p' "$spec" | head -n 1)
  if [[ -z $line ]]; then
    echo "FAIL $name: no \`-- check_load: ARGS\` line in $spec"
    fail=$((fail + 1))
    return
  fi
  local args=() data_args=() a
  for a in $line; do
    if [[ $a == --data ]]; then data_args=(--data "$data"); else args+=("$a"); fi
  done

  if ! ./fsdpgen run "$spec" -- --steps 5 --seed "$seed" --save "$w/trained.safetensors" \
       "${data_args[@]}" >"$w/train.log" 2>&1; then
    echo "FAIL $name: fsdpgen run $spec -- --steps 5 --save failed:"
    tail -n 15 "$w/train.log" | sed 's/^/    /'
    fail=$((fail + 1))
    return
  fi
  if ! ./fsdpgen run "$spec" -- --load "$w/trained.safetensors" --steps 1 --seed "$seed" \
       "${data_args[@]}" >"$w/load.log" 2>&1; then
    echo "FAIL $name: fsdpgen run $spec -- --load --steps 1 failed:"
    tail -n 15 "$w/load.log" | sed 's/^/    /'
    fail=$((fail + 1))
    return
  fi
  local loss world
  loss=$(sed -n 's/^step 1 loss \([^ ]*\) .*/\1/p' "$w/load.log" | head -n 1)
  world=$(sed -n "s/^[^ ]*: world \([0-9]*\) .*/\1/p" "$w/load.log" | head -n 1)
  if [[ -z $loss || -z $world ]]; then
    echo "FAIL $name: no \`NAME: world N\` header or \`step 1 loss X\` line in the --load run's output"
    tail -n 15 "$w/load.log" | sed 's/^/    /'
    fail=$((fail + 1))
    return
  fi

  "$py" tests/torch/check_load.py --name "$name" --weights "$w/trained.safetensors" \
    --loss "$loss" --world "$world" --seed "$seed" "${data_args[@]}" "${args[@]}" \
    >"$w/check.log" 2>&1
  count "$name" "$w/check.log" $?
}

# Adds the PASS/FAIL counts of a Python check's log (its lines shown, but the summary).
count() {
  local name=$1 log=$2 rc=$3 last
  grep -Ev '^[0-9]+ passed, [0-9]+ failed' "$log"
  last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
  if [[ $last =~ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
    pass=$((pass + BASH_REMATCH[1]))
    fail=$((fail + BASH_REMATCH[2]))
    if [[ $rc -ne 0 && ${BASH_REMATCH[2]} -eq 0 ]]; then
      echo "FAIL $name: check exit $rc"
      fail=$((fail + 1))
    fi
  else
    echo "FAIL $name: the check gave no summary line (exit $rc)"
    fail=$((fail + 1))
  fi
}

for spec in tests/torch/specs/*.lua; do
  run_case "$spec"
done

# Training steps against PyTorch's autograd: the step programs (several forwards or
# backward passes, gradient accumulation, checkpointing, clipping), HSDP with a divide
# factor, the Transformer and Llama decoders.
mkdir -p "$work/step_programs"
"$py" tests/torch/step_programs/check.py "$PWD" "$work/step_programs" >"$work/step_programs.log" 2>&1
count step_programs "$work/step_programs.log" $?

echo "tests/torch: $((SECONDS - start)) s (python: $py, data: $data)"
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
