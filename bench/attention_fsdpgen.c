// Times fsdpgen's CUDA flash attention (rt_attention_lowmem_forward / _backward, prec and dt
// bf16, gradients assigned, as the generated code calls them: the tensor-core kernels of
// runtime/cuda/kernels/flash_attention_tc.cuh) on one shape; bench/
// attention.sh runs it beside PyTorch's scaled_dot_product_attention on the same shapes.
//   attention_fsdpgen B T NH NKV HD [iters]
// Prints `RESULT impl=fsdpgen pass=forward|backward ms=... tflops=...`: the mean over
// `iters` calls after 3 warm-up calls, the device synchronized around the timed loop (each
// call is one or a few kernel launches on the runtime's stream).
// FLOPs count the causal half of each T x T product, as FlashAttention's benchmarks do:
// forward 2 products, backward 5 (fsdpgen's backward runs 7, recomputing S and dP in its
// dQ pass).
#include "bench.h"  // first: it sets _POSIX_C_SOURCE

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "rt_check.h"
#include "rt_kernels.h"

// n floats on the device, bf16 values of a fixed pseudo-random pattern in [-scale, scale).
static float* dev_random(size_t n, float scale, unsigned seed) {
    float* h = (float*)malloc(n * sizeof(float));
    if (!h) {
        fprintf(stderr, "attention_fsdpgen: out of host memory\n");
        exit(1);
    }
    unsigned s = seed;
    for (size_t i = 0; i < n; i++) h[i] = bench_value(&s, scale);
    float* d;
    RT_CHECK_CUDA(cudaMalloc((void**)&d, n * sizeof(float)));
    RT_CHECK_CUDA(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    free(h);
    return d;
}


int main(int argc, char** argv) {
    int B, T, NH, NKV, HD, iters;
    if (bench_args(argc, argv, "attention_fsdpgen", &B, &T, &NH, &NKV, &HD, &iters)) return 2;
    if (!bench_has_gpu("attention_fsdpgen")) return 0;
    rt_kernels_init();
    const size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    float *q = dev_random(nq, 2.0f, 1), *k = dev_random(nk, 2.0f, 2), *v = dev_random(nk, 1.0f, 3);
    float *dout = dev_random(nq, 1.0f, 4), *out = bench_dev_zeros(nq * 4);
    float* stats = bench_dev_zeros(rt_attention_stats_floats(B, NH, T) * 4);
    float* scratch = bench_dev_zeros(rt_attention_lowmem_scratch_floats(B, NH, T) * 4);
    float *dq = bench_dev_zeros(nq * 4), *dk = bench_dev_zeros(nk * 4);
    float* dv = bench_dev_zeros(nk * 4);
    const double causal_flops = 4.0 * B * NH * (double)T * T * HD / 2.0;  // one forward
    static const char* pass_name[2] = {"forward", "backward"};
    for (int pass = 0; pass < 2; pass++) {
        double t0 = 0.0;
        for (int i = 0; i < 3 + iters; i++) {
            if (i == 3) {
                RT_CHECK_CUDA(cudaDeviceSynchronize());
                t0 = bench_now_s();
            }
            if (pass == 0)
                rt_attention_lowmem_forward(out, stats, scratch, q, k, v, B, T, NH, NKV, HD, 1,
                                            RT_BF16, RT_BF16);
            else  // as the generated code: bf16 gradients, assigned
                rt_attention_lowmem_backward(dq, dk, dv, scratch, dout, out, q, k, v, stats, B,
                                             T, NH, NKV, HD, 1, RT_BF16, RT_BF16,
                                             RT_ASSIGN_1 | RT_ASSIGN_2 | RT_ASSIGN_3);
        }
        RT_CHECK_CUDA(cudaDeviceSynchronize());
        const double ms = (bench_now_s() - t0) * 1e3 / iters;
        const double flops = causal_flops * (pass == 0 ? 1.0 : 2.5);
        printf("RESULT impl=fsdpgen pass=%s ms=%.4f tflops=%.1f\n", pass_name[pass], ms,
               flops / (ms * 1e-3) / 1e12);
    }
    RT_CHECK_CUDA(cudaGetLastError());
    return 0;
}
