// What the kernel benchmarks (bench/attention_fsdpgen.c, attention_cudnn.c, norm_rows.c)
// share: the attention ones' command line (B T NH NKV HD [iters]), the GPU check, the clock,
// zeroed device buffers and the inputs' pseudo-random bf16 values, so they time the same
// shapes on the same data.
#ifndef BENCH_H
#define BENCH_H

#define _POSIX_C_SOURCE 199309L  // clock_gettime
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda_runtime.h>

#include "../runtime/common/dtype_bits.h"
#include "rt_check.h"

static inline double bench_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Parses `B T NH NKV HD [iters]` (iters default 20); 0, or 2 after printing prog's usage.
static inline int bench_args(int argc, char** argv, const char* prog, int* B, int* T, int* NH,
                      int* NKV, int* HD, int* iters) {
    *iters = 20;
    if ((argc != 6 && argc != 7) || sscanf(argv[1], "%d", B) != 1 ||
        sscanf(argv[2], "%d", T) != 1 || sscanf(argv[3], "%d", NH) != 1 ||
        sscanf(argv[4], "%d", NKV) != 1 || sscanf(argv[5], "%d", HD) != 1 ||
        (argc == 7 && sscanf(argv[6], "%d", iters) != 1) || *B < 1 || *T < 1 || *NH < 1 ||
        *NKV < 1 || *NH % *NKV != 0 || *HD < 1 || *iters < 1) {
        fprintf(stderr, "usage: %s B T NH NKV HD [iters] (positive; NH a multiple of NKV)\n",
                prog);
        return 2;
    }
    return 0;
}

// 1 when a GPU is visible; else 0 after prog's "no GPU: nothing measured" line.
static inline int bench_has_gpu(const char* prog) {
    int count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) return 1;
    printf("%s: no GPU: nothing measured\n", prog);
    return 0;
}

// bytes of zeroed device memory (at least one).
static inline void* bench_dev_zeros(size_t bytes) {
    void* d;
    RT_CHECK_CUDA(cudaMalloc(&d, bytes ? bytes : 1));
    RT_CHECK_CUDA(cudaMemset(d, 0, bytes ? bytes : 1));
    return d;
}

// The next value of the pattern with state *s, in [-scale, scale), rounded to bf16.
static inline float bench_value(unsigned* s, float scale) {
    *s = *s * 1664525u + 1013904223u;
    const float x = scale * ((float)(*s >> 8) / 8388608.0f - 1.0f);
    return rt_bf16_to_f32_inl(rt_bf16_from_f32_inl(x));
}

// n packed bf16 values of the pattern from seed, on the device.
static inline void* bench_dev_bf16(size_t n, float scale, unsigned seed) {
    uint16_t* h = malloc((n ? n : 1) * sizeof *h);
    if (!h) {
        fprintf(stderr, "bench: out of host memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) h[i] = rt_bf16_from_f32_inl(bench_value(&seed, scale));
    void* d = bench_dev_zeros(n * sizeof *h);
    RT_CHECK_CUDA(cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

#endif
