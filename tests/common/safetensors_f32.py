"""A reader of fp32 safetensors files by hand (the `safetensors` package is not installed),
in plain Python: tests/cuda_step/compare_runs.py uses it as it is, fsdpgen_ref.py wraps its
arrays in torch tensors.
"""
import json
import struct
import sys
from array import array


def read_f32(path):
    """name -> (shape, array('f') of the values) of every tensor, and the __metadata__."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            raise ValueError(f"{path}: {name}: dtype {info['dtype']}, expected F32")
        b, e = info["data_offsets"]
        values = array("f")
        values.frombytes(raw[8 + n + b:8 + n + e])
        if sys.byteorder != "little":
            values.byteswap()
        out[name] = (info["shape"], values)
    return out, meta
