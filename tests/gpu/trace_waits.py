#!/usr/bin/env python3
"""How long compute waited for collectives, from a CUDA binary's --trace file:

  trace_waits.py TRACE.json [--skip N]

The CUDA backend puts a span on each rank's compute stream around every wait of compute for
a collective (runtime/cuda/step/backend.c, compute_waits): category all_gather_wait,
reduce_scatter_wait or all_reduce_wait, named after the group whose collective it waits
for, timed on the GPU from when compute reaches the wait to when the collective is done.
It is about zero where the collective overlapped the compute issued before the wait (the
next group's all-gather during the current group's forward, as FSDP2 overlaps them), and
the collective's exposed time otherwise.

Prints, per rank and per section of the step (the compute stream's forward, backward and
optimizer spans), the section's time and how long compute waited for each kind of
collective, as means per step over the steps after the first N (default 1: the first step
runs eagerly and pays for first touches). A step is the driver's `step` span; a span
belongs to the step that contains its middle. Where the optimizer steps ran on their own
stream (the trace's `optimizer` thread, tid 5: each group's step beside the backward), one
more line per rank: their time per step and how much of it overlapped the backward
section. Exit 1 if the trace has no wait spans (a
CPU binary's trace: its collectives block the rank thread, so their own spans are the
exposed time).
"""
import collections
import json
import sys

KINDS = [("all_gather_wait", "all-gathers"), ("reduce_scatter_wait", "reduce-scatters"),
         ("all_reduce_wait", "all-reduces")]
OPTIMIZER_TID = 5  # runtime/include/rt_trace.h RT_TRACE_OPTIMIZER
WAIT_CATS = {cat for cat, _ in KINDS}


def load_spans(path):
    """{rank: [span]} of the trace's complete events, each span a dict of the JSON."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    ranks = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            ranks[e["pid"]].append(e)
    return ranks


def step_of(span, steps):
    """Index in `steps` (sorted step spans) of the step holding span's middle, or None."""
    mid = span["ts"] + span["dur"] / 2
    for i, s in enumerate(steps):
        if s["ts"] <= mid <= s["ts"] + s["dur"]:
            return i
    return None


def summarize(spans, skip):
    """Per-step means for one rank: (steps used, first step number, [(section, ms,
    {cat: (ms, count)})] in the order the sections first appear, (ms of the optimizer
    stream, ms of it during the backward) or None), or None without steps after the
    skipped ones."""
    steps = sorted((s for s in spans if s["cat"] == "step"), key=lambda s: s["ts"])
    n = len(steps) - skip
    if n <= 0:
        return None

    def counted(span):  # in a step after the skipped ones
        k = step_of(span, steps)
        return k is not None and k >= skip

    sections = [s for s in spans if s["cat"] == "compute" and s["tid"] == 0 and counted(s)]
    time_us = {}  # section name -> its time, in first-appearance order
    for sec in sorted(sections, key=lambda s: s["ts"]):
        time_us[sec["name"]] = time_us.get(sec["name"], 0.0) + sec["dur"]
    waited = collections.defaultdict(lambda: [0.0, 0])
    for w in spans:
        if w["cat"] not in WAIT_CATS or not counted(w):
            continue
        mid = w["ts"] + w["dur"] / 2
        name = next((sec["name"] for sec in sections if sec["ts"] <= mid <= sec["ts"] + sec["dur"]),
                    "outside any section")
        time_us.setdefault(name, 0.0)
        waited[(name, w["cat"])][0] += w["dur"]
        waited[(name, w["cat"])][1] += 1
    rows = []
    for name, us in time_us.items():
        per = {cat: (waited[(name, cat)][0] / n / 1e3, waited[(name, cat)][1] / n)
               for cat, _ in KINDS if (name, cat) in waited}
        rows.append((name, us / n / 1e3, per))
    opt = [s for s in spans if s["tid"] == OPTIMIZER_TID and s["cat"] == "optimizer" and counted(s)]
    beside = None
    if opt:
        backward = [s for s in sections if s["name"] == "backward"]
        during = sum(max(0.0, min(o["ts"] + o["dur"], b["ts"] + b["dur"]) - max(o["ts"], b["ts"]))
                     for o in opt for b in backward)
        beside = (sum(o["dur"] for o in opt) / n / 1e3, during / n / 1e3)
    return n, skip + 1, rows, beside


def main(argv):
    args, skip = argv[1:], 1
    if "--skip" in args:
        i = args.index("--skip")
        try:
            skip = int(args[i + 1])
        except (IndexError, ValueError):
            skip = -1
        if skip < 0:
            print("trace_waits.py: --skip needs an integer >= 0", file=sys.stderr)
            return 2
        del args[i:i + 2]
    if len(args) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        ranks = load_spans(args[0])
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"trace_waits.py: {args[0]}: not a readable Chrome trace ({e})", file=sys.stderr)
        return 2
    if not any(s["cat"] in WAIT_CATS for spans in ranks.values() for s in spans):
        print(f"trace_waits.py: {args[0]}: no compute-stream wait spans (a CPU binary's trace? "
              "its collectives' own spans are the exposed time)")
        return 1
    for rank in sorted(ranks):
        got = summarize(ranks[rank], skip)
        if got is None:
            print(f"rank {rank}: no traced step after the first {skip}")
            continue
        n, first, rows, beside = got
        print(f"rank {rank}: steps {first}..{first + n - 1} ({n}), mean per step:")
        for name, ms, per in rows:
            total = sum(w for w, _ in per.values())
            share = f" ({100 * total / ms:.1f}%)" if ms > 0 else ""
            kinds = "; ".join(f"{label} {per[cat][0]:.3f} ms in {per[cat][1]:g} waits"
                              for cat, label in KINDS if cat in per)
            print(f"  {name:<10} {ms:9.3f} ms, compute waited {total:.3f} ms{share}"
                  + (f": {kinds}" if kinds else ""))
        if beside:
            print(f"  optimizer stream {beside[0]:.3f} ms, {beside[1]:.3f} ms of it during the backward")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
