#!/usr/bin/env bash
# PyTorch FSDP2 itself as the oracle (docs/fsdp2_oracle.md): every repository spec and
# random ones, written as PyTorch twins (`fsdpgen torch`), run in real FSDP2 on gloo CPU
# ranks and compared with `fsdpgen events` / `fsdpgen counts` and with the binary's
# losses and parameters. Needs a python with torch >= 2.11: $FSDPGEN_TORCH_PYTHON, else
# /opt/fsdpgen/torch-2.11/bin/python; without one it prints SKIP and `0 passed, 0 failed`.
#
# Usage: tests/fsdp2/run.sh [--all] [--seed S] [--count N] [--numeric-all] [--only REGEX]
#   default: every repository spec, 8 random specs (seed 1), numbers of a representative
#   subset; --all: 100 random specs and the numbers of every eligible spec.
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
nice "$py" "$root/tests/fsdp2/oracle.py" "$root" "$work" "$@"
