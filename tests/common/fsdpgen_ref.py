"""Shared pieces of the PyTorch checks (tests/train/torch_load.py, tests/torch/check_load.py):
PASS/FAIL counting (tests/common/checks.py), the deterministic sources of the C runtime
reproduced in Python (Philox4x32-10 as rt_dropout_uniform, FNV-1a, the synthetic inputs of
rt_train.h) and a reader of fp32 safetensors files (parsed by hand: the `safetensors`
package is not installed). Import it after torch imported successfully.
"""
import math

import torch

from checks import check, summary  # noqa: F401 (re-exported: the checks import them from here)
from safetensors_f32 import read_f32


# ---- deterministic sources (rt_kernels.h: rt_dropout_uniform; rt_train.h) ----------------

MASK32 = 0xFFFFFFFF
MASK64 = 0xFFFFFFFFFFFFFFFF


def philox4x32_10(ctr, key):
    """Philox4x32-10 exactly as rt_philox4x32_10 in runtime/cpu/kernels/dropout.c."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for r in range(10):
        if r > 0:
            k0 = (k0 + 0x9E3779B9) & MASK32
            k1 = (k1 + 0xBB67AE85) & MASK32
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & MASK32, p1 & MASK32, \
                         ((p0 >> 32) ^ c3 ^ k1) & MASK32, p0 & MASK32
    return c0, c1, c2, c3


def dropout_uniform(seed, stream, index):
    """rt_dropout_uniform: lane index%4 of Philox at counter (index/4, stream), key seed;
    the top 24 bits times 2^-24."""
    block = index >> 2
    o = philox4x32_10((block & MASK32, block >> 32, stream & MASK32, (stream >> 32) & MASK32),
                      (seed & MASK32, (seed >> 32) & MASK32))
    return (o[index & 3] >> 8) * 2.0 ** -24


def fnv1a(data, h=0xCBF29CE484222325):
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & MASK64
    return h


def data_stream(step, micro, rank):
    """rt_train_data_stream: FNV-1a of "data" and step, micro, rank as 8-byte little-endian."""
    return fnv1a(b"data" + b"".join((v & MASK64).to_bytes(8, "little") for v in (step, micro, rank)))


def synthetic_inputs(seed, step, micro, rank, shape):
    """rt_train_synthetic_inputs: 2 * u - 1 over the data stream, as a float32 tensor."""
    s = data_stream(step, micro, rank)
    vals = [2.0 * dropout_uniform(seed, s, e) - 1.0 for e in range(math.prod(shape))]
    return torch.tensor(vals, dtype=torch.float32).reshape(shape)


# ---- safetensors by hand ----------------------------------------------------------------

def read_safetensors(path):
    """Every tensor of an fp32 safetensors file, and its __metadata__."""
    tensors, meta = read_f32(path)
    out = {name: torch.frombuffer(bytearray(values.tobytes()), dtype=torch.float32).reshape(shape).clone()
           for name, (shape, values) in tensors.items()}
    return out, meta
