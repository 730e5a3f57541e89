"""Checks of tests/hf/run.sh that need Hugging Face transformers (and safetensors, torch).

  check_hf.py logits DIR LOGITS   from_pretrained(DIR) with no missing or unexpected keys,
                                  then its logits on LOGITS' tokens against the binary's
                                  (max |diff| <= 1e-4 * max |logits|), and a control: with
                                  q/k rows left in fsdpgen's rotary order (Llama) or c_attn
                                  not transposed (GPT-2) the same comparison fails
  check_hf.py lowp DIR OUT DTYPE  DIR's model saved in DTYPE (bfloat16, float16) as OUT, and
                                  as OUT.f32: the same values widened to float32
  check_hf.py mutate DIR KIND     edits DIR/model.safetensors: KIND missing (a tensor
                                  renamed) or shape (a tensor reshaped, same bytes)

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
    keys = {k: sorted(info[k]) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    check(not any(keys.values()), "%s: from_pretrained (%s) with no missing, unexpected or "
          "mismatched keys %s" % (os.path.basename(d), type(m).__name__, keys))
    t = load_file(path)
    tokens, ref = t["tokens"].long(), t["logits"]
    with torch.no_grad():
        out = m(tokens).logits
    tol = 1e-4 * ref.abs().max().item()
    diff = (out - ref).abs().max().item()
    check(out.shape == ref.shape and diff <= tol, "%s: logits %s of transformers' %s equal the "
          "binary's: max |diff| %.3g <= %.3g (1e-4 of max |logit|)" % (os.path.basename(d),
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
    check(bad > tol, "control: with %s the logits differ (max |diff| %.3g > %.3g)" % (what, bad, tol))


def lowp(d, out, dtype):
    import torch
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(d).to(getattr(torch, dtype))
    m.save_pretrained(out)
    m.to(torch.float32).save_pretrained(out + ".f32")
    from safetensors import safe_open
    with safe_open(os.path.join(out, "model.safetensors"), "pt") as f:
        dt = {f.get_slice(k).get_dtype() for k in f.keys()}
    check(dt == {"BF16" if dtype == "bfloat16" else "F16"}, "%s written by transformers holds %s "
          "tensors only (%s)" % (os.path.basename(out), dtype, sorted(dt)))


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
    print(name)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "logits":
        logits(sys.argv[2], sys.argv[3])
    elif cmd == "lowp":
        lowp(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "mutate":
        mutate(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: check_hf.py logits|lowp|mutate ...")
