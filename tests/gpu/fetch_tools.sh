#!/usr/bin/env bash
# Run here (Debian 12, apt works) before using a GPU machine: the GPU machines' image has CUDA,
# NCCL, PyTorch and ninja but neither lua5.4 nor OpenBLAS, which fsdpgen needs to plan and
# to build its CPU binaries. Downloads those Debian packages into .devtools/debs (ignored
# by git; pass `carry: [".devtools"]` to the device tool) plus a text file for the example.
# On the device, tests/gpu/run_on_device.sh unpacks them (device_env.sh) and runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .devtools/debs
cd .devtools/debs
apt-get download lua5.4 liblua5.4-0 libreadline8 libopenblas0-pthread libopenblas-pthread-dev \
    libopenblas-dev libgfortran5 libquadmath0
cd ../..
cp /usr/share/common-licenses/GPL-3 .devtools/GPL-3
du -sh .devtools
