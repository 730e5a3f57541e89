#!/usr/bin/env python3
"""GPU time per kernel from an ncu raw CSV (tests/gpu/run_on_device.sh's profile stage):

  kernel_times.py NCU.csv [STEPS] [TOP]

Sums gpu__time_duration.sum by kernel name and prints the time per step (the CSV's total
over STEPS, default 2) of each category of CATEGORIES, then the TOP kernels (default 30)
with their time per step, share and launches per step.
"""
import collections
import csv
import re
import sys

# What a step's time goes to, by kernel name (runtime/cuda/kernels, runtime/cuda/step, cuBLAS, cuDNN); the
# first match wins, the rest is "other".
CATEGORIES = [
    # fsdpgen's flash kernels; cuDNN's fused attention (its kernels' names carry sdpa, fmha or flash)
    ("attention", r"rtc_fa_|sdpa|flash|fmha"),
    ("GEMM (cuBLAS)", r"gemm|nvjet|cutlass|xmma|sm\d+_"),
    ("optimizer", r"adam|sgd|clip_scale"),
    ("FSDP copies", r"seg_copy"),
    ("16-bit operand copies", r"narrow|widen|round"),
    ("loss", r"ce_"),
    ("norms", r"norm|colsum"),
    ("activations", r"swiglu|gelu|silu|relu|dropout"),
    ("adds and accumulation", r"add|acc2|axpy|scale|mul"),
    ("embedding and rotary", r"embedding|rope|rows"),
]


def category(name):
    for label, pattern in CATEGORIES:
        if re.search(pattern, name):
            return label
    return "other"


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    steps = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 30
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r and not r[0].startswith("==")]
    head = rows[0]
    name_col, time_col = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
    scale = {"ns": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}.get(rows[1][time_col], 1e-6)
    total, count = collections.Counter(), collections.Counter()
    for r in rows[2:]:
        try:
            ms = float(r[time_col].replace(",", "")) * scale
        except ValueError:
            continue
        total[r[name_col]] += ms
        count[r[name_col]] += 1
    whole = sum(total.values())
    print(f"{whole / steps:.2f} ms of kernels per step, {sum(count.values()) / steps:.0f} launches per step")
    by_category = collections.Counter()
    for name, ms in total.items():
        by_category[category(name)] += ms
    for label, ms in by_category.most_common():
        print(f"{ms / steps:9.2f} ms {100 * ms / whole:5.1f}%  {label}")
    print()
    for name, ms in total.most_common(top):
        print(f"{ms / steps:9.2f} ms {100 * ms / whole:5.1f}% {count[name] / steps:6.0f}x  {name[:100]}")


if __name__ == "__main__":
    main()
