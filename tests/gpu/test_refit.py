#!/usr/bin/env python3
"""tests/gpu/refit.py without a GPU: measurements made up from the simulator's own
prediction for both bench configs (`fsdpgen simulate --json`), each kind's kernels slower or
faster by a known factor and each step longer by what its kernels on the compute stream
added. The refit must give back each figure over its factor, launch_us within 5% of the
table's, flag an efficiency above the peak, leave out a category it does not know, and say
in one line that an input is missing.
Run from the repository root; prints `N passed, N failed`.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

CATEGORY = {"GEMM": "GEMM (cuBLAS)", "attention": "attention", "optimizer": "optimizer", "loss": "loss",
            "norms": "norms", "elementwise": "activations"}
COPIES_FACTOR = 1.6
FACTOR = {"GEMM": 1.1, "attention": 2.0, "optimizer": 1.0, "loss": 0.5, "norms": 1.0, "elementwise": 1.25}
passed = failed = 0


def check(ok, msg):
    global passed, failed
    print(("PASS " if ok else "FAIL ") + msg)
    passed, failed = passed + bool(ok), failed + (not ok)


def main():
    work = tempfile.mkdtemp(prefix="fsdpgen_refit.")
    args, rows, sims = [], [], {}
    for config in ("gpt2_124m", "llama_1b"):
        out = subprocess.run(["./fsdpgen", "simulate", f"bench/specs/{config}.lua", "--gpu", "h100", "--json"],
                             capture_output=True, text=True, check=True).stdout
        sim = json.loads(out)
        sims[config] = sim
        us = sim["kernel_figures"]["launch_us"]
        lines, added = [], 0.0
        for k in sim["kinds"]:
            p = k["time_s"] * 1e3 - k["launches"] * us * 1e-3
            m = p * FACTOR[k["kind"]]
            if k["kind"] != "optimizer":
                added += m - p
            lines.append(f"{m:9.2f} ms {1.0:5.1f}%  {CATEGORY[k['kind']]}")
        # the FSDP copies (simulate's copies, beside compute) off by their own factor, and a
        # category the simulator has no kind for
        c = sim["copies_s"] * 1e3 - sim["copy_launches"] * us * 1e-3
        lines.append(f"{c * COPIES_FACTOR:9.2f} ms {1.0:5.1f}%  FSDP copies")
        lines.append(f"{0.5:9.2f} ms {1.0:5.1f}%  other kernels")
        kpath, spath = os.path.join(work, f"kernels_{config}.txt"), os.path.join(work, f"sim_{config}.json")
        with open(kpath, "w") as f:
            f.write("1.0 ms of kernels per step, 1 launches per step\n" + "\n".join(lines)
                    + "\n\n    9.00 ms  1.0%    3x  a_kernel\n")
        with open(spath, "w") as f:
            f.write(out)
        rows.append(f"{config:10s} fsdpgen {sim['step_s'] * 1e3 + added:10.2f} 1 1.00 1.0% 1.00 (plan)")
        args += [kpath, spath]
    table = os.path.join(work, "bench_table.txt")
    with open(table, "w") as f:
        f.write("config impl ms/step tok/s x MFU peak\n" + "\n".join(rows) + "\n")
    r = subprocess.run([sys.executable, "tests/gpu/refit.py"] + args + ["--bench-table", table],
                       capture_output=True, text=True)
    print(r.stdout + r.stderr, end="")
    check(r.returncode == 0, f"refit.py exits 0 ({r.returncode})")
    figs = sims["llama_1b"]["kernel_figures"]
    got = dict(re.findall(r"(\w+) [\d.]+ -> ([\d.]+)", r.stdout))
    for kind, names in (("GEMM", ["gemm"]), ("attention", ["cudnn_attention_fwd", "cudnn_attention_bwd"]),
                        ("elementwise", ["elementwise"]), ("norms", ["norm"]), ("loss", ["loss"]),
                        ("optimizer", ["optimizer"])):
        for name in names:
            want = figs[name] / FACTOR[kind]
            g = float(got.get(name, "nan"))
            check(abs(g - want) <= 0.002 + 0.002 * want, f"{name}: {g} for {figs[name]} / {FACTOR[kind]} = {want:.3f}")
    want = figs["copy"] / COPIES_FACTOR
    g = float(got.get("copy", "nan"))
    check(abs(g - want) <= 0.002 + 0.002 * want, f"copy (the FSDP copies): {g} for {figs['copy']} / {COPIES_FACTOR} = {want:.3f}")
    g = float(got.get("launch_us", "nan"))
    check(abs(g - figs["launch_us"]) <= 0.05 * figs["launch_us"], f"launch_us: {g} for {figs['launch_us']}")
    check(re.search(r"loss 0\.63 -> 1\.2\d\d \(above the peak", r.stdout) is not None,
          "an efficiency above the peak is flagged")
    check(r.stdout.count("'other kernels' not fitted") == 2 and "a_kernel" not in r.stdout,
          "a category without a kind left out (both configs), the kernels' lines not read as categories")
    bad = subprocess.run([sys.executable, "tests/gpu/refit.py", args[0]], capture_output=True, text=True)
    check(bad.returncode != 0 and "KERNELS SIM" in bad.stderr, "an unpaired argument: the usage")
    gone = subprocess.run([sys.executable, "tests/gpu/refit.py", args[0], os.path.join(work, "none.json")],
                          capture_output=True, text=True)
    check(gone.returncode == 1 and gone.stderr.count("\n") == 1 and "none.json: No such file" in gone.stderr,
          f"a missing SIM: one line, exit 1 ({gone.stderr.strip()})")
    shutil.rmtree(work)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
