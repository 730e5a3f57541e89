#!/usr/bin/env python3
"""same_tensors.py A B: exit 0 where the fp32 safetensors files A and B hold the same tensors
(names, shapes and bits; the metadata, which names the model, may differ), else 1."""
import sys

from safetensors_f32 import read_f32

a, b = (read_f32(p)[0] for p in sys.argv[1:3])
sys.exit(not (a and a.keys() == b.keys()
              and all(a[k][0] == b[k][0] and a[k][1].tobytes() == b[k][1].tobytes() for k in a)))
