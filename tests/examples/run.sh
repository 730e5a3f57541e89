#!/usr/bin/env bash
# The small examples train: every examples/*.lua whose header says `-- Size: small` is
# built and trained for a few steps on the README main job's texts (Debian's GPL-3, validated
# on GPL-2: fixed texts, unlike the repository's own docs; two generator sources elsewhere);
# each must exit 0, print a finite loss on every step line and a validation loss, end
# lower than it started, and print FLOP/s, an ETA and the `done:` summary. Ends with
# `N passed, N failed`. The large ones are built (compiled and linked) but not run.
# (tests/generator/examples.lua plans every example.)
set -u
cd "$(dirname "$0")/../.."
pass=0
fail=0
check() {
  if [[ $1 -eq 1 ]]; then pass=$((pass + 1)); echo "PASS $2"; else fail=$((fail + 1)); echo "FAIL $2"; fi
}
work=$(mktemp -d "${TMPDIR:-/tmp}/fsdpgen_examples.XXXXXX")
trap 'rm -rf "$work"' EXIT
data=/usr/share/common-licenses/GPL-3
val_data=/usr/share/common-licenses/GPL-2
[[ -f $data && -f $val_data ]] || { data=generator/plan/planner.lua; val_data=generator/memory/memory.lua; }
small=$(grep -l '^-- Size: small' examples/*.lua)
[[ -n $small ]] || check 0 "no example says '-- Size: small'"
for spec in $small; do
  log=$work/$(basename "$spec" .lua).log
  ./fsdpgen run "$spec" -- --steps 30 --log-every 10 --data "$data" --val-data "$val_data" \
    --val-batches 2 >"$log" 2>&1
  rc=$?
  check $((rc == 0)) "$spec: ./fsdpgen run trains 30 steps (exit $rc)"
  [[ $rc -eq 0 ]] || { sed 's/^/    /' "$log" | tail -n 5; continue; }
  first=$(sed -n 's/^step 1 loss \([^ ]*\).*/\1/p' "$log")
  last=$(sed -n 's/^step 30 loss \([^ ]*\).*/\1/p' "$log")
  val=$(sed -n 's/^step 30 val loss \([^ ]*\).*/\1/p' "$log")
  ok=$(awk -v a="$first" -v b="$last" -v v="$val" 'BEGIN {
    finite = (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && v ~ /^[0-9.]+$/); print (finite && b + 0 < a + 0) ? 1 : 0 }')
  check "$ok" "$spec: loss $first -> $last after 30 steps, val loss $val (finite, lower)"
  # runtime/train/perf.c: FLOP/s and an ETA on the step lines (no MFU on the CPU without
  # --peak-tflops), and the summary: 30 steps, their tokens, the loss from the step lines.
  done_line=$(grep '^done: ' "$log")
  tokens=$(sed -n 's/^done: 30 steps, \([0-9]*\) tokens, .*/\1/p' <<<"$done_line")
  s10=$(grep '^step 10 loss ' "$log")
  loss=$(sed -n 's/.*, loss \([^ ]*\) -> \([^ ,]*\), best val loss .*/\1 \2/p' <<<"$done_line")
  same=$(awk -v a="$first" -v b="$last" -v l="$loss" 'BEGIN { split(l, x, " ")
    d1 = a - x[1]; d2 = b - x[2]; print (l != "" && d1 * d1 < 1e-8 && d2 * d2 < 1e-8) ? 1 : 0 }')
  ok=$([[ -n $tokens && $((tokens % 30)) -eq 0 && $s10 == *"FLOP/s | eta "* && $same == 1 ]] &&
    ! grep -q MFU "$log" && echo 1 || echo 0)
  check "$ok" "$spec: FLOP/s and eta on step lines, no MFU; summary: ${done_line:0:80}"
done
# The large examples (the benchmark's configs among them) are too big to train here, but
# their step C, which the CUDA build compiles too, must compile: a line of it too long for
# 100 columns once wrapped a trailing comment into code, and only these specs had one.
for spec in $(grep -l '^-- Size: large' examples/*.lua); do
  log=$work/$(basename "$spec" .lua).build.log
  ./fsdpgen build "$spec" -o "$work/$(basename "$spec" .lua)" >"$log" 2>&1
  rc=$?
  check $((rc == 0)) "$spec: ./fsdpgen build compiles its step C and links (exit $rc)"
  [[ $rc -eq 0 ]] || grep -m 5 -E 'error|failed' "$log" | sed 's/^/    /'
done
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
