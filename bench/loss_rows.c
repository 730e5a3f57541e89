// Times fsdpgen's fused cross-entropy as the generated step calls it (packed bf16 logits,
// gradient assigned: rt_cross_entropy_packed_forward_backward) on the bench models' shapes,
// each row staged in shared memory (the default: read from DRAM once) against read twice
// (rt_cuda_set_loss_stage(0)) and against a copy of half the shared memory (more L1 left,
// more of a long row read twice), all in one run on the same data.
//   loss_rows [iters]
// Prints per shape the mean ms of each over `iters` calls after 3 warm-up calls, how many
// times faster staging is than reading twice (x > 1: faster), the staged call's GB/s (the
// logits read once and the gradient written: 4 bytes an element), and #wrong as nccl-tests
// does: the gradient elements where a staged call differs from the one that reads twice
// (the bits must agree, 0 and -0 aside; a loss that differs counts as one).
#include "bench.h"  // first: it sets _POSIX_C_SOURCE

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "rt_check.h"
#include "rt_cuda.h"
#include "rt_kernels.h"

// The bench models' output heads: GPT-2 124M's 16 x 1024 tokens over 50257 logits, Llama
// 1B's 4 x 2048 over 128256.
static const struct {
    const char* name;
    int N, V;
} shapes[] = {{"gpt2_124m", 16 * 1024, 50257}, {"llama_1b", 4 * 2048, 128256}};

// Mean ms of `iters` calls after 3 warm-up calls, rows staged in at most `stage` bytes.
static double time_ms(size_t stage, int iters, void* dlogits, float* loss, const void* logits,
                      const int32_t* targets, int N, int V, const float* dloss) {
    rt_cuda_set_loss_stage(stage);
    double t0 = 0.0;
    for (int i = 0; i < 3 + iters; i++) {
        if (i == 3) {
            RT_CHECK_CUDA(cudaDeviceSynchronize());
            t0 = bench_now_s();
        }
        rt_cross_entropy_packed_forward_backward(dlogits, loss, logits, targets, N, V, dloss,
                                                 RT_BF16, RT_ASSIGN_1);
    }
    RT_CHECK_CUDA(cudaDeviceSynchronize());
    return (bench_now_s() - t0) * 1e3 / iters;
}

int main(int argc, char** argv) {
    int iters;
    if (bench_iters(argc, argv, 20, &iters)) return 2;
    if (!bench_has_gpu("loss_rows")) return 0;
    rt_kernels_init();
    int optin = 0;
    RT_CHECK_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    printf("shared memory a block may have: %d bytes\n", optin);
    printf("%-10s %6s %7s %10s %10s %10s %8s %8s %8s\n", "shape", "N", "V", "twice ms", "half ms",
           "staged ms", "staged x", "GB/s", "#wrong");
    long total_wrong = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int N = shapes[s].N, V = shapes[s].V;
        const size_t n = (size_t)N * RT_LD16(V);
        void* logits = bench_dev_bf16(n, 8.0f, 1);
        void *twice = bench_dev_zeros(n * 2), *staged = bench_dev_zeros(n * 2);
        int32_t* t = malloc((size_t)N * sizeof *t);
        if (!t) abort();
        for (int i = 0; i < N; i++) t[i] = (int32_t)(((int64_t)i * 131) % V);
        int32_t* targets = bench_dev_zeros((size_t)N * sizeof *t);
        RT_CHECK_CUDA(cudaMemcpy(targets, t, (size_t)N * sizeof *t, cudaMemcpyHostToDevice));
        float one = 1.0f, l2[2];
        float *dloss = bench_dev_zeros(sizeof one), *loss = bench_dev_zeros(2 * sizeof(float));
        RT_CHECK_CUDA(cudaMemcpy(dloss, &one, sizeof one, cudaMemcpyHostToDevice));
        const double tms = time_ms(0, iters, twice, loss, logits, targets, N, V, dloss);
        long bad = 0;
        double ms[2];  // half the shared memory, then all of it
        for (int h = 0; h < 2; h++) {
            const size_t stage = h ? (size_t)-1 : (size_t)optin / 2;
            ms[h] = time_ms(stage, iters, staged, loss + 1, logits, targets, N, V, dloss);
            RT_CHECK_CUDA(cudaMemcpy(l2, loss, sizeof l2, cudaMemcpyDeviceToHost));
            bad += bench_wrong_bf16(twice, staged, n, 0);
            bad += memcmp(&l2[0], &l2[1], sizeof l2[0]) != 0;
        }
        total_wrong += bad;
        printf("%-10s %6d %7d %10.4f %10.4f %10.4f %7.2fx %8.0f %8ld\n", shapes[s].name, N, V,
               tms, ms[0], ms[1], tms / ms[1], (double)n * 4 / (ms[1] * 1e-3) / 1e9, bad);
        void* bufs[] = {logits, twice, staged, targets, dloss, loss};
        for (int i = 0; i < 6; i++) RT_CHECK_CUDA(cudaFree(bufs[i]));
        free(t);
    }
    return total_wrong ? 1 : 0;
}
