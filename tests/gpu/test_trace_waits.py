#!/usr/bin/env python3
"""tests/gpu/trace_waits.py on hand-made traces whose sums are known: spans assigned to the
step and section that hold their middle, the first step left out, means per step, waits
outside any section, the exit codes. Run by tests/cuda_step/run.sh (plain python3); ends
with `N passed, N failed`.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from checks import check, summary  # noqa: E402


def span(name, cat, ts, dur, pid=0, tid=0):
    return {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": pid, "tid": tid}


def run(events, *args):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"traceEvents": events}, f)
    try:
        p = subprocess.run([sys.executable, os.path.join(HERE, "trace_waits.py"), f.name, *args],
                           capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    return p.returncode, p.stdout + p.stderr


def step(k, t0, ag_us, rs_us, pid=0):
    """Step k (1-based) from t0 (us): a forward section of 1000 us holding two all-gather
    waits of ag_us/2 each, a backward of 2000 us holding one reduce-scatter wait of rs_us
    and one all-gather wait of 10 us, an optimizer of 500 us; a collective span on another
    stream that must not count."""
    return [
        span(f"step {k}", "step", t0, 4000, pid),
        span("forward", "compute", t0 + 100, 1000, pid),
        span("layers.0", "all_gather_wait", t0 + 200, ag_us / 2, pid),
        span("layers.1", "all_gather_wait", t0 + 600, ag_us / 2, pid),
        span("layers.1", "all_gather", t0 + 150, 700, pid, tid=2),
        span("backward", "compute", t0 + 1200, 2000, pid),
        span("layers.1", "reduce_scatter_wait", t0 + 1500, rs_us, pid),
        span("layers.0", "all_gather_wait", t0 + 1600, 10, pid),
        span("optimizer", "compute", t0 + 3300, 500, pid),
    ]


# two ranks; rank 0's first step waits far longer (left out by default)
events = step(1, 0, 800, 300) + step(2, 5000, 40, 60) + step(3, 10000, 20, 100)
events += step(1, 0, 100, 100, pid=1) + step(2, 5000, 100, 100, pid=1)
rc, out = run(events)
lines = out.splitlines()
check(rc == 0, f"two ranks: exit 0 (got {rc})")
check("rank 0: steps 2..3 (2), mean per step:" in lines, "rank 0: steps 2 and 3 averaged, step 1 left out")
# forward: waits (40 + 20) / 2 = 30 us = 0.030 ms of 1 ms, 2 waits per step
check("  forward        1.000 ms, compute waited 0.030 ms (3.0%): all-gathers 0.030 ms in 2 waits" in lines,
      "rank 0 forward: mean of the two steps' all-gather waits, 2 a step")
# backward: reduce-scatter (60 + 100) / 2 = 80 us, all-gather 10 us
check("  backward       2.000 ms, compute waited 0.090 ms (4.5%): all-gathers 0.010 ms in 1 waits; "
      "reduce-scatters 0.080 ms in 1 waits" in lines, "rank 0 backward: both kinds, in KINDS order")
check("  optimizer      0.500 ms, compute waited 0.000 ms (0.0%)" in lines, "rank 0 optimizer: no waits")
check("rank 1: steps 2..2 (1), mean per step:" in lines, "rank 1 summarised on its own")
rc, out = run(events, "--skip", "0")
check(rc == 0 and "rank 0: steps 1..3 (3), mean per step:" in out
      and "all-gathers 0.287 ms in 2 waits" in out,
      "--skip 0: step 1 counted ((800 + 40 + 20) / 3 us of forward waits)")
rc, out = run(events, "--skip", "3")
check(rc == 0 and "rank 0: no traced step after the first 3" in out, "--skip 3: no step left, said")
# a wait in no section (between forward and backward) is its own row
rc, out = run(step(1, 0, 0, 0) + step(2, 5000, 0, 0) + [span("x", "reduce_scatter_wait", 6150, 20)])
check(rc == 0 and "  outside any section     0.000 ms, compute waited 0.020 ms: reduce-scatters 0.020 ms "
      "in 1 waits" in out,
      "a wait outside the sections: its own row")
# the optimizer on its own stream (tid 5): 300 us of steps a step, 200 us of them inside the
# backward section (t0 + 1200 .. 3200): a step from t0 + 3000 (200 of its 250 us inside)
# and one from t0 + 3250 (none); spans of other categories on tid 5 do not count
opt = []
for k, t0 in ((2, 5000), (3, 10000)):
    opt += [span("layers.1", "optimizer", t0 + 3000, 250, tid=5), span("", "optimizer", t0 + 3250, 50, tid=5),
            span("x", "compute", t0 + 1300, 999, tid=5)]
rc, out = run(step(1, 0, 0, 0) + step(2, 5000, 10, 0) + step(3, 10000, 10, 0) + opt)
check(rc == 0 and "  optimizer stream 0.300 ms, 0.200 ms of it during the backward" in out.splitlines(),
      "the optimizer stream's time per step and its overlap with the backward")
check("optimizer stream" not in run(events)[1], "no optimizer stream line without its spans")
# a CPU trace: collectives but no waits
rc, out = run([span("step 1", "step", 0, 100), span("forward", "compute", 0, 50),
               span("layers.0", "all_gather", 10, 5, tid=2)])
check(rc == 1 and "no compute-stream wait spans" in out, "no wait spans: exit 1 and says so")
rc, out = run(events, "--skip", "x")
check(rc == 2 and "--skip needs an integer" in out, "--skip x: exit 2, one line")
with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
    f.write('{"traceEvents": [')
rc = subprocess.run([sys.executable, os.path.join(HERE, "trace_waits.py"), f.name],
                    capture_output=True, text=True)
os.unlink(f.name)
check(rc.returncode == 2 and "not a readable Chrome trace" in rc.stderr, "truncated JSON: exit 2, one line")

sys.exit(summary())
