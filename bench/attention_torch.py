"""PyTorch's causal scaled_dot_product_attention (bf16, what FSDP2 runs in the bench's
models) timed on one shape, for bench/attention.sh to set beside fsdpgen's kernels.

    python3 bench/attention_torch.py B T NH NKV HD [iters]

Prints `RESULT impl=torch_sdpa pass=forward|backward ms=... tflops=...` with FLOPs counted as
bench/attention_fsdpgen.c counts them (the causal half; backward 2.5 forwards). The
backward is timed as forward + backward minus the forward, so it covers the same work as
fsdpgen's backward call. Layout [B, NH, T, HD] (SDPA's), which the bench's models get by a
view and transpose of [B, T, NH*HD].
"""
import sys
import time

import torch
import torch.nn.functional as F


def timed(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / iters


def main():
    args = [int(a) for a in sys.argv[1:]]
    if len(args) not in (5, 6) or min(args) < 1 or args[2] % args[3] != 0:
        sys.exit("usage: attention_torch.py B T NH NKV HD [iters] (positive; NH a multiple of NKV)")
    B, T, NH, NKV, HD = args[:5]
    iters = args[5] if len(args) == 6 else 20
    if not torch.cuda.is_available():
        print("attention_torch.py: no GPU: nothing measured")
        return
    dev, dt = "cuda", torch.bfloat16
    q = (torch.rand(B, NH, T, HD, device=dev) * 4 - 2).to(dt).requires_grad_()
    k = (torch.rand(B, NKV, T, HD, device=dev) * 4 - 2).to(dt).requires_grad_()
    v = (torch.rand(B, NKV, T, HD, device=dev) * 2 - 1).to(dt).requires_grad_()
    dout = (torch.rand(B, NH, T, HD, device=dev) * 2 - 1).to(dt)
    gqa = NKV != NH

    def fwd():
        with torch.no_grad():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)

    def fwd_bwd():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        out.backward(dout)

    flops = 4.0 * B * NH * T * T * HD / 2.0
    ms_f = timed(fwd, iters)
    ms_b = timed(fwd_bwd, iters) - ms_f
    for name, ms, f in (("forward", ms_f, flops), ("backward", ms_b, 2.5 * flops)):
        print(f"RESULT impl=torch_sdpa pass={name} ms={ms:.4f} tflops={f / (ms * 1e-3) / 1e12:.1f}")


if __name__ == "__main__":
    main()
