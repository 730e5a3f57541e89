#!/usr/bin/env python3
"""PyTorch check of the training driver's contracts on the tiny model (tests/train).

Usage: torch_load.py TINY_TRAIN WORK_DIR

1. `tiny_train --steps 3 --save W/t.safetensors`; the file is parsed by hand (json +
   torch.frombuffer: the `safetensors` package is not available) and loaded with
   load_state_dict(strict=True) into the PyTorch module it mirrors (Linear(4, 5) plus a
   tied alias head.bias of lin.bias).
2. The same 3 steps are recomputed in PyTorch from the documented deterministic sources
   (rt_train.h): parameter init from Philox4x32-10 keyed by (seed, FNV-1a(fqn), index),
   synthetic inputs keyed by (seed, step, microbatch, rank, index), sum loss on each of the
   2 ranks, gradients averaged over ranks (FSDP's reduce-scatter AVG), AdamW with the
   tiny model's lr schedule (warmup 2, cosine to 1e-3 at step 6: PyTorch's SequentialLR of
   LinearLR and CosineAnnealingLR). The printed
   losses and the saved parameters must agree (rtol 1e-5, atol 1e-6), and so must the
   eval after step 3 (--val-every 3 --val-batches 2) with PyTorch's no_grad forward on the
   synthetic validation batches.

Prints PASS/FAIL lines and ends with `N passed, N failed`. Without torch it prints a SKIP
line and exits 77, which run.sh counts as skipped, not failed.
"""
import os
import re
import subprocess
import sys

try:
    import torch
except Exception as e:  # ImportError, or a broken install
    print(f"SKIP torch_load: cannot import torch ({e.__class__.__name__}: {e}); "
          "apt-get install python3-torch to run it")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from fsdpgen_ref import check, dropout_uniform, fnv1a, read_safetensors, summary, synthetic_inputs  # noqa: E402

# ---- deterministic init (rt_train.h) ---------------------------------------------

def init_uniform(fqn, seed, shape, scale):
    h = fnv1a(fqn.encode())
    n = 1
    for d in shape:
        n *= d
    vals = [-scale + 2.0 * scale * dropout_uniform(seed, h, e) for e in range(n)]
    return torch.tensor(vals, dtype=torch.float32).reshape(shape)


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 5)
        self.head = torch.nn.Module()
        self.head.bias = self.lin.bias  # tied: state_dict lists it under both names


def main():
    if len(sys.argv) != 3:
        print("usage: torch_load.py TINY_TRAIN WORK_DIR")
        return 2
    binary, work = sys.argv[1], sys.argv[2]
    path = os.path.join(work, "t.safetensors")
    env = dict(os.environ, TINY_MODEL="tiny")
    r = subprocess.run([binary, "--steps", "3", "--save", path, "--val-every", "3", "--val-batches", "2"],
                       env=env, capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"tiny_train --steps 3 --save --val-every 3: exit {r.returncode} {r.stderr.strip()}")
    if r.returncode != 0:
        summary()
        return 1
    losses = [float(m) for m in re.findall(r"^step \d+ loss (\S+)", r.stdout, re.M)]

    # 1. load_state_dict accepts the file.
    sd, meta = read_safetensors(path)
    model = Tiny()
    try:
        model.load_state_dict(sd, strict=True)
        ok, why = True, ""
    except Exception as e:  # RuntimeError listing missing / unexpected keys
        ok, why = False, str(e)
    check(ok, f"load_state_dict(strict=True) accepts {sorted(sd)} {why}")
    check(set(sd) == set(model.state_dict()), "file names == the module's state_dict names")
    check(torch.equal(sd["lin.bias"], sd["head.bias"]) and model.head.bias is model.lin.bias,
          "tied alias head.bias holds lin.bias's values")
    check(meta.get("format") == "pt" and meta.get("fsdpgen_step") == "3",
          f"metadata format=pt, fsdpgen_step=3 ({meta})")

    # 2. The same 3 steps in PyTorch.
    seed = 1234
    ref = Tiny()
    with torch.no_grad():
        ref.lin.weight.copy_(init_uniform("lin.weight", seed, [5, 4], 0.5))
        ref.lin.bias.zero_()
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=1e-2)
    lrs = torch.optim.lr_scheduler
    sched = lrs.SequentialLR(opt, [lrs.LinearLR(opt, start_factor=0.5, total_iters=1),
                                   lrs.CosineAnnealingLR(opt, T_max=4, eta_min=1e-3)], milestones=[2])
    ref_losses = []
    for step in range(3):
        opt.zero_grad()
        grads = None
        total = 0.0
        for rank in range(2):
            x = synthetic_inputs(seed, step, 0, rank, [3, 4])
            loss = ref.lin(x).sum()
            g = torch.autograd.grad(loss, [ref.lin.weight, ref.lin.bias])
            grads = g if grads is None else [a + b for a, b in zip(grads, g)]
            total += loss.item()
        ref.lin.weight.grad = grads[0] / 2
        ref.lin.bias.grad = grads[1] / 2
        opt.step()
        sched.step()
        ref_losses.append(total / 2)
    # The eval after step 3: no_grad forward on validation batch v = 0, 1 of each rank
    # (synthetic step -1 - v, microbatch 0), mean over ranks and batches.
    with torch.no_grad():
        ref_val = sum(ref.lin(synthetic_inputs(seed, -1 - v, 0, rank, [3, 4])).sum().item()
                      for v in range(2) for rank in range(2)) / 4
    val = [float(m) for m in re.findall(r"^step 3 val loss (\S+)", r.stdout, re.M)]
    check(len(val) == 1 and abs(val[0] - ref_val) <= 1e-6 + 1e-5 * abs(ref_val) + 5e-7,
          f"step 3 val loss {val} matches PyTorch's no_grad forward ({ref_val:.6f})")
    close = all(abs(a - b) <= 1e-6 + 1e-5 * abs(b) + 5e-7 for a, b in zip(losses, ref_losses))
    check(len(losses) == 3 and close,
          f"step losses {losses} match PyTorch's {[round(v, 6) for v in ref_losses]}")
    for name, t in (("lin.weight", ref.lin.weight), ("lin.bias", ref.lin.bias)):
        diff = (sd[name] - t.detach()).abs().max().item()
        ok = torch.allclose(sd[name], t.detach(), rtol=1e-5, atol=1e-6)
        check(ok, f"{name} after 3 steps matches PyTorch (max abs diff {diff:.3g})")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
