// The mma.sync fragment helpers of runtime/cuda/flash_attention_tc.cuh (rtc_tc_lda,
// rtc_tc_ldb, rtc_tc_mma, rtc_tc_acc_to_a) on one warp, against exact products: D1 = A B
// (16x16x16, two 8-column tiles) and D2 = narrow(D1) C (the accumulators reused as the next
// A operand, as the attention kernels chain S -> P -> P V). Small integers make every
// product, sum and narrowing exact, so any misplaced element shows as a wrong value.
// Built twice from this one file (runtime/cuda.ninja): by nvcc, where it runs on the GPU
// (and skips without one), and as host C++ against tests/cuda/cuda_emu.h's mma emulation.
// Passing both proves the emulator's lane mapping, which every emulated attention test
// relies on, is the hardware's.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __CUDACC__
#include <cuda_runtime.h>
#else
#include "cuda_emu.h"
#endif
#include "check.h"
#include "flash_attention_tc.cuh"

#define LDS 24  // shared row stride in elements (16 + 8, as the kernels pad)

struct mma_args {
    const float *a, *b, *c;  // A 16x16, B 16x16, C 16x8, row-major
    float *d1, *d2;          // D1 16x16, D2 16x8
};

template <class E>
__global__ void mma_layout_kernel(mma_args p) {
    typedef typename rtc_tc_reg<E>::type reg;
    RTC_TC_SMEM(rtc_tc_smem);  // the tensor-core kernels' name (one extern array per type)
    E* as = (E*)rtc_tc_smem;           // A [16][LDS] row-major
    E* bt = as + 16 * LDS;    // B^T [16 n][LDS] (k-contiguous)
    E* ct = bt + 16 * LDS;    // C^T [8 n][LDS]
    const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    for (int i = lane; i < 256; i += 32) {
        const int r = i / 16, c = i % 16;
        as[r * LDS + c] = rtc_tc_narrow<E>(p.a[i]);
        bt[c * LDS + r] = rtc_tc_narrow<E>(p.b[i]);  // B (r, c) at n = c, k = r
    }
    for (int i = lane; i < 128; i += 32) ct[(i % 8) * LDS + i / 8] = rtc_tc_narrow<E>(p.c[i]);
    __syncthreads();
    reg af[4];
    rtc_tc_lda<E>(af, as, LDS, g, t);
    float acc[2][4];
    rtc_tc_zero<2>(acc);
    for (int j = 0; j < 2; j++) {
        reg bf[2];
        rtc_tc_ldb<E>(bf, bt + 8 * j * LDS, LDS, g, t);
        rtc_tc_mma<E>(acc[j], af, bf);
    }
    reg pa[4];
    rtc_tc_acc_to_a<E, 2>(pa, acc, 0);
    float acc2[1][4];
    rtc_tc_zero<1>(acc2);
    reg cf[2];
    rtc_tc_ldb<E>(cf, ct, LDS, g, t);
    rtc_tc_mma<E>(acc2[0], pa, cf);
    // accumulator element i: row g + 8 (i / 2), column 2 t + i % 2 of its 8-column tile
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        p.d1[row * 16 + col] = acc[0][i];
        p.d1[row * 16 + 8 + col] = acc[1][i];
        p.d2[row * 8 + col] = acc2[0][i];
    }
}

template <class E>
static size_t smem_bytes(void) {
    return 40 * LDS * sizeof(E);
}

#ifdef __CUDACC__
static const char* where = "GPU";
template <class E>
static bool run(const mma_args& h) {
    float *a, *b, *c, *d1, *d2;
    if (cudaMalloc(&a, 256 * 4) || cudaMalloc(&b, 256 * 4) || cudaMalloc(&c, 128 * 4) ||
        cudaMalloc(&d1, 256 * 4) || cudaMalloc(&d2, 128 * 4))
        return false;
    cudaMemcpy(a, h.a, 256 * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(b, h.b, 256 * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(c, h.c, 128 * 4, cudaMemcpyHostToDevice);
    mma_args d = {a, b, c, d1, d2};
    mma_layout_kernel<E><<<1, 32, smem_bytes<E>()>>>(d);
    const bool ok = cudaDeviceSynchronize() == cudaSuccess;
    cudaMemcpy(h.d1, d1, 256 * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(h.d2, d2, 128 * 4, cudaMemcpyDeviceToHost);
    cudaFree(a), cudaFree(b), cudaFree(c), cudaFree(d1), cudaFree(d2);
    return ok;
}
#else
static const char* where = "emulator";
template <class E>
static bool run(const mma_args& h) {
    emu_launch(mma_layout_kernel<E>, dim3(1), 32, smem_bytes<E>(), h);
    return emu_limit_errors == 0;
}
#endif

template <class E>
static void test(const char* name, unsigned seed) {
    float a[256], b[256], c[128], d1[256], d2[128], w1[256], w2[128];
    srand(seed);
    for (int i = 0; i < 256; i++) a[i] = (float)(rand() % 9 - 4), b[i] = (float)(rand() % 9 - 4);
    for (int i = 0; i < 128; i++) c[i] = (float)(rand() % 9 - 4);
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++) {
            float s = 0.0f;  // |s| <= 256: exact in fp32, bf16 and fp16
            for (int k = 0; k < 16; k++) s += a[r * 16 + k] * b[k * 16 + n];
            w1[r * 16 + n] = s;
        }
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++) {
            float s = 0.0f;
            for (int k = 0; k < 16; k++) s += w1[r * 16 + k] * c[k * 8 + n];
            w2[r * 8 + n] = s;
        }
    memset(d1, 0xFF, sizeof d1), memset(d2, 0xFF, sizeof d2);  // NaN until written
    mma_args h = {a, b, c, d1, d2};
    const bool ran = run<E>(h);
    int bad1 = 0, bad2 = 0;
    for (int i = 0; i < 256; i++) bad1 += !(d1[i] == w1[i]);
    for (int i = 0; i < 128; i++) bad2 += !(d2[i] == w2[i]);
    CHECK(ran && bad1 == 0, "%s %s: D1 = A B through rtc_tc_lda/ldb/mma: %d of 256 wrong", where,
          name, bad1);
    CHECK(ran && bad2 == 0,
          "%s %s: D2 = D1 C with D1's accumulators as the A operand (rtc_tc_acc_to_a): %d of 128 "
          "wrong",
          where, name, bad2);
}

int main(void) {
#ifdef __CUDACC__
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        printf("SKIP mma layout on the GPU: no GPU (cudaGetDeviceCount: %s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return check_summary();
    }
#endif
    test<__nv_bfloat16>("bf16", 1);
    test<__half>("fp16", 2);
#ifndef __CUDACC__
    test<float>("float (emulator only)", 3);
#endif
    return check_summary();
}
