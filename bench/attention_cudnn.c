// Times cuDNN's fused flash attention (rt_cudnn.h: the plans built once, then forward and
// backward on packed bf16 tensors, causal) on one shape; bench/attention.sh runs it beside
// fsdpgen's kernels (bench/attention_fsdpgen.c) and PyTorch's SDPA on the same shapes.
//   attention_cudnn B T NH NKV HD [iters]
// Prints `RESULT impl=cudnn pass=forward|backward ms=... tflops=...` (the mean over `iters`
// calls after 3 warm-up calls, the device synchronized around the timed loop) for the
// deterministic backward the generated step runs, then a `# ...` line with the backward
// that accumulates dQ with atomics (the frontend's default, not bit-reproducible); or
// `REFUSED impl=cudnn why=...` where cuDNN has no plan for the shape. FLOPs count the
// causal half of each T x T product, as bench/attention_fsdpgen.c does: forward 2
// products, backward 5.
#include "bench.h"  // first: it sets _POSIX_C_SOURCE

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "rt_check.h"
#include "rt_cudnn.h"

int main(int argc, char** argv) {
    int B, T, NH, NKV, HD, iters;
    if (bench_args(argc, argv, "attention_cudnn", &B, &T, &NH, &NKV, &HD, &iters)) return 2;
    if (!bench_has_gpu("attention_cudnn")) return 0;
    char why[512];
    const double t_plan = bench_now_s();
    rt_cudnn_sdpa* s =
        rt_cudnn_sdpa_create(B, T, NH, NKV, HD, 1, RT_BF16, 1, 0, 0, 0, why, sizeof why);
    if (!s) {
        printf("REFUSED impl=cudnn why=%s\n", why);
        return 0;
    }
    printf("# attention_cudnn: plans built in %.2f s, workspace %zu bytes\n",
           bench_now_s() - t_plan, rt_cudnn_sdpa_workspace_bytes(s));
    rt_cudnn_sdpa* atomic =
        rt_cudnn_sdpa_create(B, T, NH, NKV, HD, 1, RT_BF16, 0, 0, 0, 0, why, sizeof why);
    const size_t wsb = rt_cudnn_sdpa_workspace_bytes(s) > rt_cudnn_sdpa_workspace_bytes(atomic)
                           ? rt_cudnn_sdpa_workspace_bytes(s)
                           : rt_cudnn_sdpa_workspace_bytes(atomic);
    const size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    void *q = bench_dev_bf16(nq, 2.0f, 1), *k = bench_dev_bf16(nk, 2.0f, 2);
    void *v = bench_dev_bf16(nk, 1.0f, 3), *dout = bench_dev_bf16(nq, 1.0f, 4);
    void* out = bench_dev_zeros(nq * 2);
    float* stats = bench_dev_zeros(rt_cudnn_sdpa_stats_floats(B, NH, T) * sizeof(float));
    void* ws = bench_dev_zeros(wsb);
    void *dq = bench_dev_zeros(nq * 2), *dk = bench_dev_zeros(nk * 2);
    void* dv = bench_dev_zeros(nk * 2);
    cudaStream_t stream;
    RT_CHECK_CUDA(cudaStreamCreate(&stream));
    const double causal_flops = 4.0 * B * NH * (double)T * T * HD / 2.0;  // one forward
    static const char* pass_name[3] = {"forward", "backward", "backward"};
    for (int pass = 0; pass < 3; pass++) {
        const rt_cudnn_sdpa* p = pass == 2 ? atomic : s;
        if (!p) {
            printf("# cudnn backward, dQ accumulated with atomics: refused: %s\n", why);
            break;
        }
        double t0 = 0.0;
        for (int i = 0; i < 3 + iters; i++) {
            if (i == 3) {
                RT_CHECK_CUDA(cudaStreamSynchronize(stream));
                t0 = bench_now_s();
            }
            if (pass == 0)
                rt_cudnn_sdpa_forward(p, out, stats, q, k, v, ws, stream);
            else
                rt_cudnn_sdpa_backward(p, dq, dk, dv, dout, out, q, k, v, stats, ws, stream);
        }
        RT_CHECK_CUDA(cudaStreamSynchronize(stream));
        const double ms = (bench_now_s() - t0) * 1e3 / iters;
        const double tflops = causal_flops * (pass == 0 ? 1.0 : 2.5) / (ms * 1e-3) / 1e12;
        if (pass < 2)
            printf("RESULT impl=cudnn pass=%s ms=%.4f tflops=%.1f\n", pass_name[pass], ms, tflops);
        else
            printf("# cudnn backward, dQ accumulated with atomics (not deterministic): ms=%.4f "
                   "tflops=%.1f\n", ms, tflops);
    }
    RT_CHECK_CUDA(cudaGetLastError());
    rt_cudnn_sdpa_destroy(atomic);
    rt_cudnn_sdpa_destroy(s);
    return 0;
}
