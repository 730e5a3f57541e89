// What the kernel benchmarks (bench/attention_fsdpgen.c, attention_cudnn.c, norm_rows.c,
// loss_rows.c) share: their command lines (B T NH NKV HD [iters], or [iters]), the GPU
// check, the clock, zeroed device buffers, the inputs' pseudo-random bf16 values and the
// count of elements that disagree (#wrong), so they time the same
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

// Parses `[iters]` (a positive count, default def): 0, or 2 after prog's usage line.
static inline int bench_iters(int argc, char** argv, int def, int* iters) {
    *iters = def;
    if (argc > 2 || (argc == 2 && (sscanf(argv[1], "%d", iters) != 1 || *iters < 1))) {
        fprintf(stderr, "usage: %s [iters] (a positive count, default %d)\n", argv[0], def);
        return 2;
    }
    return 0;
}

// n 16-bit values of device buffer d, copied to the host (the caller frees them).
static inline uint16_t* bench_host_u16(const void* d, size_t n) {
    uint16_t* h = malloc((n ? n : 1) * sizeof *h);
    if (!h) {
        fprintf(stderr, "bench: out of host memory\n");
        exit(1);
    }
    RT_CHECK_CUDA(cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost));
    return h;
}

// #wrong as nccl-tests count it: the elements of two device buffers of n bf16 values more
// than `ulps` apart or of other signs (0 and -0 agree).
static inline long bench_wrong_bf16(const void* da, const void* db, size_t n, int ulps) {
    uint16_t *a = bench_host_u16(da, n), *b = bench_host_u16(db, n);
    long bad = 0;
    for (size_t i = 0; i < n; i++)
        if ((a[i] ^ b[i]) & 0x8000 ? (a[i] | b[i]) & 0x7FFF : abs((int)a[i] - (int)b[i]) > ulps)
            bad++;
    free(a), free(b);
    return bad;
}

#endif
