#!/usr/bin/env python3
"""PyTorch interop check for the runtime's safetensors I/O.

Usage: torch_interop.py ST_INTEROP_BINARY WORK_DIR

1. The C program writes reference tensors with our writer; Python parses the file by
   hand (json + torch.frombuffer: the `safetensors` package is not available) and
   compares dtypes, shapes and bits with the same values computed in torch.
2. Python writes the same tensors in its own layout; the C program loads them with our
   reader and compares bit for bit.

Prints PASS/FAIL lines and ends with `N passed, N failed` (the C side's checks
included). Without torch it prints a SKIP line and exits 77, which run.sh counts as
skipped, not failed.
"""
import json
import os
import re
import struct
import subprocess
import sys

try:
    import torch
except Exception as e:  # ImportError, or a broken install
    print(f"SKIP torch_interop: cannot import torch ({e.__class__.__name__}: {e}); "
          "apt-get install python3-torch to run it")
    sys.exit(77)

DTYPES = {
    "F32": (torch.float32, torch.int32),
    "F64": (torch.float64, torch.int64),
    "BF16": (torch.bfloat16, torch.int16),
    "F16": (torch.float16, torch.int16),
    "I32": (torch.int32, torch.int32),
    "I64": (torch.int64, torch.int64),
}
NAME_OF = {v[0]: k for k, v in DTYPES.items()}

passed = 0
failed = 0


def check(ok, msg):
    global passed, failed
    if ok:
        passed += 1
        print("PASS " + msg)
    else:
        failed += 1
        print("FAIL " + msg)


def reference_tensors():
    """Mirrors make_reference() in st_interop.c."""
    f16_vals = [i * 0.3 - 1.7 for i in range(10)] + [1e-6, 70000.0]
    return {
        "f32": torch.tensor([i * 0.5 - 2.75 for i in range(12)], dtype=torch.float32).reshape(3, 4),
        "f32_round": torch.tensor([i * 0.1 for i in range(7)], dtype=torch.float32),
        "bf16": torch.tensor([i * 0.37 - 1.3 for i in range(10)], dtype=torch.float32)
        .to(torch.bfloat16).reshape(2, 5),
        "f16": torch.tensor(f16_vals, dtype=torch.float32).to(torch.float16),
        "i32": torch.tensor([i * 1000003 - 7 for i in range(5)], dtype=torch.int32),
        "i64": torch.tensor([i * 3000000000 - 5 for i in range(4)], dtype=torch.int64).reshape(2, 2),
        "f64": torch.tensor([i / 3.0 for i in range(3)], dtype=torch.float64),
        "scalar": torch.tensor(3.5, dtype=torch.float32),
        "empty": torch.zeros(0, 3, dtype=torch.float32),
    }


def bits(t):
    """Integer view of a tensor's bits, for exact comparison (NaN/-0.0 safe)."""
    return t.reshape(-1).view(DTYPES[NAME_OF[t.dtype]][1])


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header_text = data[8:8 + n]
    header = json.loads(header_text.decode("utf-8"))
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    tensors = {}
    for name, e in header.items():
        dt, _ = DTYPES[e["dtype"]]
        b, end = e["data_offsets"]
        shape = e["shape"]
        if end == b:
            t = torch.empty(shape, dtype=dt)
        else:
            t = torch.frombuffer(bytearray(body[b:end]), dtype=dt).reshape(shape)
        tensors[name] = t
    return n, header_text, header, meta, len(body), tensors


def write_safetensors(path, tensors, order, meta):
    """Writes in `order` (not sorted), pretty JSON, metadata last: a layout unlike ours."""
    header, blobs, off = {}, [], 0
    for name in order:
        t = tensors[name].contiguous()
        raw = bytes(t.reshape(-1).view(torch.uint8).tolist()) if t.numel() else b""
        header[name] = {"dtype": NAME_OF[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = meta
    text = json.dumps(header, indent=1).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def run_c(binary, mode, path):
    """Runs the C side, echoes its checks, adds its counts to ours."""
    global passed, failed
    r = subprocess.run([binary, mode, path], capture_output=True, text=True)
    out = r.stdout + r.stderr
    for line in out.splitlines():
        if line.startswith(("PASS", "FAIL")):
            print("  [C] " + line)
    m = re.search(r"^(\d+) passed, (\d+) failed$", r.stdout, re.M)
    if not m:
        check(False, f"C program `{mode}` printed no summary (exit {r.returncode}): {out[-300:]}")
        return False
    passed += int(m.group(1))
    failed += int(m.group(2))
    if r.returncode != 0 and int(m.group(2)) == 0:
        check(False, f"C program `{mode}` exited {r.returncode}")
    return r.returncode == 0


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    binary, work = sys.argv[1], sys.argv[2]
    print(f"torch {torch.__version__}")
    ref = reference_tensors()

    # ---- C writes, Python reads
    c_path = os.path.join(work, "from_c.safetensors")
    if run_c(binary, "write", c_path):
        n, text, header, meta, body_len, got = read_safetensors(c_path)
        check(n % 8 == 0 and text.rstrip(b" ").endswith(b"}"),
              f"C header: {n} bytes, a multiple of 8, JSON then space padding")
        names = [k for k in json.loads(text.decode()) if k != "__metadata__"]
        check(names == sorted(names), f"C header lists tensors sorted by name: {names}")
        spans = sorted((e["data_offsets"][0], e["data_offsets"][1]) for e in header.values())
        contiguous = spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
        check(contiguous and spans[-1][1] == body_len,
              f"C data: offsets contiguous from 0 to {body_len} (the data length)")
        check(meta.get("format") == "pt", f"C metadata: {meta}")
        check(set(got) == set(ref), f"Python sees the same {len(ref)} tensor names")
        for name, want in ref.items():
            t = got.get(name)
            if t is None:
                check(False, f"'{name}' missing from the C file")
                continue
            ok = t.dtype == want.dtype and list(t.shape) == list(want.shape) and \
                torch.equal(bits(t), bits(want))
            detail = "" if ok else f" (got {t.dtype} {list(t.shape)} {t.reshape(-1)[:4].tolist()}, " \
                f"want {want.dtype} {list(want.shape)} {want.reshape(-1)[:4].tolist()})"
            check(ok, f"Python reads C's '{name}' {NAME_OF[want.dtype]} {list(want.shape)} "
                      f"bit-exact{detail}")

    # ---- Python writes, C reads
    py_path = os.path.join(work, "from_torch.safetensors")
    order = ["scalar", "i64", "f16", "f32", "empty", "bf16", "f64", "i32", "f32_round"]
    write_safetensors(py_path, ref, order, {"format": "pt"})
    run_c(binary, "read", py_path)

    print(f"{passed} passed, {failed} failed")
    sys.exit(0 if failed == 0 else 1)


if __name__ == "__main__":
    main()
