"""CUDA vs CPU: the same spec trained the same steps with the same seed by the CPU binary
and the CUDA binary. Compares the printed per-step losses (relative to the larger of the
step's loss and the first step's), the eval program's (`step N val loss`, when the runs
printed them), and every saved parameter
(--save) within a tolerance (fp32 specs: the GPU's reduction orders and transcendental
functions differ in the last bits; mixed precision: bf16/fp16 rounding steps).

Parameters are compared per tensor, normwise: |cuda - cpu|_2 <= rtol * |cpu|_2. Elementwise
comparison cannot work for Adam: where an element's gradient is near zero, a last-bit
difference flips the sign of its update (Adam divides by sqrt(v)), so one element can move
2 * lr per step the other way on one backend. Seen on an H100: llama_gqa_bf16 (AdamW, lr
3e-4, 5 steps) had elements of layer 0's w1/w3 off by up to 0.135 relative to |p| + 1e-3,
about the 2 * 5 * 3e-4 such flips give, while its losses agreed. The largest elementwise
difference is printed for information.

Plain Python (no PyTorch): the files are small, and the norms are sums of doubles.

usage: compare_runs.py CPU_LOG CUDA_LOG CPU.safetensors CUDA.safetensors RTOL LABEL
"""
import math
import re
import sys

from checks import check, summary
from safetensors_f32 import read_f32


def losses(path, what="loss"):
    with open(path) as f:
        return [float(m.group(1)) for m in re.finditer(r"^step \d+ " + what + r" (\S+)", f.read(), re.M)]


def main():
    cpu_log, cuda_log, cpu_st, cuda_st, rtol, label = sys.argv[1:7]
    rtol = float(rtol)
    a, b = losses(cpu_log), losses(cuda_log)
    # relative to the larger of the step's loss and the first's: a loss that falls to near
    # zero (seed_divide_factor_mp's, 2.09 to 0.0024 by step 3) keeps the run's scale
    scale = abs(a[0]) if a else 0.0
    worst = max((abs(x - y) / max(abs(x), scale, 1e-6) for x, y in zip(a, b)),
                default=float("inf"))
    check(len(a) == len(b) and len(a) > 0 and worst <= rtol,
          f"{label}: {len(a)} step losses, CUDA vs CPU max rel diff {worst:.3g} (rtol {rtol:g})")
    va, vb = losses(cpu_log, "val loss"), losses(cuda_log, "val loss")
    if va or vb:  # the runs had --val-every: the eval program's losses, same scale
        worst = max((abs(x - y) / max(abs(x), scale, 1e-6) for x, y in zip(va, vb)), default=float("inf"))
        check(len(va) == len(vb) and worst <= rtol,
              f"{label}: {len(va)} val losses, CUDA vs CPU max rel diff {worst:.3g} (rtol {rtol:g})")
    pa, _ = read_f32(cpu_st)
    pb, _ = read_f32(cuda_st)
    bad, worst, worst_elem, n = [], 0.0, 0.0, 0
    for name in sorted(pa):
        (shape, x), (shape_b, y) = pa[name], pb.get(name, (None, None))
        if shape != shape_b:
            bad.append(name)
            continue
        n += len(x)
        d = [u - v for u, v in zip(x, y)]
        rel = math.sqrt(math.fsum(t * t for t in d)) / max(math.sqrt(math.fsum(u * u for u in x)), 1e-30)
        worst = max(worst, rel)
        worst_elem = max(worst_elem, max((abs(t) for t in d), default=0.0))
        if rel > rtol:
            bad.append(f"{name} ({rel:.3g})")
    check(not bad and set(pa) == set(pb),
          f"{label}: {len(pa)} parameters ({n} elements), CUDA vs CPU largest normwise rel diff "
          f"{worst:.3g} (rtol {rtol:g}; largest elementwise abs diff {worst_elem:.3g})"
          f"{'; outside: ' + ', '.join(bad[:5]) if bad else ''}")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
