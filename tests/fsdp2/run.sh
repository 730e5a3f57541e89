#!/usr/bin/env bash
# PyTorch FSDP2 itself as the oracle (docs/fsdp2_oracle.md): every repository spec and
# random ones, written as PyTorch twins (`fsdpgen torch`), run in real FSDP2 on gloo CPU
# ranks and compared with `fsdpgen events` / `fsdpgen counts` and with the binary's
# losses and parameters. Needs a python with torch >= 2.11: $FSDPGEN_TORCH_PYTHON, else
# /opt/fsdpgen/torch-2.11/bin/python; without one it prints SKIP and `0 passed, 0 failed`.
#
# Usage: tests/fsdp2/run.sh [--all] [--seed S] [--count N] [--numeric-all] [--only REGEX]
#   default: every repository spec and 100 random specs (seed 1), the numbers of a
#   representative subset, and one twin under torchrun; --all: the numbers of every
#   eligible spec.
# Seconds on the 2-core development machine (2026-11-27): see docs/fsdp2_oracle.md.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
py=${FSDPGEN_TORCH_PYTHON:-/opt/fsdpgen/torch-2.11/bin/python}
# The installed version, read without importing torch (seconds on a loaded machine).
ok=$("$py" -c 'import sys, importlib.metadata as md
v = tuple(int(x) for x in md.version("torch").split("+")[0].split(".")[:2])
md.version("numpy")
sys.exit(0 if v >= (2, 11) else 1)' 2>/dev/null && echo yes)
if [ "$ok" != yes ]; then
    echo "SKIP tests/fsdp2: no python with torch >= 2.11 and numpy (set FSDPGEN_TORCH_PYTHON; tried $py)"
    echo "0 passed, 0 failed"
    exit 0
fi
# tests/run_all.sh --all (FSDPGEN_SLOW=1): the slow tier, --all
[ "${FSDPGEN_SLOW:-0}" = 1 ] && set -- --all "$@"
work=$(mktemp -d /tmp/fsdpgen_fsdp2.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$py" "$root/tests/fsdp2/oracle.py" "$root" "$work" "$@" >"$work/oracle.out" 2>&1
rc=$?
sed '$d' "$work/oracle.out"
last=$(tail -n 1 "$work/oracle.out")
if [[ ! $last =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
    echo "$last"
    echo "FAIL tests/fsdp2/oracle.py ended without its summary (exit $rc)"
    echo "0 passed, 1 failed"
    exit 1
fi
passed=${BASH_REMATCH[1]} failed=${BASH_REMATCH[2]}
[[ $rc -ne 0 && $failed -eq 0 ]] && failed=1

# A twin under torchrun prints what it prints when it spawns its own ranks (--world N).
torchrun=$(dirname "$py")/torchrun
twin=$work/tiny_twin.py
if [ ! -x "$torchrun" ]; then
    echo "SKIP the twin under torchrun: no $torchrun"
elif ! "$root/fsdpgen" torch "$root/examples/tiny.lua" -o "$twin" >/dev/null; then
    echo "FAIL fsdpgen torch examples/tiny.lua"
    failed=$((failed + 1))
else
    (cd "$work" && "$py" "$twin" --world 2 --steps 2 >spawned.out 2>spawned.err)
    (cd "$work" && "$torchrun" --standalone --nproc-per-node 2 "$twin" --steps 2 >torchrun.out 2>torchrun.err)
    if grep -q '^step 2 loss' "$work/spawned.out" && cmp -s "$work/spawned.out" "$work/torchrun.out"; then
        echo "PASS examples/tiny.lua's twin under torchrun --nproc-per-node 2 prints what --world 2 prints ($(wc -l <"$work/spawned.out") lines: events, counts, losses)"
        passed=$((passed + 1))
    else
        diff "$work/spawned.out" "$work/torchrun.out" | head -n 5
        tail -n 3 "$work/torchrun.err"
        echo "FAIL examples/tiny.lua's twin under torchrun prints other lines than under --world 2"
        failed=$((failed + 1))
    fi
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
