// The mma.sync fragment helpers of runtime/cuda/kernels/flash_attention_tc.cuh (rtc_tc_lda and
// rtc_tc_ldb2 over ldmatrix, rtc_tc_mma_rows, rtc_tc_acc_to_a) on one warp, against exact
// products: D1 = A B (16x16x16, two 8-column blocks) with B read k-contiguous (plain
// ldmatrix of B^T) and again n-contiguous (ldmatrix .trans of B), and D2 = narrow(D1) C
// (the accumulators reused as the next A operand, as the attention kernels chain
// S -> P -> P V). Small integers make every product, sum and narrowing exact, so any
// misplaced element shows as a wrong value. Built twice from this one file
// (runtime/cuda.ninja): by nvcc, where it runs on the GPU (and skips without one), and as
// host C++ against tests/cuda/cuda_emu.h's mma and ldmatrix emulation. Passing both proves
// the emulator's lane mappings, which every emulated attention test relies on, are the
// hardware's.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __CUDACC__
#include "cuda_helpers.h"  // skip_without_gpu
#else
#include "cuda_emu.h"
#endif
#include "check.h"
#include "flash_attention_tc.cuh"

#define LDS 24  // shared row stride in elements (16 + 8, as the kernels pad)

struct mma_args {
    const float *a, *b, *c;  // A, B, C 16x16, row-major
    float *d1, *d1t, *d2;    // D1 16x16 (B k-contiguous, then n-contiguous), D2 16x16
};

template <class E>
__global__ void mma_layout_kernel(mma_args p) {
    typedef typename rtc_tc_reg<E>::type reg;
    RTC_TC_SMEM(rtc_tc_smem);  // the tensor-core kernels' name (one extern array per type)
    E* as = (E*)rtc_tc_smem;   // A [16 m][LDS] row-major
    E* bt = as + 16 * LDS;     // B^T [16 n][LDS] (k-contiguous)
    E* bs = bt + 16 * LDS;     // B [16 k][LDS] (n-contiguous)
    E* cs = bs + 16 * LDS;     // C [16 k][LDS] (n-contiguous)
    const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    for (int i = lane; i < 256; i += 32) {
        const int r = i / 16, c = i % 16;
        as[r * LDS + c] = rtc_tc_narrow<E>(p.a[i]);
        bt[c * LDS + r] = rtc_tc_narrow<E>(p.b[i]);  // B (r, c) at n = c, k = r
        bs[r * LDS + c] = rtc_tc_narrow<E>(p.b[i]);
        cs[r * LDS + c] = rtc_tc_narrow<E>(p.c[i]);
    }
    __syncthreads();
    reg af[1][4];  // one row tile (MT = 1), as the kernels' helpers take them
    rtc_tc_lda<E>(af[0], as, LDS, lane);
    float acc[1][2][4], acct[1][2][4], acc2[1][2][4];
    rtc_tc_zero<2>(acc[0]);
    rtc_tc_zero<2>(acct[0]);
    rtc_tc_zero<2>(acc2[0]);
    rtc_tc_mma_rows<E, 2, true, 1, 0, 1>(acc, af, bt, LDS, 2, lane);
    rtc_tc_mma_rows<E, 2, false, 1, 0, 1>(acct, af, bs, LDS, 2, lane);
    reg pa[1][4];
    rtc_tc_acc_to_a<E, 2>(pa[0], acc[0], 0);
    rtc_tc_mma_rows<E, 2, false, 1, 0, 1>(acc2, pa, cs, LDS, 2, lane);
    // accumulator element i: row g + 8 (i / 2), column 2 t + i % 2 of its 8-column block
    for (int j = 0; j < 2; j++)
        for (int i = 0; i < 4; i++) {
            const int at = (g + 8 * (i >> 1)) * 16 + 8 * j + 2 * t + (i & 1);
            p.d1[at] = acc[0][j][i];
            p.d1t[at] = acct[0][j][i];
            p.d2[at] = acc2[0][j][i];
        }
}

template <class E>
static size_t smem_bytes(void) {
    return 64 * LDS * sizeof(E);
}

#ifdef __CUDACC__
static const char* where = "GPU";
template <class E>
static bool run(const mma_args& h) {
    float* dev[6];  // a, b, c, d1, d1t, d2: 256 floats each
    for (int i = 0; i < 6; i++)
        if (cudaMalloc(&dev[i], 256 * 4) != cudaSuccess) return false;
    cudaMemcpy(dev[0], h.a, 256 * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dev[1], h.b, 256 * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dev[2], h.c, 256 * 4, cudaMemcpyHostToDevice);
    mma_args d = {dev[0], dev[1], dev[2], dev[3], dev[4], dev[5]};
    mma_layout_kernel<E><<<1, 32, smem_bytes<E>()>>>(d);
    const bool ok = cudaDeviceSynchronize() == cudaSuccess;
    cudaMemcpy(h.d1, dev[3], 256 * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(h.d1t, dev[4], 256 * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(h.d2, dev[5], 256 * 4, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 6; i++) cudaFree(dev[i]);
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

// x [16][16] times y [16][16], row-major
static void product16(float* out, const float* x, const float* y) {
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++) {
            float s = 0.0f;  // small integers: exact in fp32 (and D1 in bf16 and fp16)
            for (int k = 0; k < 16; k++) s += x[r * 16 + k] * y[k * 16 + n];
            out[r * 16 + n] = s;
        }
}

static int wrong(const float* got, const float* want) {
    int bad = 0;
    for (int i = 0; i < 256; i++) bad += !(got[i] == want[i]);
    return bad;
}

template <class E>
static void test(const char* name, unsigned seed) {
    float a[256], b[256], c[256], d1[256], d1t[256], d2[256], w1[256], w2[256];
    srand(seed);
    for (int i = 0; i < 256; i++) {
        a[i] = (float)(rand() % 9 - 4), b[i] = (float)(rand() % 9 - 4);
        c[i] = (float)(rand() % 9 - 4);
    }
    product16(w1, a, b);  // |w1| <= 256
    product16(w2, w1, c);
    memset(d1, 0xFF, sizeof d1), memset(d1t, 0xFF, sizeof d1t);  // NaN until written
    memset(d2, 0xFF, sizeof d2);
    mma_args h = {a, b, c, d1, d1t, d2};
    const bool ran = run<E>(h);
    CHECK(ran && wrong(d1, w1) == 0,
          "%s %s: D1 = A B, B k-contiguous (rtc_tc_lda, ldmatrix; rtc_tc_mma_rows): %d of 256 "
          "wrong",
          where, name, wrong(d1, w1));
    CHECK(ran && wrong(d1t, w1) == 0,
          "%s %s: D1 = A B, B n-contiguous (ldmatrix .trans): %d of 256 wrong", where, name,
          wrong(d1t, w1));
    CHECK(ran && wrong(d2, w2) == 0,
          "%s %s: D2 = D1 C with D1's accumulators as the A operand (rtc_tc_acc_to_a): %d of 256 "
          "wrong",
          where, name, wrong(d2, w2));
}

int main(void) {
#ifdef __CUDACC__
    if (skip_without_gpu("mma layout on the GPU")) return 0;
#endif
    test<__nv_bfloat16>("bf16", 1);
    test<__half>("fp16", 2);
#ifndef __CUDACC__
    test<float>("float (emulator only)", 3);
#endif
    return check_summary();
}
