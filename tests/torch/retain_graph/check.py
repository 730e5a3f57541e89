#!/usr/bin/env python3
"""PyTorch check of two backward passes over one forward (tests/torch/retain_graph/spec.lua).

Usage: check.py FSDPGEN_ROOT WORK_DIR

Writes random parameters to W/init.safetensors, runs one step of the spec from them
(`fsdpgen run spec -- --load W/init.safetensors --steps 1 --save W/step1.safetensors`) and
recomputes that step in PyTorch: on each of the 2 ranks its synthetic inputs (rt_train.h),
sum(output 2).backward(retain_graph=True) then sum(output 1).backward(), gradients averaged
over the ranks (FSDP's reduce-scatter AVG), SGD. The saved parameters must agree (rtol 1e-5,
atol 1e-6). Control: the step where the second pass also counted the first pass's
activation gradient (0.linear's output gradient carried over) must not agree.

Prints PASS/FAIL lines and ends with `N passed, N failed`.
"""
import json
import os
import struct
import subprocess
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "common"))
from fsdpgen_ref import check, read_safetensors, summary, synthetic_inputs  # noqa: E402

SEED, WORLD, DIM, BATCH, LR = 42, 2, 8, 4, 0.5
NAMES = ["0.weight", "0.bias", "1.lin1.weight", "1.lin1.bias", "1.lin2.weight", "1.lin2.bias"]


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = t.contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def step(params, carry_over):
    """One SGD step; carry_over: the second pass also adds the first's 0.linear output gradient."""
    p = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    for rank in range(WORLD):
        x = synthetic_inputs(SEED, 0, 0, rank, [BATCH, DIM])
        y0 = x @ p["0.weight"].T + p["0.bias"]
        o1 = torch.relu(y0 @ p["1.lin1.weight"].T + p["1.lin1.bias"])
        o2 = torch.relu(y0 @ p["1.lin2.weight"].T + p["1.lin2.bias"])
        (dy0_first,) = torch.autograd.grad(o2.sum(), y0, retain_graph=True)
        o2.sum().backward(retain_graph=True)
        o1.sum().backward()
        if carry_over:
            with torch.no_grad():
                p["0.weight"].grad += dy0_first.T @ x
                p["0.bias"].grad += dy0_first.sum(0)
    return {k: (params[k] - LR * p[k].grad / WORLD) for k in NAMES}


def main():
    root, work = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    shapes = {"0.weight": [DIM, DIM], "0.bias": [DIM], "1.lin1.weight": [DIM, DIM], "1.lin1.bias": [DIM],
              "1.lin2.weight": [DIM, DIM], "1.lin2.bias": [DIM]}
    params = {k: torch.rand(s) * 2 - 1 for k, s in shapes.items()}
    init, out = os.path.join(work, "init.safetensors"), os.path.join(work, "step1.safetensors")
    write_safetensors(init, params)
    cmd = [os.path.join(root, "fsdpgen"), "run", os.path.join(root, "tests/torch/retain_graph/spec.lua"), "--",
           "--load", init, "--steps", "1", "--seed", str(SEED), "--save", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    check(r.returncode == 0, "fsdpgen run --load --steps 1 --save" +
          ("" if r.returncode == 0 else ": exit %d\n%s" % (r.returncode, (r.stdout + r.stderr)[-2000:])))
    if r.returncode != 0:
        return summary()
    got, _ = read_safetensors(out)
    want, wrong = step(params, False), step(params, True)
    for k in NAMES:
        err = (got[k] - want[k]).abs().max().item()
        check(torch.allclose(got[k], want[k], rtol=1e-5, atol=1e-6),
              f"retain_graph {k}: after one step as PyTorch (max abs diff {err:.2e})")
    far = max((got[k] - wrong[k]).abs().max().item() for k in ("0.weight", "0.bias"))
    check(far > 1e-3, f"control: 0.linear's step with the first pass's gradient carried over differs "
          f"(max abs diff {far:.2e})")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
