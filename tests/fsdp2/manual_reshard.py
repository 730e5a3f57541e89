#!/usr/bin/env python3
"""Manual reshard() in real FSDP2 against fsdpgen's plan.

Runs step programs with explicit "reshard" items (and one "unshard") on PyTorch's test
Transformer (same math as models/transformer.lua, dropout 0) in real FSDP2: PyTorch >= 2.11
on CPU, gloo ranks spawned with torch.multiprocessing, fully_shard on every block and the
root; and one two-headed model whose final callback reshards a group still sharded
post-forward (the same rule outside a manual reshard). It records FSDP events as PyTorch's own FSDP tests do (patching
FSDPParamGroup.unshard/reshard/post_backward, with their no-op filters) and counts each
all-gather, reduce-scatter and all-reduce by step item kind and process group size. Then
it compares, for the training step after a first one:
  - events with `./fsdpgen events SPEC`, exactly, less the reshard() calls that found the
    group already sharded: FSDP2's recording lists those no-ops, fsdpgen lists only
    reshards that change a group's state (docs/cli.md "Events"); each case says how many it
    left out, and a no-op must be a reshard of a sharded group outside forward;
  - counts with `./fsdpgen counts SPEC`;
  - the planned collectives by item kind and group size (a block resharded by hand
    all-gathers over the full shard group in backward, the others inside their
    post-forward group) with the planner's steps.
Specs: the feature specs named below, and specs written from each case's description.
Without torch >= 2.11 it prints one SKIP line and `0 passed, 0 failed` (exit 0).
Run from anywhere: python3 tests/fsdp2/manual_reshard.py [--verbose] [CASE...] (default: every case)
"""
import datetime
import json
import os
import socket
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "common"))
from checks import check, summary  # noqa: E402


def skip(why):
    print(f"SKIP tests/fsdp2/manual_reshard.py: {why}")
    print("0 passed, 0 failed")
    sys.exit(0)


try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    skip("this python3 cannot import torch (FSDP2's oracle needs torch >= 2.11)")
_version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
if _version < (2, 11):
    skip(f"torch {torch.__version__} is older than 2.11, the FSDP2 version fsdpgen follows")
if not dist.is_available() or not dist.is_gloo_available():
    skip("torch.distributed with gloo is unavailable")

# One case: the model (Transformer blocks, reshard_after_forward of each block), the mesh
# and the step program. `spec` names a spec file of the repository that the case is the
# twin of; otherwise the spec is written from the description (spec_text).
CASES = [
    dict(name="manual_reshard_int_raf", spec="tests/specs/features/manual_reshard_int_raf.lua",
         layers=3, raf=2, mesh=(1, 4), step=["forward", ("reshard", "layers.1"), "backward", "optimizer"]),
    dict(name="reshard_every_module_int_raf", layers=2, raf=2, mesh=(1, 4),
         step=["forward", ("reshard", None), "backward", "optimizer"]),
    dict(name="reshard_twice_int_raf", layers=2, raf=2, mesh=(1, 4),
         step=["forward", ("reshard", "layers.0"), ("reshard", "layers.0"), "backward", "optimizer"]),
    dict(name="reshard_every_module_raf_true", layers=2, raf=True, mesh=(1, 4),
         step=["forward", ("reshard", None), "backward", "optimizer"]),
    dict(name="reshard_after_backward_int_raf", layers=2, raf=2, mesh=(1, 4),
         step=["forward", "backward", ("reshard", None), "optimizer"]),
    dict(name="reshard_before_forward_int_raf", layers=2, raf=2, mesh=(1, 4),
         step=[("reshard", None), "forward", "backward", "optimizer"]),
    dict(name="unshard_then_reshard_int_raf", layers=2, raf=2, mesh=(1, 4),
         step=["forward", ("unshard", "layers.0"), ("reshard", "layers.0"), "backward", "optimizer"]),
    dict(name="hsdp_manual_reshard_int_raf", spec="tests/specs/features/hsdp_manual_reshard_int_raf.lua",
         layers=2, raf=2, mesh=(2, 4), step=["forward", ("reshard", None), "backward", "optimizer"]),
    # Not a manual reshard, the same rule: the final callback's post-backward reshards a
    # group still sharded post-forward (backward through the first output only).
    dict(name="unused_output_int_raf", spec="tests/specs/features/unused_output_int_raf.lua",
         model="two_heads", raf=2, mesh=(1, 4), step=["forward", ("backward", 1), "optimizer"]),
]
BATCH, SEQ, VOCAB, DIM, HEADS = 2, 16, 8, 16, 4


def lua_value(v):
    return "true" if v is True else "false" if v is False else str(v)


def spec_text(c):
    items = []
    for item in c["step"]:
        kind, arg = (item, None) if isinstance(item, str) else item
        key = "output = " + str(arg) if kind == "backward" else f'module = "{arg}"'
        items.append(f'{{ "{kind}", {key} }}' if arg else f'"{kind}"')
    rep, shard = c["mesh"]
    mesh = f"world_size = {shard}" if rep == 1 else f"mesh = {{ replicate = {rep}, shard = {shard} }}"
    return f'''local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{{ n_layers = {c["layers"]}, dropout_p = 0 }}
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, {{ reshard_after_forward = {lua_value(c["raf"])} }})
end
fsdp.fully_shard(model)
return fsdp.spec{{
  name = "{c["name"]}", model = model, {mesh},
  input = {{ batch = {BATCH}, seq_len = {SEQ} }}, loss = "sum", optimizer = {{ "adam", lr = 1e-2 }},
  step = {{ {", ".join(items)} }},
}}
'''


# ---------------------------------------------------------------------------- the model
# PyTorch's test Transformer (torch.testing._internal.distributed._tensor.common_dtensor),
# written out so the check needs none of torch's test dependencies; dropout 0.

class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(DIM, DIM, bias=False) for _ in range(4))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (w(x).view(b, t, HEADS, c // HEADS).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, t, c))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, 4 * DIM)
        self.w2 = nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm = nn.LayerNorm(DIM)
        self.attention = Attention()
        self.ffn_norm = nn.LayerNorm(DIM)
        self.feed_forward = FeedForward()

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class TwoHeads(nn.Module):
    """tests/specs/features/unused_output_int_raf.lua's model: two linear heads on one input."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x):
        return self.a(x), self.b(x)


class Transformer(nn.Module):
    def __init__(self, n_layers):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.pos_embeddings = nn.Embedding(SEQ, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(n_layers))
        self.norm = nn.LayerNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)
        self.output.weight = self.tok_embeddings.weight

    def forward(self, tokens):
        h = self.tok_embeddings(tokens) + self.pos_embeddings(torch.arange(tokens.size(1)))
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h)).float()


# ---------------------------------------------------------------------------- FSDP2 side

def record(events, counts, phase):
    """Patches FSDPParamGroup as PyTorch's FSDP tests do (test_fully_shard_comm.py's
    *_with_record helpers, same no-op filters) and the collectives FSDP2 calls."""
    from torch.distributed.fsdp._fully_shard._fsdp_common import TrainingState
    from torch.distributed.fsdp._fully_shard._fsdp_param import ShardedState
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
    orig_unshard, orig_reshard, orig_post_backward = (
        FSDPParamGroup.unshard, FSDPParamGroup.reshard, FSDPParamGroup.post_backward)

    def unshard(self, *args, **kwargs):
        if self._all_gather_result is None and self._sharded_state != ShardedState.UNSHARDED:
            events.append(("unshard", self._module_fqn, self._training_state.name, None))
        return orig_unshard(self, *args, **kwargs)

    def reshard(self, *args, **kwargs):
        if self._training_state == TrainingState.FORWARD and not self._reshard_after_forward:
            return orig_reshard(self, *args, **kwargs)
        # The recording's entry, with the sharded state it found (SHARDED: a no-op).
        events.append(("reshard", self._module_fqn, self._training_state.name, self._sharded_state.name))
        return orig_reshard(self, *args, **kwargs)

    def post_backward(self, *args, **kwargs):
        ret = orig_post_backward(self, *args, **kwargs)
        events.append(("post_backward", self._module_fqn, self._training_state.name, None))
        return ret

    FSDPParamGroup.unshard, FSDPParamGroup.reshard, FSDPParamGroup.post_backward = unshard, reshard, post_backward

    def counted(fn, what):
        def wrapped(*args, **kwargs):
            key = f"{phase[0]} {what} {dist.get_world_size(kwargs.get('group'))}"
            counts[key] = counts.get(key, 0) + 1
            return fn(*args, **kwargs)
        return wrapped

    dist.all_gather_into_tensor = counted(dist.all_gather_into_tensor, "all_gather")
    dist.reduce_scatter_tensor = counted(dist.reduce_scatter_tensor, "reduce_scatter")
    dist.all_reduce = counted(dist.all_reduce, "all_reduce")


def worker(rank, world, port, cases, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, fully_shard
    torch.set_num_threads(1)
    events, counts, phase = [], {}, ["?"]
    record(events, counts, phase)
    results = {}
    for c in cases:
        rep, shard = c["mesh"]
        mesh = (init_device_mesh("cpu", (shard,)) if rep == 1 else
                init_device_mesh("cpu", (rep, shard), mesh_dim_names=("replicate", "shard")))
        torch.manual_seed(0)
        gen = torch.Generator().manual_seed(rank)
        if c.get("model") == "two_heads":
            model = TwoHeads()
            blocks = [model.a, model.b]
            inp = torch.randn(4, 8, generator=gen)
        else:
            model = Transformer(c["layers"])
            blocks = list(model.layers)
            inp = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
        for block in blocks:
            fully_shard(block, mesh=mesh, reshard_after_forward=c["raf"])
        fully_shard(model, mesh=mesh)
        optim = torch.optim.Adam(model.parameters(), lr=1e-2)
        modules = dict(model.named_modules())
        for _ in range(2):  # record the second step: the first also lazily initializes FSDP
            events.clear()
            counts.clear()
            outputs = None
            for item in c["step"]:
                kind, arg = (item, None) if isinstance(item, str) else item  # arg: FQN or output
                phase[0] = kind
                if kind == "forward":
                    outputs = model(inp)
                elif kind == "backward":  # through every output, or output arg (1-based)
                    outs = outputs if isinstance(outputs, tuple) else (outputs,)
                    (outs[arg - 1] if arg else sum(o.sum() for o in outs)).sum().backward()
                elif kind == "optimizer":
                    optim.step()
                    optim.zero_grad()
                else:  # reshard / unshard: the module's, or every FSDP module's in modules() order
                    targets = [modules[arg]] if arg else [m for m in model.modules() if isinstance(m, FSDPModule)]
                    for m in targets:
                        getattr(m, kind)()
        results[c["name"]] = dict(events=list(events), counts=dict(counts))
    if rank == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


def run_fsdp2(cases, world):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        mp.spawn(worker, args=(world, port, cases, out), nprocs=world)
        with open(out) as f:
            return json.load(f)
    finally:
        os.remove(out)


# ---------------------------------------------------------------------------- fsdpgen side

# The planner's collectives by step item kind, op and group size (what the binary runs).
PLANNED = r'''
local ROOT, path = arg[1], arg[2]
package.path = table.concat({ ROOT .. "/generator/?.lua", ROOT .. "/?.lua", ROOT .. "/?/init.lua" }, ";")
local loader, planner = require("spec.loader"), require("plan.planner")
local spec = loader.load(path)
local plan = loader.protect(spec.line, planner.plan, spec)
local counts, keys = {}, {}
for _, st in ipairs(plan.steps) do
  local g, size = st.group, nil
  if st.op == "all_gather" then size = st.from_post_forward and g.post_forward_world or g.shard
  elseif st.op == "reduce_scatter" then size = g.shard
  elseif st.op == "all_reduce" then size = g.replicate end
  if size then
    local k = st.phase .. " " .. st.op .. " " .. size
    if not counts[k] then keys[#keys + 1] = k end
    counts[k] = (counts[k] or 0) + 1
  end
end
table.sort(keys)
for _, k in ipairs(keys) do print(k .. " " .. counts[k]) end
'''


def fsdpgen(*args):
    p = subprocess.run(["./fsdpgen", *args], cwd=ROOT, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def compare(c, spec, got, verbose):
    name = c["name"]
    rc, out, err = fsdpgen("events", spec)
    if rc != 0:
        check(False, f"{name}: fsdpgen events failed: {err.strip()}")
        return
    planned = out.splitlines()
    recorded, noops = [], []
    for kind, group, state, sharded in got["events"]:
        line = f'{state} {kind} "{group}"'
        if kind == "reshard" and sharded == "SHARDED":
            noops.append(line)
        else:
            recorded.append(line)
    if verbose:
        print("\n".join(f"  fsdp2: {e}" for e in recorded))
    # A left-out reshard must be a no-op outside forward (forward reshards always follow
    # an unshard).
    bad = [e for e in noops if e.startswith("FORWARD ")]
    check(not bad, f"{name}: FSDP2's {len(noops)} no-op reshard(s) of sharded groups are outside forward"
          + (f" (in forward: {bad})" if bad else ""))
    first = next((i for i in range(max(len(planned), len(recorded)))
                  if i >= len(planned) or i >= len(recorded) or planned[i] != recorded[i]), None)
    check(first is None, f"{name}: fsdpgen events equal FSDP2's {len(recorded)} recorded events "
          f"(less {len(noops)} no-op reshard(s))" + ("" if first is None else
          f"; first difference at event {first + 1}: fsdpgen {planned[first:first + 1]}, FSDP2 {recorded[first:first + 1]}"))

    totals = {}
    for key, n in got["counts"].items():
        what = key.rsplit(" ", 1)[0]
        totals[what] = totals.get(what, 0) + n
    rc, out, err = fsdpgen("counts", spec)
    cli = {}
    for line in out.splitlines():
        what, n = line.rsplit(" ", 1)
        cli[what] = int(n)
    diff = sorted(k for k in set(cli) | set(totals) if cli.get(k, 0) != totals.get(k, 0))
    check(rc == 0 and not diff, f"{name}: fsdpgen counts equal FSDP2's collectives per item kind"
          + ("" if not diff else f"; differ: " + ", ".join(f"{k} fsdpgen {cli.get(k, 0)} FSDP2 {totals.get(k, 0)}" for k in diff))
          + (f" ({err.strip()})" if rc else ""))

    p = subprocess.run(["lua5.4", "-", ROOT, os.path.join(ROOT, spec)], input=PLANNED, capture_output=True, text=True)
    plan = {}
    for line in p.stdout.splitlines():
        what, n = line.rsplit(" ", 1)
        plan[what] = int(n)
    diff = sorted(k for k in set(plan) | set(got["counts"]) if plan.get(k, 0) != got["counts"].get(k, 0))
    check(p.returncode == 0 and not diff,
          f"{name}: planned collectives by item kind and group size equal FSDP2's ("
          + ", ".join(f"{k} x{n}" for k, n in sorted(got["counts"].items())) + ")"
          + ("" if not diff else "; differ: " + ", ".join(f"{k} fsdpgen {plan.get(k, 0)} FSDP2 {got['counts'].get(k, 0)}" for k in diff))
          + (f" ({p.stderr.strip()})" if p.returncode else ""))


def main():
    args = sys.argv[1:]
    verbose = "--verbose" in args
    names = [a for a in args if a != "--verbose"]
    unknown = [n for n in names if n not in {c["name"] for c in CASES}]
    if unknown:
        print(f"manual_reshard.py: unknown case '{unknown[0]}' (allowed: " + ", ".join(c["name"] for c in CASES) + ")")
        return 2
    cases = [c for c in CASES if not names or c["name"] in names]
    with tempfile.TemporaryDirectory() as tmp:
        specs = {}
        for c in cases:
            if "spec" in c:
                specs[c["name"]] = c["spec"]
            else:
                specs[c["name"]] = os.path.join(tmp, c["name"] + ".lua")
                with open(specs[c["name"]], "w") as f:
                    f.write(spec_text(c))
        by_world = {}
        for c in cases:
            by_world.setdefault(c["mesh"][0] * c["mesh"][1], []).append(c)
        for world, cases in sorted(by_world.items()):
            try:
                got = run_fsdp2(cases, world)
            except Exception as e:  # a rank failed: every case of that run fails
                why = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
                for c in cases:
                    check(False, f"{c['name']}: real FSDP2 on {world} gloo ranks failed: {why}")
                continue
            for c in cases:
                compare(c, specs[c["name"]], got[c["name"]], verbose)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
