#!/usr/bin/env python3
"""PyTorch FSDP2 as the oracle of fsdpgen (tests/fsdp2/run.sh runs this with a python that
has torch >= 2.11).

Usage: oracle.py ROOT WORK [--all] [--seed S] [--count N] [--numeric-all]

For every spec of tests/specs/{seed,features,conformance} and examples/, and for random
specs (random_specs.py: `--count` of them with `--seed`; the default tier a few, --all
100), writes the twin (`fsdpgen torch`), runs the twins in real FSDP2 (batch.py: one set
of gloo CPU ranks per world size, 2 steps) and checks, per spec:
- events: every step's FSDP events, as FSDP2's group hooks report them, equal
  `fsdpgen events` line for line (and every rank recorded the same);
- counts: every step's collectives per step item equal `fsdpgen counts`.
For a representative subset (all eligible specs with --all or --numeric-all): 5 steps of
the binary (`fsdpgen build`, then build/<name>/<name> --steps 5 --save) against 5 steps of
the twin from the same initial weights and inputs: each step's loss and the final
parameters within rtol 1e-5 (atol 1e-6: the binary prints 6 decimals) in fp32; under a
bf16 MixedPrecisionPolicy within rtol 2e-2 (BF16_RTOL below says why). Specs with dropout
(p > 0) compare events and counts only: the binary's masks are its own Philox stream.

Prints one PASS/FAIL line per check and ends with `N passed, N failed`.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from checks import check, summary  # noqa: E402

STEPS_EVENTS, STEPS_NUMERIC = 2, 5
RTOL, ATOL = 1e-5, 1e-6
# bf16 keeps 8 significant bits (relative step 2^-8 = 0.4%). fsdpgen computes each op in
# fp32 and rounds its output to bf16 at the store; PyTorch's CPU bf16 kernels round at other
# points (inside matmuls, norms and softmax), so each op's output may differ by an ulp or
# two, and that compounds over layers and steps: a few ulps of 2^-8, 2e-2 relative.
BF16_RTOL = 2e-2
ADAM_ATOL = 1e-2
# The default tier's numeric comparisons (every eligible spec with --all).
NUMERIC_DEFAULT = ["mlp_w2_sgd_prefetch", "transformer_w1_ckpt", "transformer_w4_int_raf", "grad_accumulation",
                   "microbatch_1f1b", "lr_schedule_warmup_cosine", "deep_prefetch_largest_dim", "hsdp_int_reshard",
                   "transformer_w2_bf16", "seed_divide_factor_2w", "gpt_bytes"]
DEFAULT_RANDOM = 8


def sh(cmd, cwd=None):
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    return r.returncode, r.stdout, r.stderr


def prepare(root, work, spec):
    """Writes the twin; returns (name, spec, twin, world, flags, expected events, counts) or
    an error string; None for a spec fsdpgen rejects (a random one)."""
    name = os.path.splitext(os.path.basename(spec))[0]
    fsdpgen = os.path.join(root, "fsdpgen")
    rc, events, err = sh([fsdpgen, "events", spec])
    if rc == 2:
        return None, f"{name}: rejected by fsdpgen: {err.strip()}"
    rc2, counts, err2 = sh([fsdpgen, "counts", spec])
    twin = os.path.join(work, "twins", name + "_twin.py")
    rc3, _, err3 = sh([fsdpgen, "torch", spec, "-o", twin])
    if rc or rc2 or rc3:
        return {"name": name, "spec": spec, "error": (err + err2 + err3).strip()}, None
    with open(twin) as f:
        text = f.read()
    m = re.search(r"^    name=\"([^\"]+)\", world=(\d+),", text, re.M)
    flags = {k: re.search(rf"{k}=(True|False)", text).group(1) == "True" for k in ("dropout", "low_precision")}
    o = re.search(r'optimizer=dict\(kind="(\w+)", lr=([0-9.eE+-]+)', text)
    flags["adam_lr"] = float(o.group(2)) if o.group(1) != "sgd" else None
    return {"name": m.group(1), "file": name, "spec": spec, "twin": twin, "world": int(m.group(2)), "flags": flags,
            "events": events.splitlines(), "counts": counts.splitlines()}, None


def counts_dict(lines):
    out = {}
    for line in lines:
        k, v = line.rsplit(" ", 1)
        out[k] = int(v)
    return out


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    return {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], dtype="<f4")
            for k, v in header.items()}


def run_binary(root, job, work):
    """Builds and runs the spec's binary for STEPS_NUMERIC steps; returns (losses, params) or
    an error string."""
    rc, out, err = sh([os.path.join(root, "fsdpgen"), "build", job["spec"]])
    if rc:
        return f"fsdpgen build failed: {(out + err).strip()[-500:]}"
    save = os.path.join(work, job["file"] + ".binary.safetensors")
    binary = os.path.join(root, "build", job["name"], job["name"])
    rc, out, err = sh([binary, "--steps", str(STEPS_NUMERIC), "--log-every", "1", "--save", save])
    if rc:
        return f"binary failed: {(out + err).strip()[-500:]}"
    losses = [float(m.group(1)) for m in re.finditer(r"^step \d+ loss ([-0-9.eE+naif]+)", out, re.M)]
    return losses, read_safetensors(save)


def compare_events(job, report):
    name = job["name"]
    want = job["events"]
    bad = [(s + 1, ev) for s, ev in enumerate(report["events"]) if ev != want]
    if not bad:
        check(report["ranks_agree"], f"{name}: events of {len(report['events'])} steps match `fsdpgen events` "
              f"({len(want)} events a step){'' if report['ranks_agree'] else ', but the ranks recorded different ones'}")
    else:
        step, got = bad[0]
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        check(False, f"{name}: events of step {step} differ from `fsdpgen events` at event {first + 1}: "
              f"FSDP2 {got[first:first + 3]} fsdpgen {want[first:first + 3]} ({len(got)} vs {len(want)} events)")
    want_c = counts_dict(job["counts"])
    bad = [(s + 1, counts_dict(c)) for s, c in enumerate(report["counts"]) if counts_dict(c) != want_c]
    if not bad:
        check(True, f"{name}: counts match `fsdpgen counts` ({', '.join(job['counts'])})")
    else:
        step, got = bad[0]
        check(False, f"{name}: counts of step {step}: FSDP2 {got} fsdpgen {want_c}")


def compare_numbers(job, report, got_bin, twin_save):
    name = job["name"]
    if isinstance(got_bin, str):
        check(False, f"{name}: numbers: {got_bin}")
        return
    losses, params = got_bin
    rtol = BF16_RTOL if job["flags"]["low_precision"] else RTOL
    twin_losses = report["losses"]
    ok = len(losses) == len(twin_losses) and all(abs(a - b) <= rtol * abs(b) + ATOL for a, b in zip(losses, twin_losses))
    worst = max((abs(a - b) / max(abs(b), 1e-30) for a, b in zip(losses, twin_losses)), default=float("nan"))
    check(ok, f"{name}: losses of {len(twin_losses)} steps match FSDP2's within rtol {rtol:g} (max rel diff "
          f"{worst:.2e}; FSDP2 {twin_losses[-1]:.6f}, binary {losses[-1] if losses else float('nan'):.6f} at the last)")
    twin = read_safetensors(twin_save)
    if set(twin) != set(params):
        check(False, f"{name}: parameters: names differ ({sorted(set(twin) ^ set(params))[:4]})")
        return
    worst, worst_name, ok = 0.0, "", True
    for k in twin:
        a, b = params[k], twin[k]
        diff = np.abs(a - b)
        # bf16: also atol rtol * the tensor's largest magnitude (elements near zero).
        atol = ATOL if rtol == RTOL else rtol * max(1.0, float(np.abs(b).max()))
        if job["flags"]["adam_lr"] is not None:
            # Adam moves an element by up to lr a step whatever its gradient's size, so a
            # gradient at rounding level (summed in another order) can move it differently:
            # 1% of the largest possible move.
            atol = max(atol, ADAM_ATOL * job["flags"]["adam_lr"] * STEPS_NUMERIC)
        if not np.all(diff <= rtol * np.abs(b) + atol):
            ok = False
        d = float(diff.max()) if diff.size else 0.0
        if d > worst:
            worst, worst_name = d, k
    check(ok, f"{name}: {len(twin)} parameters after {STEPS_NUMERIC} steps match FSDP2's within rtol {rtol:g} "
          f"(max abs diff {worst:.2e}, in {worst_name})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("work")
    ap.add_argument("--all", action="store_true", help="100 random specs (or --count) and every numeric comparison")
    ap.add_argument("--numeric-all", action="store_true", help="numbers of every eligible spec")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=None)
    ap.add_argument("--only", help="regex over spec names")
    a = ap.parse_args()
    root, work = os.path.abspath(a.root), os.path.abspath(a.work)
    os.makedirs(os.path.join(work, "twins"), exist_ok=True)
    t0 = time.time()
    specs = []
    for d in ("tests/specs/seed", "tests/specs/features", "tests/specs/conformance", "examples"):
        specs += sorted(p for p in glob.glob(os.path.join(root, d, "*.lua")) if not p.endswith("/make.lua"))
    count = a.count if a.count is not None else (100 if a.all else DEFAULT_RANDOM)
    rand_dir = os.path.join(work, "random")
    out = subprocess.run([sys.executable, os.path.join(HERE, "random_specs.py"), rand_dir, "--seed", str(a.seed),
                          "--count", str(count)], capture_output=True, text=True, check=True).stdout
    specs += out.split()
    if a.only:
        specs = [s for s in specs if re.search(a.only, os.path.basename(s))]
    with ThreadPoolExecutor(2) as pool:
        prepared = list(pool.map(lambda s: prepare(root, work, s), specs))
    jobs, rejected = [], 0
    for job, note in prepared:
        if job is None:
            rejected += 1
            continue
        if "error" in job:
            check(False, f"{job['name']}: fsdpgen torch: {job['error'][-300:]}")
            continue
        jobs.append(job)
    numeric_all = a.all or a.numeric_all
    for job in jobs:
        job["numeric"] = (not job["flags"]["dropout"]) and (numeric_all or job["name"] in NUMERIC_DEFAULT)
    print(f"# {len(jobs)} specs ({rejected} random ones rejected by fsdpgen), twins written in {time.time() - t0:.0f} s",
          flush=True)
    torch_python = sys.executable
    for world in sorted({j["world"] for j in jobs}):
        batch = [j for j in jobs if j["world"] == world]
        entries = []
        for j in batch:
            j["report"] = os.path.join(work, j["file"] + ".report.json")
            j["save"] = os.path.join(work, j["file"] + ".twin.safetensors") if j["numeric"] else None
            entries.append({"twin": j["twin"], "steps": STEPS_NUMERIC if j["numeric"] else STEPS_EVENTS,
                            "report": j["report"], "save": j["save"]})
            if os.path.exists(j["report"]):
                os.remove(j["report"])
        jobs_path = os.path.join(work, f"jobs_w{world}.json")
        with open(jobs_path, "w") as f:
            json.dump(entries, f)
        t1 = time.time()
        r = subprocess.run([torch_python, os.path.join(HERE, "batch.py"), str(world), jobs_path],
                           capture_output=True, text=True)
        print(f"# world {world}: {len(batch)} twins in FSDP2 in {time.time() - t1:.0f} s", flush=True)
        if r.returncode:
            print(r.stdout[-2000:] + r.stderr[-3000:])
        for j in batch:
            if not os.path.exists(j["report"]):
                check(False, f"{j['name']}: FSDP2 run: no report (the ranks died; exit {r.returncode})")
                continue
            with open(j["report"]) as f:
                report = json.load(f)
            if "error" in report:
                check(False, f"{j['name']}: FSDP2 run failed: {report['error']}")
                if os.environ.get("VERBOSE") == "1":
                    print(report.get("trace", ""))
                continue
            compare_events(j, report)
            if j["numeric"]:
                compare_numbers(j, report, run_binary(root, j, work), j["save"])
    print(f"# {time.time() - t0:.0f} s in all")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
