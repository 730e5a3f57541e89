#!/usr/bin/env python3
"""Loads weights trained and saved by an fsdpgen binary into a PyTorch model written here
with the math of the Lua model, and checks that PyTorch gives the binary's loss.

Usage (tests/torch/run.sh calls it once per spec):
  check_load.py --name NAME --model transformer|llama|mlp --weights FILE --loss X
                --world W [--data FILE --batch B --seq-len T] [--input-shape 4,8 --seed S]
                [--n-heads H --n-kv-heads K --norm-eps E --rope-theta R]

- The safetensors file is parsed by hand (8-byte little-endian header length, JSON header,
  raw fp32 data; the `safetensors` package is not installed) and loaded with
  load_state_dict(strict=True). Tied parameters are stored under each of their names.
- X is the `step 1 loss X` that `NAME --load FILE --steps 1` printed: the loss of the
  loaded weights on step 0's batches, the mean over the W ranks (one forward per step).
- Token models read --data with the offset contract of rt_data.h: sequence b of rank r in
  microbatch a of step s starts at o = ((((s*A + a)*W + r)*B + b)*T) mod (N - T) (A = 1,
  s = 0); inputs are tokens o..o+T-1, targets o+1..o+T; the loss is F.cross_entropy
  (mean over the rank's B*T tokens). Float-input models get the synthetic inputs of
  rt_train.h (2*u - 1 from Philox4x32-10 keyed by (seed, FNV-1a("data", step, micro,
  rank), index)) and the "sum" loss.
- Pass: |torch - fsdpgen| <= 1e-4 * |fsdpgen| + 1e-6 (the binary prints 6 decimals).

Prints PASS/FAIL lines and ends with `N passed, N failed`; exit 0 only when all passed.
"""
import argparse
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from fsdpgen_ref import check, read_safetensors, summary, synthetic_inputs  # noqa: E402

# ---- token data (rt_data.h) --------------------------------------------------------------

def token_batch(tokens, world, n_micro, batch, seq_len, step, micro, rank):
    """rt_data_batch: inputs [B, T] and targets [B, T] of (step, micro, rank)."""
    n = len(tokens)
    xs, ys = [], []
    for b in range(batch):
        o = (((((step * n_micro + micro) * world + rank) * batch + b) * seq_len) % (n - seq_len))
        xs.append(tokens[o:o + seq_len])
        ys.append(tokens[o + 1:o + seq_len + 1])
    return (torch.tensor(xs, dtype=torch.long), torch.tensor(ys, dtype=torch.long))


def read_tokens(path):
    with open(path, "rb") as f:
        raw = f.read()
    if path.endswith(".u16"):
        return list(struct.unpack("<%dH" % (len(raw) // 2), raw))
    return list(raw)


# ---- shared pieces ------------------------------------------------------------------------

def causal_attention(q, k, v, n_heads, n_kv_heads):
    """nn.attention: q [B,T,NH*HD], k and v [B,T,NKV*HD]; query head h uses kv head
    h // (NH/NKV) (repeat_interleave); scale 1/sqrt(HD); causal. (torch 1.13 has no
    F.scaled_dot_product_attention, so the math is spelled out.)"""
    B, T, C = q.shape
    hd = C // n_heads
    q = q.view(B, T, n_heads, hd).transpose(1, 2)
    k = k.view(B, T, n_kv_heads, hd).transpose(1, 2)
    v = v.view(B, T, n_kv_heads, hd).transpose(1, 2)
    if n_kv_heads != n_heads:
        rep = n_heads // n_kv_heads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    out = F.softmax(scores, dim=-1) @ v
    return out.transpose(1, 2).contiguous().view(B, T, C)


# ---- Transformer (PyTorch's FSDP test helper; models/transformer.lua) ---------------------

class TAttention(torch.nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.wq = torch.nn.Linear(dim, dim, bias=False)
        self.wk = torch.nn.Linear(dim, dim, bias=False)
        self.wv = torch.nn.Linear(dim, dim, bias=False)
        self.wo = torch.nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        o = causal_attention(self.wq(x), self.wk(x), self.wv(x), self.n_heads, self.n_heads)
        return self.wo(o)  # resid_dropout: p = 0


class TFeedForward(torch.nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = torch.nn.Linear(dim, hidden)
        self.gelu = torch.nn.GELU()  # exact (erf)
        self.w2 = torch.nn.Linear(hidden, dim)

    def forward(self, x):
        return self.w2(self.gelu(self.w1(x)))


class TBlock(torch.nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.attention_norm = torch.nn.LayerNorm(dim)  # eps 1e-5
        self.attention = TAttention(dim, n_heads)
        self.ffn_norm = torch.nn.LayerNorm(dim)
        self.feed_forward = TFeedForward(dim, 4 * dim)

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(torch.nn.Module):
    def __init__(self, sd, n_heads):
        super().__init__()
        vocab, dim = sd["tok_embeddings.weight"].shape
        max_seq_len = sd["pos_embeddings.weight"].shape[0]
        n_layers = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("layers."))
        self.tok_embeddings = torch.nn.Embedding(vocab, dim)
        self.pos_embeddings = torch.nn.Embedding(max_seq_len, dim)
        self.layers = torch.nn.ModuleList(TBlock(dim, n_heads) for _ in range(n_layers))
        self.norm = torch.nn.LayerNorm(dim)
        self.output = torch.nn.Linear(dim, vocab, bias=False)
        self.output.weight = self.tok_embeddings.weight  # weight_tying

    def forward(self, tokens):
        T = tokens.shape[1]
        h = self.tok_embeddings(tokens) + self.pos_embeddings(torch.arange(T))
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h)).float()


# ---- Llama (models/llama.lua) -------------------------------------------------------------

class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary(x, n_heads, theta):
    """Meta Llama's apply_rotary_emb: consecutive pairs (x[2i], x[2i+1]) of each head at
    position t rotated by t * theta^(-2i/HD); frequencies in float32 (precompute_freqs_cis)."""
    B, T, C = x.shape
    hd = C // n_heads
    freqs = 1.0 / (theta ** (torch.arange(0, hd, 2)[: hd // 2].float() / hd))
    ang = torch.outer(torch.arange(T, dtype=torch.float32), freqs)  # [T, HD/2]
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    xr = x.view(B, T, n_heads, hd // 2, 2)
    x0, x1 = xr[..., 0], xr[..., 1]
    out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
    return out.reshape(B, T, C)


class LAttention(torch.nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, theta):
        super().__init__()
        hd = dim // n_heads
        self.n_heads, self.n_kv_heads, self.theta = n_heads, n_kv_heads, theta
        self.wq = torch.nn.Linear(dim, n_heads * hd, bias=False)
        self.wk = torch.nn.Linear(dim, n_kv_heads * hd, bias=False)
        self.wv = torch.nn.Linear(dim, n_kv_heads * hd, bias=False)
        self.wo = torch.nn.Linear(n_heads * hd, dim, bias=False)

    def forward(self, x):
        q = rotary(self.wq(x), self.n_heads, self.theta)
        k = rotary(self.wk(x), self.n_kv_heads, self.theta)
        return self.wo(causal_attention(q, k, self.wv(x), self.n_heads, self.n_kv_heads))


class LFeedForward(torch.nn.Module):
    def __init__(self, dim, ffn_dim):
        super().__init__()
        self.w1 = torch.nn.Linear(dim, ffn_dim, bias=False)
        self.w2 = torch.nn.Linear(ffn_dim, dim, bias=False)
        self.w3 = torch.nn.Linear(dim, ffn_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class LBlock(torch.nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, ffn_dim, eps, theta):
        super().__init__()
        self.attention_norm = RMSNorm(dim, eps)
        self.attention = LAttention(dim, n_heads, n_kv_heads, theta)
        self.ffn_norm = RMSNorm(dim, eps)
        self.feed_forward = LFeedForward(dim, ffn_dim)

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(torch.nn.Module):
    def __init__(self, sd, n_heads, n_kv_heads, eps, theta):
        super().__init__()
        vocab, dim = sd["tok_embeddings.weight"].shape
        ffn_dim = sd["layers.0.feed_forward.w1.weight"].shape[0]
        n_layers = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("layers."))
        self.tok_embeddings = torch.nn.Embedding(vocab, dim)
        self.layers = torch.nn.ModuleList(
            LBlock(dim, n_heads, n_kv_heads, ffn_dim, eps, theta) for _ in range(n_layers))
        self.norm = RMSNorm(dim, eps)
        self.output = torch.nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h)).float()


# ---- MLP blocks in a Sequential (models/mlp.lua) --------------------------------------------

class MLP(torch.nn.Module):
    def __init__(self, dim, hidden, bias):
        super().__init__()
        self.in_proj = torch.nn.Linear(dim, hidden, bias=bias)
        self.out_proj = torch.nn.Linear(hidden, dim, bias=bias)

    def forward(self, x):
        return F.relu(self.out_proj(F.relu(self.in_proj(x))))


def mlp_sequential(sd):
    n = 1 + max(int(k.split(".")[0]) for k in sd)
    blocks = []
    for i in range(n):
        hidden, dim = sd[f"{i}.in_proj.weight"].shape
        blocks.append(MLP(dim, hidden, f"{i}.in_proj.bias" in sd))
    return torch.nn.Sequential(*blocks)


# ---- main ---------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", required=True)
    ap.add_argument("--model", required=True, choices=["transformer", "llama", "mlp"])
    ap.add_argument("--weights", required=True)
    ap.add_argument("--loss", required=True, type=float, help="the binary's step 1 loss")
    ap.add_argument("--world", required=True, type=int)
    ap.add_argument("--data")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--seq-len", type=int)
    ap.add_argument("--input-shape")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--n-heads", type=int)
    ap.add_argument("--n-kv-heads", type=int)
    ap.add_argument("--norm-eps", type=float, default=1e-5)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    a = ap.parse_args()
    torch.manual_seed(0)  # the modules' own init is overwritten by load_state_dict

    sd, meta = read_safetensors(a.weights)
    if a.model == "transformer":
        model = Transformer(sd, a.n_heads)
    elif a.model == "llama":
        model = Llama(sd, a.n_heads, a.n_kv_heads or a.n_heads, a.norm_eps, a.rope_theta)
    else:
        model = mlp_sequential(sd)
    model.eval()

    try:
        model.load_state_dict(sd, strict=True)
        ok, why = True, ""
    except Exception as e:  # missing / unexpected keys, shape mismatch
        ok, why = False, ": " + str(e).replace("\n", " ")
    check(ok, f"{a.name}: load_state_dict(strict=True) of {len(sd)} tensors "
              f"(fsdpgen_step={meta.get('fsdpgen_step')}){why}")
    if not ok:
        return
    if a.model == "transformer":
        same = torch.equal(sd["tok_embeddings.weight"], sd["output.weight"])
        check(same, f"{a.name}: tied output.weight == tok_embeddings.weight in the file")

    losses = []
    with torch.no_grad():
        if a.model == "mlp":
            shape = [int(v) for v in a.input_shape.split(",")]
            for r in range(a.world):
                x = synthetic_inputs(a.seed, 0, 0, r, shape)
                losses.append(model(x).sum().item())
        else:
            tokens = read_tokens(a.data)
            for r in range(a.world):
                x, y = token_batch(tokens, a.world, 1, a.batch, a.seq_len, 0, 0, r)
                logits = model(x)
                losses.append(F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1)).item())
    torch_loss = sum(losses) / len(losses)
    diff = abs(torch_loss - a.loss)
    ok = diff <= 1e-4 * abs(a.loss) + 1e-6
    check(ok, f"{a.name}: loss of the trained weights on step 0's batches: fsdpgen {a.loss:.6f}, "
              f"torch {torch_loss:.6f} (ranks {', '.join(f'{v:.6f}' for v in losses)}), "
              f"diff {diff:.3g}, rel {diff / max(abs(a.loss), 1e-30):.3g}")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # a crash counts as one failure, with its reason
        name = sys.argv[sys.argv.index("--name") + 1] if "--name" in sys.argv[:-1] else "?"
        check(False, f"{name}: check_load.py: {e.__class__.__name__}: {e}")
    sys.exit(summary())
