"""The runtime part of every twin that `fsdpgen torch` writes (generator/emit/emit_torch.lua
copies this file after the spec's part: SPEC, PARAMS, build_model, shard, set_flags,
train_step). What the training binary does outside the step, in PyTorch:
- inputs: the binary's synthetic data (rt_train.h: Philox4x32-10 keyed by the seed and
  FNV-1a("data", step, microbatch, rank)) or a token file cut as rt_data.h says;
- initial weights: the binary's (rt_train_init_param: each parameter from its FQN and the
  seed), or --load FILE.safetensors (a file the binary saved);
- FSDP events recorded as PyTorch's FSDP tests record them, by patching
  FSDPParamGroup.unshard / reshard / post_backward (an unshard that issues an all-gather,
  a reshard that frees parameters, every post_backward), and the collectives per step item
  counted at torch.distributed's calls, printed as `fsdpgen events` / `fsdpgen counts`;
- `step N loss X`: the mean over ranks and backward items of each backward's loss.
"""
import argparse
import contextlib
import json
import os
import struct
import sys

import numpy as np
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule
from torch.distributed.fsdp._fully_shard._fsdp_param import ShardedState
from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup


# ---- model helpers ------------------------------------------------------------------------

def attention(q, k, v, n_heads, n_kv_heads, causal, dropout_p=0.0):
    """fsdpgen's nn.attention: q [..., T, NH*HD], k and v [..., T, NKV*HD]; query head h
    reads kv head h // (NH / NKV); scale 1/sqrt(HD). With dropout_p, written out in fp32
    (softmax, the binary's mask on the probabilities, then times v) so that the mask is the
    binary's: probability (b, h, i, j) is element ((b*NH + h)*T + i)*T + j of its draw."""
    *lead, T, C = q.shape
    hd = C // n_heads
    q = q.reshape(-1, T, n_heads, hd).transpose(1, 2)
    k = k.reshape(-1, T, n_kv_heads, hd).transpose(1, 2)
    v = v.reshape(-1, T, n_kv_heads, hd).transpose(1, 2)
    if dropout_p > 0:
        rep = n_heads // n_kv_heads
        kf, vf = k.float().repeat_interleave(rep, 1), v.float().repeat_interleave(rep, 1)
        s = q.float() @ kf.transpose(-2, -1) / math.sqrt(hd)
        if causal:
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        p = torch.softmax(s, -1)
        o = ((p * dropout_mask(dropout_p, p.shape)) @ vf).to(q.dtype)
    else:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=n_kv_heads != n_heads)
    return o.transpose(1, 2).reshape(*lead, T, C)


def dropout(x, p, training):
    """F.dropout with the binary's mask: element e of x (row-major) kept times
    float(1 / (1 - p)) iff its draw is >= p, the product rounded once to x's dtype."""
    if not training or p == 0:
        return x
    return (x.float() * dropout_mask(p, x.shape)).to(x.dtype)


class Dropout(nn.Module):
    """nn.Dropout drawing the binary's masks (dropout above)."""

    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        return dropout(x, self.p, self.training)


def rotary(x, n_heads, theta):
    """fsdpgen's nn.rotary (Meta Llama's apply_rotary_emb): pairs (x[2i], x[2i+1]) of each
    head at position t rotated by t * theta^(-2i/HD), frequencies in float32."""
    *lead, T, C = x.shape
    hd = C // n_heads
    freqs = 1.0 / (theta ** (torch.arange(0, hd, 2)[: hd // 2].float() / hd))
    ang = torch.outer(torch.arange(T, dtype=torch.float32), freqs)
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    xr = x.float().reshape(*lead, T, n_heads, hd // 2, 2)
    x0, x1 = xr[..., 0], xr[..., 1]
    out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
    return out.reshape(*lead, T, C).to(x.dtype)


def largest_dim(param):
    """shard_placement "largest_dim": the first dim of maximal size."""
    return Shard(max(range(param.ndim), key=lambda d: (param.shape[d], -d)))


def checkpoint_module(module):
    """fsdpgen's nn.checkpoint_module: composable activation checkpointing."""
    from torch.distributed._composable import checkpoint as composable_checkpoint
    composable_checkpoint(module)


def fsdp_modules(model):
    """Every FSDP module in model.modules() order (a list group's modules each once)."""
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


# ---- the binary's deterministic sources (rt_train.h, rt_kernels.h) ------------------------

M32 = np.uint64(0xFFFFFFFF)


def philox_uniform(seed, stream, index):
    """rt_dropout_uniform for an array of element indices: lane index % 4 of Philox4x32-10
    at counter (index / 4, stream) with key seed; the top 24 bits times 2^-24 (float64)."""
    index = np.asarray(index, dtype=np.uint64)
    block = index >> np.uint64(2)
    c0, c1 = block & M32, block >> np.uint64(32)
    c2 = np.full_like(block, np.uint64(stream & 0xFFFFFFFF))
    c3 = np.full_like(block, np.uint64((stream >> 32) & 0xFFFFFFFF))
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64((seed >> 32) & 0xFFFFFFFF)
    for r in range(10):
        if r > 0:
            k0 = (k0 + np.uint64(0x9E3779B9)) & M32
            k1 = (k1 + np.uint64(0xBB67AE85)) & M32
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0) & M32, p1 & M32, \
            ((p0 >> np.uint64(32)) ^ c3 ^ k1) & M32, p0 & M32
    lanes = np.stack([c0, c1, c2, c3])
    out = np.take_along_axis(lanes, (index & np.uint64(3)).astype(np.int64)[None, :], 0)[0]
    return (out >> np.uint64(8)).astype(np.float64) * 2.0 ** -24


def fnv1a(data, h=0xCBF29CE484222325):
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def data_stream(step, micro, rank):
    return fnv1a(b"data" + b"".join((v & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little") for v in (step, micro, rank)))


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


class DropoutSites:
    """Which of the binary's RNG sites each dropout of a training step draws from. The
    binary draws op o's mask from stream rt_step_rng_stream(step, rank, o's site): its
    dropouts in the forwards' order are SPEC["dropout_sites"], (site, elements) each, and a
    recomputed forward draws its original's mask. The twin finds its place in that list by
    the position of torch's default generator, one draw per dropout, because checkpointing
    (torch.utils.checkpoint and checkpoint(module)) restores that generator before it
    recomputes, as it does for PyTorch's own masks: so a recomputed dropout and a module
    called twice each find their own site."""

    def __init__(self):
        self.seed = self.step = self.rank = 0
        self.marks = {}

    def begin(self, seed, step, rank):
        self.seed, self.step, self.rank = seed, step, rank
        n = len(SPEC["dropout_sites"])
        torch.default_generator.manual_seed(step)
        marks = [int(torch.randint(0, 1 << 62, ())) for _ in range(n + 1)]
        if len(set(marks)) != n + 1:
            raise SystemExit("twin: two dropout position marks are equal; change DropoutSites.begin's seed")
        self.marks = {v: i for i, v in enumerate(marks)}
        torch.default_generator.manual_seed(step)

    def next(self, numel):
        """The stream of the next dropout of numel elements."""
        i = self.marks.get(int(torch.randint(0, 1 << 62, ())))
        sites = SPEC["dropout_sites"]
        if i is None or i >= len(sites):
            raise SystemExit(f"twin: {SPEC['name']}: more dropouts in step {self.step + 1} than the binary's "
                             f"{len(sites)}")
        site, n = sites[i]
        if n != numel:
            raise SystemExit(f"twin: {SPEC['name']}: dropout {i + 1} of step {self.step + 1} has {numel} "
                             f"elements, the binary's (site {site}) {n}")
        return splitmix64(splitmix64(splitmix64(self.step) ^ self.rank) ^ site)

    def end(self):
        """Checks that the step drew every site."""
        i = self.marks.get(int(torch.randint(0, 1 << 62, ())))
        if i != len(SPEC["dropout_sites"]):
            raise SystemExit(f"twin: {SPEC['name']}: step {self.step + 1} ran {i} of the binary's "
                             f"{len(SPEC['dropout_sites'])} dropouts")


DROPOUT_SITES = DropoutSites()


def dropout_mask(p, shape):
    """The binary's dropout factors (0 or float(1 / (1 - p))) for a tensor of `shape`,
    drawn from the next site (rt_dropout_uniform: element e's draw >= float(p) keeps it)."""
    n = int(np.prod(shape))
    stream = DROPOUT_SITES.next(n)
    u = philox_uniform(DROPOUT_SITES.seed, stream, np.arange(n, dtype=np.uint64))
    pf = float(np.float32(p))
    scale = float(np.float32(1.0 / (1.0 - pf)))
    return torch.from_numpy(np.where(u >= pf, scale, 0.0).astype(np.float32)).reshape(shape)


def init_value(fqn, shape, kind, scale, seed):
    """rt_train_init_param: the binary's initial value of a parameter."""
    n = int(np.prod(shape))
    if kind == "zeros":
        v = np.zeros(n)
    elif kind == "ones":
        v = np.ones(n)
    else:
        h = fnv1a(fqn.encode())
        e = np.arange(n, dtype=np.uint64)
        if kind == "uniform":
            v = -scale + 2.0 * scale * philox_uniform(seed, h, e)
        else:
            u1 = philox_uniform(seed, h, 2 * e)
            u2 = philox_uniform(seed, h, 2 * e + np.uint64(1))
            v = scale * (np.sqrt(-2.0 * np.log(1.0 - u1)) * np.cos(6.283185307179586476925286766559 * u2))
    return torch.from_numpy(v.astype(np.float32)).reshape(shape)


def read_tokens(path):
    with open(path, "rb") as f:
        raw = f.read()
    if path.endswith(".u16"):
        return np.frombuffer(raw[: len(raw) // 2 * 2], dtype="<u2").astype(np.int64)
    return np.frombuffer(raw, dtype=np.uint8).astype(np.int64)


def batch(tokens, seed, step, micro, n_micro, rank, world):
    """Forward item `micro` of 0-based step `step` on `rank`: (inputs, targets or None)."""
    shape = SPEC["input_shape"]
    if not SPEC["tokens"]:
        u = philox_uniform(seed, data_stream(step, micro, rank), np.arange(int(np.prod(shape)), dtype=np.uint64))
        x = torch.from_numpy((2.0 * u.astype(np.float32) - 1.0).astype(np.float32)).reshape(shape)
        return x.to(SPEC["input_dtype"]), None
    B, T = shape
    if tokens is None:  # rt_train_synthetic_tokens
        vocab = SPEC["vocab"]
        u = philox_uniform(seed, data_stream(step, micro, rank), np.arange(B * (T + 1), dtype=np.uint64))
        tok = np.minimum((u * vocab).astype(np.int64), vocab - 1).reshape(B, T + 1)
        return torch.from_numpy(tok[:, :T].copy()), torch.from_numpy(tok[:, 1:].copy())
    n = len(tokens)  # rt_data.h's offsets
    xs, ys = [], []
    for b in range(B):
        o = ((((step * n_micro + micro) * world + rank) * B + b) * T) % (n - T)
        xs.append(tokens[o:o + T])
        ys.append(tokens[o + 1:o + T + 1])
    return torch.from_numpy(np.stack(xs)), torch.from_numpy(np.stack(ys))


# ---- safetensors (fp32, by hand) -----------------------------------------------------------

def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            raise SystemExit(f"twin: {path}: tensor {name} is {info['dtype']}, expected F32")
        b, e = info["data_offsets"]
        out[name] = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]), dtype=torch.float32).reshape(info["shape"])
    return out


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        blob = t.detach().contiguous().float().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---- recording: FSDP events and collectives ------------------------------------------------

class Recorder:
    """Events (state, kind, group) and collective counts ("forward all_gather") of one step.
    Shared by every twin in a process (one patch of FSDPParamGroup)."""

    def __init__(self):
        self.events, self.counts, self.phase, self.names = [], {}, None, {}

    def name(self, group):
        # FSDP2 names a group at the root's lazy init; an unshard before the first forward
        # comes earlier, so the twin names groups as that init will (name_groups).
        return self.names.get(id(group), group._module_fqn or "")

    def event(self, group, kind):
        self.events.append((group._training_state.name, kind, self.name(group)))

    def collective(self, kind):
        if self.phase in ("forward", "backward", "unshard", "reshard"):
            key = f"{self.phase} {kind}"
            self.counts[key] = self.counts.get(key, 0) + 1


def recorder():
    rec = getattr(FSDPParamGroup, "_fsdpgen_recorder", None)
    if rec is not None:
        return rec
    rec = FSDPParamGroup._fsdpgen_recorder = Recorder()
    unshard, reshard, post_backward = FSDPParamGroup.unshard, FSDPParamGroup.reshard, FSDPParamGroup.post_backward

    def unshard_recorded(self, *args, **kwargs):
        if self._all_gather_result is None and self._sharded_state != ShardedState.UNSHARDED:
            rec.event(self, "unshard")  # skips no-ops, as PyTorch's tests do
        return unshard(self, *args, **kwargs)

    def reshard_recorded(self, *args, **kwargs):
        before = self._sharded_state
        entry = (self._training_state.name, "reshard", rec.name(self))
        out = reshard(self, *args, **kwargs)
        if self._sharded_state != before:  # only a reshard that frees parameters
            rec.events.append(entry)
        return out

    def post_backward_recorded(self, *args, **kwargs):
        out = post_backward(self, *args, **kwargs)
        rec.event(self, "post_backward")  # with the state it leaves, as PyTorch's tests
        return out

    # gloo has no PREMUL_SUM, which FSDP2 uses for a divide factor other than the shard
    # size on fp32/bf16: the same reduce-scatter, its division after the sum instead.
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives
    factors = _fsdp_collectives._get_gradient_divide_factors

    def factors_for_gloo(*args, **kwargs):
        pre, post, rs_op, ar_op = factors(*args, **kwargs)
        if rs_op == dist.ReduceOp.PREMUL_SUM:
            factor = kwargs.get("factor", args[4] if len(args) > 4 else None)
            return None, factor, dist.ReduceOp.SUM, dist.ReduceOp.SUM
        return pre, post, rs_op, ar_op

    _fsdp_collectives._get_gradient_divide_factors = factors_for_gloo
    FSDPParamGroup.unshard, FSDPParamGroup.reshard = unshard_recorded, reshard_recorded
    FSDPParamGroup.post_backward = post_backward_recorded
    for name, kind in (("all_gather_into_tensor", "all_gather"), ("reduce_scatter_tensor", "reduce_scatter"),
                       ("all_reduce", "all_reduce")):
        def counted(*args, _orig=getattr(dist, name), _kind=kind, **kwargs):
            rec.collective(_kind)
            return _orig(*args, **kwargs)
        setattr(dist, name, counted)
    return rec


def name_groups(model, rec):
    """Each group's name as FSDP2's lazy init gives it: its modules' FQNs in
    named_modules order, joined by ", "."""
    names = {}
    for fqn, m in model.named_modules():
        if isinstance(m, FSDPModule):
            g = m._get_fsdp_state()._fsdp_param_group
            if g is not None:
                names.setdefault(id(g), []).append(fqn)
    rec.names = {k: ", ".join(v) for k, v in names.items()}


def counts_lines(counts):
    """`fsdpgen counts`'s lines: the three base keys, HSDP's all-reduce, then the others."""
    keys = ["forward all_gather", "backward all_gather", "backward reduce_scatter"]
    if SPEC["replicate"]:
        keys.append("backward all_reduce")
    keys += sorted(k for k in counts if k not in keys)
    return [f"{k} {counts.get(k, 0)}" for k in keys]


# ---- the run ------------------------------------------------------------------------------

def lr_factor(i):
    """The lr_schedule's multiplier at optimizer step i (docs/spec.md, "lr_schedule")."""
    s, lr = SPEC["lr_schedule"], SPEC["optimizer"]["lr"]
    if s is None:
        return 1.0
    w = s["warmup_steps"]
    if i < w:
        return (i + 1) / w
    if s["decay"] == "constant":
        return 1.0
    p = min(1.0, (i - w) / (s["total_steps"] - w))
    if s["decay"] == "cosine":
        val = s["min_lr"] + (lr - s["min_lr"]) * 0.5 * (1 + math.cos(math.pi * p))
    else:
        val = s["min_lr"] + (lr - s["min_lr"]) * (1 - p)
    return val / lr


def make_optimizer(params):
    o = SPEC["optimizer"]
    if o["kind"] == "sgd":
        return torch.optim.SGD(params, lr=o["lr"], momentum=o["momentum"], dampening=o["dampening"],
                               weight_decay=o["weight_decay"], nesterov=o["nesterov"])
    cls = torch.optim.Adam if o["kind"] == "adam" else torch.optim.AdamW
    return cls(params, lr=o["lr"], betas=o["betas"], eps=o["eps"], weight_decay=o["weight_decay"])


class Run:
    """What train_step calls: forwards on the binary's batches, backwards over the pending
    forwards' losses, the optimizer item."""

    def __init__(self, model, rank, world, seed, tokens, rec):
        self.model, self.rank, self.world, self.seed, self.tokens, self.rec = model, rank, world, seed, tokens, rec
        self.params = list(model.parameters())
        self.opt = make_optimizer(self.params)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lr_factor)
        self.pending, self.losses, self.step = [], [], 0

    @contextlib.contextmanager
    def phase(self, name):
        self.rec.phase = name
        try:
            yield
        finally:
            self.rec.phase = None

    def forward(self, module, item):
        x, y = batch(self.tokens, self.seed, self.step, item, SPEC["n_forward"], self.rank, self.world)
        out = module(x)
        self.pending.append((out if isinstance(out, tuple) else (out,), y))

    @staticmethod
    def loss_of(pending, output=None):
        """The spec's loss over the selected outputs of each forward, added together."""
        loss = None
        for outs, y in pending:
            for o in (outs if output is None else (outs[output],)):
                if SPEC["loss"] == "sum":
                    part = o.sum()
                else:
                    part = F.cross_entropy(o.reshape(-1, o.shape[-1]).float(), y.reshape(-1))
                loss = part if loss is None else loss.float() + part.float()
        return loss

    def backward(self, model, output=None, retain_graph=False, is_last_backward=None):
        loss = self.loss_of(self.pending, output)
        if is_last_backward is not None:
            ctx = model._get_fsdp_state()._state_ctx
            keep = ctx.is_last_backward
            model.set_is_last_backward(is_last_backward)
        loss.backward(retain_graph=retain_graph)
        if is_last_backward is not None:
            model.set_is_last_backward(keep)
        self.losses.append(loss.detach().float())
        if not retain_graph:
            self.pending = []

    def optimizer_step(self):
        if SPEC["grad_clip"] is not None:
            grads = [p for p in self.params if p.grad is not None]
            torch.nn.utils.clip_grad_norm_(grads, SPEC["grad_clip"])
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)


def evaluate(run, model, val_tokens, n_batches):
    """The binary's eval program (--val-every): model.eval(), then per validation batch a
    no-grad forward of the whole model, its loss and reshard() on every FSDP module; back
    to model.train(). Returns (the loss averaged over ranks and batches, each batch's
    events, each batch's counts)."""
    rec = run.rec
    model.eval()
    total, events, counts = 0.0, [], []
    for v in range(n_batches):
        rec.events, rec.counts = [], {}
        # rt_train: batch v of --val-data, else the synthetic batch of step -1 - v.
        x, y = batch(val_tokens, run.seed, v if val_tokens is not None else -1 - v, 0, 1, run.rank, run.world)
        with torch.no_grad():
            with run.phase("forward"):
                out = model(x)
            total += run.loss_of([(out if isinstance(out, tuple) else (out,), y)]).double().item()
            with run.phase("reshard"):
                for m in fsdp_modules(model):
                    m.reshard()
        events.append([f'{st} {kind} "{g}"' for st, kind, g in rec.events])
        counts.append(counts_lines(rec.counts))
    model.train()
    t = torch.tensor([total], dtype=torch.float64)
    dist.all_reduce(t)
    return t.item() / (run.world * n_batches), events, counts


def eval_due(opts, i):
    """rt_train's eval_due: after every --val-every-th step and the last (with only
    --val-data, after the last)."""
    if not opts.val_every and not opts.val_data:
        return False
    return i + 1 == opts.steps or bool(opts.val_every and (i + 1) % opts.val_every == 0)


def full_state(model):
    """Every parameter as a full tensor under each of its names (all ranks take part)."""
    sd = {}
    named = dict(model.named_parameters(remove_duplicate=False))
    for fqn, names, *_ in PARAMS:
        p = named[fqn]
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        for n in names:
            sd[n] = full.detach().float().clone()
    return sd


def run_rank(rank, world, opts):
    """Trains opts.steps steps on this rank (the process group is up). Returns rank 0's
    report: per step the events, counts and loss; None elsewhere."""
    rec = recorder()
    seed = SPEC["seed"] if opts.seed is None else opts.seed
    R, S = SPEC["mesh"]
    if R * S != world:
        raise SystemExit(f"twin: {SPEC['name']} needs {R * S} ranks, got {world}")
    mesh = init_device_mesh("cpu", (R, S), mesh_dim_names=("replicate", "shard")) if R > 1 \
        else init_device_mesh("cpu", (S,))
    torch.manual_seed(seed)
    model = build_model()
    with torch.no_grad():
        weights = read_safetensors(opts.load) if opts.load else None
        named = dict(model.named_parameters(remove_duplicate=False))
        for fqn, names, shape, kind, scale in PARAMS:
            v = weights[fqn] if weights is not None else init_value(fqn, shape, kind, scale, seed)
            if tuple(v.shape) != tuple(shape):
                raise SystemExit(f"twin: {fqn}: shape {list(v.shape)} in the weights, the spec has {list(shape)}")
            named[fqn].copy_(v)
    if opts.save_init and rank == 0:
        write_safetensors(opts.save_init, {n: named[fqn] for fqn, names, *_ in PARAMS for n in names})
    shard(model, mesh)
    set_flags(model)
    name_groups(model, rec)
    tokens = read_tokens(opts.data) if opts.data else None
    val_tokens = read_tokens(opts.val_data) if opts.val_data else None
    if (opts.val_every or opts.val_data) and FSDPGEN["eval_events"] is None:
        raise SystemExit(f"twin: {SPEC['name']}: fsdpgen has no eval program for this spec")
    run = Run(model, rank, world, seed, tokens, rec)
    report = {"name": SPEC["name"], "events": [], "counts": [], "losses": [], "evals": []}
    for s in range(opts.steps):
        run.step, run.losses = s, []
        rec.events, rec.counts = [], {}
        DROPOUT_SITES.begin(seed, s, rank)
        train_step(model, run)
        DROPOUT_SITES.end()
        loss = torch.stack(run.losses).mean()
        dist.all_reduce(loss)
        report["events"].append([f'{st} {kind} "{g}"' for st, kind, g in rec.events])
        report["counts"].append(counts_lines(rec.counts))
        report["losses"].append(loss.item() / world)
        if eval_due(opts, s):
            val, ev, co = evaluate(run, model, val_tokens, opts.val_batches)
            report["evals"].append({"step": s + 1, "loss": val, "events": ev, "counts": co})
    # Every rank must have recorded the same events (they run the same program).
    mine = json.dumps(report["events"]).encode()
    gathered = [None] * world
    dist.all_gather_object(gathered, mine)
    report["ranks_agree"] = all(g == mine for g in gathered)
    state = full_state(model) if opts.save else None
    if rank != 0:
        return None
    if opts.save:
        write_safetensors(opts.save, state)
    return report


def print_report(report):
    first = report["events"][0] if report["events"] else []
    for s, (ev, co, loss) in enumerate(zip(report["events"], report["counts"], report["losses"])):
        if s == 0 or ev != first:
            print(f"events step {s + 1}:")
            for line in ev:
                print(line)
            print(f"counts step {s + 1}:")
            for line in co:
                print(line)
        print(f"step {s + 1} loss {loss:.6f}")
        for e in report["evals"]:
            if e["step"] == s + 1:
                print(f"step {s + 1} val loss {e['loss']:.6f} | {len(e['events'])} batches")
    # Where FSDP2 did otherwise than fsdpgen planned (the first step, the first eval).
    if report["events"] and (report["events"][0] != FSDPGEN["events"] or report["counts"][0] != FSDPGEN["counts"]):
        print("note: FSDP2's events or counts of step 1 differ from fsdpgen's plan (FSDPGEN)")
    if report["evals"] and (report["evals"][0]["events"][0] != FSDPGEN["eval_events"]
                            or report["evals"][0]["counts"][0] != FSDPGEN["eval_counts"]):
        print("note: FSDP2's events or counts of the eval differ from fsdpgen's plan (FSDPGEN)")
    if not report["ranks_agree"]:
        print("note: the ranks recorded different events")
    sys.stdout.flush()


def _spawned(rank, world, port, opts):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        report = run_rank(rank, world, opts)
        if report is not None:
            print_report(report)
            if opts.report:
                with open(opts.report, "w") as f:
                    json.dump(report, f)
    finally:
        dist.destroy_process_group()


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=f"PyTorch FSDP2 twin of fsdpgen spec {SPEC['name']}")
    ap.add_argument("--world", type=int, default=SPEC["world"], help="ranks to spawn (the spec's world size)")
    ap.add_argument("--steps", type=int, default=1, help="training steps (default 1)")
    ap.add_argument("--seed", type=int, default=None, help="the binary's --seed (default: the spec's)")
    ap.add_argument("--data", help="token file, as the binary's --data")
    ap.add_argument("--load", help="initial weights: a safetensors file the binary saved or loaded")
    ap.add_argument("--save", help="write the trained parameters (full fp32, as the binary's --save)")
    ap.add_argument("--save-init", help="write the initial parameters before training")
    ap.add_argument("--val-every", type=int, default=0, help="eval after every N-th step and the last, as the binary")
    ap.add_argument("--val-batches", type=int, default=8, help="validation batches per eval (default 8)")
    ap.add_argument("--val-data", help="validation token file, as the binary's --val-data")
    ap.add_argument("--report", help="write rank 0's events, counts and losses per step as JSON")
    ap.add_argument("--port", type=int, default=29500 + os.getpid() % 1000)
    return ap.parse_args(argv)


def main():
    opts = parse_args()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun
        dist.init_process_group("gloo")
        try:
            report = run_rank(dist.get_rank(), dist.get_world_size(), opts)
            if report is not None:
                print_report(report)
        finally:
            dist.destroy_process_group()
        return
    mp.spawn(_spawned, args=(opts.world, opts.port, opts), nprocs=opts.world)


if __name__ == "__main__":
    main()
