// Flash attention on tensor cores for 16-bit operands: prec RT_BF16 / RT_F16 of
// rt_attention_lowmem_forward / rt_attention_lowmem_backward (attention.cu), causal or not,
// multi-head and grouped-query, head dims that are multiples of 16 up to 128 (other head
// dims, and prec RT_F32, take the fp32 kernels of flash_attention.cuh). Same contracts,
// same algorithm and the same statistics as those kernels: stats [B,NH,T,2] holds (m, 1/l)
// with m the row max of the scaled scores and l the sum of exp(s - m), so either backward
// can consume either forward's stats; D = rowsum(dO * O) is that header's rtc_fa_dot_kernel.
// Nothing of size T x T reaches global memory.
//
// Numerics. q, k, v and dout are fp32 buffers holding bf16/fp16 values; their tiles are
// narrowed to E (__nv_bfloat16 / __half) on their way into shared memory, which is exact.
// Every product runs on tensor cores (16-bit inputs, fp32 accumulation), so the scores
// S = Q K^T and dP = dO V^T equal fp32 arithmetic up to summation order. As in
// FlashAttention-2 and PyTorch's bf16/fp16 SDPA, the probabilities and their gradients are
// narrowed to E before the products they feed: P (unnormalised, exp(s - m) in [0, 1])
// before O += P V; P before dV += P^T dO; dS = P (dP - D) before dQ += dS K and
// dK += dS^T Q. The row max and sum, the rescaling and dS itself are fp32 (l sums the
// unrounded exponentials). That narrowing is the only error beyond fp32 round-off: an
// output element built from product terms x_i y_i (one factor narrowed) is off by at most
// u * sum_i |x_i y_i|, u the unit roundoff (2^-8 bf16, 2^-11 fp16; fp16 also has an
// absolute 2^-25 per narrowed value below its normal range, 2^-14);
// tests/cuda/attention_tc_ref.h evaluates that bound per element for the tests.
//
// Kernels (W = 16-row wmma tiles; a warp owns W rows of its block's tile):
//   forward   grid (B*NH, ceil(T/FBR)), FBR/16 warps. The warp's Q fragments stay in
//             registers. Per key tile of FBC keys (K and V narrowed into shared memory by the
//             whole block): S = Q K^T (16 x FBC per warp) stored to the warp's fp32 score
//             rows; the online softmax reads them, two lanes per row (interleaved columns,
//             the row max combined with one __shfl_xor_sync); P narrowed into the warp's P
//             rows; O (16 x HD, accumulator fragments) rescaled by exp(m_old - m_new), but
//             only when some row's max moved (multiplying by exactly 1 changes no bit, so
//             skipping it is exact) and through the score rows, since a fragment's
//             elements are only reachable through memory; then O += P V.
//   backward  FlashAttention-2 without atomics, as flash_attention.cuh:
//             1. D = rowsum(dO * O) into the scratch (rtc_fa_dot_kernel);
//             2. dK, dV: grid (B*NKV, ceil(T/KBC)), KBC/16 warps of 16 keys each; walks the
//                query tiles (KBR queries) of every query head of the GQA group in head
//                order: S^T = K Q^T and dP^T = V dO^T into the warp's fp32 rows, P^T and
//                dS^T computed there in fp32 and narrowed, dV += P^T dO and dK += dS^T Q in
//                accumulator fragments;
//             3. dQ: grid (B*NH, ceil(T/QBR)), QBR/16 warps of 16 queries: per key tile
//                (QBC keys) S, dP, dS as in 2, dQ += dS K.
//             Every gradient element has one owner block, which adds to it once at the end
//             (the += contract): deterministic, no atomics, and dq, dk, dv requested alone
//             give the joint call's bits (each is computed by the same operations either
//             way; D is only computed when dq or dk is wanted).
//   Causal: key tiles past a query tile's last row are never loaded, a warp whose 16 rows
//   see none of the current tile skips its products (its state cannot change), and blocks
//   run longest first: the forward and dQ grids map blockIdx.y to query tiles from the
//   last (most key tiles) down, and dK/dV's key tile 0 (all queries) is already first.
//   Blocks are dispatched roughly in blockIdx order, so the short blocks fill the tail.
//
// Tiles, threads and shared memory (bytes; E = 2 bytes, rows padded by 8 elements or 4
// floats so consecutive rows start 16 bytes apart in the bank cycle; every region 128-byte
// aligned for wmma's 32-byte pointer rule):
//              HD <= 64 (HDP 64)                    HD <= 128 (HDP 128)
//   forward    FBR 128, FBC 64, 8 warps, 90624      FBR 64, FBC 64, 4 warps, 79104
//   dK/dV      KBC 64, KBR 64, 4 warps, 90880       KBC 64, KBR 32, 4 warps, 81280
//   dQ         QBR 64, QBC 64, 4 warps, 81664       QBR 64, QBC 32, 4 warps, 76544
// All within 99 KiB, the smallest opt-in limit among the targets (sm_86/sm_89; sm_80 has
// 163 KiB, H100 227 KiB), as every flash kernel here (rtc_attention_init sets the opt-in;
// tests/cuda/test_flash_tc_emu.cc checks every configuration). On an H100 each kernel
// fits two blocks per SM (8 to 16 warps), so one block's global->shared tile loads overlap
// another's tensor-core work; that is the only latency hiding (no double buffering: the
// operands are fp32 in global memory and must pass through registers to be narrowed, so
// cp.async/TMA cannot stage them, and a register prefetch of the next K/V tile costs 64
// registers per thread at these tiles). The larger query tile goes to the forward at
// HDP 64 (K/V loads amortised over 128 queries); HDP 128 and the backward kernels hold
// two fp32 16 x 64 staging tiles per warp and stay at 4 warps to fit.
//
// Why wmma (nvcuda::wmma, 16x16x16) rather than mma.sync/wgmma PTX. There is no GPU where
// this is developed, so the kernels must be testable in tests/cuda/cuda_emu.h: wmma's
// fragments are opaque (the kernels touch them only through fill/load/store/mma), so the
// emulator can give every lane the whole tile and the results cannot depend on a register
// layout; a wrong guess about mma.sync's layout would have been reproduced identically
// by kernel and emulator and passed. The price is that softmax and rescaling go through
// shared memory instead of registers. Expected performance (reasoned before any GPU ran
// them; the measurement follows): per warp and 64-key tile at HD 64 the forward does 131k
// MACs (32 wmma 16x16x16) and moves about 28 KiB through shared memory (K and V fragments
// 16 KiB, S stored and read 8 KiB, P 4 KiB). An H100 SXM SM does ~1900 dense bf16 MAC/clk
// (989 TFLOP/s over 132 SMs at 1.98 GHz) but moves 128 B/clk of shared memory and 16
// exp2/clk: ~70 clk of MACs against ~220 clk of shared memory and ~64 clk of exp2 per
// warp-tile, so the forward is bound by shared memory at best near 30% of the tensor-core
// peak, less after the tile loads and barriers; the backward stages S and dP and reads
// more fragments per MAC, so expect less. Against the fp32 kernels (CUDA cores: fp32 peak
// is 1/15 of the bf16 one, and they reach a fraction of it) that is still several times
// faster. wmma compiles to the HMMA instructions of mma.sync; Hopper's asynchronous wgmma and TMA,
// register-resident softmax (FA2), 32 rows per warp (halving the K/V fragment traffic per
// MAC) and a bf16 copy of K/V in global memory are the known next steps, none tried yet.
// Measured on an H100 (ncu, 2026-11-22), causal, HD 64, per layer, counting the causal
// half of each T x T product: GPT-2 bench (B 16, T 1024, 12 heads) forward 0.48 ms
// (53 TFLOP/s), dK/dV 1.51 ms (34), dQ 1.06 ms (37); Llama 1B bench (B 4, T 2048, 32
// heads) forward 1.12 ms (62 TFLOP/s). That is 4-6% of the bf16 peak, far under the 30%
// reasoned above, and a quarter of the Llama 1B step (105 of 409 ms): the first thing to
// profile (ncu's shared-memory and stall metrics) and rewrite.
//
// Emulator-only instantiation E = float (no 16-bit rounding anywhere; no such 16x16x16
// wmma shape exists on hardware, so nvcc never sees it): the test runs the very same
// kernels unrounded and holds them to the fp32 kernels' tolerances, which checks the
// indexing, masking, online softmax and GQA walk tightly, apart from the 16-bit bound.
#ifndef FSDPGEN_CUDA_FLASH_ATTENTION_TC_CUH
#define FSDPGEN_CUDA_FLASH_ATTENTION_TC_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "flash_attention.cuh"

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#endif

// Dynamic shared memory of a kernel, 128-byte aligned (the emulator supplies its own).
#ifndef RTC_TC_SMEM
#define RTC_TC_SMEM(name) extern __shared__ __align__(128) unsigned char name[]
#endif

#define RTC_TC_MAX_HD 128
#define RTC_TC_LOG2E 1.44269504088896341f
#define RTC_TC_FULL 0xFFFFFFFFu

// ----------------------------------------------------------------------------
// element types

// x rounded to nearest even in E (exact for values of E's format).
template <class E>
__device__ __forceinline__ E rtc_tc_narrow(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 rtc_tc_narrow<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half rtc_tc_narrow<__half>(float x) {
    return __float2half_rn(x);
}
template <>
__device__ __forceinline__ float rtc_tc_narrow<float>(float x) {  // emulator only
    return x;
}

// ----------------------------------------------------------------------------
// tiles and shared-memory layouts (see the table at the top)

template <int HDP>
struct rtc_tc_cfg;
template <>
struct rtc_tc_cfg<64> {
    enum { FBR = 128, FBC = 64, KBC = 64, KBR = 64, QBR = 64, QBC = 64 };
};
template <>
struct rtc_tc_cfg<128> {
    enum { FBR = 64, FBC = 64, KBC = 64, KBR = 32, QBR = 64, QBC = 32 };
};

constexpr size_t rtc_tc_al(size_t bytes) { return (bytes + 127) / 128 * 128; }

// forward: qs [BR][LDE] E, ks/vs [BC][LDE] E, ss [BR][LDS] fp32 (scores, staging),
// ps [BR][LDP] E (P), al [BR] fp32 (per-row alpha, then 1/l)
template <class E, int HDP>
struct rtc_tc_fwd_layout {
    enum { BR = rtc_tc_cfg<HDP>::FBR, BC = rtc_tc_cfg<HDP>::FBC };
    enum { LDE = HDP + 8, LDS = BC + 4, LDP = BC + 8 };
    static constexpr size_t q = 0;
    static constexpr size_t k = q + rtc_tc_al((size_t)BR * LDE * sizeof(E));
    static constexpr size_t v = k + rtc_tc_al((size_t)BC * LDE * sizeof(E));
    static constexpr size_t s = v + rtc_tc_al((size_t)BC * LDE * sizeof(E));
    static constexpr size_t p = s + rtc_tc_al((size_t)BR * LDS * sizeof(float));
    static constexpr size_t al = p + rtc_tc_al((size_t)BR * LDP * sizeof(E));
    static constexpr size_t bytes = al + rtc_tc_al((size_t)BR * sizeof(float));
};

// dK/dV: ks/vs [BC][LDE] E (the block's keys), qs/dos [BR][LDE] E (the query tile),
// st/dpt [BC][LDT] fp32 (S^T, dP^T, staging), pt/dst [BC][LDQ] E (P^T, dS^T), m/inv/D [BR]
template <class E, int HDP>
struct rtc_tc_dkdv_layout {
    enum { BC = rtc_tc_cfg<HDP>::KBC, BR = rtc_tc_cfg<HDP>::KBR };
    enum { LDE = HDP + 8, LDT = BR + 4, LDQ = BR + 8 };
    static constexpr size_t k = 0;
    static constexpr size_t v = k + rtc_tc_al((size_t)BC * LDE * sizeof(E));
    static constexpr size_t q = v + rtc_tc_al((size_t)BC * LDE * sizeof(E));
    static constexpr size_t dout = q + rtc_tc_al((size_t)BR * LDE * sizeof(E));
    static constexpr size_t st = dout + rtc_tc_al((size_t)BR * LDE * sizeof(E));
    static constexpr size_t dpt = st + rtc_tc_al((size_t)BC * LDT * sizeof(float));
    static constexpr size_t pt = dpt + rtc_tc_al((size_t)BC * LDT * sizeof(float));
    static constexpr size_t dst = pt + rtc_tc_al((size_t)BC * LDQ * sizeof(E));
    static constexpr size_t m = dst + rtc_tc_al((size_t)BC * LDQ * sizeof(E));
    static constexpr size_t inv = m + rtc_tc_al((size_t)BR * sizeof(float));
    static constexpr size_t D = inv + rtc_tc_al((size_t)BR * sizeof(float));
    static constexpr size_t bytes = D + rtc_tc_al((size_t)BR * sizeof(float));
};

// dQ: qs/dos [BR][LDE] E, ks/vs [BC][LDE] E, ss/dps [BR][LDS] fp32 (S, dP, staging),
// dss [BR][LDP] E (dS), m/inv/D [BR]
template <class E, int HDP>
struct rtc_tc_dq_layout {
    enum { BR = rtc_tc_cfg<HDP>::QBR, BC = rtc_tc_cfg<HDP>::QBC };
    enum { LDE = HDP + 8, LDS = BC + 4, LDP = BC + 8 };
    static constexpr size_t q = 0;
    static constexpr size_t dout = q + rtc_tc_al((size_t)BR * LDE * sizeof(E));
    static constexpr size_t k = dout + rtc_tc_al((size_t)BR * LDE * sizeof(E));
    static constexpr size_t v = k + rtc_tc_al((size_t)BC * LDE * sizeof(E));
    static constexpr size_t s = v + rtc_tc_al((size_t)BC * LDE * sizeof(E));
    static constexpr size_t dp = s + rtc_tc_al((size_t)BR * LDS * sizeof(float));
    static constexpr size_t ds = dp + rtc_tc_al((size_t)BR * LDS * sizeof(float));
    static constexpr size_t m = ds + rtc_tc_al((size_t)BR * LDP * sizeof(E));
    static constexpr size_t inv = m + rtc_tc_al((size_t)BR * sizeof(float));
    static constexpr size_t D = inv + rtc_tc_al((size_t)BR * sizeof(float));
    static constexpr size_t bytes = D + rtc_tc_al((size_t)BR * sizeof(float));
};

// ----------------------------------------------------------------------------
// device helpers

typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> rtc_tc_acc;

__device__ __forceinline__ bool rtc_tc_aligned16(const void* p) {
    return ((uintptr_t)p & 15u) == 0;
}

// Four consecutive elements, stored together.
template <class E>
struct alignas(4 * sizeof(E)) rtc_tc_e4 {
    E v[4];
};

// Rows [t0, t0 + R) of one head (row t at src + t * ld, HD floats) narrowed into a shared
// tile of E with row stride LDE; rows past T are zero (finite, masked later), dims past HD
// are never read. vec: the buffers are 16-byte aligned, so (HD and the head offset being
// multiples of 16) every row is, and float4 loads apply.
template <class E, int NT, int LDE>
__device__ __forceinline__ void rtc_tc_load(E* dst, const float* src, size_t ld, int t0, int R,
                                            int T, int HD, bool vec) {
    if (vec) {
        const int n4 = HD / 4;
        for (int i = threadIdx.x; i < R * n4; i += NT) {
            const int r = i / n4, d = (i % n4) * 4, t = t0 + r;
            const float4 x = t < T ? *(const float4*)(src + (size_t)t * ld + d)
                                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            rtc_tc_e4<E> w;  // one 8-byte shared store (d and LDE are multiples of 4)
            w.v[0] = rtc_tc_narrow<E>(x.x);
            w.v[1] = rtc_tc_narrow<E>(x.y);
            w.v[2] = rtc_tc_narrow<E>(x.z);
            w.v[3] = rtc_tc_narrow<E>(x.w);
            *(rtc_tc_e4<E>*)(dst + r * LDE + d) = w;
        }
    } else {
        for (int i = threadIdx.x; i < R * HD; i += NT) {
            const int r = i / HD, d = i % HD, t = t0 + r;
            dst[r * LDE + d] = rtc_tc_narrow<E>(t < T ? src[(size_t)t * ld + d] : 0.0f);
        }
    }
}

// Hands a warp's 16 x HD accumulator rows (acc[0..nkd), 16 dims each) to f(row, dim,
// value), CH fragments at a time through the warp's fp32 staging rows st (stride LDST >=
// 16 * CH). Lanes take consecutive dims (coalesced global writes in f).
template <int NF, int CH, int LDST, class F>
__device__ __forceinline__ void rtc_tc_drain(const rtc_tc_acc (&acc)[NF], float* st, int nkd,
                                             int lane, F f) {
#pragma unroll
    for (int c0 = 0; c0 < NF; c0 += CH) {
        if (c0 < nkd) {
            __syncwarp();  // earlier readers of st are done
#pragma unroll
            for (int i = 0; i < CH; i++)
                if (c0 + i < nkd)
                    nvcuda::wmma::store_matrix_sync(st + 16 * i, acc[c0 + i], LDST,
                                                    nvcuda::wmma::mem_row_major);
            __syncwarp();
            for (int e = lane; e < 16 * 16 * CH; e += 32) {
                const int r = e / (16 * CH), col = e % (16 * CH);
                if (c0 * 16 + col < nkd * 16) f(r, c0 * 16 + col, st[r * LDST + col]);
            }
        }
    }
    __syncwarp();  // st is free again
}

// acc row r *= alpha[r] (r < 16), through the warp's staging rows st as in rtc_tc_drain.
template <int NF, int CH, int LDST>
__device__ __forceinline__ void rtc_tc_rescale(rtc_tc_acc (&acc)[NF], float* st,
                                               const float* alpha, int nkd, int lane) {
#pragma unroll
    for (int c0 = 0; c0 < NF; c0 += CH) {
        if (c0 < nkd) {
            __syncwarp();  // earlier readers of st are done
#pragma unroll
            for (int i = 0; i < CH; i++)
                if (c0 + i < nkd)
                    nvcuda::wmma::store_matrix_sync(st + 16 * i, acc[c0 + i], LDST,
                                                    nvcuda::wmma::mem_row_major);
            __syncwarp();
            for (int e = lane; e < 16 * 16 * CH; e += 32) {
                const int r = e / (16 * CH), col = e % (16 * CH);
                st[r * LDST + col] *= alpha[r];
            }
            __syncwarp();
#pragma unroll
            for (int i = 0; i < CH; i++)
                if (c0 + i < nkd)
                    nvcuda::wmma::load_matrix_sync(acc[c0 + i], st + 16 * i, LDST,
                                                   nvcuda::wmma::mem_row_major);
        }
    }
    __syncwarp();  // every lane loaded before st is reused
}

// ----------------------------------------------------------------------------
// forward: grid (B*NH, ceil(T/FBR)), FBR/16 warps; out and stats of the block's queries

template <class E, int HDP>
__global__ void __launch_bounds__(rtc_tc_cfg<HDP>::FBR * 2)
    rtc_fa_tc_forward_kernel(rtc_fa_args a) {
    namespace wmma = nvcuda::wmma;
    typedef rtc_tc_fwd_layout<E, HDP> L;
    enum { BR = L::BR, BC = L::BC, NT = BR * 2, LDE = L::LDE, LDS = L::LDS, LDP = L::LDP };
    enum { NF = HDP / 16, NJ = BC / 16 };
    RTC_TC_SMEM(rtc_tc_smem);
    unsigned char* sm = rtc_tc_smem;
    E* qs = (E*)(sm + L::q);
    E* ks = (E*)(sm + L::k);
    E* vs = (E*)(sm + L::v);
    float* ss = (float*)(sm + L::s);
    E* ps = (E*)(sm + L::p);
    float* al = (float*)(sm + L::al);
    const int T = a.T, HD = a.HD, nkd = HD / 16;
    const int b = blockIdx.x / a.NH, h = blockIdx.x % a.NH, hk = h / (a.NH / a.NKV);
    const int qt = a.causal ? (int)gridDim.y - 1 - (int)blockIdx.y : (int)blockIdx.y;
    const int q0 = qt * BR;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * 16;
    const int rr = lane >> 1, half = lane & 1, tq = q0 + r0 + rr;  // this lane's row
    const size_t ldq = (size_t)a.NH * HD, ldk = (size_t)a.NKV * HD;
    const float* qg = a.q + (size_t)b * T * ldq + (size_t)h * HD;
    const float* kg = a.k + (size_t)b * T * ldk + (size_t)hk * HD;
    const float* vg = a.v + (size_t)b * T * ldk + (size_t)hk * HD;
    const bool vec = rtc_tc_aligned16(a.q) && rtc_tc_aligned16(a.k) && rtc_tc_aligned16(a.v);
    float* sw = ss + r0 * LDS;  // the warp's score rows (and staging)
    E* pw = ps + r0 * LDP;      // the warp's P rows
    float* alw = al + r0;

    rtc_tc_load<E, NT, LDE>(qs, qg, ldq, q0, BR, T, HD, vec);
    __syncthreads();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major> qa[NF];
#pragma unroll
    for (int kk = 0; kk < NF; kk++)
        if (kk < nkd) wmma::load_matrix_sync(qa[kk], qs + r0 * LDE + 16 * kk, LDE);
    rtc_tc_acc o[NF];
#pragma unroll
    for (int i = 0; i < NF; i++) wmma::fill_fragment(o[i], 0.0f);
    float m = -INFINITY, l = 0.0f;  // row tq's running max; this lane's part of its sum
    const int kend = a.causal ? (q0 + BR < T ? q0 + BR : T) : T;
    const bool rows_in = q0 + r0 < T;
    for (int k0 = 0; k0 < kend; k0 += BC) {
        __syncthreads();  // the previous tile's readers of ks and vs are done
        rtc_tc_load<E, NT, LDE>(ks, kg, ldk, k0, BC, T, HD, vec);
        rtc_tc_load<E, NT, LDE>(vs, vg, ldk, k0, BC, T, HD, vec);
        __syncthreads();
        if (!rows_in || (a.causal && q0 + r0 + 15 < k0)) continue;  // all masked for the warp
        // S = Q K^T into the warp's score rows
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            rtc_tc_acc sacc;
            wmma::fill_fragment(sacc, 0.0f);
#pragma unroll
            for (int kk = 0; kk < NF; kk++) {
                if (kk < nkd) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::col_major> kb;
                    wmma::load_matrix_sync(kb, ks + 16 * j * LDE + 16 * kk, LDE);
                    wmma::mma_sync(sacc, qa[kk], kb, sacc);
                }
            }
            wmma::store_matrix_sync(sw + 16 * j, sacc, LDS, wmma::mem_row_major);
        }
        __syncwarp();
        // online softmax of row rr: this lane takes columns half, half + 2, ...
        float sv[BC / 2];
        float mt = -INFINITY;
#pragma unroll
        for (int i = 0; i < BC / 2; i++) {
            const int c = 2 * i + half;
            sv[i] = rtc_fa_visible(tq, k0 + c, T, a.causal) ? a.scale * sw[rr * LDS + c]
                                                            : -INFINITY;
            mt = fmaxf(mt, sv[i]);
        }
        mt = fmaxf(mt, __shfl_xor_sync(RTC_TC_FULL, mt, 1));
        const float mnew = fmaxf(m, mt);
        const float mref = mnew == -INFINITY ? 0.0f : mnew;  // a row past T stays empty
        const float alpha = mnew == m ? 1.0f : exp2f((m - mref) * RTC_TC_LOG2E);
        float lt = 0.0f;
#pragma unroll
        for (int i = 0; i < BC / 2; i++) {
            const float p = exp2f((sv[i] - mref) * RTC_TC_LOG2E);
            lt += p;
            pw[rr * LDP + 2 * i + half] = rtc_tc_narrow<E>(p);
        }
        l = l * alpha + lt;
        m = mnew;
        if (half == 0) alw[rr] = alpha;
        __syncwarp();  // P, alpha written; the score rows are free
        bool moved = false;
#pragma unroll
        for (int i = 0; i < 16; i++) moved = moved || alw[i] != 1.0f;
        if (moved) rtc_tc_rescale<NF, NJ, LDS>(o, sw, alw, nkd, lane);
        // O += P V
#pragma unroll
        for (int kk = 0; kk < NJ; kk++) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major> pa;
            wmma::load_matrix_sync(pa, pw + 16 * kk, LDP);
#pragma unroll
            for (int i = 0; i < NF; i++) {
                if (i < nkd) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::row_major> vb;
                    wmma::load_matrix_sync(vb, vs + 16 * kk * LDE + 16 * i, LDE);
                    wmma::mma_sync(o[i], pa, vb, o[i]);
                }
            }
        }
    }
    l += __shfl_xor_sync(RTC_TC_FULL, l, 1);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // l >= 1 for every row inside T
    __syncwarp();  // the last tile's readers of alw are done
    if (half == 0) alw[rr] = inv;
    __syncwarp();
    float* og = a.out + (size_t)b * T * ldq + (size_t)h * HD;
    rtc_tc_drain<NF, NJ, LDS>(o, sw, nkd, lane, [&](int r, int d, float x) {
        const int t = q0 + r0 + r;
        if (t < T) og[(size_t)t * ldq + d] = x * alw[r];
    });
    if (half == 0 && tq < T) {
        float* st = a.stats + (((size_t)b * a.NH + h) * T + tq) * 2;
        st[0] = m;
        st[1] = inv;
    }
}

// ----------------------------------------------------------------------------
// backward 2: grid (B*NKV, ceil(T/KBC)), KBC/16 warps; dK and dV of the block's keys,
// summed over the query tiles of the NH/NKV query heads that share the kv head

template <class E, int HDP>
__global__ void __launch_bounds__(rtc_tc_cfg<HDP>::KBC * 2)
    rtc_fa_tc_dkdv_kernel(rtc_fa_args a) {
    namespace wmma = nvcuda::wmma;
    typedef rtc_tc_dkdv_layout<E, HDP> L;
    enum { BC = L::BC, BR = L::BR, NT = BC * 2, LDE = L::LDE, LDT = L::LDT, LDQ = L::LDQ };
    enum { NF = HDP / 16, NJ = BR / 16 };
    RTC_TC_SMEM(rtc_tc_smem);
    unsigned char* sm = rtc_tc_smem;
    E* ks = (E*)(sm + L::k);
    E* vs = (E*)(sm + L::v);
    E* qs = (E*)(sm + L::q);
    E* dos = (E*)(sm + L::dout);
    float* sts = (float*)(sm + L::st);
    float* dpts = (float*)(sm + L::dpt);
    E* pts = (E*)(sm + L::pt);
    E* dsts = (E*)(sm + L::dst);
    float* ms = (float*)(sm + L::m);
    float* invs = (float*)(sm + L::inv);
    float* Ds = (float*)(sm + L::D);
    const int T = a.T, HD = a.HD, nkd = HD / 16, G = a.NH / a.NKV;
    const int b = blockIdx.x / a.NKV, hk = blockIdx.x % a.NKV;
    const int k0 = blockIdx.y * BC;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * 16;
    const int rr = lane >> 1, half = lane & 1, tk = k0 + r0 + rr;  // this lane's key
    const size_t ldq = (size_t)a.NH * HD, ldk = (size_t)a.NKV * HD;
    const size_t kvoff = (size_t)b * T * ldk + (size_t)hk * HD;
    const bool want_dk = a.dk != NULL, want_dv = a.dv != NULL;
    const bool vec = rtc_tc_aligned16(a.q) && rtc_tc_aligned16(a.k) && rtc_tc_aligned16(a.v) &&
                     rtc_tc_aligned16(a.dout);
    float* stw = sts + r0 * LDT;  // the warp's rows: S^T (and staging), dP^T, P^T, dS^T
    float* dptw = dpts + r0 * LDT;
    E* ptw = pts + r0 * LDQ;
    E* dstw = dsts + r0 * LDQ;

    rtc_tc_load<E, NT, LDE>(ks, a.k + kvoff, ldk, k0, BC, T, HD, vec);
    rtc_tc_load<E, NT, LDE>(vs, a.v + kvoff, ldk, k0, BC, T, HD, vec);
    rtc_tc_acc dk[NF], dv[NF];
#pragma unroll
    for (int i = 0; i < NF; i++) {
        wmma::fill_fragment(dk[i], 0.0f);
        wmma::fill_fragment(dv[i], 0.0f);
    }
    const int qstart = a.causal ? k0 / BR * BR : 0;  // earlier queries see none of these keys
    for (int g = 0; g < G; g++) {
        const int h = hk * G + g;
        const size_t qoff = (size_t)b * T * ldq + (size_t)h * HD;
        for (int q0 = qstart; q0 < T; q0 += BR) {
            __syncthreads();  // the previous tile's readers are done
            rtc_tc_load<E, NT, LDE>(qs, a.q + qoff, ldq, q0, BR, T, HD, vec);
            rtc_tc_load<E, NT, LDE>(dos, a.dout + qoff, ldq, q0, BR, T, HD, vec);
            rtc_fa_load_stats<NT>(ms, invs, Ds, a, b, h, q0, BR);
            __syncthreads();
            if (k0 + r0 >= T || (a.causal && q0 + BR - 1 < k0 + r0)) continue;  // all masked
            // S^T = K Q^T and dP^T = V dO^T into the warp's rows
            rtc_tc_acc sacc[NJ], pacc[NJ];
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                wmma::fill_fragment(sacc[j], 0.0f);
                if (want_dk) wmma::fill_fragment(pacc[j], 0.0f);
            }
#pragma unroll
            for (int kk = 0; kk < NF; kk++) {
                if (kk < nkd) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major> xa;
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::col_major> yb;
                    wmma::load_matrix_sync(xa, ks + r0 * LDE + 16 * kk, LDE);
#pragma unroll
                    for (int j = 0; j < NJ; j++) {
                        wmma::load_matrix_sync(yb, qs + 16 * j * LDE + 16 * kk, LDE);
                        wmma::mma_sync(sacc[j], xa, yb, sacc[j]);
                    }
                    if (want_dk) {
                        wmma::load_matrix_sync(xa, vs + r0 * LDE + 16 * kk, LDE);
#pragma unroll
                        for (int j = 0; j < NJ; j++) {
                            wmma::load_matrix_sync(yb, dos + 16 * j * LDE + 16 * kk, LDE);
                            wmma::mma_sync(pacc[j], xa, yb, pacc[j]);
                        }
                    }
                }
            }
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                wmma::store_matrix_sync(stw + 16 * j, sacc[j], LDT, wmma::mem_row_major);
                if (want_dk)
                    wmma::store_matrix_sync(dptw + 16 * j, pacc[j], LDT, wmma::mem_row_major);
            }
            __syncwarp();
            // P^T and dS^T of key rr: this lane takes queries half, half + 2, ...
#pragma unroll
            for (int i = 0; i < BR / 2; i++) {
                const int c = 2 * i + half;
                const float p = rtc_fa_visible(q0 + c, tk, T, a.causal)
                                    ? exp2f((a.scale * stw[rr * LDT + c] - ms[c]) *
                                            RTC_TC_LOG2E) * invs[c]
                                    : 0.0f;
                if (want_dv) ptw[rr * LDQ + c] = rtc_tc_narrow<E>(p);
                if (want_dk) dstw[rr * LDQ + c] = rtc_tc_narrow<E>(p * (dptw[rr * LDT + c] - Ds[c]));
            }
            __syncwarp();
            // dV += P^T dO, dK += dS^T Q
#pragma unroll
            for (int kk = 0; kk < NJ; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major> xa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::row_major> yb;
                if (want_dv) {
                    wmma::load_matrix_sync(xa, ptw + 16 * kk, LDQ);
#pragma unroll
                    for (int i = 0; i < NF; i++) {
                        if (i < nkd) {
                            wmma::load_matrix_sync(yb, dos + 16 * kk * LDE + 16 * i, LDE);
                            wmma::mma_sync(dv[i], xa, yb, dv[i]);
                        }
                    }
                }
                if (want_dk) {
                    wmma::load_matrix_sync(xa, dstw + 16 * kk, LDQ);
#pragma unroll
                    for (int i = 0; i < NF; i++) {
                        if (i < nkd) {
                            wmma::load_matrix_sync(yb, qs + 16 * kk * LDE + 16 * i, LDE);
                            wmma::mma_sync(dk[i], xa, yb, dk[i]);
                        }
                    }
                }
            }
        }
    }
    const float scale = a.scale;
    if (want_dv) {
        float* dvg = a.dv + kvoff;
        rtc_tc_drain<NF, NJ, LDT>(dv, stw, nkd, lane, [&](int r, int d, float x) {
            const int t = k0 + r0 + r;
            if (t < T) dvg[(size_t)t * ldk + d] += x;
        });
    }
    if (want_dk) {
        float* dkg = a.dk + kvoff;
        rtc_tc_drain<NF, NJ, LDT>(dk, stw, nkd, lane, [&](int r, int d, float x) {
            const int t = k0 + r0 + r;
            if (t < T) dkg[(size_t)t * ldk + d] += scale * x;
        });
    }
}

// ----------------------------------------------------------------------------
// backward 3: grid (B*NH, ceil(T/QBR)), QBR/16 warps; dQ of the block's queries

template <class E, int HDP>
__global__ void __launch_bounds__(rtc_tc_cfg<HDP>::QBR * 2) rtc_fa_tc_dq_kernel(rtc_fa_args a) {
    namespace wmma = nvcuda::wmma;
    typedef rtc_tc_dq_layout<E, HDP> L;
    enum { BR = L::BR, BC = L::BC, NT = BR * 2, LDE = L::LDE, LDS = L::LDS, LDP = L::LDP };
    enum { NF = HDP / 16, NJ = BC / 16 };
    RTC_TC_SMEM(rtc_tc_smem);
    unsigned char* sm = rtc_tc_smem;
    E* qs = (E*)(sm + L::q);
    E* dos = (E*)(sm + L::dout);
    E* ks = (E*)(sm + L::k);
    E* vs = (E*)(sm + L::v);
    float* ss = (float*)(sm + L::s);
    float* dps = (float*)(sm + L::dp);
    E* dss = (E*)(sm + L::ds);
    float* ms = (float*)(sm + L::m);
    float* invs = (float*)(sm + L::inv);
    float* Ds = (float*)(sm + L::D);
    const int T = a.T, HD = a.HD, nkd = HD / 16;
    const int b = blockIdx.x / a.NH, h = blockIdx.x % a.NH, hk = h / (a.NH / a.NKV);
    const int qt = a.causal ? (int)gridDim.y - 1 - (int)blockIdx.y : (int)blockIdx.y;
    const int q0 = qt * BR;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * 16;
    const int rr = lane >> 1, half = lane & 1, tq = q0 + r0 + rr;  // this lane's query
    const size_t ldq = (size_t)a.NH * HD, ldk = (size_t)a.NKV * HD;
    const size_t qoff = (size_t)b * T * ldq + (size_t)h * HD;
    const size_t kvoff = (size_t)b * T * ldk + (size_t)hk * HD;
    const bool vec = rtc_tc_aligned16(a.q) && rtc_tc_aligned16(a.k) && rtc_tc_aligned16(a.v) &&
                     rtc_tc_aligned16(a.dout);
    float* sw = ss + r0 * LDS;  // the warp's rows: S (and staging), dP, dS
    float* dpw = dps + r0 * LDS;
    E* dsw = dss + r0 * LDP;

    rtc_tc_load<E, NT, LDE>(qs, a.q + qoff, ldq, q0, BR, T, HD, vec);
    rtc_tc_load<E, NT, LDE>(dos, a.dout + qoff, ldq, q0, BR, T, HD, vec);
    rtc_fa_load_stats<NT>(ms, invs, Ds, a, b, h, q0, BR);
    __syncthreads();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major> qa[NF], doa[NF];
#pragma unroll
    for (int kk = 0; kk < NF; kk++) {
        if (kk < nkd) {
            wmma::load_matrix_sync(qa[kk], qs + r0 * LDE + 16 * kk, LDE);
            wmma::load_matrix_sync(doa[kk], dos + r0 * LDE + 16 * kk, LDE);
        }
    }
    rtc_tc_acc dq[NF];
#pragma unroll
    for (int i = 0; i < NF; i++) wmma::fill_fragment(dq[i], 0.0f);
    const float mr = ms[r0 + rr], invr = invs[r0 + rr], Dr = Ds[r0 + rr];
    const int kend = a.causal ? (q0 + BR < T ? q0 + BR : T) : T;
    const bool rows_in = q0 + r0 < T;
    for (int k0 = 0; k0 < kend; k0 += BC) {
        __syncthreads();  // the previous tile's readers of ks and vs are done
        rtc_tc_load<E, NT, LDE>(ks, a.k + kvoff, ldk, k0, BC, T, HD, vec);
        rtc_tc_load<E, NT, LDE>(vs, a.v + kvoff, ldk, k0, BC, T, HD, vec);
        __syncthreads();
        if (!rows_in || (a.causal && q0 + r0 + 15 < k0)) continue;  // all masked for the warp
        // S = Q K^T and dP = dO V^T into the warp's rows
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            rtc_tc_acc sacc, pacc;
            wmma::fill_fragment(sacc, 0.0f);
            wmma::fill_fragment(pacc, 0.0f);
#pragma unroll
            for (int kk = 0; kk < NF; kk++) {
                if (kk < nkd) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::col_major> yb;
                    wmma::load_matrix_sync(yb, ks + 16 * j * LDE + 16 * kk, LDE);
                    wmma::mma_sync(sacc, qa[kk], yb, sacc);
                    wmma::load_matrix_sync(yb, vs + 16 * j * LDE + 16 * kk, LDE);
                    wmma::mma_sync(pacc, doa[kk], yb, pacc);
                }
            }
            wmma::store_matrix_sync(sw + 16 * j, sacc, LDS, wmma::mem_row_major);
            wmma::store_matrix_sync(dpw + 16 * j, pacc, LDS, wmma::mem_row_major);
        }
        __syncwarp();
        // dS of row rr: this lane takes keys half, half + 2, ...
#pragma unroll
        for (int i = 0; i < BC / 2; i++) {
            const int c = 2 * i + half;
            const float p = rtc_fa_visible(tq, k0 + c, T, a.causal)
                                ? exp2f((a.scale * sw[rr * LDS + c] - mr) * RTC_TC_LOG2E) * invr
                                : 0.0f;
            dsw[rr * LDP + c] = rtc_tc_narrow<E>(p * (dpw[rr * LDS + c] - Dr));
        }
        __syncwarp();
        // dQ += dS K
#pragma unroll
        for (int kk = 0; kk < NJ; kk++) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major> dsa;
            wmma::load_matrix_sync(dsa, dsw + 16 * kk, LDP);
#pragma unroll
            for (int i = 0; i < NF; i++) {
                if (i < nkd) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::row_major> kb;
                    wmma::load_matrix_sync(kb, ks + 16 * kk * LDE + 16 * i, LDE);
                    wmma::mma_sync(dq[i], dsa, kb, dq[i]);
                }
            }
        }
    }
    const float scale = a.scale;
    float* dqg = a.dq + qoff;
    rtc_tc_drain<NF, NJ, LDS>(dq, sw, nkd, lane, [&](int r, int d, float x) {
        const int t = q0 + r0 + r;
        if (t < T) dqg[(size_t)t * ldq + d] += scale * x;
    });
}

// ----------------------------------------------------------------------------
// launch logic, shared with the emulator: `launch(kernel, grid, threads, smem_bytes, args)`
// runs kernel<<<grid, threads, smem_bytes, stream>>>(args) (attention.cu) or emulates it

// Padded head dim of the tensor-core kernels: 64 or 128; 0 when HD is not a multiple of 16
// in (0, 128] (the fp32 kernels then serve).
static inline int rtc_fa_tc_hdp(int HD) {
    return HD <= 0 || HD % 16 != 0 ? 0 : HD <= 64 ? 64 : HD <= RTC_TC_MAX_HD ? 128 : 0;
}

template <class E, int HDP, class Launch>
void rtc_fa_tc_forward_hd(Launch& launch, const rtc_fa_args& a) {
    typedef rtc_tc_fwd_layout<E, HDP> L;
    launch(rtc_fa_tc_forward_kernel<E, HDP>,
           dim3((unsigned)(a.B * a.NH), rtc_fa_tiles(a.T, L::BR)), (unsigned)(L::BR * 2),
           L::bytes, a);
}

template <class E, int HDP, class Launch>
void rtc_fa_tc_backward_hd(Launch& launch, const rtc_fa_args& a) {
    typedef rtc_tc_dkdv_layout<E, HDP> K;
    typedef rtc_tc_dq_layout<E, HDP> Q;
    if (a.dk || a.dv)
        launch(rtc_fa_tc_dkdv_kernel<E, HDP>,
               dim3((unsigned)(a.B * a.NKV), rtc_fa_tiles(a.T, K::BC)), (unsigned)(K::BC * 2),
               K::bytes, a);
    if (a.dq)
        launch(rtc_fa_tc_dq_kernel<E, HDP>,
               dim3((unsigned)(a.B * a.NH), rtc_fa_tiles(a.T, Q::BR)), (unsigned)(Q::BR * 2),
               Q::bytes, a);
}

// Calls set(kernel, smem_bytes) for every tensor-core kernel of element type E.
template <class E, int HDP, class Set>
void rtc_fa_tc_each_kernel_hd(Set& set) {
    set(rtc_fa_tc_forward_kernel<E, HDP>, rtc_tc_fwd_layout<E, HDP>::bytes);
    set(rtc_fa_tc_dkdv_kernel<E, HDP>, rtc_tc_dkdv_layout<E, HDP>::bytes);
    set(rtc_fa_tc_dq_kernel<E, HDP>, rtc_tc_dq_layout<E, HDP>::bytes);
}

template <class E, class Set>
void rtc_fa_tc_each_kernel(Set& set) {
    rtc_fa_tc_each_kernel_hd<E, 64>(set);
    rtc_fa_tc_each_kernel_hd<E, 128>(set);
}

// Forward: out and stats. B, T > 0 and rtc_fa_tc_hdp(HD) != 0 (the caller checks).
template <class E, class Launch>
void rtc_fa_tc_forward(Launch& launch, const rtc_fa_args& a) {
    if (rtc_fa_tc_hdp(a.HD) == 64)
        rtc_fa_tc_forward_hd<E, 64>(launch, a);
    else
        rtc_fa_tc_forward_hd<E, 128>(launch, a);
}

// Backward: D into a.D (when dq or dk is wanted; a.D is the scratch), then dK/dV and dQ.
template <class E, class Launch>
void rtc_fa_tc_backward(Launch& launch, rtc_fa_args a) {
    if (!a.dq && !a.dk && !a.dv) return;
    if (a.dq || a.dk) {
        const size_t rows = (size_t)a.B * a.T * a.NH;
        size_t blocks = (rows + RTC_FA_NT - 1) / RTC_FA_NT;
        if (blocks > 65535) blocks = 65535;
        launch(rtc_fa_dot_kernel, dim3((unsigned)blocks), (unsigned)RTC_FA_NT, (size_t)0, a);
    } else {
        a.D = NULL;  // dV alone needs no dS
    }
    if (rtc_fa_tc_hdp(a.HD) == 64)
        rtc_fa_tc_backward_hd<E, 64>(launch, a);
    else
        rtc_fa_tc_backward_hd<E, 128>(launch, a);
}

#endif
