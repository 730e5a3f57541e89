#!/usr/bin/env python3
"""PyTorch FSDP2 as the oracle of fsdpgen (tests/fsdp2/run.sh runs this with a python that
has torch >= 2.11).

Usage: oracle.py ROOT WORK [--all] [--seed S] [--count N] [--numeric-all]

For every spec of tests/specs/{seed,features,conformance,review},
tests/torch/{specs,step_programs}, tests/cuda_step, tests/hf and examples/, and for random
specs (random_specs.py: `--count` of them with `--seed`, 100 by default; with --all also 30
programs of arbitrary step items that plan, step_fuzz.lua --write-any), writes the twin
(`fsdpgen torch`), runs the twins in real FSDP2 (batch.py: one set of gloo CPU ranks per
world size, 2 steps) and checks, per spec:
- events: every step's FSDP events, as FSDP2's group hooks report them, equal
  `fsdpgen events` line for line (and every rank recorded the same);
- counts: every step's collectives per step item equal `fsdpgen counts`.
For a representative subset (all eligible specs with --all or --numeric-all): 5 steps of
the binary (`fsdpgen build`, then build/<name>/<name> --steps 5 --save) against 5 steps of
the twin from the same initial weights and inputs: each step's loss and the final
parameters within rtol 1e-5 (atol 1e-6: the binary prints 6 decimals) in fp32; under a
bf16 MixedPrecisionPolicy within rtol 2e-2 (BF16_RTOL below says why) of the run's largest
loss (of a parameter: its tensor's largest magnitude), at least 1. Specs with dropout
compare numbers too: the twin draws the binary's masks (docs/fsdp2_oracle.md).

Prints one PASS/FAIL line per check and ends with `N passed, N failed`.
"""
import argparse
import ast
import glob
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from checks import check, summary  # noqa: E402

STEPS_EVENTS, STEPS_NUMERIC = 2, 5
# Where the spec has an eval program: an eval after every step, of one validation batch
# (events only), or after every second step and the last, of two (numbers).
VAL_EVERY_EVENTS, VAL_EVERY_NUMERIC, VAL_BATCHES, VAL_BATCHES_EVENTS = 1, 2, 2, 1
RTOL, ATOL = 1e-5, 1e-6
# bf16 keeps 8 significant bits (relative step 2^-8 = 0.4%). fsdpgen computes each op in
# fp32 and rounds its output to bf16 at the store; PyTorch's CPU bf16 kernels round at other
# points (inside matmuls, norms and softmax), so each op's output may differ by an ulp or
# two, and that compounds over layers and steps: a few ulps of 2^-8, 2e-2 relative.
BF16_RTOL = 2e-2
ADAM_ATOL, ADAM_RARE = 1e-2, 1e-3
# The default tier's numeric comparisons (every eligible spec with --all).
NUMERIC_DEFAULT = ["w1_direct_all_gather", "w1_keep_microbatch", "hsdp_shard1_keep", "w1_offload_keep", "transformer_w4_int_raf", "microbatch_1f1b", "lr_schedule_warmup_cosine",
                   "hsdp_int_reshard", "transformer_w2_bf16", "gpt_bytes", "assign_param_grads", "gpt2_w1_tied_rows",
                   # dropout: recomputed by checkpoint(module) / torch.utils.checkpoint, two forwards, attention's
                   "bwd_prefetch_raf_2_ckpt_composable", "multi_forward_raf_true_ckpt_utils",
                   "transformer_attn_dropout_bf16",
                   # frozen parameters: frozen groups and frozen parts, at world 2 and (bf16, in place) 1
                   "frozen_params", "frozen_llama_w1_bf16", "frozen_between",
                   # a tensor times a number (LoRA's scaling), bf16; powers of two folded into the linears
                   "scale_bf16", "scale_fold_bf16",
                   # LoRA: frozen base, trainable adapters in every block's group (world 2; one rank,
                   # checkpointed, in place; the base's and lora_a's input gradients stacked)
                   "lora_llama_bf16", "lora_llama_w1_ckpt_bf16", "lora_llama_stacked_bf16",
                   "lora_llama_stacked_w1_bf16",
                   # the bench configs in small (tests/cuda_step): one rank, bf16, every fused path
                   "llama_bench_shape", "gpt2_bench_shape",
                   # a checkpointed region recomputed by two backwards (a retained graph)
                   "retain_graph_ckpt"]
DEFAULT_RANDOM = 100
# Lua files beside the specs that are not specs (they write them).
NOT_SPECS = ("make.lua", "map.lua")


def sh(cmd, cwd=None):
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    return r.returncode, r.stdout, r.stderr


def planned_of(text):
    """The twin's FSDPGEN block: what fsdpgen planned (events, counts, the eval's)."""
    m = re.search(r"^FSDPGEN = dict\(.*?^\)$", text, re.M | re.S)
    call = ast.parse(m.group(0)).body[0].value
    return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}


def prepare(root, work, spec, random_dir):
    """Writes the twin (one `fsdpgen torch`: the twin carries fsdpgen's events and counts);
    returns (job, None), (None, note) for a random spec fsdpgen rejects, or ({error}, None)."""
    # the work files' stem: the spec's path under root, unique where two folders have a
    # file of one name (tests/specs/features and tests/torch/step_programs)
    rel = os.path.relpath(spec, root)
    name = os.path.splitext(os.path.basename(spec) if rel.startswith("..") else rel.replace(os.sep, "__"))[0]
    twin = os.path.join(work, "twins", name + "_twin.py")
    rc, _, err = sh([os.path.join(root, "fsdpgen"), "torch", spec, "-o", twin])
    if rc == 2 and spec.startswith(random_dir):
        return None, f"{name}: rejected by fsdpgen: {err.strip()}"
    if rc:
        return {"name": name, "spec": spec, "error": err.strip()}, None
    with open(twin) as f:
        text = f.read()
    m = re.search(r"^    name=\"([^\"]+)\", world=(\d+),", text, re.M)
    flags = {k: re.search(rf"{k}=(True|False)", text).group(1) == "True" for k in ("low_precision",)}
    o = re.search(r'optimizer=dict\(kind="(\w+)", lr=([0-9.eE+-]+)', text)
    flags["adam_lr"] = float(o.group(2)) if o.group(1) != "sgd" else None
    planned = planned_of(text)
    return {"name": m.group(1), "file": name, "spec": spec, "twin": twin, "world": int(m.group(2)), "flags": flags,
            "planned": planned, "eval": planned["eval_events"] is not None}, None


def is_large(spec):
    """An example whose header says `-- Size: large` (GPT-2 124M, Llama 1B): planned and
    built anywhere, but a step of it in FSDP2 on CPU ranks would take hours."""
    with open(spec) as f:
        return any(line.startswith("-- Size: large") for line in f)


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
    """Builds and runs the spec's binary for STEPS_NUMERIC steps (with evals where the spec
    has one); returns (losses, val losses, params) or an error string."""
    rc, out, err = sh([os.path.join(root, "fsdpgen"), "build", job["spec"]])
    if rc:
        return f"fsdpgen build failed: {(out + err).strip()[-500:]}"
    save = os.path.join(work, job["file"] + ".binary.safetensors")
    binary = os.path.join(root, "build", job["name"], job["name"])
    cmd = [binary, "--steps", str(STEPS_NUMERIC), "--log-every", "1", "--save", save]
    if job["eval"]:
        cmd += ["--val-every", str(VAL_EVERY_NUMERIC), "--val-batches", str(VAL_BATCHES)]
    rc, out, err = sh(cmd)
    if rc:
        return f"binary failed: {(out + err).strip()[-500:]}"
    losses = [float(m.group(1)) for m in re.finditer(r"^step \d+ loss ([-0-9.eE+naif]+)", out, re.M)]
    vals = [float(m.group(1)) for m in re.finditer(r"^step \d+ val loss ([-0-9.eE+naif]+)", out, re.M)]
    return losses, vals, read_safetensors(save)


def first_difference(name, what, got, want):
    first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    return (f"{name}: {what} differ from fsdpgen's at event {first + 1}: FSDP2 {got[first:first + 3]} "
            f"fsdpgen {want[first:first + 3]} ({len(got)} vs {len(want)} events)")


def compare_events(job, report):
    """Each step's events and counts against fsdpgen's (a step after an eval against the
    plan of a step after an eval), and each eval batch's against the eval's plan."""
    name, planned = job["name"], job["planned"]
    after_eval = {e["step"] + 1 for e in report["evals"]}
    bad_ev, bad_co = None, None
    for s, (ev, co) in enumerate(zip(report["events"], report["counts"])):
        after = s + 1 in after_eval
        want = planned["after_eval_events" if after else "events"]
        want_c = planned["after_eval_counts" if after else "counts"]
        label = f"events of step {s + 1}{' (after an eval)' if after else ''}"
        if ev != want and bad_ev is None:
            bad_ev = first_difference(name, label, ev, want)
        if counts_dict(co) != counts_dict(want_c) and bad_co is None:
            bad_co = f"{name}: counts of step {s + 1}: FSDP2 {counts_dict(co)} fsdpgen {counts_dict(want_c)}"
    n = len(report["events"])
    if bad_ev:
        check(False, bad_ev)
    else:
        check(report["ranks_agree"], f"{name}: events of {n} steps match `fsdpgen events` "
              f"({len(planned['events'])} events a step{', after an eval too' if after_eval else ''})"
              f"{'' if report['ranks_agree'] else ', but the ranks recorded different ones'}")
    check(bad_co is None, bad_co or f"{name}: counts match `fsdpgen counts` ({', '.join(planned['counts'])})")
    if not report["evals"]:
        return
    bad = None
    for e in report["evals"]:
        for b, (ev, co) in enumerate(zip(e["events"], e["counts"])):
            if bad is None and ev != planned["eval_events"]:
                bad = first_difference(name, f"eval events after step {e['step']} (batch {b + 1})", ev,
                                       planned["eval_events"])
            if bad is None and counts_dict(co) != counts_dict(planned["eval_counts"]):
                bad = (f"{name}: eval counts after step {e['step']} (batch {b + 1}): FSDP2 {counts_dict(co)} "
                       f"fsdpgen {counts_dict(planned['eval_counts'])}")
    nb = sum(len(e["events"]) for e in report["evals"])
    check(bad is None, bad or f"{name}: eval events and counts of {nb} validation batches match fsdpgen's eval "
          f"({len(planned['eval_events'])} events, {', '.join(planned['eval_counts'][:1])})")


def compare_numbers(job, report, got_bin, twin_save):
    name = job["name"]
    if isinstance(got_bin, str):
        check(False, f"{name}: numbers: {got_bin}")
        return
    losses, vals, params = got_bin
    rtol = BF16_RTOL if job["flags"]["low_precision"] else RTOL
    twin_losses = report["losses"]
    twin_vals = [e["loss"] for e in report["evals"]] if job["eval"] else []
    # bf16: within rtol of the run's largest loss (at least 1), not of each loss. A loss
    # trained down near zero (a "sum" loss of ReLU outputs, 6.8 to 0.003 in 5 steps) differs
    # by what the parameters' rounding did to terms of the size they had (rand_1204_72: the
    # binary 2.9e-3 + 4.5e-5, FSDP2 2.9e-3; its fp32 twin spec matches within 1e-5).
    scale = 0.0 if rtol == RTOL else max([1.0] + [abs(b) for b in twin_losses + twin_vals])
    within = f"rtol {rtol:g}" + (f" of max(|loss|, {scale:.3g})" if scale else "")

    def close(got, want):
        return len(got) == len(want) and all(abs(a - b) <= rtol * max(abs(b), scale) + ATOL for a, b in zip(got, want))

    if job["eval"]:
        worst = max((abs(a - b) / max(abs(b), 1e-30) for a, b in zip(vals, twin_vals)), default=float("nan"))
        check(close(vals, twin_vals), f"{name}: val losses of {len(twin_vals)} evals match FSDP2's within {within} "
              f"(max rel diff {worst:.2e}; {len(vals)} from the binary)")
    worst = max((abs(a - b) / max(abs(b), 1e-30) for a, b in zip(losses, twin_losses)), default=float("nan"))
    check(close(losses, twin_losses), f"{name}: losses of {len(twin_losses)} steps match FSDP2's within {within} "
          f"(max rel diff {worst:.2e}; FSDP2 {twin_losses[-1]:.6f}, binary {losses[-1] if losses else float('nan'):.6f} "
          "at the last)")
    twin = read_safetensors(twin_save)
    if set(twin) != set(params):
        check(False, f"{name}: parameters: names differ ({sorted(set(twin) ^ set(params))[:4]})")
        return
    worst, worst_name, ok = 0.0, "", True
    lr = job["flags"]["adam_lr"]
    outliers, total = 0, 0
    for k in twin:
        a, b = params[k], twin[k]
        diff = np.abs(a - b)
        # bf16: also atol rtol * the tensor's largest magnitude (elements near zero).
        atol = ATOL if rtol == RTOL else rtol * max(1.0, float(np.abs(b).max()))
        if lr is not None:
            # Adam moves an element by up to lr a step whatever its gradient's size, so a
            # gradient at rounding level (summed in another order) can move it differently:
            # 1% of the largest possible move. Under bf16 the gradients keep 8 bits, so
            # such elements are common: lr x steps, half the widest gap two Adam runs can
            # open on one element.
            frac = ADAM_ATOL if rtol == RTOL else 1.0
            atol = max(atol, frac * lr * STEPS_NUMERIC)
        bad = diff > rtol * np.abs(b) + atol
        if lr is not None:
            # In fp32 such an element is rare and may take the widest gap (2 lr x steps):
            # allowed for at most ADAM_RARE of the elements (and one).
            if np.any(diff[bad] > 2 * lr * STEPS_NUMERIC):
                ok = False
            outliers += int(bad.sum())
        elif np.any(bad):
            ok = False
        total += diff.size
        d = float(diff.max()) if diff.size else 0.0
        if d > worst:
            worst, worst_name = d, k
    if outliers > max(1, ADAM_RARE * total):
        ok = False
    rare = f", {outliers} of {total} elements by up to 2 lr x steps" if outliers else ""
    check(ok, f"{name}: {len(twin)} parameters after {STEPS_NUMERIC} steps match FSDP2's within rtol {rtol:g} "
          f"({f'max abs diff {worst:.2e}, in {worst_name}' if worst_name else 'every one equal'}{rare})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("work")
    ap.add_argument("--all", action="store_true", help="every numeric comparison (the default: a representative subset)")
    ap.add_argument("--numeric-all", action="store_true", help="numbers of every eligible spec")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=None)
    ap.add_argument("--only", help="regex over spec names")
    a = ap.parse_args()
    root, work = os.path.abspath(a.root), os.path.abspath(a.work)
    os.makedirs(os.path.join(work, "twins"), exist_ok=True)
    t0 = time.time()
    specs = []
    for d in ("tests/specs/seed", "tests/specs/features", "tests/specs/conformance", "tests/specs/review",
              "tests/torch/specs", "tests/torch/step_programs", "tests/cuda_step", "tests/hf", "examples"):
        specs += sorted(p for p in glob.glob(os.path.join(root, d, "*.lua"))
                        if os.path.basename(p) not in NOT_SPECS)
    large = [s for s in specs if is_large(s)]
    specs = [s for s in specs if s not in large]
    count = a.count if a.count is not None else (100 if a.all else DEFAULT_RANDOM)
    rand_dir = os.path.join(work, "random")
    out = subprocess.run([sys.executable, os.path.join(HERE, "random_specs.py"), rand_dir, "--seed", str(a.seed),
                          "--count", str(count)], capture_output=True, text=True, check=True).stdout
    specs += out.split()
    if a.all:  # and 30 of step_fuzz's programs of arbitrary items (retained graphs, setters, ...)
        any_dir = os.path.join(work, "any")
        os.makedirs(any_dir, exist_ok=True)
        subprocess.run(["lua5.4", "tests/generator/step_fuzz.lua", "--write-any", any_dir, "30"], cwd=root, check=True)
        specs += sorted(glob.glob(os.path.join(any_dir, "*.lua")))
    if a.only:
        specs = [s for s in specs if re.search(a.only, os.path.basename(s))]
    numeric_all = a.all or a.numeric_all
    # Pipelined: the twins are written (2 at a time) while batch.py (torch imported once)
    # runs the ones already written, a group of one world size at a time; the binaries of
    # the numeric subset build and train in the background meanwhile.
    log = open(os.path.join(work, "batch.log"), "w")
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "batch.py")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=log, text=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(l.rstrip("\n")) for l in proc.stdout] + [lines.put(None)],
                     daemon=True).start()
    pool, binaries = ThreadPoolExecutor(2), ThreadPoolExecutor(1)
    futures = [pool.submit(prepare, root, work, s, rand_dir) for s in specs]
    outcomes, jobs, pending, numbers = [None] * len(futures), [], [], {}
    busy, ended, rejected, t_written = False, False, 0, None
    while True:
        for i, f in enumerate(futures):
            if outcomes[i] is None and f.done():
                job, note = outcomes[i] = f.result()
                if job is None:
                    rejected += 1
                elif "error" not in job:
                    job["numeric"] = numeric_all or job["name"] in NUMERIC_DEFAULT
                    job["report"] = os.path.join(work, job["file"] + ".report.json")
                    job["save"] = os.path.join(work, job["file"] + ".twin.safetensors") if job["numeric"] else None
                    jobs.append(job)
                    pending.append(job)
                    if job["numeric"]:
                        numbers[job["file"]] = binaries.submit(run_binary, root, job, work)
        written = all(o is not None for o in outcomes)
        if written and t_written is None:
            t_written = time.time()
            print(f"# {len(jobs)} specs ({rejected} random ones rejected by fsdpgen), twins written in "
                  f"{t_written - t0:.0f} s", flush=True)
        while not lines.empty():
            line = lines.get()
            if line is None:
                ended = True
            elif line == "# idle":
                busy = False
            elif line.startswith("# world"):
                print(line, flush=True)
        if ended or (written and not pending and not busy):
            break
        if not busy and pending:
            by_world = {}
            for j in pending:
                by_world.setdefault(j["world"], []).append(j)
            world, group = max(by_world.items(), key=lambda kv: len(kv[1]))
            if written or len(group) >= 8:
                entries = [{"twin": j["twin"], "steps": STEPS_NUMERIC if j["numeric"] else STEPS_EVENTS,
                            "report": j["report"], "save": j["save"],
                            "val_batches": VAL_BATCHES if j["numeric"] else VAL_BATCHES_EVENTS,
                            "val_every": (VAL_EVERY_NUMERIC if j["numeric"] else VAL_EVERY_EVENTS) if j["eval"] else 0}
                           for j in group]
                proc.stdin.write(json.dumps({"world": world, "jobs": entries}) + "\n")
                proc.stdin.flush()
                pending = [j for j in pending if j["world"] != world]
                busy = True
        time.sleep(0.05)
    proc.stdin.close()
    rc = proc.wait()
    log.close()
    if rc:
        with open(os.path.join(work, "batch.log")) as f:
            print(f.read()[-3000:])
    # The checks, in the specs' order.
    for job, note in outcomes:
        if job is not None and "error" in job:
            check(False, f"{job['name']}: fsdpgen torch: {job['error'][-300:]}")
    for j in jobs:
        if not os.path.exists(j["report"]):
            check(False, f"{j['name']}: FSDP2 run: no report (the ranks died; exit {rc})")
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
            compare_numbers(j, report, numbers[j["file"]].result(), j["save"])
    pool.shutdown()
    binaries.shutdown()
    # The GPU-sized examples: their twins are written and compile; they do not run here.
    for s in large:
        if a.only and not re.search(a.only, os.path.basename(s)):
            continue
        job, _ = prepare(root, work, s, rand_dir)
        if "error" in job:
            check(False, f"{job['name']}: fsdpgen torch: {job['error'][-300:]}")
            continue
        with open(job["twin"]) as f:
            try:
                compile(f.read(), job["twin"], "exec")
                ok, why = True, ""
            except SyntaxError as e:
                ok, why = False, f": {e}"
        check(ok, f"{job['name']}: twin written and compiles{why} (GPU-sized: not run in FSDP2 on CPU ranks, "
                  "where one step takes hours)")
    print(f"# {time.time() - t0:.0f} s in all")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
