"""The checks of tests/hf/run.sh that need Hugging Face transformers (with safetensors and
torch), in one process (importing transformers is the slowest part of the suite).
`check_hf.py prepare DIR LOGITS [DIR LOGITS ...]`, DIR a --save-hf directory and LOGITS
the binary's --logits file:
  - from_pretrained(DIR) has no missing, unexpected or mismatched keys, its logits on
    LOGITS' tokens equal the binary's (max |diff| <= 1e-4 * max |logit|), and a control
    fails: q_proj left in fsdpgen's rotary order (Llama), c_attn not transposed (GPT-2);
  - DIR_bfloat16 and DIR_float16: the model saved by transformers in that dtype, and
    DIR_<dtype>.f32 the same values widened to float32;
  - DIR_missing (a norm's tensor renamed), DIR_shape (reshaped, same bytes) and
    DIR_extra (one tensor more): copies of DIR for the error cases;
  - DIR_sharded: saved in several files with model.safetensors.index.json; DIR_hub
    (GPT-2): named as the hub's GPT-2 files are (no "transformer.", the attn.bias
    buffers, lm_head.weight beside wte); DIR_untied (lm_head.weight not wte's) and
    DIR_bias (an attention bias not zero), which are other models.
Pairs after the word `logits` get the first check alone (a LoRA model's merged directory
against the binary's logits with its adapters); triples after the word `peft` (BASE
ADAPTERS LOGITS: a --save-peft directory) are loaded with PEFT onto BASE and compared the
same way, with the base alone as the control, and saved again by PEFT as ADAPTERS_peft.
Prints PASS/FAIL lines; the caller counts them.
"""
import json
import os
import struct
import sys


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what)
    return ok


def logits(d, path):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    m, info = AutoModelForCausalLM.from_pretrained(d, output_loading_info=True)
    m.eval()
    name = os.path.basename(os.path.dirname(os.path.abspath(d)))
    keys = {k: sorted(info[k]) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    check(not any(keys.values()), "%s: from_pretrained (%s) with no missing, unexpected or "
          "mismatched keys %s" % (name, type(m).__name__, keys))
    t = load_file(path)
    tokens, ref = t["tokens"].long(), t["logits"]
    with torch.no_grad():
        out = m(tokens).logits
    tol = 1e-4 * ref.abs().max().item()
    diff = (out - ref).abs().max().item()
    check(out.shape == ref.shape and diff <= tol, "%s: logits %s of transformers' %s equal the "
          "binary's: max |diff| %.3g <= %.3g (1e-4 of max |logit|)" % (name,
          list(out.shape), type(m).__name__, diff, tol))
    # The control: the layout the map undoes must matter.
    sd = m.state_dict()
    with torch.no_grad():
        if m.config.model_type == "llama":
            w = sd["model.layers.0.self_attn.q_proj.weight"]
            hd = m.config.hidden_size // m.config.num_attention_heads
            n = w.shape[0] // hd
            back = w.view(n, 2, hd // 2, -1).transpose(1, 2).reshape(w.shape)
            what = "q_proj left in fsdpgen's interleaved rotary order"
        else:
            w = sd["transformer.h.0.attn.c_attn.weight"]
            back = w.t().reshape(w.shape)
            what = "c_attn not transposed to Conv1D's [in, out]"
        w.copy_(back)
        bad = (m(tokens).logits - ref).abs().max().item()
    check(bad > tol, "%s control: with %s the logits differ (max |diff| %.3g > %.3g)"
          % (name, what, bad, tol))


def lowp(d, out, dtype):
    import torch
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(d).to(getattr(torch, dtype))
    m.save_pretrained(out)
    m.to(torch.float32).save_pretrained(out + ".f32")
    from safetensors import safe_open
    with safe_open(os.path.join(out, "model.safetensors"), "pt") as f:
        dt = {f.get_slice(k).get_dtype() for k in f.keys()}
    name = os.path.basename(os.path.dirname(os.path.abspath(out)))
    check(dt == {"BF16" if dtype == "bfloat16" else "F16"}, "%s: save_pretrained in %s holds %s "
          "tensors only" % (name, dtype, sorted(dt)))


def mutate(d, kind):
    path = os.path.join(d, "model.safetensors")
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    name = sorted(k for k in header if k.endswith("norm.weight") or k.endswith("ln_f.weight"))[0]
    if kind == "missing":
        header[name[:-1] + "_"] = header.pop(name)
    else:
        e = header[name]
        e["shape"] = [2, e["shape"][0] // 2]
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + blob[8 + n:])


def variants(d):
    """The other directories a --save-hf directory is read back from."""
    import shutil
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM
    name = os.path.basename(os.path.dirname(os.path.abspath(d)))
    m = AutoModelForCausalLM.from_pretrained(d)
    m.save_pretrained(d + "_sharded", max_shard_size="20KB")
    files = [f for f in os.listdir(d + "_sharded") if f.endswith(".safetensors")]
    check(len(files) > 1 and os.path.exists(os.path.join(d + "_sharded", "model.safetensors.index.json")),
          "%s: save_pretrained(max_shard_size=20KB) wrote %d files and an index" % (name, len(files)))
    sd = load_file(os.path.join(d, "model.safetensors"))
    shutil.copytree(d, d + "_extra")
    save_file(dict(sd, **{"model.extra.weight": torch.zeros(2)}),
              os.path.join(d + "_extra", "model.safetensors"), metadata={"format": "pt"})
    if m.config.model_type == "gpt2":
        # as the hub's GPT-2 files: no "transformer." prefix, the causal-mask buffers, and
        # lm_head.weight beside wte
        hub = {k[len("transformer."):]: v for k, v in sd.items()}
        n = m.config.n_positions
        for i in range(m.config.n_layer):
            hub["h.%d.attn.bias" % i] = torch.tril(torch.ones(n, n)).view(1, 1, n, n)
        hub["lm_head.weight"] = hub["wte.weight"].clone()
        shutil.copytree(d, d + "_hub")
        save_file(hub, os.path.join(d + "_hub", "model.safetensors"), metadata={"format": "pt"})
        # lm_head not equal to wte; an attention bias that is not zero: other models
        shutil.copytree(d, d + "_untied")
        save_file(dict(hub, **{"lm_head.weight": hub["wte.weight"] + 1}),
                  os.path.join(d + "_untied", "model.safetensors"), metadata={"format": "pt"})
        shutil.copytree(d, d + "_bias")
        bias = dict(sd)
        bias["transformer.h.0.attn.c_attn.bias"] = bias["transformer.h.0.attn.c_attn.bias"] + 0.5
        save_file(bias, os.path.join(d + "_bias", "model.safetensors"), metadata={"format": "pt"})


def prepare(d, logits_path):
    import shutil
    logits(d, logits_path)
    for dtype in ("bfloat16", "float16"):
        lowp(d, d + "_" + dtype, dtype)
    for kind in ("missing", "shape"):
        shutil.copytree(d, d + "_" + kind)
        mutate(d + "_" + kind, kind)
    variants(d)


def peft(base, adapters, path):
    """PeftModel.from_pretrained(base, adapters): its logits equal the binary's with its
    adapters; the base model's alone do not (the control)."""
    try:
        import peft as peft_lib  # noqa: F401
    except ImportError:
        print("SKIP %s: no peft (pip install peft into $FSDPGEN_TORCH_PYTHON's environment)" % adapters)
        return
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    name = os.path.basename(os.path.dirname(os.path.abspath(adapters)))
    m = AutoModelForCausalLM.from_pretrained(base)
    m.eval()
    t = load_file(path)
    tokens, ref = t["tokens"].long(), t["logits"]
    tol = 1e-4 * ref.abs().max().item()
    with torch.no_grad():
        bare = (m(tokens).logits - ref).abs().max().item()
        pm = PeftModel.from_pretrained(m, adapters)
        pm.eval()
        out = pm(tokens).logits
    diff = (out - ref).abs().max().item()
    check(out.shape == ref.shape and diff <= tol, "%s: PeftModel.from_pretrained(base, --save-peft "
          "directory) (r %d, lora_alpha %g): logits equal the binary's: max |diff| %.3g <= %.3g"
          % (name, pm.peft_config["default"].r, pm.peft_config["default"].lora_alpha, diff, tol))
    check(bare > tol, "%s control: the base model without the adapters differs (max |diff| %.3g > %.3g)"
          % (name, bare, tol))
    # PEFT's own directory of them (its adapter_config.json has every field), for --load-peft
    pm.save_pretrained(adapters + "_peft")


if __name__ == "__main__":
    # pairs to prepare, then after the word "logits" pairs whose logits alone are checked,
    # after the word "peft" triples BASE ADAPTERS LOGITS
    args = sys.argv[2:]
    sections = {"prepare": [], "logits": [], "peft": []}
    at = "prepare"
    for a in args:
        if a in ("logits", "peft"):
            at = a
        else:
            sections[at].append(a)
    pairs, only, triples = sections["prepare"], sections["logits"], sections["peft"]
    if (len(sys.argv) < 2 or sys.argv[1] != "prepare" or not pairs or len(pairs) % 2
            or len(only) % 2 or len(triples) % 3):
        sys.exit("usage: check_hf.py prepare DIR LOGITS [DIR LOGITS ...] [logits DIR LOGITS ...] "
                 "[peft BASE ADAPTERS LOGITS ...]")
    for i in range(0, len(pairs), 2):
        prepare(pairs[i], pairs[i + 1])
    for i in range(0, len(only), 2):
        logits(only[i], only[i + 1])
    for i in range(0, len(triples), 3):
        peft(triples[i], triples[i + 1], triples[i + 2])
