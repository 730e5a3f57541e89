#!/usr/bin/env python3
"""GPU time per kernel from an ncu raw CSV (tests/gpu/run_on_device.sh's profile stage):

  kernel_times.py NCU.csv [STEPS] [TOP]

Sums gpu__time_duration.sum by kernel name and prints the TOP kernels (default 30) with
their time per step (the CSV's total over STEPS, default 2), share and launches per step.
"""
import collections
import csv
import sys


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
    for name, ms in total.most_common(top):
        print(f"{ms / steps:9.2f} ms {100 * ms / whole:5.1f}% {count[name] / steps:6.0f}x  {name[:100]}")


if __name__ == "__main__":
    main()
