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
// Every product runs on tensor cores (mma.sync m16n8k16: 16-bit inputs, fp32
// accumulation), so the scores S = Q K^T and dP = dO V^T equal fp32 arithmetic up to
// summation order. As in FlashAttention-2 and PyTorch's bf16/fp16 SDPA, the probabilities
// and their gradients are narrowed to E before the products they feed: P (unnormalised,
// exp(s - m) in [0, 1]) before O += P V; P before dV += P^T dO; dS = P (dP - D) before
// dQ += dS K and dK += dS^T Q. The row max and sum, the rescaling and dS itself are fp32
// (l sums the unrounded exponentials). That narrowing is the only error beyond fp32
// round-off: an output element built from product terms x_i y_i (one factor narrowed) is
// off by at most u * sum_i |x_i y_i|, u the unit roundoff (2^-8 bf16, 2^-11 fp16; fp16 also
// has an absolute 2^-25 per narrowed value below its normal range, 2^-14);
// tests/cuda/attention_tc_ref.h evaluates that bound per element for the tests.
//
// Register-resident, FlashAttention-2 style. A warp owns 16 rows of its block's tile and
// keeps everything about them in registers: its A operand fragments, the score and dP
// accumulators, the running max and sum, and the output accumulators. mma.sync's
// accumulator layout (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point
// type": lane = 4 * group + t holds rows group and group + 8, columns 2t and 2t + 1 of each
// 8-column tile) is also the A operand layout of the next product once two adjacent
// column tiles are narrowed in pairs, so P and dS go from one product to the next without
// touching memory, and the softmax's row reductions are two shuffles within a group of 4.
// Shared memory holds only the narrowed operand tiles: B operands are read as 32-bit pairs
// of consecutive k, so a tile is stored k-contiguous: row-major when k runs along a row
// (K for S = Q K^T), transposed on its way in when k runs down the columns (V^T for
// O += P V). Rows are padded by 8 elements (16 bytes), which makes both the fragment reads
// (8 groups x 4 lanes) and the transposed stores free of bank conflicts.
//
// Kernels (W = 16 rows per warp):
//   forward   grid (B*NH, ceil(T/FBR)), FBR/16 warps. Q fragments stay in registers; per
//             key tile of FBC keys (K row-major, V^T): S = Q K^T, the online softmax on the
//             accumulators (O rescaled by exp(m_old - m_new) per row), O += P V.
//   backward  FlashAttention-2 without atomics, as flash_attention.cuh:
//             1. D = rowsum(dO * O) into the scratch (rtc_fa_dot_kernel);
//             2. dK, dV: grid (B*NKV, ceil(T/KBC)), KBC/16 warps of 16 keys each; walks the
//                query tiles (KBR queries; Q, dO row-major and transposed, each read
//                from global memory once: rtc_tc_load_both) of every query head of the
//                GQA group in head order: S^T = K Q^T and dP^T = V dO^T, P^T
//                and dS^T in fp32 on the accumulators, dV += P^T dO and dK += dS^T Q;
//             3. dQ: grid (B*NH, ceil(T/QBR)), QBR/16 warps of 16 queries: per key tile
//                (QBC keys; K row-major and transposed from one read, V row-major) S and
//                dP, dS, dQ += dS K.
//             Every gradient element has one owner block, which stores it once at the end
//             (added to, or assigned, and rounded to dt: rtc_fa_store_grad): deterministic,
//             no atomics, rounding and assigning free, and dq, dk, dv requested alone
//             give the joint call's bits (each is computed by the same operations either
//             way; D is only computed when dq or dk is wanted).
//   Causal: key tiles past a query tile's last row are never loaded, a warp whose 16 rows
//   see none of the current tile skips its products (its state cannot change), and blocks
//   run longest first: the forward and dQ grids map blockIdx.y to query tiles from the
//   last (most key tiles) down, and dK/dV's key tile 0 (all queries) is already first.
//
// Tiles, threads and shared memory (bytes, E = 2 bytes):
//              HD <= 64 (HDP 64)                    HD <= 128 (HDP 128)
//   forward    FBR 128, FBC 64, 8 warps, 36864      FBR 64, FBC 64, 4 warps, 53248
//   dK/dV      KBC 64, KBR 64, 4 warps, 56064       KBC 64, KBR 32, 4 warps, 73088
//   dQ         QBR 64, QBC 64, 4 warps, 46848       QBR 64, QBC 32, 4 warps, 63232
// All within 99 KiB, the smallest opt-in limit among the targets (sm_86/sm_89), as every
// flash kernel here (rtc_attention_init sets the opt-in; tests/cuda/test_flash_tc_emu.cc
// checks every configuration). Registers bound the blocks per SM, so each kernel asks
// __launch_bounds__ for a count (rtc_tc_cfg FMB, KMB, QMB: 2 or 3), because ptxas's choice
// without one moves by 40 registers across a blocks-per-SM boundary on unrelated edits
// (two ints added to rtc_fa_args took the HDP 128 forward from 168 to 209). ptxas (sm_90a)
// then gives the forward 128 (HDP 64) and 168 (HDP 128; 4 bytes spilled), dK/dV 168 and
// 247, dQ 164 and 207: an H100 SM runs 3 blocks of the HDP 64 dK/dV and dQ and the HDP 128
// forward, 2 of the others, whose tile loads (fp32 in global memory, narrowed through
// registers, so no cp.async/TMA) overlap each other's tensor-core work; there is no double
// buffering within a block.
//
// History and expectations. The first version (wmma 16x16x16, softmax and rescaling
// through fp32 shared-memory rows, because wmma fragments are opaque) measured 4-6% of the
// H100's bf16 peak (ncu, 2026-11-22, causal, HD 64, counting the causal half: GPT-2 bench
// forward 0.48 ms per layer, dK/dV 1.51, dQ 1.06; Llama 1B forward 1.12), a quarter of the
// Llama 1B step. This version removes the shared-memory round trips of S, P, dP, dS and O
// and the fp32 staging rows (the forward moves 16 KiB of fragments through shared memory
// per warp and 64-key tile at HD 64, against 28 KiB before, and no barriers inside a
// tile's products). Not yet run on a GPU: it was written in a session without one, and
// only the emulator below has checked it; its speed is unmeasured.
//
// Testing without a GPU. tests/cuda/cuda_emu.h emulates mma.sync from the PTX ISA's
// fragment tables alone (each lane publishes its registers, every lane rebuilds the whole
// A and B tiles from the documented lane mapping), independently of how these kernels
// use it, so a kernel that assumed a different mapping fails against the CPU reference.
// Emulator-only instantiation E = float (a register holds two floats instead of two
// 16-bit halves; nvcc never sees it): the test runs the very same kernels unrounded and
// holds them to the fp32 kernels' tolerances, which checks the indexing, masking, online
// softmax and GQA walk tightly, apart from the 16-bit bound.
#ifndef FSDPGEN_CUDA_FLASH_ATTENTION_TC_CUH
#define FSDPGEN_CUDA_FLASH_ATTENTION_TC_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "flash_attention.cuh"

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

// Dynamic shared memory of a kernel, 128-byte aligned (the emulator supplies its own).
#ifndef RTC_TC_SMEM
#define RTC_TC_SMEM(name) extern __shared__ __align__(128) unsigned char name[]
#endif

#define RTC_TC_MAX_HD 128
#define RTC_TC_LOG2E 1.44269504088896341f
#define RTC_TC_FULL 0xFFFFFFFFu

// ----------------------------------------------------------------------------
// element types and mma.sync operands

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

// x rounded to nearest even in E and widened back (E's values: the bits of the host's
// converters, rt_step_round's, but for NaN payloads), one conversion each way on the GPU;
// the kernels' store of out, dq, dk, dv when dt is E (the launcher sends other dts to the
// fp32 kernels).
template <class E>
__device__ __forceinline__ float rtc_tc_round(float x);
template <>
__device__ __forceinline__ float rtc_tc_round<__nv_bfloat16>(float x) {
    return __bfloat162float(__float2bfloat16_rn(x));
}
template <>
__device__ __forceinline__ float rtc_tc_round<__half>(float x) {
    return __half2float(__float2half_rn(x));
}
template <>
__device__ __forceinline__ float rtc_tc_round<float>(float x) {  // emulator only
    return x;
}

// One register of an A or B fragment: two elements consecutive in k, the lower k in the
// low half (for E = float, the emulator's unrounded mode, a pair of floats).
template <class E>
struct rtc_tc_reg {
    typedef uint32_t type;
};
struct rtc_tc_f32_pair {
    float lo, hi;
};
template <>
struct rtc_tc_reg<float> {
    typedef rtc_tc_f32_pair type;
};

// (lo, hi) narrowed to E into one register.
template <class E>
__device__ __forceinline__ typename rtc_tc_reg<E>::type rtc_tc_pack(float lo, float hi) {
    const E l = rtc_tc_narrow<E>(lo), h = rtc_tc_narrow<E>(hi);
    uint16_t lb, hb;
    memcpy(&lb, &l, sizeof lb);
    memcpy(&hb, &h, sizeof hb);
    return (uint32_t)lb | (uint32_t)hb << 16;
}
template <>
__device__ __forceinline__ rtc_tc_f32_pair rtc_tc_pack<float>(float lo, float hi) {
    rtc_tc_f32_pair r = {lo, hi};
    return r;
}
#ifdef __CUDACC__
template <>
__device__ __forceinline__ uint32_t rtc_tc_pack<__nv_bfloat16>(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x = lo, the low half
    return *(const uint32_t*)&h;
}
template <>
__device__ __forceinline__ uint32_t rtc_tc_pack<__half>(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *(const uint32_t*)&h;
}
#endif

// The register of elements p[0], p[1], and its store (p 4-byte aligned: even columns, even
// strides). The emulator copies bytes (its E is a struct, and a cast would break aliasing
// rules); nvcc gets the plain 32-bit access (its memcpy cannot assume the alignment).
template <class E>
__device__ __forceinline__ typename rtc_tc_reg<E>::type rtc_tc_ld(const E* p) {
#ifdef __CUDACC__
    return *(const typename rtc_tc_reg<E>::type*)p;
#else
    typename rtc_tc_reg<E>::type r;
    memcpy(&r, p, sizeof r);
    return r;
#endif
}
template <class E>
__device__ __forceinline__ void rtc_tc_st(E* p, typename rtc_tc_reg<E>::type r) {
#ifdef __CUDACC__
    *(typename rtc_tc_reg<E>::type*)p = r;
#else
    memcpy(p, &r, sizeof r);
#endif
}

#ifdef __CUDACC__
// d += a b: one warp-wide mma.sync.m16n8k16 with fp32 accumulation. a: the 16x16 A
// fragment (4 registers), b: the 16x8 B fragment (2), d: the 16x8 accumulator (4), in the
// PTX ISA's layouts (the emulator, tests/cuda/cuda_emu.h, has its own rtc_tc_mma).
template <class E>
__device__ __forceinline__ void rtc_tc_mma(float (&d)[4], const uint32_t (&a)[4],
                                           const uint32_t (&b)[2]);
template <>
__device__ __forceinline__ void rtc_tc_mma<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                          const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <>
__device__ __forceinline__ void rtc_tc_mma<__half>(float (&d)[4], const uint32_t (&a)[4],
                                                   const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif

// The A fragment of rows [0, 16) x columns [0, 16) of the row-major tile p (row stride ld):
// lane 4g + t holds rows g and g + 8, columns 2t, 2t + 1, 2t + 8, 2t + 9.
template <class E>
__device__ __forceinline__ void rtc_tc_lda(typename rtc_tc_reg<E>::type (&a)[4], const E* p,
                                           int ld, int g, int t) {
    a[0] = rtc_tc_ld<E>(p + g * ld + 2 * t);
    a[1] = rtc_tc_ld<E>(p + (g + 8) * ld + 2 * t);
    a[2] = rtc_tc_ld<E>(p + g * ld + 2 * t + 8);
    a[3] = rtc_tc_ld<E>(p + (g + 8) * ld + 2 * t + 8);
}

// The B fragment (16 k x 8 n) of a k-contiguous tile: element (k, n) at p[n * ld + k];
// lane 4g + t holds column g, k = 2t, 2t + 1, 2t + 8, 2t + 9.
template <class E>
__device__ __forceinline__ void rtc_tc_ldb(typename rtc_tc_reg<E>::type (&b)[2], const E* p,
                                           int ld, int g, int t) {
    b[0] = rtc_tc_ld<E>(p + g * ld + 2 * t);
    b[1] = rtc_tc_ld<E>(p + g * ld + 2 * t + 8);
}

// The A fragment of columns [16 kk, 16 kk + 16) of a warp's accumulator rows (acc[j]: the
// 8 columns from 8 j), narrowed: the accumulator layout of two adjacent column tiles is the
// A layout.
template <class E, int NJ>
__device__ __forceinline__ void rtc_tc_acc_to_a(typename rtc_tc_reg<E>::type (&a)[4],
                                                const float (&acc)[NJ][4], int kk) {
    a[0] = rtc_tc_pack<E>(acc[2 * kk][0], acc[2 * kk][1]);
    a[1] = rtc_tc_pack<E>(acc[2 * kk][2], acc[2 * kk][3]);
    a[2] = rtc_tc_pack<E>(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
    a[3] = rtc_tc_pack<E>(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
}

template <int NJ>
__device__ __forceinline__ void rtc_tc_zero(float (&acc)[NJ][4]) {
#pragma unroll
    for (int j = 0; j < NJ; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
}

// acc[n] += a B_n for the 8-column blocks n < nn of the k-contiguous tile b (element (k, n)
// at b[n * ld + k], k from 0): one A fragment against a row of B fragments.
template <class E, int NN>
__device__ __forceinline__ void rtc_tc_mma_row(float (&acc)[NN][4],
                                               const typename rtc_tc_reg<E>::type (&a)[4],
                                               const E* b, int ld, int nn, int g, int t) {
#pragma unroll
    for (int n = 0; n < NN; n++) {
        if (n < nn) {
            typename rtc_tc_reg<E>::type y[2];
            rtc_tc_ldb<E>(y, b + 8 * n * ld, ld, g, t);
            rtc_tc_mma<E>(acc[n], a, y);
        }
    }
}

// acc[j] += a b_j for the 8-column blocks j < NJ, with a's NK column blocks of 16 (the first
// nk used) in registers: acc = X Y^T for the warp's rows X and the rows of the tile y
// (row stride ld). Block by block (each acc[j] finished before the next), which keeps
// fewer B fragments live than rtc_tc_mma_row per k block.
template <class E, int NJ, int NK>
__device__ __forceinline__ void rtc_tc_mma_nt(float (&acc)[NJ][4],
                                              const typename rtc_tc_reg<E>::type (&a)[NK][4],
                                              const E* y, int ld, int nk, int g, int t) {
#pragma unroll
    for (int j = 0; j < NJ; j++) {
#pragma unroll
        for (int kk = 0; kk < NK; kk++) {
            if (kk < nk) {
                typename rtc_tc_reg<E>::type b[2];
                rtc_tc_ldb<E>(b, y + 8 * j * ld + 16 * kk, ld, g, t);
                rtc_tc_mma<E>(acc[j], a[kk], b);
            }
        }
    }
}

// out[8 d + 2 t + i] += scale * acc[d][2 r + i] (i = 0, 1; d < nd), or = when assigned
// (0 + x, as rtc_fa_store_grad), rounded to E when rnd: this lane's elements of accumulator
// row r (0: row g, 1: row g + 8), out being that row's start plus 2 t.
template <class E, int ND>
__device__ __forceinline__ void rtc_tc_add_row(float* out, const float (&acc)[ND][4], int r,
                                               float scale, int nd, bool assign, bool rnd) {
#pragma unroll
    for (int d = 0; d < ND; d++) {
        if (d < nd) {
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const float x = (assign ? 0.0f : out[8 * d + i]) + scale * acc[d][2 * r + i];
                out[8 * d + i] = rnd ? rtc_tc_round<E>(x) : x;
            }
        }
    }
}

// The max (or sum) of v over the 4 lanes of a group (the lanes sharing accumulator rows).
__device__ __forceinline__ float rtc_tc_group_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(RTC_TC_FULL, v, 1));
    return fmaxf(v, __shfl_xor_sync(RTC_TC_FULL, v, 2));
}
__device__ __forceinline__ float rtc_tc_group_sum(float v) {
    v += __shfl_xor_sync(RTC_TC_FULL, v, 1);
    return v + __shfl_xor_sync(RTC_TC_FULL, v, 2);
}

// ----------------------------------------------------------------------------
// tiles and shared-memory layouts (see the table at the top)

template <int HDP>
struct rtc_tc_cfg;
template <>
struct rtc_tc_cfg<64> {
    enum { FBR = 128, FBC = 64, KBC = 64, KBR = 64, QBR = 64, QBC = 64 };
    enum { FMB = 2, KMB = 3, QMB = 3 };
};
template <>
struct rtc_tc_cfg<128> {
    enum { FBR = 64, FBC = 64, KBC = 64, KBR = 32, QBR = 64, QBC = 32 };
    enum { FMB = 3, KMB = 2, QMB = 2 };
};

constexpr size_t rtc_tc_al(size_t bytes) { return (bytes + 127) / 128 * 128; }

// Bytes of a tile of `rows` rows of `cols` elements E, each row padded by 8 elements.
template <class E>
constexpr size_t rtc_tc_tile(int rows, int cols) {
    return rtc_tc_al((size_t)rows * (cols + 8) * sizeof(E));
}

// forward: qs [BR][HDP+8] (staging for the Q fragments), ks [BC][HDP+8], vt [HDP][BC+8]
template <class E, int HDP>
struct rtc_tc_fwd_layout {
    enum { BR = rtc_tc_cfg<HDP>::FBR, BC = rtc_tc_cfg<HDP>::FBC, LDE = HDP + 8, LDT = BC + 8 };
    static constexpr size_t q = 0;
    static constexpr size_t k = q + rtc_tc_tile<E>(BR, HDP);
    static constexpr size_t vt = k + rtc_tc_tile<E>(BC, HDP);
    static constexpr size_t bytes = vt + rtc_tc_tile<E>(HDP, BC);
};

// dK/dV: ks, vs [BC][HDP+8] (the block's keys), qs, dos [BR][HDP+8] and qt, dot
// [HDP][BR+8] (the query tile both ways), m, inv, D [BR]
template <class E, int HDP>
struct rtc_tc_dkdv_layout {
    enum { BC = rtc_tc_cfg<HDP>::KBC, BR = rtc_tc_cfg<HDP>::KBR, LDE = HDP + 8, LDT = BR + 8 };
    static constexpr size_t k = 0;
    static constexpr size_t v = k + rtc_tc_tile<E>(BC, HDP);
    static constexpr size_t q = v + rtc_tc_tile<E>(BC, HDP);
    static constexpr size_t dout = q + rtc_tc_tile<E>(BR, HDP);
    static constexpr size_t qt = dout + rtc_tc_tile<E>(BR, HDP);
    static constexpr size_t dot = qt + rtc_tc_tile<E>(HDP, BR);
    static constexpr size_t m = dot + rtc_tc_tile<E>(HDP, BR);
    static constexpr size_t inv = m + rtc_tc_al((size_t)BR * sizeof(float));
    static constexpr size_t D = inv + rtc_tc_al((size_t)BR * sizeof(float));
    static constexpr size_t bytes = D + rtc_tc_al((size_t)BR * sizeof(float));
};

// dQ: qs, dos [BR][HDP+8] (staging for the fragments), ks, vs [BC][HDP+8], kt [HDP][BC+8],
// m, inv, D [BR]
template <class E, int HDP>
struct rtc_tc_dq_layout {
    enum { BR = rtc_tc_cfg<HDP>::QBR, BC = rtc_tc_cfg<HDP>::QBC, LDE = HDP + 8, LDT = BC + 8 };
    static constexpr size_t q = 0;
    static constexpr size_t dout = q + rtc_tc_tile<E>(BR, HDP);
    static constexpr size_t k = dout + rtc_tc_tile<E>(BR, HDP);
    static constexpr size_t v = k + rtc_tc_tile<E>(BC, HDP);
    static constexpr size_t kt = v + rtc_tc_tile<E>(BC, HDP);
    static constexpr size_t m = kt + rtc_tc_tile<E>(HDP, BC);
    static constexpr size_t inv = m + rtc_tc_al((size_t)BR * sizeof(float));
    static constexpr size_t D = inv + rtc_tc_al((size_t)BR * sizeof(float));
    static constexpr size_t bytes = D + rtc_tc_al((size_t)BR * sizeof(float));
};

// ----------------------------------------------------------------------------
// tile loads

__device__ __forceinline__ bool rtc_tc_aligned16(const void* p) {
    return ((uintptr_t)p & 15u) == 0;
}

// Rows [t0, t0 + R) of one head (row t at src + t * ld, HD floats) narrowed into a
// row-major shared tile of E with row stride LDE; rows past T are zero (finite, masked
// later), dims past HD are never read. vec: the buffers are 16-byte aligned, so (HD and
// the head offset being multiples of 16) every row is, and float4 loads apply.
template <class E, int NT, int LDE>
__device__ __forceinline__ void rtc_tc_load(E* dst, const float* src, size_t ld, int t0, int R,
                                            int T, int HD, bool vec) {
    if (vec) {
        const int n4 = HD / 4;
        for (int i = threadIdx.x; i < R * n4; i += NT) {
            const int r = i / n4, d = (i % n4) * 4, t = t0 + r;
            const float4 x = t < T ? *(const float4*)(src + (size_t)t * ld + d)
                                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            rtc_tc_st<E>(dst + r * LDE + d, rtc_tc_pack<E>(x.x, x.y));  // d, LDE even
            rtc_tc_st<E>(dst + r * LDE + d + 2, rtc_tc_pack<E>(x.z, x.w));
        }
    } else {
        for (int i = threadIdx.x; i < R * HD; i += NT) {
            const int r = i / HD, d = i % HD, t = t0 + r;
            dst[r * LDE + d] = rtc_tc_narrow<E>(t < T ? src[(size_t)t * ld + d] : 0.0f);
        }
    }
}

// Rows t and t + 1 of src (row stride ld), four floats from column d each (zeros past T);
// src 16-byte aligned as the vec paths below require.
__device__ __forceinline__ void rtc_tc_ld_pair(float4& x0, float4& x1, const float* src,
                                               size_t ld, int t, int d, int T) {
    const float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    x0 = t < T ? *(const float4*)(src + (size_t)t * ld + d) : z;
    x1 = t + 1 < T ? *(const float4*)(src + (size_t)(t + 1) * ld + d) : z;
}

// That pair transposed into rows d..d+3 of dstt (row stride LDT) at column r: one register
// (x0's element, x1's element) per dim.
template <class E, int LDT>
__device__ __forceinline__ void rtc_tc_st_pair_t(E* dstt, int r, int d, float4 x0, float4 x1) {
    rtc_tc_st<E>(dstt + (d + 0) * LDT + r, rtc_tc_pack<E>(x0.x, x1.x));
    rtc_tc_st<E>(dstt + (d + 1) * LDT + r, rtc_tc_pack<E>(x0.y, x1.y));
    rtc_tc_st<E>(dstt + (d + 2) * LDT + r, rtc_tc_pack<E>(x0.z, x1.z));
    rtc_tc_st<E>(dstt + (d + 3) * LDT + r, rtc_tc_pack<E>(x0.w, x1.w));
}

// The same rows transposed: dst[d * LDT + r] (d < HD, r < R; R even). Thread i takes the
// row pair r = 2 (i % (R/2)), r + 1 and four dims, and stores four registers (one per dim,
// the pair's two elements), consecutive threads in consecutive registers of a row.
template <class E, int NT, int LDT>
__device__ __forceinline__ void rtc_tc_load_t(E* dst, const float* src, size_t ld, int t0,
                                              int R, int T, int HD, bool vec) {
    const int np = R / 2;
    if (vec) {
        for (int i = threadIdx.x; i < np * (HD / 4); i += NT) {
            const int r = 2 * (i % np), d = (i / np) * 4;
            float4 x0, x1;
            rtc_tc_ld_pair(x0, x1, src, ld, t0 + r, d, T);
            rtc_tc_st_pair_t<E, LDT>(dst, r, d, x0, x1);
        }
    } else {
        for (int i = threadIdx.x; i < R * HD; i += NT) {
            const int r = i % R, d = i / R, t = t0 + r;
            dst[d * LDT + r] = rtc_tc_narrow<E>(t < T ? src[(size_t)t * ld + d] : 0.0f);
        }
    }
}

// The same rows both ways from one read of global memory: row-major into dst (as
// rtc_tc_load) and transposed into dstt (as rtc_tc_load_t), for the tiles the backward
// kernels need in both layouts (Q and dO in dK/dV, K in dQ). Thread i takes a row pair and
// four dims; a warp covers 16 row pairs x 2 dim groups, i.e. 32 bytes of each of 32 rows
// (whole 32-byte sectors). Worked out by hand, not measured: with LDT = R + 8 (R 32 or 64,
// a row of LDT / 2 = 4 mod 32 words) a warp's transposed stores hit 32 distinct banks; its
// row-major stores are 4-way conflicted (rows 2 apart at LDE / 2 = 4 mod 32 words), a
// small cost next to the global read this saves. R: a multiple of 32.
template <class E, int NT, int R, int LDE, int LDT>
__device__ __forceinline__ void rtc_tc_load_both(E* dst, E* dstt, const float* src, size_t ld,
                                                 int t0, int T, int HD, bool vec) {
    static_assert(R % 32 == 0, "rtc_tc_load_both: R must be a multiple of 32");
    enum { NB = R / 32 };  // blocks of 16 row pairs
    if (vec) {
        for (int i = threadIdx.x; i < R / 2 * (HD / 4); i += NT) {
            const int c = i / 32, p = (i % 32) / 2, q = i % 2;
            const int r = 2 * (16 * (c % NB) + p), d = 4 * (2 * (c / NB) + q);
            float4 x0, x1;
            rtc_tc_ld_pair(x0, x1, src, ld, t0 + r, d, T);
            rtc_tc_st<E>(dst + r * LDE + d, rtc_tc_pack<E>(x0.x, x0.y));
            rtc_tc_st<E>(dst + r * LDE + d + 2, rtc_tc_pack<E>(x0.z, x0.w));
            rtc_tc_st<E>(dst + (r + 1) * LDE + d, rtc_tc_pack<E>(x1.x, x1.y));
            rtc_tc_st<E>(dst + (r + 1) * LDE + d + 2, rtc_tc_pack<E>(x1.z, x1.w));
            rtc_tc_st_pair_t<E, LDT>(dstt, r, d, x0, x1);
        }
    } else {
        for (int i = threadIdx.x; i < R * HD; i += NT) {
            const int r = i / HD, d = i % HD, t = t0 + r;
            const E x = rtc_tc_narrow<E>(t < T ? src[(size_t)t * ld + d] : 0.0f);
            dst[r * LDE + d] = x;
            dstt[d * LDT + r] = x;
        }
    }
}

// ----------------------------------------------------------------------------
// forward: grid (B*NH, ceil(T/FBR)), FBR/16 warps; out and stats of the block's queries

template <class E, int HDP>
__global__ void __launch_bounds__(rtc_tc_cfg<HDP>::FBR * 2, rtc_tc_cfg<HDP>::FMB)
    rtc_fa_tc_forward_kernel(rtc_fa_args a) {
    typedef rtc_tc_fwd_layout<E, HDP> L;
    typedef typename rtc_tc_reg<E>::type reg;
    enum { BR = L::BR, BC = L::BC, NT = BR * 2, LDE = L::LDE, LDT = L::LDT };
    enum { NK = HDP / 16, ND = HDP / 8, NJ = BC / 8 };
    RTC_TC_SMEM(rtc_tc_smem);
    E* qs = (E*)(rtc_tc_smem + L::q);
    E* ks = (E*)(rtc_tc_smem + L::k);
    E* vt = (E*)(rtc_tc_smem + L::vt);
    const int T = a.T, HD = a.HD, nk = HD / 16, nd = HD / 8;
    const int b = blockIdx.x / a.NH, h = blockIdx.x % a.NH, hk = h / (a.NH / a.NKV);
    const int qt = a.causal ? (int)gridDim.y - 1 - (int)blockIdx.y : (int)blockIdx.y;
    const int q0 = qt * BR;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * 16;
    const int g = lane >> 2, t = lane & 3;
    const int tq[2] = {q0 + r0 + g, q0 + r0 + g + 8};  // this lane's two rows
    const size_t ldq = (size_t)a.NH * HD, ldk = (size_t)a.NKV * HD;
    const float* qg = a.q + (size_t)b * T * ldq + (size_t)h * HD;
    const float* kg = a.k + (size_t)b * T * ldk + (size_t)hk * HD;
    const float* vg = a.v + (size_t)b * T * ldk + (size_t)hk * HD;
    const bool vec = rtc_tc_aligned16(a.q) && rtc_tc_aligned16(a.k) && rtc_tc_aligned16(a.v);

    rtc_tc_load<E, NT, LDE>(qs, qg, ldq, q0, BR, T, HD, vec);
    __syncthreads();
    reg qa[NK][4];
#pragma unroll
    for (int kk = 0; kk < NK; kk++)
        if (kk < nk) rtc_tc_lda<E>(qa[kk], qs + r0 * LDE + 16 * kk, LDE, g, t);
    float o[ND][4];
    rtc_tc_zero<ND>(o);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // l: this lane's columns only
    const int kend = a.causal ? (q0 + BR < T ? q0 + BR : T) : T;
    const bool rows_in = q0 + r0 < T;
    for (int k0 = 0; k0 < kend; k0 += BC) {
        __syncthreads();  // the previous tile's readers of ks and vt are done
        rtc_tc_load<E, NT, LDE>(ks, kg, ldk, k0, BC, T, HD, vec);
        rtc_tc_load_t<E, NT, LDT>(vt, vg, ldk, k0, BC, T, HD, vec);
        __syncthreads();
        if (!rows_in || (a.causal && q0 + r0 + 15 < k0)) continue;  // all masked for the warp
        // S = Q K^T
        float s[NJ][4];
        rtc_tc_zero<NJ>(s);
        rtc_tc_mma_nt<E, NJ, NK>(s, qa, ks, LDE, nk, g, t);
        // online softmax: element i of s[j] is row tq[i / 2], key k0 + 8 j + 2 t + i % 2
        float mt[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < NJ; j++) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int tk = k0 + 8 * j + 2 * t + (i & 1);
                s[j][i] = rtc_fa_visible(tq[i >> 1], tk, T, a.causal) ? a.scale * s[j][i]
                                                                      : -INFINITY;
                mt[i >> 1] = fmaxf(mt[i >> 1], s[j][i]);
            }
        }
        float mref[2], alpha[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const float mnew = fmaxf(m[r], rtc_tc_group_max(mt[r]));
            mref[r] = mnew == -INFINITY ? 0.0f : mnew;  // a row with nothing visible stays empty
            alpha[r] = mnew == m[r] ? 1.0f : exp2f((m[r] - mref[r]) * RTC_TC_LOG2E);
            m[r] = mnew;
            l[r] *= alpha[r];
        }
#pragma unroll
        for (int j = 0; j < NJ; j++) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                s[j][i] = exp2f((s[j][i] - mref[i >> 1]) * RTC_TC_LOG2E);
                l[i >> 1] += s[j][i];
            }
        }
#pragma unroll
        for (int d = 0; d < ND; d++) {
            o[d][0] *= alpha[0], o[d][1] *= alpha[0];
            o[d][2] *= alpha[1], o[d][3] *= alpha[1];
        }
        // O += P V
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++) {
            reg pa[4];
            rtc_tc_acc_to_a<E, NJ>(pa, s, kk);
            rtc_tc_mma_row<E, ND>(o, pa, vt + 16 * kk, LDT, nd, g, t);
        }
    }
    float* og = a.out + (size_t)b * T * ldq + (size_t)h * HD;
    const bool rnd = a.dt != RT_F32;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float lr = rtc_tc_group_sum(l[r]);
        const float inv = lr > 0.0f ? 1.0f / lr : 0.0f;  // l >= 1 for every row inside T
        if (tq[r] < T) {
            float* orow = og + (size_t)tq[r] * ldq + 2 * t;
#pragma unroll
            for (int d = 0; d < ND; d++) {
                if (d < nd) {
                    const float x0 = o[d][2 * r] * inv, x1 = o[d][2 * r + 1] * inv;
                    orow[8 * d] = rnd ? rtc_tc_round<E>(x0) : x0;
                    orow[8 * d + 1] = rnd ? rtc_tc_round<E>(x1) : x1;
                }
            }
            if (t == 0) {
                float* st = a.stats + (((size_t)b * a.NH + h) * T + tq[r]) * 2;
                st[0] = m[r];
                st[1] = inv;
            }
        }
    }
}

// ----------------------------------------------------------------------------
// backward 2: grid (B*NKV, ceil(T/KBC)), KBC/16 warps; dK and dV of the block's keys,
// summed over the query tiles of the NH/NKV query heads that share the kv head

template <class E, int HDP>
__global__ void __launch_bounds__(rtc_tc_cfg<HDP>::KBC * 2, rtc_tc_cfg<HDP>::KMB)
    rtc_fa_tc_dkdv_kernel(rtc_fa_args a) {
    typedef rtc_tc_dkdv_layout<E, HDP> L;
    typedef typename rtc_tc_reg<E>::type reg;
    enum { BC = L::BC, BR = L::BR, NT = BC * 2, LDE = L::LDE, LDT = L::LDT };
    enum { NK = HDP / 16, ND = HDP / 8, NJ = BR / 8 };
    RTC_TC_SMEM(rtc_tc_smem);
    E* ks = (E*)(rtc_tc_smem + L::k);
    E* vs = (E*)(rtc_tc_smem + L::v);
    E* qs = (E*)(rtc_tc_smem + L::q);
    E* dos = (E*)(rtc_tc_smem + L::dout);
    E* qts = (E*)(rtc_tc_smem + L::qt);
    E* dots = (E*)(rtc_tc_smem + L::dot);
    float* ms = (float*)(rtc_tc_smem + L::m);
    float* invs = (float*)(rtc_tc_smem + L::inv);
    float* Ds = (float*)(rtc_tc_smem + L::D);
    const int T = a.T, HD = a.HD, nk = HD / 16, nd = HD / 8, G = a.NH / a.NKV;
    const int b = blockIdx.x / a.NKV, hk = blockIdx.x % a.NKV;
    const int k0 = blockIdx.y * BC;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * 16;
    const int g = lane >> 2, t = lane & 3;
    const int tk[2] = {k0 + r0 + g, k0 + r0 + g + 8};  // this lane's two keys
    const size_t ldq = (size_t)a.NH * HD, ldk = (size_t)a.NKV * HD;
    const size_t kvoff = (size_t)b * T * ldk + (size_t)hk * HD;
    const bool want_dk = a.dk != NULL, want_dv = a.dv != NULL;
    const bool vec = rtc_tc_aligned16(a.q) && rtc_tc_aligned16(a.k) && rtc_tc_aligned16(a.v) &&
                     rtc_tc_aligned16(a.dout);

    rtc_tc_load<E, NT, LDE>(ks, a.k + kvoff, ldk, k0, BC, T, HD, vec);
    rtc_tc_load<E, NT, LDE>(vs, a.v + kvoff, ldk, k0, BC, T, HD, vec);
    float dk[ND][4], dv[ND][4];
    rtc_tc_zero<ND>(dk);
    rtc_tc_zero<ND>(dv);
    const int qstart = a.causal ? k0 / BR * BR : 0;  // earlier queries see none of these keys
    for (int gi = 0; gi < G; gi++) {
        const int h = hk * G + gi;
        const size_t qoff = (size_t)b * T * ldq + (size_t)h * HD;
        for (int q0 = qstart; q0 < T; q0 += BR) {
            __syncthreads();  // the previous tile's readers are done
            // Q row-major always, transposed for dK; dO row-major for dK, transposed for dV
            const float *qg = a.q + qoff, *dog = a.dout + qoff;
            if (want_dk) {
                rtc_tc_load_both<E, NT, BR, LDE, LDT>(qs, qts, qg, ldq, q0, T, HD, vec);
                if (want_dv)
                    rtc_tc_load_both<E, NT, BR, LDE, LDT>(dos, dots, dog, ldq, q0, T, HD, vec);
                else
                    rtc_tc_load<E, NT, LDE>(dos, dog, ldq, q0, BR, T, HD, vec);
            } else {
                rtc_tc_load<E, NT, LDE>(qs, qg, ldq, q0, BR, T, HD, vec);
                rtc_tc_load_t<E, NT, LDT>(dots, dog, ldq, q0, BR, T, HD, vec);  // want_dv
            }
            rtc_fa_load_stats<NT>(ms, invs, Ds, a, b, h, q0, BR);
            __syncthreads();
            if (k0 + r0 >= T || (a.causal && q0 + BR - 1 < k0 + r0)) continue;  // all masked
            // S^T = K Q^T and dP^T = V dO^T: rows are this warp's keys, columns the queries
            float st[NJ][4], dpt[NJ][4];
            rtc_tc_zero<NJ>(st);
            rtc_tc_zero<NJ>(dpt);
#pragma unroll
            for (int kk = 0; kk < NK; kk++) {
                if (kk < nk) {
                    reg xa[4];
                    rtc_tc_lda<E>(xa, ks + r0 * LDE + 16 * kk, LDE, g, t);
                    rtc_tc_mma_row<E, NJ>(st, xa, qs + 16 * kk, LDE, NJ, g, t);
                    if (want_dk) {
                        rtc_tc_lda<E>(xa, vs + r0 * LDE + 16 * kk, LDE, g, t);
                        rtc_tc_mma_row<E, NJ>(dpt, xa, dos + 16 * kk, LDE, NJ, g, t);
                    }
                }
            }
            // P^T (into st) and dS^T (into dpt): element i of st[j] is key tk[i / 2], query
            // column c = 8 j + 2 t + i % 2
#pragma unroll
            for (int j = 0; j < NJ; j++) {
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int c = 8 * j + 2 * t + (i & 1);
                    const float p = rtc_fa_visible(q0 + c, tk[i >> 1], T, a.causal)
                                        ? exp2f((a.scale * st[j][i] - ms[c]) * RTC_TC_LOG2E) *
                                              invs[c]
                                        : 0.0f;
                    st[j][i] = p;
                    if (want_dk) dpt[j][i] = p * (dpt[j][i] - Ds[c]);
                }
            }
            // dV += P^T dO, dK += dS^T Q
#pragma unroll
            for (int kk = 0; kk < BR / 16; kk++) {
                reg xa[4];
                if (want_dv) {
                    rtc_tc_acc_to_a<E, NJ>(xa, st, kk);
                    rtc_tc_mma_row<E, ND>(dv, xa, dots + 16 * kk, LDT, nd, g, t);
                }
                if (want_dk) {
                    rtc_tc_acc_to_a<E, NJ>(xa, dpt, kk);
                    rtc_tc_mma_row<E, ND>(dk, xa, qts + 16 * kk, LDT, nd, g, t);
                }
            }
        }
    }
    const bool rnd = a.dt != RT_F32;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (tk[r] >= T) continue;
        const size_t row = kvoff + (size_t)tk[r] * ldk + 2 * t;
        if (want_dv)  // x * 1 is x, bit for bit
            rtc_tc_add_row<E, ND>(a.dv + row, dv, r, 1.0f, nd, a.assign & RTC_FA_ASSIGN_DV, rnd);
        if (want_dk)
            rtc_tc_add_row<E, ND>(a.dk + row, dk, r, a.scale, nd, a.assign & RTC_FA_ASSIGN_DK, rnd);
    }
}

// ----------------------------------------------------------------------------
// backward 3: grid (B*NH, ceil(T/QBR)), QBR/16 warps; dQ of the block's queries

template <class E, int HDP>
__global__ void __launch_bounds__(rtc_tc_cfg<HDP>::QBR * 2, rtc_tc_cfg<HDP>::QMB)
    rtc_fa_tc_dq_kernel(rtc_fa_args a) {
    typedef rtc_tc_dq_layout<E, HDP> L;
    typedef typename rtc_tc_reg<E>::type reg;
    enum { BR = L::BR, BC = L::BC, NT = BR * 2, LDE = L::LDE, LDT = L::LDT };
    enum { NK = HDP / 16, ND = HDP / 8, NJ = BC / 8 };
    RTC_TC_SMEM(rtc_tc_smem);
    E* qs = (E*)(rtc_tc_smem + L::q);
    E* dos = (E*)(rtc_tc_smem + L::dout);
    E* ks = (E*)(rtc_tc_smem + L::k);
    E* vs = (E*)(rtc_tc_smem + L::v);
    E* kts = (E*)(rtc_tc_smem + L::kt);
    float* ms = (float*)(rtc_tc_smem + L::m);
    float* invs = (float*)(rtc_tc_smem + L::inv);
    float* Ds = (float*)(rtc_tc_smem + L::D);
    const int T = a.T, HD = a.HD, nk = HD / 16, nd = HD / 8;
    const int b = blockIdx.x / a.NH, h = blockIdx.x % a.NH, hk = h / (a.NH / a.NKV);
    const int qt = a.causal ? (int)gridDim.y - 1 - (int)blockIdx.y : (int)blockIdx.y;
    const int q0 = qt * BR;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * 16;
    const int g = lane >> 2, t = lane & 3;
    const int tq[2] = {q0 + r0 + g, q0 + r0 + g + 8};  // this lane's two queries
    const size_t ldq = (size_t)a.NH * HD, ldk = (size_t)a.NKV * HD;
    const size_t qoff = (size_t)b * T * ldq + (size_t)h * HD;
    const size_t kvoff = (size_t)b * T * ldk + (size_t)hk * HD;
    const bool vec = rtc_tc_aligned16(a.q) && rtc_tc_aligned16(a.k) && rtc_tc_aligned16(a.v) &&
                     rtc_tc_aligned16(a.dout);

    rtc_tc_load<E, NT, LDE>(qs, a.q + qoff, ldq, q0, BR, T, HD, vec);
    rtc_tc_load<E, NT, LDE>(dos, a.dout + qoff, ldq, q0, BR, T, HD, vec);
    rtc_fa_load_stats<NT>(ms, invs, Ds, a, b, h, q0, BR);
    __syncthreads();
    reg qa[NK][4], doa[NK][4];
#pragma unroll
    for (int kk = 0; kk < NK; kk++) {
        if (kk < nk) {
            rtc_tc_lda<E>(qa[kk], qs + r0 * LDE + 16 * kk, LDE, g, t);
            rtc_tc_lda<E>(doa[kk], dos + r0 * LDE + 16 * kk, LDE, g, t);
        }
    }
    const float mr[2] = {ms[r0 + g], ms[r0 + g + 8]}, invr[2] = {invs[r0 + g], invs[r0 + g + 8]};
    const float Dr[2] = {Ds[r0 + g], Ds[r0 + g + 8]};
    float dq[ND][4];
    rtc_tc_zero<ND>(dq);
    const int kend = a.causal ? (q0 + BR < T ? q0 + BR : T) : T;
    const bool rows_in = q0 + r0 < T;
    for (int k0 = 0; k0 < kend; k0 += BC) {
        __syncthreads();  // the previous tile's readers of ks, vs and kts are done
        rtc_tc_load_both<E, NT, BC, LDE, LDT>(ks, kts, a.k + kvoff, ldk, k0, T, HD, vec);
        rtc_tc_load<E, NT, LDE>(vs, a.v + kvoff, ldk, k0, BC, T, HD, vec);
        __syncthreads();
        if (!rows_in || (a.causal && q0 + r0 + 15 < k0)) continue;  // all masked for the warp
        // S = Q K^T and dP = dO V^T
        float s[NJ][4], dp[NJ][4];
        rtc_tc_zero<NJ>(s);
        rtc_tc_zero<NJ>(dp);
        rtc_tc_mma_nt<E, NJ, NK>(s, qa, ks, LDE, nk, g, t);
        rtc_tc_mma_nt<E, NJ, NK>(dp, doa, vs, LDE, nk, g, t);
        // dS (into s): element i of s[j] is query tq[i / 2], key k0 + 8 j + 2 t + i % 2
#pragma unroll
        for (int j = 0; j < NJ; j++) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int r = i >> 1, tk = k0 + 8 * j + 2 * t + (i & 1);
                const float p = rtc_fa_visible(tq[r], tk, T, a.causal)
                                    ? exp2f((a.scale * s[j][i] - mr[r]) * RTC_TC_LOG2E) * invr[r]
                                    : 0.0f;
                s[j][i] = p * (dp[j][i] - Dr[r]);
            }
        }
        // dQ += dS K
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++) {
            reg dsa[4];
            rtc_tc_acc_to_a<E, NJ>(dsa, s, kk);
            rtc_tc_mma_row<E, ND>(dq, dsa, kts + 16 * kk, LDT, nd, g, t);
        }
    }
    float* dqg = a.dq + qoff;
    const bool rnd = a.dt != RT_F32;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (tq[r] >= T) continue;
        rtc_tc_add_row<E, ND>(dqg + (size_t)tq[r] * ldq + 2 * t, dq, r, a.scale, nd,
                              a.assign & RTC_FA_ASSIGN_DQ, rnd);
    }
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
