#!/usr/bin/env python3
"""The benchmark's arithmetic, in one place (pure Python, no torch): the two configs (the
same numbers as bench/specs/*.lua), their parameter shapes under fsdpgen's / PyTorch's
names, FLOPs per token, the GPU's bf16 dense peak (runtime/train/peaks.def), MFU, and the
table of bench/run.sh.

FLOPs per token (PaLM, appendix B): 6 * N + 12 * n_layers * seq_len * dim, where N counts
the parameters that take part in a matmul: every parameter except embedding tables that
are only looked up (GPT-2: pos_embeddings; its tok_embeddings is also the tied output
projection, so it counts; Llama: tok_embeddings, untied from output). Norm weights and
biases are counted (they are < 0.1% of N). The attention term counts the full T x T
product (no causal halving), as PaLM does.

Command line (bench/run.sh uses it):
  flops.py peak "DEVICE NAME"              bf16 dense TFLOP/s, or exit 2 for an unknown GPU
  flops.py info CONFIG                     params, matmul params, FLOPs per token
  flops.py table --peak-tflops P < LINES   the results table from `RESULT ...` lines
"""
import os
import re
import sys

# Model arguments: models/transformer.lua (GPT2 "124M") and models/llama.lua (preset "1B");
# batch and seq_len: the `input` of bench/specs/<config>.lua.
CONFIGS = {
    "gpt2_124m": dict(model="transformer", n_layers=12, dim=768, n_heads=12, vocab_size=50257,
                      max_seq_len=1024, batch=16, seq_len=1024, spec="bench/specs/gpt2_124m.lua"),
    "llama_1b": dict(model="llama", n_layers=16, dim=2048, n_heads=32, n_kv_heads=8, ffn_dim=8192,
                     vocab_size=128256, max_seq_len=2048, norm_eps=1e-5, rope_theta=500000.0,
                     batch=4, seq_len=2048, spec="bench/specs/llama_1b.lua"),
}

# bf16 dense peak (no sparsity), TFLOP/s: runtime/train/peaks.def, the table the training
# binary reads too. [(NAME, WITH, TFLOP/s or None)], first match wins.
PEAKS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime", "train",
                          "peaks.def")


def read_peaks(path=PEAKS_FILE):
    with open(path) as f:
        rows = re.findall(r'^PEAK\("([^"]*)", "([^"]*)", ([0-9.]+)\)', f.read(), re.M)
    return [(name, with_, float(v) or None) for name, with_, v in rows]


PEAKS = read_peaks()


def param_shapes(cfg):
    """{name: shape} of every parameter, as named_parameters(remove_duplicate=False) and the
    .schedule header name them (the tied output.weight included); and the set of names that
    are lookup-only embeddings (excluded from N)."""
    d, v, L = cfg["dim"], cfg["vocab_size"], cfg["n_layers"]
    s = {"tok_embeddings.weight": (v, d)}
    if cfg["model"] == "transformer":
        s["pos_embeddings.weight"] = (cfg["max_seq_len"], d)
        for i in range(L):
            p = f"layers.{i}."
            s[p + "attention_norm.weight"] = (d,)
            s[p + "attention_norm.bias"] = (d,)
            for w in ("wq", "wk", "wv", "wo"):
                s[p + f"attention.{w}.weight"] = (d, d)
            s[p + "ffn_norm.weight"] = (d,)
            s[p + "ffn_norm.bias"] = (d,)
            s[p + "feed_forward.w1.weight"] = (4 * d, d)
            s[p + "feed_forward.w1.bias"] = (4 * d,)
            s[p + "feed_forward.w2.weight"] = (d, 4 * d)
            s[p + "feed_forward.w2.bias"] = (d,)
        s["norm.weight"] = (d,)
        s["norm.bias"] = (d,)
        s["output.weight"] = (v, d)  # tied to tok_embeddings.weight
        return s, {"pos_embeddings.weight"}
    hd = d // cfg["n_heads"]
    kv, f = cfg["n_kv_heads"] * hd, cfg["ffn_dim"]
    for i in range(L):
        p = f"layers.{i}."
        s[p + "attention_norm.weight"] = (d,)
        s[p + "attention.wq.weight"] = (cfg["n_heads"] * hd, d)
        s[p + "attention.wk.weight"] = (kv, d)
        s[p + "attention.wv.weight"] = (kv, d)
        s[p + "attention.wo.weight"] = (d, cfg["n_heads"] * hd)
        s[p + "ffn_norm.weight"] = (d,)
        s[p + "feed_forward.w1.weight"] = (f, d)
        s[p + "feed_forward.w2.weight"] = (d, f)
        s[p + "feed_forward.w3.weight"] = (f, d)
    s["norm.weight"] = (d,)
    s["output.weight"] = (v, d)
    return s, {"tok_embeddings.weight"}


def numel(shape):
    n = 1
    for x in shape:
        n *= x
    return n


def tied(cfg):
    return cfg["model"] == "transformer"  # GPT-2: output.weight is tok_embeddings.weight


def param_counts(cfg):
    """(total parameters, each tied tensor once; N of the FLOP formula)."""
    shapes, lookup_only = param_shapes(cfg)
    names = [k for k in shapes if not (tied(cfg) and k == "output.weight")]
    total = sum(numel(shapes[k]) for k in names)
    return total, total - sum(numel(shapes[k]) for k in lookup_only)


def flops_per_token(n_matmul_params, n_layers, seq_len, dim):
    """PaLM's model FLOPs per trained token (forward + backward)."""
    return 6 * n_matmul_params + 12 * n_layers * seq_len * dim


def config_flops_per_token(cfg):
    return flops_per_token(param_counts(cfg)[1], cfg["n_layers"], cfg["seq_len"], cfg["dim"])


def mfu(flops_token, tokens_per_s, peak_tflops):
    """Model FLOPs utilisation, a fraction."""
    return flops_token * tokens_per_s / (peak_tflops * 1e12)


def peak_tflops(device_name):
    """bf16 dense peak of a known GPU, or None."""
    for name, with_, val in PEAKS:
        if name in device_name and (not with_ or with_ in device_name):
            return val
    return None


def parse_result(line):
    """`RESULT k=v k=v ...` -> dict, or None."""
    if not line.startswith("RESULT "):
        return None
    return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)


# Speedup targets of fsdpgen's default run over PyTorch FSDP2 (ms/step ratio), per config.
TARGETS = {
    "gpt2_124m": (("torch_eager", 2.0), ("torch_compile", 1.0)),
    "llama_1b": (("torch_eager", 1.5), ("torch_compile", 1.3)),
}


IMPLS = ["fsdpgen", "fsdpgen_atomic", "fsdpgen_sm8", "fsdpgen_sm16", "fsdpgen_opt_after",
         "fsdpgen_cudnn", "fsdpgen_kernels", "fsdpgen_sums", "fsdpgen_copy_kept", "torch_eager",
         "torch_compile"]


def table(lines, peak):
    """The run.sh table; ratio = that row's ms/step over fsdpgen's (> 1: fsdpgen faster)."""
    rows = [r for r in (parse_result(x.strip()) for x in lines) if r]
    out = [f"{'config':<10} {'impl':<17} {'ms/step':>9} {'tok/s':>10} {'fsdpgen x':>9} "
           f"{'MFU':>6} {'peak mem GB':>11}"]
    verdicts = []
    for name in [c for c in CONFIGS if any(r.get("config") == c for r in rows)]:
        fpt = config_flops_per_token(CONFIGS[name])
        # bench/run.sh's rows in one order, whatever order they ran in
        mine = sorted((r for r in rows if r.get("config") == name),
                      key=lambda r: IMPLS.index(r.get("impl")) if r.get("impl") in IMPLS else len(IMPLS))
        ours = next((r for r in mine if r.get("impl") == "fsdpgen" and r.get("ms_per_step")), None)
        for r in mine:
            if "ms_per_step" not in r:
                out.append(f"{name:<10} {r.get('impl', '?'):<17} {'failed: ' + r.get('error', '?')}")
                continue
            ms, tps = float(r["ms_per_step"]), float(r["tokens_per_s"])
            ratio = f"{ms / float(ours['ms_per_step']):.2f}" if ours else "-"
            mem = r.get("peak_mem_gb", "-") + (" (plan)" if r.get("mem_source") == "plan" else "")
            out.append(f"{name:<10} {r['impl']:<17} {ms:>9.2f} {tps:>10.0f} {ratio:>9} "
                       f"{100 * mfu(fpt, tps, peak):>5.1f}% {mem:>11}")
        if ours:
            base = float(ours["ms_per_step"])
            for impl, target in TARGETS[name]:
                t = next((r for r in mine if r.get("impl") == impl and r.get("ms_per_step")), None)
                if t:
                    x = float(t["ms_per_step"]) / base
                    verdicts.append(f"{name}: speedup of fsdpgen over {impl}: {x:.2f}x "
                                    f"(target >= {target:.2f}x): {'met' if x >= target else 'MISSED'}")
            if name == "llama_1b":
                m = 100 * mfu(fpt, float(ours["tokens_per_s"]), peak)
                verdicts.append(f"{name}: fsdpgen MFU {m:.1f}% (target >= 50% on an H100): "
                                f"{'met' if m >= 50 else 'MISSED'}")
    return out + [""] + verdicts if verdicts else out


def main(argv):
    if len(argv) >= 2 and argv[0] == "peak":
        p = peak_tflops(argv[1])
        if p is None:
            known = ", ".join(f"{n} {v:g}" for n, w, v in PEAKS if v and not w)
            print(f"flops.py: no bf16 peak known for GPU '{argv[1]}' (known, TFLOP/s: {known}; "
                  "runtime/train/peaks.def); pass --peak-tflops", file=sys.stderr)
            return 2
        print(f"{p:g}")
        return 0
    if len(argv) == 2 and argv[0] == "info" and argv[1] in CONFIGS:
        cfg = CONFIGS[argv[1]]
        total, n = param_counts(cfg)
        print(f"{argv[1]}: params {total}, matmul params N {n}, "
              f"flops/token {config_flops_per_token(cfg)} (6N + 12 * {cfg['n_layers']} * "
              f"{cfg['seq_len']} * {cfg['dim']}), batch {cfg['batch']} x seq {cfg['seq_len']}")
        return 0
    if len(argv) == 3 and argv[0] == "table" and argv[1] == "--peak-tflops":
        print("\n".join(table(sys.stdin.readlines(), float(argv[2]))))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
