"""CUDA vs CPU: the same spec trained the same steps with the same seed by the CPU binary
and the CUDA binary. Compares the printed per-step losses and every saved parameter
(--save) within a tolerance (fp32 specs: the GPU's reduction orders and transcendental
functions differ in the last bits, which Adam's early steps amplify; mixed precision:
bf16/fp16 rounding steps).

usage: compare_runs.py CPU_LOG CUDA_LOG CPU.safetensors CUDA.safetensors RTOL LABEL
"""
import re
import sys

from fsdpgen_ref import check, read_safetensors, summary


def losses(path):
    with open(path) as f:
        return [float(m.group(1)) for m in re.finditer(r"^step \d+ loss (\S+)", f.read(), re.M)]


def main():
    cpu_log, cuda_log, cpu_st, cuda_st, rtol, label = sys.argv[1:7]
    rtol = float(rtol)
    a, b = losses(cpu_log), losses(cuda_log)
    worst = max((abs(x - y) / max(abs(x), 1e-6) for x, y in zip(a, b)), default=float("inf"))
    check(len(a) == len(b) and len(a) > 0 and worst <= rtol,
          f"{label}: {len(a)} step losses, CUDA vs CPU max rel diff {worst:.3g} (rtol {rtol:g})")
    pa, _ = read_safetensors(cpu_st)
    pb, _ = read_safetensors(cuda_st)
    bad, worst, n = [], 0.0, 0
    for name in sorted(pa):
        if name not in pb or pa[name].shape != pb[name].shape:
            bad.append(name)
            continue
        d = (pa[name] - pb[name]).abs()
        lim = rtol * (pa[name].abs() + 1e-3)
        n += pa[name].numel()
        worst = max(worst, float((d / (pa[name].abs() + 1e-3)).max()))
        if bool((d > lim).any()):
            bad.append(name)
    check(not bad and set(pa) == set(pb),
          f"{label}: {len(pa)} parameters ({n} elements), CUDA vs CPU max rel diff {worst:.3g} "
          f"(rtol {rtol:g}){'; outside: ' + ', '.join(bad[:5]) if bad else ''}")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
