#!/usr/bin/env python3
"""PyTorch check of the step programs' numbers (tests/torch/step_programs/*.lua).

Usage: check.py FSDPGEN_ROOT WORK_DIR

For each spec here: writes random parameters to W/NAME.init.safetensors (the decoders:
the spec's own, saved after one step), runs two steps (or the case's number) from them
(`fsdpgen run SPEC -- --load W/NAME.init.safetensors --steps 2 --save ...`) and recomputes
those steps with PyTorch's autograd: on each rank its synthetic inputs (rt_train.h: forward
item k of step s reads stream (s, k, rank)) or token batches (rt_data.h, on a generated
token file) and the decoders of check_load.py with cross-entropy, the spec's step program,
the ranks' gradients summed and divided by the world size (FSDP's AVG reduce-scatter, and
all-reduce across HSDP replicas) or by the group's divide factor, global-norm clipping
where the spec clips, and torch.optim's step (SGD unless the case is about the optimizer),
then the LR scheduler's where the spec has an lr_schedule, after each of the step's
optimizer items. The saved parameters must agree (rtol 1e-5, atol 1e-6). The token cases
also run the eval program after their last step (--val-data on a second token file), whose
printed loss must equal PyTorch's (model.eval(), no_grad, cross-entropy on the validation
batches). Each case also has
a control: the same steps with one plausible mistake (named in its line), which must not
agree, so each check can fail.

Prints PASS/FAIL lines and ends with `N passed, N failed`.
"""
import json
import os
import struct
import subprocess
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "common"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fsdpgen_ref import check, read_safetensors, summary, synthetic_inputs  # noqa: E402
from check_load import Llama, Transformer, token_batch  # noqa: E402

SEED, STEPS, DIM, BATCH = 42, 2, 8, 4
HERE = "tests/torch/step_programs"


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


def linear(p, name, x):
    return x @ p[name + ".weight"].T + p[name + ".bias"]


# ---- models (the specs' nn.Sequential) -------------------------------------------------

def double_linear(p, x):
    """Linear(8, 8) then DoubleLinear(8): (relu(lin1(y)), relu(lin2(y)))."""
    y = linear(p, "0", x)
    return torch.relu(linear(p, "1.lin1", y)), torch.relu(linear(p, "1.lin2", y))


def mlp_block(p, prefix, x):
    """MLP(8) at prefix: relu(out_proj(relu(in_proj(x))))."""
    return torch.relu(linear(p, f"{prefix}.out_proj", torch.relu(linear(p, f"{prefix}.in_proj", x))))


def mlp(p, x):
    """Linear(8, 8) then MLP(8)."""
    return mlp_block(p, "1", linear(p, "0", x))


def mlp_stack(p, x, n):
    """The first n of three MLP(8)s (nn.Sequential)."""
    for i in range(n):
        x = mlp_block(p, i, x)
    return x


DOUBLE_SHAPES = {"0.weight": [DIM, DIM], "0.bias": [DIM], "1.lin1.weight": [DIM, DIM], "1.lin1.bias": [DIM],
                 "1.lin2.weight": [DIM, DIM], "1.lin2.bias": [DIM]}
MLP_SHAPES = {"0.weight": [DIM, DIM], "0.bias": [DIM], "1.in_proj.weight": [4 * DIM, DIM],
              "1.in_proj.bias": [4 * DIM], "1.out_proj.weight": [DIM, 4 * DIM], "1.out_proj.bias": [DIM]}


# ---- step programs: fill the parameters' .grad on one rank (mistake: the control's) -----

def retain_graph(p, step, rank, mistake):
    """forward; backward(output 2, retain_graph); backward(output 1). Mistake "carry": the
    second pass also adds the first pass's gradient of 0.linear's output; "drop": the
    second pass's gradients replace the first's."""
    x = synthetic_inputs(SEED, step, 0, rank, [BATCH, DIM])
    o1, o2 = double_linear(p, x)
    if mistake == "carry":
        y = linear(p, "0", x)
        (dy,) = torch.autograd.grad(torch.relu(linear(p, "1.lin2", y)).sum(), y)
    o2.sum().backward(retain_graph=True)
    if mistake == "drop":
        for t in p.values():
            t.grad = None
    o1.sum().backward()
    if mistake == "carry":
        with torch.no_grad():
            p["0.weight"].grad += dy.T @ x
            p["0.bias"].grad += dy.sum(0)


def multi_forward(p, step, rank, mistake):
    """forward (item 0); forward (item 1); (l1 + l2).backward(). Mistake "same_batch": both
    forwards read item 0's batch."""
    x0 = synthetic_inputs(SEED, step, 0, rank, [BATCH, DIM])
    x1 = synthetic_inputs(SEED, step, 0 if mistake == "same_batch" else 1, rank, [BATCH, DIM])
    (mlp(p, x0).sum() + mlp(p, x1).sum()).backward()


def microbatches(n):
    """n microbatches, each forward and backward (forward item k reads batch k); their
    gradients add up. Mistake "drop": the last backward replaces the earlier ones'
    gradients (unsharded, or reduce-scattered but not yet all-reduced)."""
    def program(p, step, rank, mistake):
        for k in range(n):
            if mistake == "drop" and k == n - 1:
                for t in p.values():
                    t.grad = None
            mlp(p, synthetic_inputs(SEED, step, k, rank, [BATCH, DIM])).sum().backward()
    return program


def forward_backward(p, step, rank, mistake):
    """forward, backward (the default program; checkpointing changes no number). Its
    controls' mistakes are in run_steps: the clipping, the divide factor."""
    del mistake
    mlp(p, synthetic_inputs(SEED, step, 0, rank, [BATCH, DIM])).sum().backward()


def unused(p, step, rank, mistake):
    """forward, backward of Net: head(relu(a(x))); b, spare and never get no gradient. Its
    control's mistake is in run_steps: zero gradients instead of none."""
    del mistake
    x = synthetic_inputs(SEED, step, 0, rank, [BATCH, DIM])
    linear(p, "head", torch.relu(linear(p, "a", x))).sum().backward()


def twice(p, step, rank, mistake):
    """forward, backward of Twice: head(relu(a(relu(a(x))))). Mistake "first_use": a's
    gradient from its second use only (reduced at its first post-backward)."""
    x = synthetic_inputs(SEED, step, 0, rank, [BATCH, DIM])
    h = torch.relu(linear(p, "a", x))
    if mistake == "first_use":
        h = h.detach()
    linear(p, "head", torch.relu(linear(p, "a", h))).sum().backward()


def clip_(grads, max_norm):
    """torch.nn.utils.clip_grad_norm_ on a dict of gradients; returns the clipped ones."""
    holders = {k: torch.zeros_like(g, requires_grad=True) for k, g in grads.items()}
    for k, h in holders.items():
        h.grad = grads[k].clone()
    torch.nn.utils.clip_grad_norm_(list(holders.values()), max_norm)
    return {k: h.grad for k, h in holders.items()}


def non_root(k, n):
    """forward item k through the first n MLPs (3: the root, 1: model[0] alone), backward."""
    def program(p, step, rank, mistake):
        del mistake
        mlp_stack(p, synthetic_inputs(SEED, step, k, rank, [BATCH, DIM]), n).sum().backward()
    return program


MLP3_SHAPES = {f"{i}.{name}": shape for i in range(3) for name, shape in
               (("in_proj.weight", [4 * DIM, DIM]), ("in_proj.bias", [4 * DIM]),
                ("out_proj.weight", [DIM, 4 * DIM]), ("out_proj.bias", [DIM]))}
TWICE_SHAPES = {"a.weight": [DIM, DIM], "a.bias": [DIM], "head.weight": [4, DIM], "head.bias": [4]}
UNUSED_SHAPES = {"a.weight": [DIM, DIM], "a.bias": [DIM], "b.weight": [DIM, DIM], "b.bias": [DIM],
                 "spare.weight": [DIM, DIM], "spare.bias": [DIM], "never.weight": [DIM, DIM],
                 "never.bias": [DIM], "head.weight": [4, DIM], "head.bias": [4]}


def sgd(lr, **kw):
    return lambda ps: torch.optim.SGD(ps, lr=lr, **kw)


def adam(lr, **kw):
    return lambda ps: torch.optim.Adam(ps, lr=lr, foreach=False, **kw)


def adamw(lr, **kw):
    return lambda ps: torch.optim.AdamW(ps, lr=lr, foreach=False, **kw)


def warmup_then(decay, warmup, total, min_lr):
    """The spec's lr_schedule as PyTorch's schedulers (docs/spec.md, "lr_schedule"): LinearLR from
    lr / warmup to lr over the warmup steps, then decay ("cosine": CosineAnnealingLR to
    min_lr; "linear": LinearLR to min_lr), one scheduler.step() per optimizer.step()."""
    sched = torch.optim.lr_scheduler

    def make(opt):
        lr = opt.param_groups[0]["lr"]
        if decay == "cosine":
            after = sched.CosineAnnealingLR(opt, T_max=total - warmup, eta_min=min_lr)
        else:
            after = sched.LinearLR(opt, start_factor=1.0, end_factor=min_lr / lr, total_iters=total - warmup)
        if warmup == 0:
            return after
        ramp = sched.LinearLR(opt, start_factor=1.0 / warmup, end_factor=1.0, total_iters=warmup - 1)
        return sched.SequentialLR(opt, [ramp, after], milestones=[warmup])
    return make


def case(name, shapes, program, optimizer, mistake, control, world=2, clip=None, factors=None,
         wrong_optimizer=None, spec=None, steps=STEPS, scheduler=None):
    """A spec (NAME.lua here unless given) and how PyTorch trains it for `steps` steps.
    program: what one rank does before the step's optimizer item, or a list of those, one
    per optimizer item of the step (each followed by optim.step(), the scheduler's step and
    zero_grad). mistake: the control's, a key that the program or run_steps acts on
    (control says it in words); factors: divide factors by parameter-name prefix;
    wrong_optimizer: the optimizer of the mistake "optimizer"; scheduler: builds the LR
    scheduler from the optimizer (warmup_then)."""
    return dict(name=name, shapes=shapes, program=program, optimizer=optimizer, mistake=mistake,
                control=control, world=world, clip=clip, factors=factors or {},
                wrong_optimizer=wrong_optimizer, spec=spec or os.path.join(HERE, name + ".lua"),
                steps=steps, scheduler=scheduler)


CASES = [
    case("retain_graph", DOUBLE_SHAPES, retain_graph, sgd(0.5),
         "carry", "the second backward pass adds onto the first's activation gradients"),
    case("retain_graph_one_group", DOUBLE_SHAPES, retain_graph, sgd(0.5),
         "drop", "the second backward pass's gradients replace the first's"),
    case("retain_graph_one_group_w1", DOUBLE_SHAPES, retain_graph, sgd(0.5),
         "drop", "the second backward pass's gradients replace the first's", world=1),
    case("multi_forward", MLP_SHAPES, multi_forward, sgd(0.01),
         "same_batch", "both forwards read forward item 0's batch"),
    case("grad_accumulation", MLP_SHAPES, microbatches(2), sgd(0.01),
         "drop", "the synced backward drops the unsynced one's gradients"),
    case("hsdp_accumulation", MLP_SHAPES, microbatches(2), sgd(0.01),
         "drop", "the synced backward drops the unsynced one's gradients", world=4),
    case("microbatch_1f1b", MLP_SHAPES, microbatches(3), sgd(0.01),
         "drop", "the synced backward drops the unsynced ones' gradients"),
    case("hsdp_reduce_scatter_only", MLP_SHAPES, microbatches(3), sgd(0.01),
         "drop", "the all-reduced backward drops the earlier reduce-scatters' gradients", world=4),
    case("checkpoint_clip", MLP_SHAPES, forward_backward, sgd(0.01),
         "per_rank_clip", "each rank clips by its own gradients' norm before the average", clip=0.5),
    case("hsdp_divide", MLP_SHAPES, forward_backward, sgd(0.01),
         "average", "the MLP's gradients averaged over the ranks, as the root's", world=4,
         factors={"1.": 8}),
    case("list_group_unused_module", UNUSED_SHAPES, unused, adamw(0.01, weight_decay=0.1),
         "zero_grads", "the unused parameters get zero gradients (so AdamW decays them)",
         spec="tests/specs/features/list_group_unused_module.lua"),
    case("non_root_forward", MLP3_SHAPES, [non_root(0, 3), non_root(1, 1)], adam(0.01),
         "stale", "the second optimizer step also steps the groups without a gradient, with "
         "the first one's gradients"),
    case("module_twice", TWICE_SHAPES, twice, sgd(0.01),
         "first_use", "the module's gradient from its second use only"),
    case("sgd_nesterov", MLP_SHAPES, forward_backward,
         sgd(0.01, momentum=0.9, dampening=0.0, nesterov=True, weight_decay=0.05),
         "optimizer", "plain momentum instead of Nesterov's",
         wrong_optimizer=sgd(0.01, momentum=0.9, weight_decay=0.05)),
    case("adam_l2", MLP_SHAPES, forward_backward, adam(0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1),
         "optimizer", "AdamW's decoupled weight decay instead of Adam's L2 term",
         wrong_optimizer=adamw(0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)),
    # 4 steps of 2 optimizer items: lr steps 0..7, warmup 0..2, the cosine to step 8.
    case("lr_schedule_cosine", MLP3_SHAPES, [non_root(0, 3), non_root(1, 1)], adam(0.01),
         "per_step", "the scheduler steps once per training step, not per optimizer.step()",
         steps=4, scheduler=warmup_then("cosine", 3, 8, 1e-3)),
    # 5 steps: the linear decay reaches min_lr at step 3 and stays there.
    case("lr_schedule_linear", MLP_SHAPES, forward_backward, sgd(0.05, momentum=0.9),
         "no_schedule", "the constant lr", steps=5, scheduler=warmup_then("linear", 0, 3, 0.01)),
]


def run_steps(c, params, mistake):
    """The training steps of case c from params, as fsdpgen's binary runs them: a
    parameter that no rank's backward reached has no gradient (None), which torch.optim
    skips. mistake: the case's control mistake, or None."""
    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    optimizer = c["wrong_optimizer"] if mistake == "optimizer" else c["optimizer"]
    opt = optimizer(list(leaves.values()))
    sched = c["scheduler"](opt) if c["scheduler"] and mistake != "no_schedule" else None
    world, clip = c["world"], c["clip"]

    def divisor(name):
        f = [v for prefix, v in c["factors"].items() if name.startswith(prefix)]
        return f[0] if f and mistake != "average" else world

    programs = c["program"] if isinstance(c["program"], list) else [c["program"]]
    for step in range(c["steps"]):
        last = {}
        for program in programs:
            total = {}
            for rank in range(world):
                p = {k: v.detach().clone().requires_grad_(True) for k, v in leaves.items()}
                program(p, step, rank, mistake)
                grads = {k: t.grad for k, t in p.items()
                         if t.grad is not None or mistake == "zero_grads"}
                grads = {k: g if g is not None else torch.zeros_like(p[k]) for k, g in grads.items()}
                if mistake == "per_rank_clip":
                    grads = clip_(grads, clip)
                for k, g in grads.items():
                    total[k] = total.get(k, 0) + g / divisor(k)
            if mistake == "stale":
                total = {**last, **total}
            last = total
            if clip is not None and mistake != "per_rank_clip":
                total = clip_(total, clip)
            for k, t in leaves.items():
                t.grad = total.get(k)
            opt.step()
            if sched and mistake != "per_step":
                sched.step()
        if sched and mistake == "per_step":
            sched.step()
    return {k: v.detach() for k, v in leaves.items()}


def compare(name, what, start, got, want, wrong, mistake, rtol, atol, steps=STEPS):
    """fsdpgen's parameters `got` against PyTorch's `want` after `steps` steps; the control:
    the same test fails on `wrong`, the steps with the case's mistake."""
    def close(a):
        return all(torch.allclose(got[k], a[k], rtol=rtol, atol=atol) for k in want)

    def diff(a):
        return max((got[k] - a[k]).abs().max().item() for k in want)

    moved = max((want[k] - start[k]).abs().max().item() for k in want)
    check(close(want) and moved > 1e-3, f"{name}: {what} after {steps} steps as PyTorch (max abs diff "
          f"{diff(want):.2e}; the steps moved them by up to {moved:.2e})")
    check(not close(wrong), f"{name}: control, {mistake}: differs (max abs diff {diff(wrong):.2e})")


# ---- token models: the decoders of check_load.py, cross-entropy on token data -----------

TOKEN_BATCH, TOKEN_SEQ = 2, 16


def transformer(sd, mistake):
    """check_load's Transformer; the mistake unties the output head from the embedding."""
    m = Transformer(sd, 4)
    if mistake:
        m.output.weight = torch.nn.Parameter(m.tok_embeddings.weight.detach().clone())
    return m


def llama(sd, mistake):
    """check_load's Llama; the mistake leaves rope_theta at PyTorch's usual 10000."""
    return Llama(sd, 4, 2, 0.05, 10000.0 if mistake else 10.0)


TOKEN_CASES = [
    # name, spec, model builder, world, lr, the control's mistake
    ("transformer", "transformer_sgd.lua", transformer, 2, 0.1,
     "the output head untied from the token embedding"),
    ("llama", "llama_sgd.lua", llama, 2, 0.1, "rope_theta 10000 instead of the spec's 10"),
]


def token_steps(init, build, tokens, world, lr, mistake):
    """STEPS SGD steps from the state dict `init`; returns the state dict after them."""
    model = build(init, mistake)
    model.load_state_dict(init, strict=True)
    params = dict(model.named_parameters())
    for step in range(STEPS):
        avg = {k: torch.zeros_like(p) for k, p in params.items()}
        for rank in range(world):
            model.zero_grad(set_to_none=True)
            x, y = token_batch(tokens, world, 1, TOKEN_BATCH, TOKEN_SEQ, step, 0, rank)
            logits = model(x)
            torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1)).backward()
            for k, p in params.items():
                avg[k] += p.grad / world
        with torch.no_grad():
            for k, p in params.items():
                p -= lr * avg[k]
    return {k: v.detach() for k, v in model.state_dict().items()}


VAL_BATCHES = 2


def val_loss(sd, build, tokens, world):
    """The eval program's loss: model.eval() and no_grad, cross-entropy on validation batch
    v of each rank (rt_data.h's offsets with one microbatch, step v), mean over both."""
    model = build(sd, False)
    model.load_state_dict(sd, strict=True)
    model.eval()
    total = 0.0
    with torch.no_grad():
        for v in range(VAL_BATCHES):
            for rank in range(world):
                x, y = token_batch(tokens, world, 1, TOKEN_BATCH, TOKEN_SEQ, v, 0, rank)
                logits = model(x)
                total += torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1)).item()
    return total / (VAL_BATCHES * world)


def run(cmd):
    """Runs cmd; returns its exit status, the reason for the check line on failure, and stdout."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode == 0:
        return 0, "", r.stdout
    return r.returncode, ": exit %d\n%s" % (r.returncode, (r.stdout + r.stderr)[-2000:]), r.stdout


def check_token_cases(root, work):
    data = bytes((i * 7919 + i // 13) % 256 for i in range(20000))
    tokens_path, tokens = os.path.join(work, "tokens.bin"), list(data)
    with open(tokens_path, "wb") as f:
        f.write(data)
    val = bytes((i * 104729 + i // 7) % 256 for i in range(5000))
    val_path, val_tokens = os.path.join(work, "val.bin"), list(val)
    with open(val_path, "wb") as f:
        f.write(val)
    for name, spec, build, world, lr, mistake in TOKEN_CASES:
        init, out = os.path.join(work, name + ".init.safetensors"), os.path.join(work, name + ".safetensors")
        binary = [os.path.join(root, "fsdpgen"), "run", os.path.join(root, HERE, spec), "--", "--seed", str(SEED),
                  "--data", tokens_path]
        rc, why, _ = run(binary + ["--steps", "1", "--save", init])  # the spec's own init, one step in
        stdout = ""
        if rc == 0:
            rc, why, stdout = run(binary + ["--load", init, "--steps", str(STEPS), "--save", out, "--val-data", val_path,
                                            "--val-batches", str(VAL_BATCHES)])
        check(rc == 0, f"{name}: fsdpgen run --steps 1 --save, then --load --steps {STEPS} --save --val-data{why}")
        if rc != 0:
            continue
        start, _ = read_safetensors(init)
        got, _ = read_safetensors(out)
        want = token_steps(start, build, tokens, world, lr, False)
        wrong = token_steps(start, build, tokens, world, lr, True)
        compare(name, f"{len(want)} tensors", start, got, want, wrong, mistake, 1e-5, 1e-6)
        # The eval after the last step, printed with 6 decimals.
        line = [l for l in stdout.splitlines() if l.startswith(f"step {STEPS} val loss ")]
        printed = float(line[0].split()[4]) if line else float("nan")
        ref, bad = val_loss(want, build, val_tokens, world), val_loss(want, build, tokens, world)
        check(abs(printed - ref) <= 1e-5 * abs(ref) + 1e-6, f"{name}: step {STEPS} val loss {printed} (--val-data, "
              f"{VAL_BATCHES} batches) matches PyTorch's eval-mode no_grad loss {ref:.6f}")
        check(abs(printed - bad) > 1e-5 * abs(bad) + 1e-6, f"{name}: control: the same eval on the training "
              f"tokens ({bad:.6f}) does not match")


def main():
    root, work = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    for c in CASES:
        name, shapes = c["name"], c["shapes"]
        params = {k: torch.rand(s) * 2 - 1 for k, s in shapes.items()}
        init, out = os.path.join(work, name + ".init.safetensors"), os.path.join(work, name + ".safetensors")
        write_safetensors(init, params)
        rc, why, _ = run([os.path.join(root, "fsdpgen"), "run", os.path.join(root, c["spec"]), "--",
                       "--load", init, "--steps", str(c["steps"]), "--seed", str(SEED), "--save", out])
        check(rc == 0, f"{name}: fsdpgen run --load --steps {c['steps']} --save{why}")
        if rc != 0:
            continue
        got, _ = read_safetensors(out)
        want, wrong = run_steps(c, params, None), run_steps(c, params, c["mistake"])
        compare(name, f"{len(shapes)} parameters", params, got, want, wrong, c["control"], 1e-5, 1e-6,
                c["steps"])
    check_token_cases(root, work)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
