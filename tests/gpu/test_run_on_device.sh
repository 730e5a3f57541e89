#!/usr/bin/env bash
# tests/gpu/run_on_device.sh without a GPU, so that the one device call a session may get
# does not fail on the script itself. With DRY_RUN=1 each step prints `DRY NAME: COMMAND`
# instead of running; checked: the script parses; every stage prints its steps and the
# closing `0 passed, 0 failed`; ninja knows every target of the build steps, and they build
# every program a step runs from build/; each repository script or spec a step runs exists (scripts run directly are executable); $OUT
# is left as the device tool brings it back (summary.txt and logs.tar.gz, the other logs
# inside); an unknown stage is refused with one line and exit 2.
# Ends with `N passed, N failed`.
set -u
cd "$(dirname "$0")/../.."
work=$(mktemp -d "${TMPDIR:-/tmp}/fsdpgen_device_dry.XXXXXX")
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
check() {  # check OK MESSAGE
  if [ "$1" = 1 ]; then echo "PASS $2"; passed=$((passed + 1)); else echo "FAIL $2"; failed=$((failed + 1)); fi
}

script=tests/gpu/run_on_device.sh
check "$(bash -n "$script" 2>"$work/syntax.txt" && echo 1 || echo 0)" "$script parses ($(head -c 200 "$work/syntax.txt"))"

stages="cudnn tests example bench profile attention sweep"
mkdir "$work/out"
DRY_RUN=1 OUT="$work/out" "$script" $stages >"$work/dry.txt" 2>&1
rc=$?
ndry=$(grep -c '^DRY ' "$work/dry.txt")
check "$([ "$rc" = 0 ] && [ "$(tail -n 1 "$work/dry.txt")" = "0 passed, 0 failed" ] && [ "$ndry" -ge 25 ] &&
  echo 1 || echo 0)" "DRY_RUN=1 over every stage ($stages): exit $rc, $ndry steps printed, the closing count last"
for want in "DRY build: ninja" "DRY build cuda_step: ninja" "DRY test test_cudnn_attention:" \
    "DRY test cuda_step: tests/cuda_step/run.sh" "DRY example:" "DRY bench llama_1b: bench/run.sh llama_1b" \
    "DRY profile llama_1b:" "DRY attention vs sdpa: bench/attention.sh" "DRY attention sweep:"; do
  check "$(grep -qF "$want" "$work/dry.txt" && echo 1 || echo 0)" "a step of each stage: '$want'"
done

# the build steps' targets, as ninja reads them (-n: nothing runs), and what they build:
# their targets and those of their phony targets
built=" "
while IFS= read -r line; do
  cmd=${line#DRY *: }
  file=build.ninja
  [[ $cmd == *"-f runtime/cuda_step.ninja"* ]] && file=runtime/cuda_step.ninja
  ${cmd/ninja /ninja -n } >"$work/ninja.txt" 2>&1
  check "$([ $? = 0 ] && echo 1 || echo 0)" "ninja knows the targets of '${line%%: *}' ($(grep -m 1 -E 'unknown target|error' "$work/ninja.txt"))"
  for t in $cmd; do
    [[ $t == ninja || $t == -* || $t == runtime/cuda_step.ninja ]] && continue
    built+="$t "
    built+="$(ninja -f "$file" -t query "$t" 2>/dev/null | awk '/^  input: phony/ { p = 1; next } /^  [a-z]/ { p = 0 } p { printf "%s ", $1 }')"
  done
done < <(grep -E '^DRY build( cuda_step)?: ninja ' "$work/dry.txt")

# what each step runs (its first word but env's) and the repository's scripts, specs and
# programs it names: a program from build/ is built by a build step (the benchmark's,
# build/bench_*, come from bench/run.sh and fsdpgen build); a script or spec exists, and
# one run directly is executable
unbuilt=() missing=() notexec=()
while IFS= read -r line; do
  first=""
  for w in ${line#DRY *: }; do
    [[ $w == env || $w == *=* ]] && continue
    if [ -z "$first" ]; then
      first=$w
      [[ $w == build/* && $w != build/bench_* && $built != *" $w "* ]] && unbuilt+=("$w")
    fi
    if [[ $w =~ ^(\./fsdpgen|(tests|bench)/[A-Za-z0-9_/.-]+\.(sh|py)|(examples|bench/specs)/[A-Za-z0-9_.-]+\.lua)$ ]]; then
      [ -e "$w" ] || missing+=("$w")
      [[ $w == "$first" && ! -x $w ]] && notexec+=("$w")
    fi
  done
done < <(grep '^DRY ' "$work/dry.txt")
check "$([ ${#unbuilt[@]} = 0 ] && echo 1 || echo 0)" "every program a step runs from build/ is built by a build step (not: ${unbuilt[*]:-none})"
check "$([ ${#missing[@]} = 0 ] && echo 1 || echo 0)" "every repository script or spec a step names exists (missing: ${missing[*]:-none})"
check "$([ ${#notexec[@]} = 0 ] && echo 1 || echo 0)" "every script a step runs directly is executable (not: ${notexec[*]:-none})"

left=$(cd "$work/out" && ls -A | tr '\n' ' ')
check "$([ "$left" = "logs.tar.gz summary.txt " ] && tar tzf "$work/out/logs.tar.gz" | grep -qx './env.txt' &&
  echo 1 || echo 0)" "\$OUT holds summary.txt and logs.tar.gz only, the other logs inside (have: $left)"

"$script" nonsense >"$work/bad.txt" 2>&1
rc=$?
check "$([ "$rc" = 2 ] && [ "$(wc -l <"$work/bad.txt")" = 1 ] && grep -q "unknown stage 'nonsense'" "$work/bad.txt" &&
  echo 1 || echo 0)" "an unknown stage: exit $rc, one line: $(head -n 1 "$work/bad.txt")"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
