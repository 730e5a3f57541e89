#!/usr/bin/env python3
"""PyTorch FSDP2 itself (2.x; one GPU, world 1) against the rule the planner's eval program
rests on (generator/plan/planner.lua after_eval): a no-grad forward is recorded in FSDP2's
post-forward order, which only a last backward clears, so in the next training step the
backward prefetch of the group with the step's first post-forward targets the eval's last
post-forward group.
  * Root with parameters (blocks plus a root-owned head): that group is the root, unsharded
    through backward, so the prefetch does nothing: the step after an eval issues the
    all-gathers of a step without one. fsdpgen offers the eval for such specs.
  * Root without parameters (Sequential of blocks): that group is the last block, which its
    own backward has resharded, so FSDP2 all-gathers it once more. fsdpgen plans that step
    after an eval (tests/specs/features/mixed_precision_mlp3.lua's schedule,
    after_eval_backward2).
The eval is `model.eval()`, a `torch.no_grad()` forward, `reshard()` on every FSDPModule.
All-gathers are counted where FSDPParamGroup.unshard issues one (no result pending, not
unsharded). Prints PASS/FAIL lines and `N passed, N failed`; exits 77 (skipped) without
FSDP2 or a GPU.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

try:
    from torch.distributed.fsdp import FSDPModule, fully_shard
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
except Exception as e:  # ImportError, or an older torch failing to import its FSDP
    print(f"SKIP fsdp2_eval: no FSDP2 in torch {torch.__version__} ({e.__class__.__name__}: {e})")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIP fsdp2_eval: no GPU")
    sys.exit(77)

passed = failed = 0


def check(ok, msg):
    global passed, failed
    print(("PASS " if ok else "FAIL ") + msg)
    passed, failed = passed + bool(ok), failed + (not ok)


issued = []
_unshard = FSDPParamGroup.unshard


def counting_unshard(self, *args, **kwargs):
    if self._all_gather_result is None and not self.is_unsharded:
        issued.append(self._module_fqn)
    return _unshard(self, *args, **kwargs)


FSDPParamGroup.unshard = counting_unshard


class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.a, self.b = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class WithHead(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.blocks = nn.ModuleList(MLP(d) for _ in range(3))
        self.head = nn.Linear(d, d)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def step(model, opt, x):
    issued.clear()
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
    return list(issued)


def evaluate(model, x):
    model.eval()
    with torch.no_grad():
        model(x)
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.reshard()
    model.train()


def case(name, model, blocks, extra):
    for b in blocks:
        fully_shard(b)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    x = torch.randn(4, 16, device="cuda")
    step(model, opt, x)
    plain = step(model, opt, x)
    evaluate(model, x)
    after = step(model, opt, x)
    again = step(model, opt, x)
    want = sorted(plain + extra)
    check(sorted(after) == want and again == plain,
          f"{name}: the step after an eval all-gathers {after} (a step without one: {plain}; expected "
          f"{'one more of ' + repr(extra[0]) if extra else 'the same'}), the next step {again} again")


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=0, world_size=1)
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    with torch.device("cuda"):
        rooted = WithHead(16)
        paramless = nn.Sequential(MLP(16), MLP(16), MLP(16))
    case("root with parameters", rooted, list(rooted.blocks), [])
    case("root without parameters", paramless, list(paramless), ["2"])
    dist.destroy_process_group()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
