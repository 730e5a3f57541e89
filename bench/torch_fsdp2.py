#!/usr/bin/env python3
"""PyTorch FSDP2 side of the benchmark (bench/run.sh): trains a bench config on one GPU with
fully_shard per block and the root, MixedPrecisionPolicy(bf16 params, fp32 reduce) and
AdamW, eager or with torch.compile, and prints one line

  RESULT impl=torch_eager|torch_compile config=C ms_per_step=M tokens_per_s=T peak_mem_gb=G ...

ms_per_step is the median of the timed steps (torch.cuda.Event around each step, after
--warmup steps), like fsdpgen's `bench:` line; tokens_per_s = batch * seq_len / that.

The models are tests/torch/check_load.py's Transformer and Llama (fsdpgen's math, names and
shapes), imported, built with the shapes of bench/flops.py's config. On the GPU their
kernels are swapped for PyTorch's fast ones with the same math: causal
F.scaled_dot_product_attention (enable_gqa for Llama), F.rms_norm, rotary tables computed
once on the device, position ids on the device.

  torch_fsdp2.py --config gpt2_124m|llama_1b [--compile] [--warmup W] [--steps N]
                 [--schedule FILE]      check parameter names and shapes, batch and
                                        seq_len against an fsdpgen .schedule first
  torch_fsdp2.py --config C --check-only [--schedule FILE]
      no GPU or FSDP2 needed (PyTorch 1.13 is enough): builds the model on the meta device,
      prints its parameter count, compares it with FILE's; exit 0 when they agree.
"""
import argparse
import os
import re
import socket
import statistics
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "torch"))
import flops  # noqa: E402
import check_load as ref  # noqa: E402  (the PyTorch models of tests/torch)


# ---- the model -------------------------------------------------------------------------

class _MetaMode(torch.overrides.TorchFunctionMode):
    """`with torch.device("meta")` for PyTorch 1.13, which lacks it: factories on meta."""
    FACTORIES = {torch.empty, torch.zeros, torch.ones, torch.full, torch.tensor, torch.arange}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in self.FACTORIES:
            kwargs["device"] = "meta"
        return func(*args, **kwargs)


def on_device(device):
    if hasattr(torch.device, "__enter__"):
        return torch.device(device)
    assert device == "meta", "PyTorch 1.13 builds on meta only"
    return _MetaMode()


def build(cfg, device):
    """check_load's model for the config; check_load reads sizes from a state dict, so it
    gets one of meta tensors with bench/flops.py's shapes."""
    shapes = {k: torch.empty(s, device="meta") for k, s in flops.param_shapes(cfg)[0].items()}
    with on_device(device):
        if cfg["model"] == "transformer":
            return ref.Transformer(shapes, cfg["n_heads"])
        return ref.Llama(shapes, cfg["n_heads"], cfg["n_kv_heads"], cfg["norm_eps"], cfg["rope_theta"])


def read_schedule(path):
    """{name: shape} of an fsdpgen .schedule header (tied names included), the sum of its
    groups' numels and its input shape [batch, seq_len]."""
    shapes, total, inp = {}, 0, None
    row = re.compile(r"^    (\S+)\s+\[([\d, ]*)\]\s+\d+ .*?(?:\(tied: ([^)]+)\))?$")
    with open(path) as f:
        for line in f:
            if line.startswith("memory"):
                break
            m = re.match(r"^input\s+\[(\d+), (\d+)\]", line)
            if m:
                inp = (int(m.group(1)), int(m.group(2)))
            m = re.search(r"^    params \d+, numel (\d+),", line)
            if m:
                total += int(m.group(1))
                continue
            m = row.match(line.rstrip("\n"))
            if m:
                shape = tuple(int(x) for x in m.group(2).split(",") if x.strip())
                for name in [m.group(1)] + ([t.strip() for t in m.group(3).split(",")] if m.group(3) else []):
                    shapes[name] = shape
    return shapes, total, inp


def check_against(model, cfg, name, schedule):
    """Prints the parameter counts; compares names and shapes with the config table and an
    fsdpgen schedule. Returns True when they agree."""
    # state_dict keeps each tied name (named_parameters drops them; 1.13 cannot keep them)
    mine = {k: tuple(v.shape) for k, v in model.state_dict(keep_vars=True).items()}
    total = sum(p.numel() for p in model.parameters())  # tied tensors once
    n = flops.param_counts(cfg)[1]
    print(f"torch {name}: {total} parameters (tied tensors once), N for FLOPs {n}, "
          f"{len(mine)} names")
    ok = True
    want = {k: tuple(s) for k, s in flops.param_shapes(cfg)[0].items()}
    if mine != want:
        print(f"MISMATCH torch model vs bench/flops.py shapes: {diff(mine, want)}")
        ok = False
    line = f"CHECK config={name} torch_params={total}"
    if schedule:
        theirs, their_total, inp = read_schedule(schedule)
        print(f"fsdpgen {os.path.basename(schedule)}: {their_total} parameters, {len(theirs)} names, "
              f"input {inp}")
        if inp != (cfg["batch"], cfg["seq_len"]):
            print(f"MISMATCH input: fsdpgen {inp}, bench/flops.py batch {cfg['batch']} x seq {cfg['seq_len']}")
            ok = False
        line += f" fsdpgen_params={their_total}"
        if mine != theirs:
            print(f"MISMATCH torch model vs {schedule}: {diff(mine, theirs)}")
            ok = False
        if total != their_total:
            print(f"MISMATCH parameter count: torch {total}, fsdpgen {their_total}")
            ok = False
    print(line + f" agree={'yes' if ok else 'no'}")
    return ok


def diff(a, b):
    only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    shape = sorted(k for k in set(a) & set(b) if a[k] != b[k])
    return (f"only in torch {only_a[:4]}, only in the other {only_b[:4]}, "
            f"shapes differ {[(k, a[k], b[k]) for k in shape[:4]]}")


# ---- fast kernels on the GPU (same math as check_load's) -------------------------------

_rope_cache = {}


def _rope_tables(T, hd, theta, device):
    freqs = 1.0 / (theta ** (torch.arange(0, hd, 2, device=device)[: hd // 2].float() / hd))
    ang = torch.outer(torch.arange(T, device=device, dtype=torch.float32), freqs)
    return ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]


def rotary(x, n_heads, theta):
    """check_load.rotary in fp32 with cached tables, cast back to x's dtype."""
    B, T, C = x.shape
    hd = C // n_heads
    key = (T, hd, theta, x.device)
    if torch.compiler.is_compiling():
        cos, sin = _rope_tables(T, hd, theta, x.device)
    else:
        if key not in _rope_cache:
            _rope_cache[key] = _rope_tables(T, hd, theta, x.device)
        cos, sin = _rope_cache[key]
    xr = x.float().view(B, T, n_heads, hd // 2, 2)
    x0, x1 = xr[..., 0], xr[..., 1]
    out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
    return out.reshape(B, T, C).to(x.dtype)


def sdpa_attention(q, k, v, n_heads, n_kv_heads):
    """check_load.causal_attention through F.scaled_dot_product_attention (flash)."""
    B, T, C = q.shape
    hd = C // n_heads
    q = q.view(B, T, n_heads, hd).transpose(1, 2)
    k = k.view(B, T, n_kv_heads, hd).transpose(1, 2)
    v = v.view(B, T, n_kv_heads, hd).transpose(1, 2)
    gqa = {"enable_gqa": True} if n_kv_heads != n_heads else {}
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
    return o.transpose(1, 2).reshape(B, T, C)


def rms_norm_forward(self, x):
    return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def transformer_forward(self, tokens):
    """check_load.Transformer.forward with the position ids on the tokens' device."""
    T = tokens.shape[1]
    h = self.tok_embeddings(tokens) + self.pos_embeddings(torch.arange(T, device=tokens.device))
    for layer in self.layers:
        h = layer(h)
    return self.output(self.norm(h)).float()


def use_gpu_kernels():
    ref.causal_attention = sdpa_attention
    ref.rotary = rotary
    ref.RMSNorm.forward = rms_norm_forward
    ref.Transformer.forward = transformer_forward


# ---- the benchmark ---------------------------------------------------------------------

def init_single_gpu():
    """One process, world 1, NCCL; works under torchrun or alone."""
    import torch.distributed as dist
    if int(os.environ.get("WORLD_SIZE", "1")) != 1:
        sys.exit("torch_fsdp2.py: the benchmark is single-GPU (WORLD_SIZE must be 1)")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    return dist, device


def bench(a, cfg):
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:  # PyTorch < 2.6
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.device_mesh import init_device_mesh

    dist, device = init_single_gpu()
    use_gpu_kernels()
    torch.manual_seed(0)
    model = build(cfg, device)  # fp32 on the GPU, PyTorch's default init
    if a.schedule and not check_against(model, cfg, a.config, a.schedule):
        return 1
    if a.compile:  # per block, before fully_shard (torchtitan's apply_compile)
        for i, layer in enumerate(list(model.layers)):
            model.layers.register_module(str(i), torch.compile(layer))
    mesh = init_device_mesh("cuda", (1,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp, reshard_after_forward=True)
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)

    B, T, V = cfg["batch"], cfg["seq_len"], cfg["vocab_size"]
    g = torch.Generator(device=device).manual_seed(0)
    pool = torch.randint(0, V, (4, B, T + 1), device=device, generator=g)

    def step(i):
        batch = pool[i % len(pool)]
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, V), batch[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for i in range(a.warmup):
        step(i)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(a.steps + 1)]
    ev[0].record()
    for i in range(a.steps):
        loss = step(a.warmup + i)
        ev[i + 1].record()
    torch.cuda.synchronize()
    ms = [ev[i].elapsed_time(ev[i + 1]) for i in range(a.steps)]
    med = statistics.median(ms)
    print(f"RESULT impl={'torch_compile' if a.compile else 'torch_eager'} config={a.config} "
          f"ms_per_step={med:.3f} tokens_per_s={B * T * 1000.0 / med:.0f} "
          f"peak_mem_gb={torch.cuda.max_memory_allocated() / 1e9:.2f} "
          f"mean_ms={statistics.fmean(ms):.3f} warmup={a.warmup} steps={a.steps} batch={B} "
          f"seq_len={T} loss={loss.item():.4f} torch={torch.__version__} "
          f"device={torch.cuda.get_device_name(device).replace(' ', '_')}")
    dist.destroy_process_group()
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, choices=sorted(flops.CONFIGS))
    ap.add_argument("--compile", action="store_true", help="torch.compile each block")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--schedule", help="an fsdpgen .schedule of the same config to compare with")
    ap.add_argument("--check-only", action="store_true",
                    help="build on meta, count and compare parameters, exit (no GPU needed)")
    a = ap.parse_args()
    if a.warmup < 1 or a.steps < 1:
        ap.error("--warmup and --steps need at least 1")
    cfg = flops.CONFIGS[a.config]
    if a.check_only:
        return 0 if check_against(build(cfg, "meta"), cfg, a.config, a.schedule) else 1
    if not torch.cuda.is_available():
        sys.exit("torch_fsdp2.py: no CUDA device (use --check-only on a machine without a GPU)")
    return bench(a, cfg)


if __name__ == "__main__":
    sys.exit(main())
