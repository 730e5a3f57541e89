#!/usr/bin/env python3
"""Random fsdpgen specs on PyTorch's test models, for the FSDP2 oracle (tests/fsdp2).

Usage: random_specs.py OUT_DIR --seed S --count N

Each spec: a Transformer (1-6 blocks; tied or untied output; dropout 0 or 0.1; the model's
own checkpointing, composable checkpoint(module) on some blocks, or none; the embedding, a
block or a block's attention frozen, or LoRA adapters on every block's q, v and w2 with the
rest frozen), a Llama (1-4 blocks; head dims 4, 8, 16; grouped-query attention; its ffn
sizes; checkpointing; LoRA on a random set of its linears, the embedding or an attention
frozen) or a Sequential of MLPs (a block frozen); blocks
sharded one by one, in list groups, or left to the root; embedding and head groups; every
reshard_after_forward kind (true, false, default, an integer divisor of the shard size);
forward and backward prefetch lists; a bf16 MixedPrecisionPolicy; uneven shards (sizes
the world does not divide); HSDP 2 x 2 and 2 x 1; microbatch programs (gradient accumulation,
1F1B with explicit unshards, two forwards before one backward, a manual reshard); world
sizes 1, 2, 4 and 8; SGD (momentum, nesterov, dampening, weight decay), Adam and AdamW (betas;
AdamW's weight decay), lr schedules. Writes OUT_DIR/rand_<seed>_<i>.lua and prints their paths. Specs
fsdpgen rejects are part of the space too: the caller drops those (`fsdpgen events` exit 2).
"""
import argparse
import os
import random

HEADER = 'local nn, fsdp, models = require("nn"), require("fsdp"), require("models")\n'


def raf_value(rng, shard, root=False):
    kinds = ["true", "false", "nil"]
    divisors = [d for d in range(2, shard) if shard % d == 0]
    if divisors and not root:
        kinds.append(str(rng.choice(divisors)))
    return rng.choice(kinds)


def opts(raf, mp, hsdp):
    parts = []
    if raf != "nil":
        parts.append(f"reshard_after_forward = {raf}")
    if mp:
        parts.append('mp_policy = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }')
    return "{ " + ", ".join(parts) + " }"


def step_program(rng, kind):
    if kind == "plain":
        return None
    if kind == "accumulate":
        return ('{ { "set_requires_gradient_sync", false }, "forward", "backward", '
                '{ "set_requires_gradient_sync", true }, "forward", "backward", "optimizer" }')
    if kind == "1f1b":
        return ('{ { "unshard", async_op = true }, { "set_requires_gradient_sync", false }, '
                '{ "set_is_last_backward", false }, { "set_reshard_after_backward", false }, "forward", "backward", '
                '"forward", "backward", { "set_requires_gradient_sync", true }, { "set_is_last_backward", true }, '
                '{ "set_reshard_after_backward", true }, "forward", "backward", "optimizer" }')
    if kind == "two_forwards":
        return '{ "forward", "forward", "backward", "optimizer" }'
    return '{ "forward", "reshard", "backward", "optimizer" }'


def shard_blocks(rng, lines, n, shard, mp, hsdp, tie):
    """fully_shard calls for a decoder's n blocks (one by one, in pairs, or left to the root),
    its embedding and head groups (untied), the root, and prefetch lists between blocks."""
    sharded = []
    b = 0
    while b < n:
        r = rng.random()
        if r < 0.15:
            b += 1  # left to the root
            continue
        if r < 0.35 and b + 1 < n:
            lines.append(f"fsdp.fully_shard({{ model.layers[{b + 1}], model.layers[{b + 2}] }}, "
                         f"{opts(raf_value(rng, shard), mp, hsdp)})")
            sharded.append(b)
            b += 2
            continue
        lines.append(f"fsdp.fully_shard(model.layers[{b + 1}], {opts(raf_value(rng, shard), mp, hsdp)})")
        sharded.append(b)
        b += 1
    if not tie and rng.random() < 0.3:
        lines.append(f"fsdp.fully_shard(model.tok_embeddings, {opts(raf_value(rng, shard), mp, hsdp)})")
    if not tie and rng.random() < 0.3:
        lines.append(f"fsdp.fully_shard({{ model.norm, model.output }}, {opts(raf_value(rng, shard), mp, hsdp)})")
    lines.append(f"fsdp.fully_shard(model, {opts(raf_value(rng, shard, root=True), mp, hsdp)})")
    singles = [s for s in sharded if f"fully_shard(model.layers[{s + 1}]," in "\n".join(lines)]
    if len(singles) >= 2 and rng.random() < 0.4:
        for a, c in zip(singles, singles[1:]):
            lines.append(f"model.layers[{a + 1}]:set_modules_to_forward_prefetch({{ model.layers[{c + 1}] }})")
    if len(singles) >= 2 and rng.random() < 0.3:
        for a, c in zip(singles, singles[1:]):
            lines.append(f"model.layers[{c + 1}]:set_modules_to_backward_prefetch({{ model.layers[{a + 1}] }})")


def transformer(rng, i, world, hsdp):
    shard = hsdp[1] if hsdp else world
    n = rng.randint(1, 6)
    uneven = rng.random() < 0.3
    dim = rng.choice([12, 20]) if uneven else rng.choice([8, 16])
    heads = 2 if dim % 4 else 4
    vocab = rng.choice([10, 13]) if uneven else 8
    tie = rng.random() < 0.4
    ckpt = rng.choice(["none", "none", "model", "composable"])
    mp = rng.random() < 0.2
    drop = rng.choice([0, 0, 0.1])   # the model's dropouts and attention's: the binary's masks
    lines = [HEADER]
    lines.append(f"local model = models.Transformer{{ n_layers = {n}, vocab_size = {vocab}, max_seq_len = 16, dim = {dim}, "
                 f"n_heads = {heads}, dropout_p = {drop}, weight_tying = {str(tie).lower()}, "
                 f"checkpoint_activations = {str(ckpt == 'model').lower()} }}")
    # frozen parameters (fine-tuning): the embedding, a block, or a block's attention
    r = rng.random()
    if r < 0.1:
        lines.append("model.tok_embeddings:requires_grad_(false)")
    elif r < 0.2:
        lines.append(f"model.layers[{rng.randint(1, n)}]:requires_grad_(false)")
    elif r < 0.3:
        lines.append(f"model.layers[{rng.randint(1, n)}].attention:requires_grad_(false)")
    elif r < 0.4:
        # LoRA as torchtune: adapters on q, v and the feed-forward's w2, the rest frozen
        rank, alpha, ldrop = rng.choice([2, 4]), rng.choice([4, 6, 16]), rng.choice([0, 0.1])
        for b in range(1, n + 1):
            for path, fan_in, bias in (("attention.wq", dim, "false"), ("attention.wv", dim, "false"),
                                       ("feed_forward.w2", 4 * dim, "true")):
                lines.append(f"model.layers[{b}].{path} = nn.LoRALinear({fan_in}, {dim}, {{ rank = {rank}, "
                             f"alpha = {alpha}, dropout = {ldrop}, bias = {bias} }})")
        lines.append("model:requires_grad_(false)")
        lines.append("for _, p in ipairs(nn.adapter_params(model)) do p:requires_grad_(true) end")
    if ckpt == "composable":
        for b in range(n):
            if rng.random() < 0.5:
                lines.append(f"nn.checkpoint_module(model.layers[{b + 1}])")
    shard_blocks(rng, lines, n, shard, mp, hsdp, tie)
    # Cross-entropy, bounded below: a sum of logits falls without bound under training,
    # and 5 steps of that (SGD with momentum above all) amplify rounding differences
    # between two correct implementations past any tolerance.
    return lines, "{ batch = 2, seq_len = 16 }", "cross_entropy", dim


def llama(rng, i, world, hsdp):
    """models.Llama: RMSNorm, rotary, grouped-query attention, SwiGLU, untied output. In bf16
    at one rank this is where the one-rank plans live (parameters kept across steps, the
    embedding read from its shard, q/k/v and w1/w3 stacked in backward, rotary pairs, a
    residual add and its norm in one call), and dims that are not multiples of 8 keep some
    tensors out of the 16-bit storage."""
    shard = hsdp[1] if hsdp else world
    n = rng.randint(1, 4)
    heads = rng.choice([2, 4])
    head_dim = rng.choice([4, 8, 16])
    dim = heads * head_dim
    kv = rng.choice([d for d in (1, 2, 4) if heads % d == 0])
    vocab = rng.choice([16, 24, 37])
    ffn = rng.choice(["", f", ffn_dim = {rng.choice([20, 24, 48])}", ", multiple_of = 16"])
    ckpt = rng.random() < 0.25
    mp = rng.random() < 0.5
    lines = [HEADER]
    r = rng.random()
    lora = ""
    if r < 0.15:
        targets = [t for t in ("wq", "wk", "wv", "wo", "w1", "w2", "w3", "output") if rng.random() < 0.4] or ["wq"]
        names = ", ".join('"' + t + '"' for t in targets)
        lora = (f", lora_modules = {{ {names} }}, "
                f"lora_rank = {rng.choice([2, 4])}, lora_alpha = {rng.choice([4, 8, 16])}, "
                f"lora_dropout = {rng.choice([0, 0.1])}")
    lines.append(f"local model = models.Llama{{ n_layers = {n}, dim = {dim}, n_heads = {heads}, n_kv_heads = {kv}, "
                 f"vocab_size = {vocab}, max_seq_len = 16{ffn}, checkpoint_activations = {str(ckpt).lower()}{lora} }}")
    if lora:
        lines.append("model:requires_grad_(false)")
        lines.append("for _, p in ipairs(nn.adapter_params(model)) do p:requires_grad_(true) end")
    elif r < 0.25:
        lines.append("model.tok_embeddings:requires_grad_(false)")
    elif r < 0.35:
        lines.append(f"model.layers[{rng.randint(1, n)}].attention:requires_grad_(false)")
    shard_blocks(rng, lines, n, shard, mp, hsdp, False)
    return lines, "{ batch = 2, seq_len = 16 }", "cross_entropy", dim


def mlps(rng, i, world, hsdp):
    shard = hsdp[1] if hsdp else world
    n = rng.randint(1, 4)
    dim = rng.choice([8, 12, 16])
    mp = rng.random() < 0.2
    lines = [HEADER]
    blocks = ", ".join(f"models.MLP({dim})" for _ in range(n))
    lines.append(f"local model = nn.Sequential{{ nn.Linear({dim}, {dim}), {blocks} }}")
    if rng.random() < 0.2:   # a frozen block
        lines.append(f"model[{rng.randint(1, n + 1)}]:requires_grad_(false)")
    for b in range(n):
        if rng.random() < 0.8:
            lines.append(f"fsdp.fully_shard(model[{b + 2}], {opts(raf_value(rng, shard), mp, hsdp)})")
    lines.append(f"fsdp.fully_shard(model, {opts(raf_value(rng, shard, root=True), mp, hsdp)})")
    return lines, f"{{ shape = {{ 4, {dim} }} }}", "sum", dim


def optimizer_options(rng, opt):
    """opt with some of torch.optim's options: SGD's nesterov, dampening and weight decay,
    AdamW's decoupled weight decay, and Adam's and AdamW's betas. Not Adam's L2 decay: its
    gradient plus wd * p cancels to Adam's eps now and then (rand_1207_66: one element of
    30760 at 3e-8 against 2.5e-3 terms), where the step divides a rounding difference by
    eps: 0.12 lr apart after one step, the losses 3e-5 apart after five, a case for a
    written spec (tests/torch/step_programs/adam_l2.lua) rather than a random one."""
    extra = []
    if '"sgd"' in opt:
        r = rng.random()
        if r < 0.25:
            extra.append("nesterov = true")
        elif r < 0.4:
            extra.append("dampening = 0.1")
        if rng.random() < 0.3:
            extra.append("weight_decay = 0.01")
    else:
        if rng.random() < 0.4 and '"adamw"' in opt:
            extra.append(f"weight_decay = {rng.choice([0.01, 0.1])}")
        if rng.random() < 0.3:
            extra.append("betas = { 0.8, 0.95 }")
    return opt[:-2] + "".join(", " + e for e in extra) + " }"


def lr_schedule(rng):
    """An lr schedule in a quarter of the specs (docs/spec.md `lr_schedule`), short enough
    that the oracle's 5 steps reach its decay and its end."""
    r = rng.random()
    if r < 0.1:
        return '{ "cosine", warmup_steps = 2, total_steps = 4, min_lr = 1e-3 }'
    if r < 0.2:
        return '{ "linear", warmup_steps = 1, total_steps = 3 }'
    if r < 0.25:
        return '{ "constant", warmup_steps = 3 }'
    return None


def make(rng, seed, i):
    world = rng.choice([1, 2, 4, 4, 8])
    # HSDP: 2 x 2, or 2 x 1 (a shard group of one rank: FSDP2 issues no all-gather and no
    # reduce-scatter there, only the all-reduce).
    hsdp = None
    if world == 4 and rng.random() < 0.25:
        hsdp = (2, 2)
    elif world == 2 and rng.random() < 0.2:
        hsdp = (2, 1)
    r = rng.random()
    lines, inp, loss, _ = (transformer if r < 0.5 else llama if r < 0.75 else mlps)(rng, i, world, hsdp)
    program = step_program(rng, rng.choice(["plain", "plain", "plain", "accumulate", "1f1b", "two_forwards",
                                            "reshard"]))
    opt = rng.choice(['{ "adam", lr = 1e-2 }', '{ "sgd", lr = 1e-2, momentum = 0.9 }', '{ "adamw", lr = 1e-2 }'])
    # The optimizer's other options and an lr schedule, from a generator of their own, so
    # that the rest of each spec is what it was before they came (seeds keep their models).
    orng = random.Random(f"{seed}/{i}/optimizer")
    opt, schedule = optimizer_options(orng, opt), lr_schedule(orng)
    where = f"mesh = {{ replicate = {hsdp[0]}, shard = {hsdp[1]} }}" if hsdp else f"world_size = {world}"
    body = [f'  name = "rand_{seed}_{i}", model = model, {where},',
            f'  input = {inp}, loss = "{loss}", optimizer = {opt},']
    if rng.random() < 0.2:
        body.append("  grad_clip = 1.0,")
    if schedule:
        body.append(f"  lr_schedule = {schedule},")
    if program:
        body.append(f"  step = {program},")
    lines.append("return fsdp.spec{\n" + "\n".join(body) + "\n}")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=100)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    for i in range(a.count):
        path = os.path.join(a.out, f"rand_{a.seed}_{i}.lua")
        with open(path, "w") as f:
            f.write(make(rng, a.seed, i))
        print(path)


if __name__ == "__main__":
    main()
