#!/usr/bin/env python3
"""Checks that every CUDA kernel can be launched at its largest block on an sm_90a GPU.

A kernel's registers, times the threads of its block, must fit an SM's register file
(65536 registers, allocated per warp in units of 256). A kernel that does not builds,
passes every test on the CPU emulator, and fails only at its launch on a GPU ("too many
resources requested for launch"). The largest block is the kernel's __launch_bounds__
(the PTX's .maxntid), else 1024 threads, the most any launch may ask for.

usage: kernel_resources.py --control CONTROL.ptxas FILE.ptxas...
Each FILE.ptxas is ptxas -v's report of FILE.ptx (runtime/cuda.ninja `cuda_resources`).
CONTROL must be reported over the limit (the check sees what it is for). Prints a PASS or
FAIL line per file and kernel over the limit, then `N passed, N failed`.
"""
import re
import subprocess
import sys

REGISTERS_PER_SM = 65536
MAX_THREADS = 1024


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                             check=True).stdout.split("\n")
        return dict(zip(names, out))
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def kernels(info_path):
    """[(mangled name, registers, largest block)] of one ptxas report and its PTX."""
    with open(info_path[: -len(".ptxas")] + ".ptx") as f:
        ptx = f.read()
    bounds = {}
    for m in re.finditer(r"\.entry\s+(\S+?)\s*\(.*?\)(.*?)\{", ptx, re.S):
        nt = re.search(r"\.maxntid\s+(\d+),\s*(\d+),\s*(\d+)", m.group(2))
        bounds[m.group(1)] = int(nt[1]) * int(nt[2]) * int(nt[3]) if nt else MAX_THREADS
    with open(info_path) as f:
        info = f.read()
    found = []
    for m in re.finditer(r"Compiling entry function '([^']+)'.*?Used (\d+) registers", info, re.S):
        found.append((m.group(1), int(m.group(2)), bounds.get(m.group(1), MAX_THREADS)))
    return found


def registers_needed(regs, threads):
    per_warp = (regs * 32 + 255) // 256 * 256
    return per_warp * ((threads + 31) // 32)


def over(found):
    return [(n, r, t) for n, r, t in found if registers_needed(r, t) > REGISTERS_PER_SM]


def main(argv):
    if len(argv) < 3 or argv[0] != "--control":
        print(__doc__.split("\n\n")[2])
        return 2
    control, files = argv[1], argv[2:]
    passed = failed = 0
    bad = over(kernels(control))
    if bad:
        passed += 1
        n, r, t = bad[0]
        print(f"PASS control: {demangle([n])[n]} ({r} registers, {t} threads) is reported over "
              f"the register file")
    else:
        failed += 1
        print(f"FAIL control: {control} is not reported over the register file")
    for path in files:
        found = kernels(path)
        bad = over(found)
        names = demangle([n for n, _, _ in found])
        for n, r, t in bad:
            failed += 1
            bound = f"__launch_bounds__({t})" if t < MAX_THREADS else "no __launch_bounds__: 1024"
            print(f"FAIL {names[n]}: {r} registers a thread at {t} threads ({bound}) need "
                  f"{registers_needed(r, t)} of an SM's {REGISTERS_PER_SM}; give it "
                  f"__launch_bounds__ of its largest launch, or use fewer registers")
        if not found:
            failed += 1
            print(f"FAIL {path}: no kernels in ptxas's report")
        elif not bad:
            passed += 1
            n, r, t = max(found, key=lambda k: registers_needed(k[1], k[2]))
            print(f"PASS {path}: {len(found)} kernels fit an SM at their largest block (the most: "
                  f"{names[n].split('(')[0][:60]}, {r} registers x {t} threads)")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
