#!/usr/bin/env python3
"""The simulator's kernel figures refitted to a GPU's measured kernels
(tests/gpu/run_on_device.sh's profile stage):

  refit.py KERNELS SIM [KERNELS SIM ...] [--bench-table FILE]

KERNELS is tests/gpu/kernel_times.py's output for one bench config (ncu's time per step by
category), SIM `fsdpgen simulate SPEC --gpu G --json` for the same spec on that GPU, and
FILE bench/flops.py's table of the run (the fsdpgen rows' ms/step). For each kind of the
simulator's `kernels` line, and for its `copies` (the FSDP copies beside compute), it sets
the measured time beside the predicted one without its launches (launch_us each), over
all configs given, and proposes the efficiency that would have predicted the measurement (the figure now x predicted / measured; attention's forward
and backward figures alike). With the table, it proposes launch_us too: the step's time
that the measured kernels on the compute stream leave unexplained, over their launches
(the optimizer's kernels, beside the backward, count only for what the simulator puts
after it). It proposes, it writes nothing: the figures in generator/simulate/gpus/<gpu>.lua
say where each comes from, and a person decides.
"""
import json
import re
import sys

# kernel_times.py's categories -> the simulator's kinds (cost.lua's classes as `simulate`
# names them). The 16-bit operand copies are priced with their linears; the FSDP copies,
# on the collectives' streams, which the kinds leave out, are `simulate`'s copies.
KIND_OF = {
    "GEMM (cuBLAS)": "GEMM", "16-bit operand copies": "GEMM", "attention": "attention",
    "optimizer": "optimizer", "loss": "loss", "norms": "norms", "activations": "elementwise",
    "adds and accumulation": "elementwise", "embedding and rotary": "elementwise",
    "FSDP copies": "copies",
}
# each kind's figures in the GPU table (attention's: cuDNN's where the simulator ran it, or
# fsdpgen's kernels')
FIGURES = {"GEMM": ["gemm"], "elementwise": ["elementwise"], "norms": ["norm"], "loss": ["loss"],
           "optimizer": ["optimizer"], "copies": ["copy"]}
ATTENTION = {True: ["cudnn_attention_fwd", "cudnn_attention_bwd"], False: ["attention_fwd", "attention_bwd"]}


def read_text(path):
    """path's text, or one line and exit 1."""
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        sys.exit(f"refit.py: {path}: {e.strerror}")


def read_kernels(path):
    """ms per step by kernel_times.py category: its table's lines `   12.34 ms  5.6%  label`
    after the first line, up to the blank line before the kernels."""
    ms = {}
    lines = read_text(path).splitlines()
    for line in lines[1:]:
        if not line.strip():
            break
        m = re.match(r"\s*([\d.]+) ms\s+[\d.]+%\s+(\S.*?)\s*$", line)
        if m:
            ms[m.group(2)] = ms.get(m.group(2), 0.0) + float(m.group(1))
    if not ms:
        sys.exit(f"refit.py: {path}: no `N ms P%  category` lines (kernel_times.py's output)")
    return ms


def read_bench(path):
    """The fsdpgen rows' ms/step by config, from bench/flops.py's table."""
    steps = {}
    for line in read_text(path).splitlines():
        cols = line.split()
        if len(cols) > 2 and cols[1] == "fsdpgen":
            try:
                steps[cols[0]] = float(cols[2])
            except ValueError:
                pass
    return steps


def main(argv):
    args, table = [], None
    i = 0
    while i < len(argv):
        if argv[i] == "--bench-table" and i + 1 < len(argv):
            table, i = argv[i + 1], i + 2
        else:
            args.append(argv[i])
            i += 1
    if not args or len(args) % 2:
        sys.exit(__doc__)
    steps = read_bench(table) if table else {}
    pred, meas, launches, figures, cudnn = {}, {}, {}, None, None
    unexplained, compute_launches, fitted_configs = 0.0, 0, []
    for kpath, spath in zip(args[::2], args[1::2]):
        try:
            sim = json.loads(read_text(spath))
            figs = sim["kernel_figures"]
        except (ValueError, KeyError, TypeError):
            sys.exit(f"refit.py: {spath}: not `fsdpgen simulate --json`'s output")
        if figures is not None and figs != figures:
            sys.exit(f"refit.py: {spath}: another GPU table than the first SIM's")
        figures = figs
        us = figs["launch_us"]
        got = {}
        for cat, ms in read_kernels(kpath).items():
            kind = KIND_OF.get(cat)
            if kind:
                got[kind] = got.get(kind, 0.0) + ms
            else:
                print(f"{sim['spec']}: {ms:.2f} ms of {cat!r} not fitted")
        on_cudnn = sim.get("attention", {}).get("cudnn", 0) > 0
        if cudnn is not None and on_cudnn != cudnn:
            sys.exit(f"refit.py: {spath}: attention on cuDNN in one SIM and not in another")
        cudnn = on_cudnn
        copies = {"kind": "copies", "time_s": sim.get("copies_s", 0.0), "launches": sim.get("copy_launches", 0)}
        for k in sim["kinds"] + [copies]:
            kind, n = k["kind"], k["launches"]
            p = k["time_s"] * 1e3 - n * us * 1e-3
            pred[kind] = pred.get(kind, 0.0) + p
            meas[kind] = meas.get(kind, 0.0) + got.get(kind, 0.0)
            launches[kind] = launches.get(kind, 0) + n
        config = sim["spec"][len("bench_"):] if sim["spec"].startswith("bench_") else sim["spec"]
        if config in steps:
            # the compute stream: every kind's kernels but the optimizer's beside the backward
            opt = sim.get("optimizer") or {}
            after = opt.get("after_s", 0.0) * 1e3
            on_compute = sum(got.get(k["kind"], 0.0) for k in sim["kinds"] if k["kind"] != "optimizer")
            unexplained += steps[config] - sim["exposed_s"] * 1e3 - on_compute - after
            compute_launches += sum(k["launches"] for k in sim["kinds"] if k["kind"] != "optimizer")
            fitted_configs.append(config)
    print(f"{'kind':12s} {'predicted ms':>12s} {'measured ms':>11s} {'launches':>8s}  figure: now -> proposed")
    for kind in sorted(pred, key=lambda k: -meas.get(k, 0.0)):
        p, m = pred[kind], meas[kind]
        line = f"{kind:12s} {p:12.2f} {m:11.2f} {launches[kind]:8d}  "
        if m <= 0 or p <= 0:
            print(line + "nothing measured: kept")
            continue
        props = []
        for name in ATTENTION[bool(cudnn)] if kind == "attention" else FIGURES.get(kind, []):
            new = figures[name] * p / m
            props.append(f"{name} {figures[name]:g} -> {new:.3f}" + (" (above the peak: check the categories)"
                                                                      if new > 1 else ""))
        print(line + "; ".join(props))
    if compute_launches:
        new_us = max(0.0, unexplained * 1e3 / compute_launches)
        print(f"launch_us {figures['launch_us']:g} -> {new_us:.1f} ({unexplained:.2f} ms of "
              f"{', '.join(fitted_configs)} unexplained by the kernels over {compute_launches} launches)")
    else:
        print(f"launch_us {figures['launch_us']:g}: kept (no bench step time for these configs)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
