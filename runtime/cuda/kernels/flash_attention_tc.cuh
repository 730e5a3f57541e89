// Flash attention on tensor cores for 16-bit operands: prec RT_BF16 / RT_F16 of
// rt_attention_lowmem_forward / rt_attention_lowmem_backward (attention.cu), causal or not,
// multi-head and grouped-query, head dims that are multiples of 16 up to 128 (other head
// dims, and prec RT_F32, take the fp32 kernels of flash_attention.cuh). Same contracts,
// same algorithm and the same statistics as those kernels: stats [B,NH,T,2] holds (m, 1/l)
// with m the row max of the scaled scores and l the sum of exp(s - m), so either backward
// can consume either forward's stats; D = rowsum(dO * O) is that header's rtc_fa_dot_kernel.
// Nothing of size T x T reaches global memory.
//
// Numerics. q, k, v and dout are fp32 buffers holding bf16/fp16 values; the caller narrows
// them (exactly) into dense 16-bit copies of the same layout (rtc_fa_args q16, k16, v16,
// dout16), which the kernels read. Every product runs on tensor cores (mma.sync m16n8k16:
// 16-bit inputs, fp32 accumulation), so the scores S = Q K^T and dP = dO V^T equal fp32
// arithmetic up to summation order. As in FlashAttention-2 and PyTorch's bf16/fp16 SDPA,
// the probabilities and their gradients are narrowed to E before the products they feed:
// P (unnormalised, exp(s - m) in [0, 1]) before O += P V; P before dV += P^T dO;
// dS = P (dP - D) before dQ += dS K and dK += dS^T Q. The row max and sum, the rescaling
// and dS itself are fp32 (l sums the unrounded exponentials; every exponential is one
// ex2.approx, relative error about 2^-22, rtc_tc_exp2). That narrowing is the only
// error beyond fp32 round-off: an output element built from product terms x_i y_i (one
// factor narrowed) is off by at most u * sum_i |x_i y_i|, u the unit roundoff (2^-8 bf16,
// 2^-11 fp16; fp16 also has an absolute 2^-25 per narrowed value below its normal range,
// 2^-14); tests/cuda/attention_tc_ref.h evaluates that bound per element for the tests.
//
// Register-resident, FlashAttention-2 style. A warp owns one or two row tiles of 16 rows of
// its block's tile (rtc_tc_cfg FMT, KMT, QMT; the rows of dK/dV are keys) and keeps
// everything about them in registers: per row tile its A operand fragments, the score and
// dP accumulators, the running max and sum, and the output accumulators. mma.sync's
// accumulator layout (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point
// type": lane = 4 * group + t holds rows group and group + 8, columns 2t and 2t + 1 of each
// 8-column tile) is also the A operand layout of the next product once two adjacent
// column tiles are narrowed in pairs, so P and dS go from one product to the next without
// touching memory, and the softmax's row reductions are two shuffles within a group of 4.
// With two row tiles (32 rows, as FlashAttention-2) each B fragment loaded by ldmatrix
// feeds both tiles' mma.sync: half the ldmatrix instructions and shared-memory reads per
// product, for about twice the registers. Each row tile runs exactly the operations a
// warp of 16 rows runs (every accumulator sums its k blocks in the same order, every row
// the same softmax steps), so the count changes no bit (test_flash_tc_emu checks); a row
// tile with nothing to do for the current streamed tile (causal, or rows past T) skips its
// products while the other goes on (rtc_tc_on_tiles: the body is compiled per set of busy
// tiles, with no test per product).
//
// Shared memory holds only 16-bit operand tiles, row-major as in global memory (a row is
// one token's head: HD elements, padded by 8 to LDE = HDP + 8, i.e. 16 bytes, so the 8
// row addresses of an ldmatrix hit 8 distinct 16-byte bank groups). Tiles arrive by
// cp.async (16 bytes per copy, rows past T zero-filled by the copy itself), with no
// register staging, and the streamed tiles are double-buffered: the next tile's copies are
// in flight while the current one is multiplied. Fragments come out by ldmatrix.x4 (four
// 8x8 matrices per instruction: a whole A fragment, or the B fragments of two 8-column
// blocks); a B operand whose k runs down the tile's columns (V for O += P V, dO and Q for
// dV and dK, K for dQ) is read with ldmatrix's .trans, so no tile is stored transposed.
//
// Kernels (W = 16 FMT, 16 KMT, 16 QMT rows per warp):
//   forward   grid (B*NH, ceil(T/FBR)), FBR/W warps. Q fragments stay in registers; per
//             key tile of FBC keys (K and V double-buffered): S = Q K^T, the online softmax
//             on the accumulators (O rescaled by exp(m_old - m_new) per row), O += P V.
//   backward  FlashAttention-2 without atomics, as flash_attention.cuh:
//             1. D = rowsum(dO * O) into the scratch (rtc_fa_dot_kernel);
//             2. dK, dV: grid (B*NKV, ceil(T/KBC)), KBC/W warps of W keys each; walks the
//                query tiles (KBR queries; Q, dO and their (m, 1/l, D) double-buffered) of
//                every query head of the GQA group in head order: S^T = K Q^T and
//                dP^T = V dO^T, P^T and dS^T in fp32 on the accumulators, dV += P^T dO and
//                dK += dS^T Q;
//             3. dQ: grid (B*NH, ceil(T/QBR)), QBR/W warps of W queries: per key tile
//                (QBC keys; K and V double-buffered) S and dP, dS, dQ += dS K.
//             Every gradient element has one owner block, which stores it once at the end
//             (added to, or assigned, and rounded to dt: rtc_fa_store_grad; in fp32 storage
//             or, rtc_fa_args grads16, packed 16-bit storage of E, in rows of ld_dq, ld_dk,
//             ld_dv elements where those are set): deterministic,
//             no atomics, rounding and assigning free, and dq, dk, dv requested alone
//             give the joint call's bits (each is computed by the same operations either
//             way; D is only computed when dq or dk is wanted).
//   Dropout (rtc_fa_args drop_p > 0; the DROP instantiations, the others have no dropout
//   code): as the fp32 kernels, each probability's mask factor Z is drawn from the element's
//   index where the accumulators hold it (rtc_fa_drop); m and l stay the undropped softmax's.
//   The forward narrows P Z for O += (P Z) V; dK/dV narrow P Z for dV and the dQ kernel and
//   dK/dV take dS = P (Z dP - D). Where a lane's pair of elements are consecutive keys of one
//   query (the forward's and dQ's accumulators) one Philox call draws both (rtc_tc_drop_rows);
//   dK/dV's pairs are two queries of one key, T indices apart, one call each. Same
//   __launch_bounds__ as without dropout; ptxas (sm_90a, CUDA 13) gives the DROP forward 128
//   registers (HDP 64, 24 bytes spilled) and 168 (152 spilled), dK/dV 128 (32 spilled) and
//   232, dQ 128 (60 spilled) and 241.
//   Causal: key tiles past a query tile's last row are never loaded, a row tile whose 16
//   rows see none of the current tile skips its products (its state cannot change), blocks
//   run longest first: the forward and dQ grids map blockIdx.y to query tiles from the
//   last (most key tiles) down, and dK/dV's key tile 0 (all queries) is already first.
//
// Tiles, threads and shared memory (bytes, E = 2 bytes; x2: double-buffered), 16 rows per
// warp (FMT, KMT, QMT 1):
//              HD <= 64 (HDP 64)                       HD <= 128 (HDP 128)
//   forward    FBR 128, FBC 64 x2, 8 warps, 36864      FBR 64, FBC 64 x2, 4 warps, 69632
//   dK/dV      KBC 64, KBR 32 x2, 4 warps, 37632       KBC 64, KBR 32 x2, 4 warps, 70400
//   dQ         QBR 64, QBC 32 x2, 4 warps, 37632       QBR 64, QBC 32 x2, 4 warps, 70400
// All within 99 KiB, the smallest opt-in limit among the targets (sm_86/sm_89), as every
// flash kernel here (rtc_attention_init sets the opt-in; tests/cuda/test_flash_tc_emu.cc
// checks every configuration). Registers bound the blocks per SM, so each kernel asks
// __launch_bounds__ for a count (rtc_tc_cfg FMB, KMB, QMB: 2 to 4), because ptxas's choice
// without one moves by 40 registers across a blocks-per-SM boundary on unrelated edits.
// ptxas (sm_90a, CUDA 13) gives the forward 126 registers (HDP 64) and 168 (HDP 128, 20
// bytes spilled), dK/dV 128 (16 bytes spilled) and 224, dQ 128 and 216: an H100 SM runs 4
// blocks of the HDP 64 dK/dV and dQ, 3 of the HDP 128 forward, 2 of the others. The HDP 64
// shapes are an H100 sweep's best (2026-11-23, bench/attention.sh's shapes, 12 tile / block
// count combinations): the backward is fastest with the most resident warps, spills and
// all (KBR, QBC 32 at 4 blocks: 1.63 ms on the Llama shape, against 1.84 with 64 at 3
// blocks and 2.00 with 32 at 3), the forward with 16 rows per warp, 8 warps and FBC 64.
// With two row tiles per warp the HDP 64 kernels take 227 to 255 registers: unspilled at 8
// warps per SM (16 with one row tile), hundreds of bytes spilled at 12
// (bench/attention_sweep.sh prints them per variant); the HDP 128 ones spill 600 to 1500
// bytes even at 255 (their output accumulators alone take 128 to 256), so they keep one.
//
// History. The first version (wmma, softmax through fp32 shared-memory rows) measured 4-6%
// of the H100's bf16 peak. The second kept P and dS in registers (this structure) but read
// the fp32 buffers, narrowed through registers into shared memory (transposed copies for
// the .trans operands above, no overlap of a block's loads with its products, B fragments
// by 32-bit shared loads); on an H100 (2026-11-22, 49a3a80) it ran at 0.23-0.30x of
// PyTorch's SDPA (bench/attention.sh; Llama 1B shape, forward 0.73 ms against 0.18, backward
// 2.84 against 0.66), with 25% occupancy and K/V read from DRAM at about 1.1 TB/s. This
// version (16-bit copies, cp.async, double buffering, ldmatrix) halves the bytes read and
// overlaps them with the products: written without a GPU, it measured (2026-11-23) forward
// 0.75 ms and backward 2.50 on that shape. Most of the gap to SDPA was instructions, not
// bytes: ncu showed the issue slots half busy, the integer pipe the busiest and 14 issued
// instructions per mma. Dealing the tile copies with compile-time counts (the per-copy
// integer divisions were most of the integer work), the softmax as one fma and one
// ex2.approx per score, masking only the tiles that cross T or the diagonal, independent
// products in Q K^T and the backward tiles above brought that to forward 0.38 ms and
// backward 1.63 (SDPA: 0.18 and 0.66). What remains is structural: 16 rows per warp load
// every B fragment for one product (FlashAttention-2 gives a warp 32 or more rows), and
// the backward recomputes S and dP for dQ (7 products against FlashAttention-2's 5, which
// adds dQ with atomics, out of order). Two row tiles per warp, a compile-time option of
// each kernel since 2026-11-23, are slower: on an H100 (2026-11-24, bench/attention_sweep.sh,
// forward plus backward over both bench shapes) the default took 3.07 ms, two row tiles in
// dQ only 3.10, in dK/dV only 3.13, everywhere 3.31 to 3.50, because 225 to 255 registers
// halve the resident warps. A fused dQ was slower too (H100, 2026-11-24): the dK/dV kernel
// multiplying its dS^T by K (five products, as FlashAttention-2), the blocks' parts added
// in key-tile order through counters, took 2.11 ms for the Llama 1B backward against 1.64;
// it was removed after 11e65c6.
//
// Testing without a GPU. tests/cuda/cuda_emu.h emulates mma.sync and ldmatrix from the PTX
// ISA's fragment tables alone (each lane publishes its registers or row address, every lane
// rebuilds its part from the documented lane mapping), independently of how these kernels
// use them, so a kernel that assumed a different mapping fails against the CPU reference;
// cp.async there poisons its destination when issued and copies at the wait that covers it,
// so a read before the wait sees NaN. Emulator-only instantiation E = float (a register
// holds two floats instead of two 16-bit halves, the copies are fp32; nvcc never sees it):
// the test runs the very same kernels unrounded and holds them to the fp32 kernels'
// tolerances, which checks the indexing, masking, online softmax and GQA walk tightly,
// apart from the 16-bit bound.
#ifndef FSDPGEN_CUDA_FLASH_ATTENTION_TC_CUH
#define FSDPGEN_CUDA_FLASH_ATTENTION_TC_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <type_traits>

#include "flash_attention.cuh"
#include "cp_async.cuh"

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

// An element of E widened to fp32 (exact).
__device__ __forceinline__ float rtc_tc_widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float rtc_tc_widen(__half x) { return __half2float(x); }
__device__ __forceinline__ float rtc_tc_widen(float x) { return x; }

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

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: four 8x8 matrices of 16-bit elements;
// lane l gives the address of row l % 8 of matrix l / 8 (16 bytes, 16-byte aligned).
// Register j of lane l: matrix j's row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 (low
// half first); with .trans, column l / 4, rows 2 (l % 4) and 2 (l % 4) + 1.
template <class E>
__device__ __forceinline__ void rtc_tc_ldsm(uint32_t (&r)[4], const E* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(rtc_smem_addr(row))
                 : "memory");
}
template <class E>
__device__ __forceinline__ void rtc_tc_ldsm_t(uint32_t (&r)[4], const E* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(rtc_smem_addr(row))
                 : "memory");
}

#endif

// 2^x for the softmax's exponentials: one ex2.approx.ftz (the multi-function unit; relative
// error about 2^-22, results below 2^-126 flushed to 0, 2^-inf = 0) where exp2f adds the
// instructions that keep subnormal results, which no probability here needs (P is narrowed
// to E and multiplies values of E). The emulator: the host's exp2f.
__device__ __forceinline__ float rtc_tc_exp2(float x) {
#ifdef __CUDACC__
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
#else
    return exp2f(x);
#endif
}

// ----------------------------------------------------------------------------
// fragments through ldmatrix (x4: four 8x8 matrices, see rtc_tc_ldsm)

// The A fragment of rows [0, 16) x columns [0, 16) of the row-major tile p (row stride ld):
// lane 4g + t holds rows g and g + 8, columns 2t, 2t + 1, 2t + 8, 2t + 9, i.e. matrices
// (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) in that order.
template <class E>
__device__ __forceinline__ void rtc_tc_lda(typename rtc_tc_reg<E>::type (&a)[4], const E* p,
                                           int ld, int lane) {
    rtc_tc_ldsm<E>(a, p + (lane & 15) * ld + (lane >> 4) * 8);
}

// The same A fragment from a tile stored k-major: element (row m, column k) at p[k * ld + m]
// (dS from dS^T for dQ += dS K): .trans, matrices (k 0-7, m 0-7), (k 0-7, m 8-15),
// (k 8-15, m 0-7), (k 8-15, m 8-15) give A's four in its order.
template <class E>
__device__ __forceinline__ void rtc_tc_lda_t(typename rtc_tc_reg<E>::type (&a)[4], const E* p,
                                             int ld, int lane) {
    rtc_tc_ldsm_t<E>(a, p + ((lane & 7) + (lane >> 4) * 8) * ld + ((lane >> 3) & 1) * 8);
}

// The B fragments (16 k x 8 n; lane 4g + t holds column g, k = 2t, 2t + 1, 2t + 8, 2t + 9)
// of the 8-column blocks n 0-7 (b[0], b[1]) and 8-15 (b[2], b[3]) of a 16-k slice at p:
//   k-contiguous (KC): element (k, n) at p[n * ld + k] (K for S = Q K^T): plain ldmatrix,
//     matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15);
//   n-contiguous: element (k, n) at p[k * ld + n] (V for O += P V): .trans, matrices
//     (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15).
template <class E, bool KC>
__device__ __forceinline__ void rtc_tc_ldb2(typename rtc_tc_reg<E>::type (&b)[4], const E* p,
                                            int ld, int lane) {
    if (KC)
        rtc_tc_ldsm<E>(b, p + ((lane & 7) + (lane >> 4) * 8) * ld + ((lane >> 3) & 1) * 8);
    else
        rtc_tc_ldsm_t<E>(b, p + (lane & 15) * ld + (lane >> 4) * 8);
}

// acc[n] += a B_n and acc[n + 1] += a B_{n + 1} for the pair of B fragments from rtc_tc_ldb2.
template <class E>
__device__ __forceinline__ void rtc_tc_mma2(float (&acc0)[4], float (&acc1)[4],
                                            const typename rtc_tc_reg<E>::type (&a)[4],
                                            const typename rtc_tc_reg<E>::type (&b)[4]) {
    const typename rtc_tc_reg<E>::type b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
    rtc_tc_mma<E>(acc0, a, b0);
    rtc_tc_mma<E>(acc1, a, b1);
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

// A warp's row tiles: MT tiles of 16 rows (rows 16 u to 16 u + 15 of the warp's, u < MT),
// each with its own A fragments a[u] and accumulators acc[u]; the helpers below multiply
// the tiles [LO, HI) together, so that each B fragment loaded feeds HI - LO products.

// acc[u][n] += a[u] B_n and acc[u][n + 1] += a[u] B_{n + 1} (u in [LO, HI)) for the 8-column
// blocks n < nn (nn even) of the 16-k slice b of a shared tile, k-contiguous or not as
// rtc_tc_ldb2: one A fragment per row tile against a row of B fragments.
template <class E, int NN, bool KC, int MT, int LO, int HI>
__device__ __forceinline__ void rtc_tc_mma_rows(float (&acc)[MT][NN][4],
                                                const typename rtc_tc_reg<E>::type (&a)[MT][4],
                                                const E* b, int ld, int nn, int lane) {
#pragma unroll
    for (int n = 0; n < NN; n += 2) {
        if (n < nn) {
            typename rtc_tc_reg<E>::type y[4];
            rtc_tc_ldb2<E, KC>(y, KC ? b + 8 * n * ld : b + 8 * n, ld, lane);
#pragma unroll
            for (int u = LO; u < HI; u++) rtc_tc_mma2<E>(acc[u][n], acc[u][n + 1], a[u], y);
        }
    }
}

// acc[u][j] += a[u] b_j (u in [LO, HI)) for the 8-column blocks j < NJ, with a[u]'s NK
// column blocks of 16 (the first nk used) in registers: acc[u] = X_u Y^T for the row tiles
// X_u and the rows of the shared tile y (row stride ld). The k blocks are the outer loop,
// so the products of one k block are independent and issue back to back (an accumulator's
// next product waits for its last, tens of cycles); each accumulator still sums its k
// blocks in order.
template <class E, int NJ, int NK, int MT, int LO, int HI>
__device__ __forceinline__ void rtc_tc_mma_nt(float (&acc)[MT][NJ][4],
                                              const typename rtc_tc_reg<E>::type (&a)[MT][NK][4],
                                              const E* y, int ld, int nk, int lane) {
#pragma unroll
    for (int kk = 0; kk < NK; kk++) {
        if (kk < nk) {
#pragma unroll
            for (int j = 0; j < NJ; j += 2) {
                typename rtc_tc_reg<E>::type b[4];
                rtc_tc_ldb2<E, true>(b, y + 8 * j * ld + 16 * kk, ld, lane);
#pragma unroll
                for (int u = LO; u < HI; u++) rtc_tc_mma2<E>(acc[u][j], acc[u][j + 1], a[u][kk], b);
            }
        }
    }
}

// A compile-time int: the bounds of a range of row tiles.
template <int N>
struct rtc_tc_int {
    static constexpr int value = N;
};

// f(lo, hi) (rtc_tc_int) for the range [lo, hi) of a warp's MT row tiles that have work
// (act[u]; warp-uniform), or nothing when none has. MT is 1 or 2, so the tiles with work
// are both, the first or the second (PREFIX: never the second alone); the kernels' bodies
// are compiled once per case, all loops unrolled, with no per-product test.
template <int MT, bool PREFIX, class F>
__device__ __forceinline__ void rtc_tc_on_tiles(const bool (&act)[MT], F& f) {
    static_assert(MT == 1 || MT == 2, "1 or 2 row tiles per warp");
    if constexpr (MT == 1) {
        if (act[0]) f(rtc_tc_int<0>(), rtc_tc_int<1>());
    } else {
        if (act[0] && act[1]) {
            f(rtc_tc_int<0>(), rtc_tc_int<2>());
        } else if (act[0]) {
            f(rtc_tc_int<0>(), rtc_tc_int<1>());
        } else if constexpr (!PREFIX) {
            if (act[1]) f(rtc_tc_int<1>(), rtc_tc_int<2>());
        }
    }
}

// out[8 d + 2 t + i] += scale * acc[d][2 r + i] (i = 0, 1; d < nd), or = when assigned
// (0 + x, as rtc_fa_store_grad), rounded to E when rnd: this lane's elements of accumulator
// row r (0: row g, 1: row g + 8), out being that row's start plus 2 t. G: fp32 storage, or
// packed storage in E (dt is then E's type: the sum is narrowed, which rounds it).
template <class E, int ND, class G>
__device__ __forceinline__ void rtc_tc_add_row(G* out, const float (&acc)[ND][4], int r,
                                               float scale, int nd, bool assign, bool rnd) {
#pragma unroll
    for (int d = 0; d < ND; d++) {
        if (d < nd) {
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const float x =
                    (assign ? 0.0f : rtc_tc_widen(out[8 * d + i])) + scale * acc[d][2 * r + i];
                if constexpr (std::is_same<G, float>::value)
                    out[8 * d + i] = rnd ? rtc_tc_round<E>(x) : x;
                else
                    out[8 * d + i] = rtc_tc_narrow<E>(x);
            }
        }
    }
}

// rtc_tc_add_row on gradient g (a.dq, a.dk or a.dv) from element off: its fp32 storage, or
// its packed storage in E when `packed` (rtc_fa_args grads16).
template <class E, int ND>
__device__ __forceinline__ void rtc_tc_add_grad_row(float* g, bool packed, size_t off,
                                                    const float (&acc)[ND][4], int r, float scale,
                                                    int nd, bool assign, bool rnd) {
    if (packed)
        rtc_tc_add_row<E, ND>((E*)(void*)g + off, acc, r, scale, nd, assign, rnd);
    else
        rtc_tc_add_row<E, ND>(g + off, acc, r, scale, nd, assign, rnd);
}

// (lo, hi) narrowed to E at p[0], p[1] (p 4-byte aligned: one 32-bit store of a register).
template <class E>
__device__ __forceinline__ void rtc_tc_store2(E* p, float lo, float hi) {
    if constexpr (std::is_same<E, float>::value) {
        p[0] = lo, p[1] = hi;
    } else {
        *(uint32_t*)(void*)p = rtc_tc_pack<E>(lo, hi);
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

// A kernel configuration: per kernel, its tile (rows x columns of the block's T x T part),
// its row tiles of 16 per warp (1 or 2: FMT, KMT, QMT; the dK/dV kernel's rows are keys)
// and the blocks per SM its __launch_bounds__ asks for. HDP: the padded head dim. Only FBC
// (the online softmax's step) changes results: any other value gives the same bits
// (tests/cuda/test_flash_tc_emu.cc runs other configurations against the default's).
template <int HDP_, int FBR_, int FBC_, int FMT_, int FMB_, int KBC_, int KBR_, int KMT_,
          int KMB_, int QBR_, int QBC_, int QMT_, int QMB_>
struct rtc_tc_tiles {
    enum { HDP = HDP_ };
    enum { FBR = FBR_, FBC = FBC_, FMT = FMT_, FMB = FMB_, FNT = FBR * 2 / FMT };  // forward
    enum { KBC = KBC_, KBR = KBR_, KMT = KMT_, KMB = KMB_, KNT = KBC * 2 / KMT };  // dK/dV
    enum { QBR = QBR_, QBC = QBC_, QMT = QMT_, QMB = QMB_, QNT = QBR * 2 / QMT };  // dQ
    static_assert(HDP == 64 || HDP == 128, "padded head dim 64 or 128");
    static_assert((FMT == 1 || FMT == 2) && (KMT == 1 || KMT == 2) && (QMT == 1 || QMT == 2),
                  "1 or 2 row tiles per warp");
    static_assert(FBR % (16 * FMT) == 0 && KBC % (16 * KMT) == 0 && QBR % (16 * QMT) == 0,
                  "whole warps");
    static_assert(FBC % 16 == 0 && KBR % 16 == 0 && QBC % 16 == 0, "16-column tiles");
    static_assert(FNT <= 1024 && KNT <= 1024 && QNT <= 1024, "at most 1024 threads");
};

// The configurations used (the table at the top). The HDP 64 one, the bench shapes', can be
// set value by value at compile time (-DRTC_TC64_FMT=2 ...; bench/attention_sweep.sh).
#ifndef RTC_TC64_FBR
#define RTC_TC64_FBR 128
#endif
#ifndef RTC_TC64_FBC
#define RTC_TC64_FBC 64
#endif
#ifndef RTC_TC64_FMT
#define RTC_TC64_FMT 1
#endif
#ifndef RTC_TC64_FMB
#define RTC_TC64_FMB 2
#endif
#ifndef RTC_TC64_KBC
#define RTC_TC64_KBC 64
#endif
#ifndef RTC_TC64_KBR
#define RTC_TC64_KBR 32
#endif
#ifndef RTC_TC64_KMT
#define RTC_TC64_KMT 1
#endif
#ifndef RTC_TC64_KMB
#define RTC_TC64_KMB 4
#endif
#ifndef RTC_TC64_QBR
#define RTC_TC64_QBR 64
#endif
#ifndef RTC_TC64_QBC
#define RTC_TC64_QBC 32
#endif
#ifndef RTC_TC64_QMT
#define RTC_TC64_QMT 1
#endif
#ifndef RTC_TC64_QMB
#define RTC_TC64_QMB 4
#endif
template <int HDP>
struct rtc_tc_cfg;
template <>
struct rtc_tc_cfg<64>
    : rtc_tc_tiles<64, RTC_TC64_FBR, RTC_TC64_FBC, RTC_TC64_FMT, RTC_TC64_FMB, RTC_TC64_KBC,
                   RTC_TC64_KBR, RTC_TC64_KMT, RTC_TC64_KMB, RTC_TC64_QBR, RTC_TC64_QBC,
                   RTC_TC64_QMT, RTC_TC64_QMB> {};
template <>
struct rtc_tc_cfg<128> : rtc_tc_tiles<128, 64, 64, 1, 3, 64, 32, 1, 2, 64, 32, 1, 2> {};

constexpr size_t rtc_tc_al(size_t bytes) { return (bytes + 127) / 128 * 128; }

// Bytes of a tile of `rows` rows of HDP elements E, each row padded by 8 elements.
template <class E, int HDP>
constexpr size_t rtc_tc_tile(int rows) {
    return rtc_tc_al((size_t)rows * (HDP + 8) * sizeof(E));
}

// Bytes of `n` floats.
constexpr size_t rtc_tc_floats(int n) { return rtc_tc_al((size_t)n * sizeof(float)); }

// forward: buffers 0 and 1 of k, v [BC][LDE] (buffer i's k at k + i * buf, its v at
// v + i * buf), and q [BR][LDE], staging for the Q fragments, over buffer 1 (the kernel
// reads its fragments before the first copy into buffer 1 is issued)
template <class E, class C>
struct rtc_tc_fwd_layout {
    enum { HDP = C::HDP, BR = C::FBR, BC = C::FBC, MT = C::FMT, NT = C::FNT, LDE = HDP + 8 };
    static constexpr size_t kv = rtc_tc_tile<E, HDP>(BC);  // one tile of k or v
    static constexpr size_t buf = 2 * kv;
    static constexpr size_t k = 0;
    static constexpr size_t v = kv;
    static constexpr size_t q = buf;
    static constexpr size_t qt = rtc_tc_tile<E, HDP>(BR);
    static constexpr size_t bytes = buf + (2 * kv > qt ? 2 * kv : qt);
};

// dK/dV: k, v [BC][LDE] (the block's keys), q, dout [2][BR][LDE] (the query tile), and its
// m, inv, D [2][BR]
template <class E, class C>
struct rtc_tc_dkdv_layout {
    enum { HDP = C::HDP, BC = C::KBC, BR = C::KBR, MT = C::KMT, NT = C::KNT, LDE = HDP + 8 };
    static constexpr size_t qd = rtc_tc_tile<E, HDP>(BR);  // one buffer of q or dout
    static constexpr size_t st = rtc_tc_floats(BR);        // one buffer of m, inv or D
    static constexpr size_t k = 0;
    static constexpr size_t v = k + rtc_tc_tile<E, HDP>(BC);
    static constexpr size_t q = v + rtc_tc_tile<E, HDP>(BC);
    static constexpr size_t dout = q + 2 * qd;
    static constexpr size_t m = dout + 2 * qd;
    static constexpr size_t inv = m + 2 * st;
    static constexpr size_t D = inv + 2 * st;
    static constexpr size_t bytes = D + 2 * st;
};

// dQ: q, dout [BR][LDE] (staging for the fragments), buffers 0 and 1 of k, v [BC][LDE] (as
// the forward's), m, inv, D [BR]
template <class E, class C>
struct rtc_tc_dq_layout {
    enum { HDP = C::HDP, BR = C::QBR, BC = C::QBC, MT = C::QMT, NT = C::QNT, LDE = HDP + 8 };
    static constexpr size_t kv = rtc_tc_tile<E, HDP>(BC);
    static constexpr size_t buf = 2 * kv;
    static constexpr size_t q = 0;
    static constexpr size_t dout = q + rtc_tc_tile<E, HDP>(BR);
    static constexpr size_t k = dout + rtc_tc_tile<E, HDP>(BR);
    static constexpr size_t v = k + kv;
    static constexpr size_t m = k + 2 * buf;
    static constexpr size_t inv = m + rtc_tc_floats(BR);
    static constexpr size_t D = inv + rtc_tc_floats(BR);
    static constexpr size_t bytes = D + rtc_tc_floats(BR);
};

// ----------------------------------------------------------------------------
// tile loads (cp.async; the caller commits and waits)

// Rows [t0, t0 + R) of one head of a 16-bit copy (row t at src + t * ld, HD elements) into
// a row-major shared tile with row stride LDE; rows past T are zeros (finite, masked
// later), dims past HD are never written nor read. HD and the head offset are multiples of
// 16 elements, so every 8-element copy is 16-byte aligned. The tile's R x LDE / 8 chunks
// are dealt to the NT threads with compile-time counts (no division in the copy loop).
template <class E, int NT, int LDE, int R>
__device__ __forceinline__ void rtc_tc_load(E* dst, const E* src, size_t ld, int t0, int T,
                                            int HD) {
    enum { CPR = (LDE - 8) / 8, N = R * CPR };  // chunks per row (a power of 2), in all
#pragma unroll
    for (int i0 = 0; i0 < N; i0 += NT) {
        const int i = i0 + (int)threadIdx.x, r = i / CPR, c = i % CPR * 8, t = t0 + r;
        if ((N % NT == 0 || i < N) && c < HD)
            rtc_cp8<E>(dst + r * LDE + c, src + (t < T ? (size_t)t * ld + c : 0), t < T);
    }
}

// (m, 1/l) and D of query rows [q0, q0 + R) of head h, as rtc_fa_load_stats (zeros past T;
// D zeros when a.D is NULL), by cp.async.
template <int NT>
__device__ __forceinline__ void rtc_tc_load_stats(float* ms, float* invs, float* Ds,
                                                  const rtc_fa_args& a, int b, int h, int q0,
                                                  int R) {
    for (int i = threadIdx.x; i < R; i += NT) {
        const int t = q0 + i;
        const bool in = t < a.T;
        const size_t row = in ? ((size_t)b * a.NH + h) * a.T + t : 0;
        rtc_cp1f(ms + i, a.stats_in + 2 * row, in);
        rtc_cp1f(invs + i, a.stats_in + 2 * row + 1, in);
        rtc_cp1f(Ds + i, a.D ? a.D + row : a.stats_in, in && a.D);
    }
}

// The key-tile pipeline of the forward and dQ kernels (layout L: buffer i's K tile at
// L::k + i L::buf, its V tile at L::v + i L::buf): key tile j (keys from j BC, of the kv
// head at kg, vg) goes to buffer j % 2, one commit group per tile.
template <class E, class L, int NT>
__device__ __forceinline__ void rtc_tc_kv_issue(unsigned char* smem, const E* kg, const E* vg,
                                                size_t ldk, int j, int T, int HD) {
    const size_t at = (size_t)(j & 1) * L::buf;
    rtc_tc_load<E, NT, L::LDE, L::BC>((E*)(smem + L::k + at), kg, ldk, j * L::BC, T, HD);
    rtc_tc_load<E, NT, L::LDE, L::BC>((E*)(smem + L::v + at), vg, ldk, j * L::BC, T, HD);
    rtc_cp_commit();
}

// At the top of iteration j of ntiles (tile j issued before) of the forward's and dQ's walk
// over key tiles: issues tile j + 1, into the buffer tile j - 1 used (its readers passed the
// barrier ending that iteration), waits for tile j and makes it visible to the block (a
// barrier: every thread calls this), and points ks and vs at it.
template <class E, class L, int NT>
__device__ __forceinline__ void rtc_tc_kv_next(unsigned char* smem, const E* kg, const E* vg,
                                               size_t ldk, int j, int ntiles, int T, int HD,
                                               const E*& ks, const E*& vs) {
    if (j + 1 < ntiles) {
        rtc_tc_kv_issue<E, L, NT>(smem, kg, vg, ldk, j + 1, T, HD);
        rtc_cp_wait<1>();
    } else {
        rtc_cp_wait<0>();
    }
    __syncthreads();
    const size_t cb = (size_t)(j & 1) * L::buf;
    ks = (const E*)(smem + L::k + cb);
    vs = (const E*)(smem + L::v + cb);
}

// The row tiles (query rows row0 + 16 u to + 15, u < MT) with work in the key tile that
// starts at key k0: the others' rows are all past T or (causal) before every key of the
// tile, so their state cannot change.
template <int MT>
__device__ __forceinline__ void rtc_tc_query_tiles_busy(bool (&act)[MT], int row0, int k0, int T,
                                                        bool causal) {
#pragma unroll
    for (int u = 0; u < MT; u++)
        act[u] = row0 + 16 * u < T && !(causal && row0 + 16 * u + 15 < k0);
}

// Scores a row may not see to -inf: element i of s[j] is query row tq[i / 2], key
// kc + 8 j + i % 2 (kc: the tile's first key plus 2 t); keys past T, and when causal keys
// after the row. One compare per element: against the row's last visible key.
template <int NJ>
__device__ __forceinline__ void rtc_tc_mask_rows(float (&s)[NJ][4], const int (&tq)[2], int kc,
                                                 int T, int causal) {
    int last[2];  // the row's last visible key, relative to kc
#pragma unroll
    for (int r = 0; r < 2; r++) last[r] = (causal && tq[r] < T - 1 ? tq[r] : T - 1) - kc;
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            if (8 * j + (i & 1) > last[i >> 1]) s[j][i] = -INFINITY;
}

// The mask factors (rtc_fa_drop's) of elements e and e + 1: one Philox block, or two when e
// is its block's last lane.
__device__ __forceinline__ void rtc_tc_drop2(const rtc_fa_args& a, uint64_t e, float (&z)[2]) {
    uint32_t o[4];
    rt_philox_block_inl(a.drop_seed, a.drop_stream, e >> 2, o);
    const unsigned l = (unsigned)e & 3;
    const uint32_t x0 = l == 0 ? o[0] : l == 1 ? o[1] : l == 2 ? o[2] : o[3];
    uint32_t x1;
    if (l == 3) {
        rt_philox_block_inl(a.drop_seed, a.drop_stream, (e >> 2) + 1, o);
        x1 = o[0];
    } else {
        x1 = l == 0 ? o[1] : l == 1 ? o[2] : o[3];
    }
    z[0] = rt_dropout_factor_inl(rt_philox_u01_inl(x0), a.drop_p, a.drop_scale);
    z[1] = rt_dropout_factor_inl(rt_philox_u01_inl(x1), a.drop_p, a.drop_scale);
}

// Accumulators of query rows times their mask factors: element i of acc[j] is query
// tq[i / 2] of head bh = b NH + h, key kc + 8 j + i % 2 (kc: the tile's first key plus 2 t),
// so elements 2 r and 2 r + 1 are consecutive indices, drawn together.
template <int NJ>
__device__ __forceinline__ void rtc_tc_drop_rows(float (&acc)[NJ][4], const rtc_fa_args& a,
                                                 size_t bh, const int (&tq)[2], int kc) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const uint64_t e0 = ((uint64_t)bh * a.T + tq[r]) * a.T + kc;
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            float z[2];
            rtc_tc_drop2(a, e0 + 8 * j, z);
            acc[j][2 * r] *= z[0];
            acc[j][2 * r + 1] *= z[1];
        }
    }
}

// ----------------------------------------------------------------------------
// forward: grid (B*NH, ceil(T/FBR)), FBR/(16 FMT) warps of FMT row tiles; out and stats of
// the block's queries

template <class E, class C, bool DROP>
__global__ void __launch_bounds__(C::FNT, C::FMB) rtc_fa_tc_forward_kernel(rtc_fa_args a) {
    typedef rtc_tc_fwd_layout<E, C> L;
    typedef typename rtc_tc_reg<E>::type reg;
    enum { BR = L::BR, BC = L::BC, MT = L::MT, NT = L::NT, LDE = L::LDE };
    enum { NK = C::HDP / 16, ND = C::HDP / 8, NJ = BC / 8 };
    RTC_TC_SMEM(rtc_tc_smem);
    E* qs = (E*)(rtc_tc_smem + L::q);
    const int T = a.T, HD = a.HD, nk = HD / 16, nd = HD / 8;
    const int b = blockIdx.x / a.NH, h = blockIdx.x % a.NH, hk = h / (a.NH / a.NKV);
    const int qt = a.causal ? (int)gridDim.y - 1 - (int)blockIdx.y : (int)blockIdx.y;
    const int q0 = qt * BR;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * 16 * MT;
    const int g = lane >> 2, t = lane & 3;
    int tq[MT][2];  // this lane's two rows of each row tile u (rows r0 + 16 u to + 15)
#pragma unroll
    for (int u = 0; u < MT; u++)
        tq[u][0] = q0 + r0 + 16 * u + g, tq[u][1] = q0 + r0 + 16 * u + g + 8;
    const size_t ldq = (size_t)a.NH * HD, ldk = (size_t)a.NKV * HD;
    const E* kg = (const E*)a.k16 + (size_t)b * T * ldk + (size_t)hk * HD;
    const E* vg = (const E*)a.v16 + (size_t)b * T * ldk + (size_t)hk * HD;
    const int kend = a.causal ? (q0 + BR < T ? q0 + BR : T) : T;
    const int ntiles = (kend + BC - 1) / BC;

    rtc_tc_load<E, NT, LDE, BR>(qs, (const E*)a.q16 + (size_t)b * T * ldq + (size_t)h * HD, ldq,
                                q0, T, HD);
    rtc_cp_commit();
    rtc_tc_kv_issue<E, L, NT>(rtc_tc_smem, kg, vg, ldk, 0, T, HD);  // groups: Q, key tile 0
    rtc_cp_wait<1>();                                             // Q
    __syncthreads();
    reg qa[MT][NK][4];
#pragma unroll
    for (int u = 0; u < MT; u++)
#pragma unroll
        for (int kk = 0; kk < NK; kk++)
            if (kk < nk)
                rtc_tc_lda<E>(qa[u][kk], qs + r0 * LDE + 16 * u * LDE + 16 * kk, LDE, lane);
    __syncthreads();  // every warp has its Q fragments: key tile 1 may land over qs
    float o[MT][ND][4];
#pragma unroll
    for (int u = 0; u < MT; u++) rtc_tc_zero<ND>(o[u]);
    // m: the row max of the unscaled scores; l: the sum of this lane's columns only
    float m[MT][2], l[MT][2];
#pragma unroll
    for (int u = 0; u < MT; u++) m[u][0] = m[u][1] = -INFINITY, l[u][0] = l[u][1] = 0.0f;
    const float sl2 = a.scale * RTC_TC_LOG2E;  // unscaled score to base-2 exponent
    for (int j = 0; j < ntiles; j++) {
        const int k0 = j * BC;
        const E *ks, *vs;
        rtc_tc_kv_next<E, L, NT>(rtc_tc_smem, kg, vg, ldk, j, ntiles, T, HD, ks, vs);
        bool act[MT];
        rtc_tc_query_tiles_busy<MT>(act, q0 + r0, k0, T, a.causal);
        auto tiles = [&](auto lo, auto hi) {  // row tiles [LO, HI)
            constexpr int LO = decltype(lo)::value, HI = decltype(hi)::value;
            // S = Q K^T
            float s[MT][NJ][4];
#pragma unroll
            for (int u = LO; u < HI; u++) rtc_tc_zero<NJ>(s[u]);
            rtc_tc_mma_nt<E, NJ, NK, MT, LO, HI>(s, qa, ks, LDE, nk, lane);
#pragma unroll
            for (int u = LO; u < HI; u++) {
                // online softmax on the unscaled scores (scale > 0: their max, times scale, is
                // the scaled scores' max, bit for bit); element i of s[u][jj] is row
                // tq[u][i / 2], key k0 + 8 jj + 2 t + i % 2. Only tiles reaching past T or
                // (causal) past the row tile's first row have keys to hide.
                if (k0 + BC > T || (a.causal && k0 + BC - 1 > q0 + r0 + 16 * u))
                    rtc_tc_mask_rows<NJ>(s[u], tq[u], k0 + 2 * t, T, a.causal);
                float mt[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int jj = 0; jj < NJ; jj++) {
                    mt[0] = fmaxf(mt[0], fmaxf(s[u][jj][0], s[u][jj][1]));
                    mt[1] = fmaxf(mt[1], fmaxf(s[u][jj][2], s[u][jj][3]));
                }
                float nb[2], alpha[2];  // p = 2^(s sl2 + nb): nb = -m sl2 for the new max m
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const float mnew = fmaxf(m[u][r], rtc_tc_group_max(mt[r]));
                    // a row with nothing visible stays empty
                    nb[r] = mnew == -INFINITY ? 0.0f : -mnew * sl2;
                    alpha[r] = mnew == m[u][r] ? 1.0f : rtc_tc_exp2(fmaf(m[u][r], sl2, nb[r]));
                    m[u][r] = mnew;
                    l[u][r] *= alpha[r];
                }
#pragma unroll
                for (int jj = 0; jj < NJ; jj++) {
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        s[u][jj][i] = rtc_tc_exp2(fmaf(s[u][jj][i], sl2, nb[i >> 1]));
                        l[u][i >> 1] += s[u][jj][i];
                    }
                }
                if constexpr (DROP)  // l summed the undropped P; P Z multiplies V
                    rtc_tc_drop_rows<NJ>(s[u], a, blockIdx.x, tq[u], k0 + 2 * t);
#pragma unroll
                for (int d = 0; d < ND; d++) {
                    o[u][d][0] *= alpha[0], o[u][d][1] *= alpha[0];
                    o[u][d][2] *= alpha[1], o[u][d][3] *= alpha[1];
                }
            }
            // O += P V (V: k = key down the tile, n = dim along its rows)
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++) {
                reg pa[MT][4];
#pragma unroll
                for (int u = LO; u < HI; u++) rtc_tc_acc_to_a<E, NJ>(pa[u], s[u], kk);
                rtc_tc_mma_rows<E, ND, false, MT, LO, HI>(o, pa, vs + 16 * kk * LDE, LDE, nd, lane);
            }
        };
        rtc_tc_on_tiles<MT, false>(act, tiles);
        __syncthreads();  // every reader of buffer j % 2 is done before tile j + 2 lands there
    }
    const size_t o0 = (size_t)b * T * ldq + (size_t)h * HD;  // out's (b, 0, h, 0)
    const bool rnd = a.dt != RT_F32;
#pragma unroll
    for (int u = 0; u < MT; u++) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const float lr = rtc_tc_group_sum(l[u][r]);
            const float inv = lr > 0.0f ? 1.0f / lr : 0.0f;  // l >= 1 for every row inside T
            if (tq[u][r] < T) {
                const size_t e0 = o0 + (size_t)tq[u][r] * ldq + 2 * t;
#pragma unroll
                for (int d = 0; d < ND; d++) {
                    if (d < nd) {
                        const float x0 = o[u][d][2 * r] * inv, x1 = o[u][d][2 * r + 1] * inv;
                        if (a.out16) {  // packed: E is dt's type
                            ((E*)a.out16)[e0 + 8 * d] = rtc_tc_narrow<E>(x0);
                            ((E*)a.out16)[e0 + 8 * d + 1] = rtc_tc_narrow<E>(x1);
                        } else {
                            a.out[e0 + 8 * d] = rnd ? rtc_tc_round<E>(x0) : x0;
                            a.out[e0 + 8 * d + 1] = rnd ? rtc_tc_round<E>(x1) : x1;
                        }
                    }
                }
                if (t == 0) {
                    float* st = a.stats + (((size_t)b * a.NH + h) * T + tq[u][r]) * 2;
                    st[0] = m[u][r] * a.scale;
                    st[1] = inv;
                }
            }
        }
    }
}

// ----------------------------------------------------------------------------
// backward 2: grid (B*NKV, ceil(T/KBC)), KBC/(16 KMT) warps of KMT key tiles; dK and dV of
// the block's keys, summed over the query tiles of the NH/NKV query heads that share the
// kv head

template <class E, class C, bool DROP>
__global__ void __launch_bounds__(C::KNT, C::KMB) rtc_fa_tc_dkdv_kernel(rtc_fa_args a) {
    typedef rtc_tc_dkdv_layout<E, C> L;
    typedef typename rtc_tc_reg<E>::type reg;
    enum { BC = L::BC, BR = L::BR, MT = L::MT, NT = L::NT, LDE = L::LDE };
    enum { NK = C::HDP / 16, ND = C::HDP / 8, NJ = BR / 8 };
    RTC_TC_SMEM(rtc_tc_smem);
    const E* ks = (const E*)(rtc_tc_smem + L::k);
    const E* vs = (const E*)(rtc_tc_smem + L::v);
    const int T = a.T, HD = a.HD, nk = HD / 16, nd = HD / 8, G = a.NH / a.NKV;
    const int b = blockIdx.x / a.NKV, hk = blockIdx.x % a.NKV;
    const int k0 = blockIdx.y * BC;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * 16 * MT;
    const int g = lane >> 2, t = lane & 3;
    int tk[MT][2];  // this lane's two keys of each key tile u (keys k0 + r0 + 16 u to + 15)
#pragma unroll
    for (int u = 0; u < MT; u++)
        tk[u][0] = k0 + r0 + 16 * u + g, tk[u][1] = k0 + r0 + 16 * u + g + 8;
    const size_t ldq = (size_t)a.NH * HD, ldk = (size_t)a.NKV * HD;
    const size_t kvoff = (size_t)b * T * ldk + (size_t)hk * HD;
    const size_t lddk = a.ld_dk ? (size_t)a.ld_dk : ldk, lddv = a.ld_dv ? (size_t)a.ld_dv : ldk;
    const bool want_dk = a.dk != NULL, want_dv = a.dv != NULL;
    const float sl2 = a.scale * RTC_TC_LOG2E;  // unscaled score to base-2 exponent
    // query tiles: nq per head from qstart (earlier queries see none of these keys), for
    // the G heads of the group; tile n goes to buffer n % 2. In head order, each head's
    // tiles in order.
    const int qstart = a.causal ? k0 / BR * BR : 0;
    const int nq = (T - qstart + BR - 1) / BR, ntiles = G * nq;
    struct tile_at {  // where tile n's rows come from
        int h, q0;
    };
    auto tile = [&](int n) { return tile_at{hk * G + n / nq, qstart + n % nq * BR}; };
    auto issue = [&](int n) {  // tile n's copies (Q, dO, stats) into buffer n % 2
        const tile_at x = tile(n);
        const size_t qoff = (size_t)b * T * ldq + (size_t)x.h * HD, nb = (size_t)(n & 1);
        rtc_tc_load<E, NT, LDE, BR>((E*)(rtc_tc_smem + L::q + nb * L::qd),
                                    (const E*)a.q16 + qoff, ldq, x.q0, T, HD);
        rtc_tc_load<E, NT, LDE, BR>((E*)(rtc_tc_smem + L::dout + nb * L::qd),
                                    (const E*)a.dout16 + qoff, ldq, x.q0, T, HD);
        rtc_tc_load_stats<NT>((float*)(rtc_tc_smem + L::m + nb * L::st),
                              (float*)(rtc_tc_smem + L::inv + nb * L::st),
                              (float*)(rtc_tc_smem + L::D + nb * L::st), a, b, x.h, x.q0, BR);
        rtc_cp_commit();
    };

    rtc_tc_load<E, NT, LDE, BC>((E*)(rtc_tc_smem + L::k), (const E*)a.k16 + kvoff, ldk, k0, T, HD);
    rtc_tc_load<E, NT, LDE, BC>((E*)(rtc_tc_smem + L::v), (const E*)a.v16 + kvoff, ldk, k0, T, HD);
    issue(0);  // one group with K and V
    float dk[MT][ND][4], dv[MT][ND][4];
#pragma unroll
    for (int u = 0; u < MT; u++) rtc_tc_zero<ND>(dk[u]), rtc_tc_zero<ND>(dv[u]);
    for (int n = 0; n < ntiles; n++) {
        if (n + 1 < ntiles) {  // the buffer tile n - 1 used: its readers passed the barrier
            issue(n + 1);
            rtc_cp_wait<1>();  // tile n
        } else {
            rtc_cp_wait<0>();
        }
        __syncthreads();
        const tile_at x = tile(n);
        const size_t cb = (size_t)(n & 1);
        const E* qs = (const E*)(rtc_tc_smem + L::q + cb * L::qd);
        const E* dos = (const E*)(rtc_tc_smem + L::dout + cb * L::qd);
        const float* ms = (const float*)(rtc_tc_smem + L::m + cb * L::st);
        const float* invs = (const float*)(rtc_tc_smem + L::inv + cb * L::st);
        const float* Ds = (const float*)(rtc_tc_smem + L::D + cb * L::st);
        // the key tiles with work: the others' keys are all past T or (causal) after every
        // query of the tile (the first tile has work whenever the second has)
        bool act[MT];
#pragma unroll
        for (int u = 0; u < MT; u++)
            act[u] = k0 + r0 + 16 * u < T && !(a.causal && x.q0 + BR - 1 < k0 + r0 + 16 * u);
        auto tiles = [&](auto lo, auto hi) {  // key tiles [LO, HI)
            constexpr int LO = decltype(lo)::value, HI = decltype(hi)::value;
            // S^T = K Q^T and dP^T = V dO^T: rows are the warp's keys, columns the queries
            // (k = dim along the rows of Q and dO)
            float st[MT][NJ][4], dpt[MT][NJ][4];
#pragma unroll
            for (int u = LO; u < HI; u++) rtc_tc_zero<NJ>(st[u]), rtc_tc_zero<NJ>(dpt[u]);
#pragma unroll
            for (int kk = 0; kk < NK; kk++) {
                if (kk < nk) {
                    reg xa[MT][4];
#pragma unroll
                    for (int u = LO; u < HI; u++)
                        rtc_tc_lda<E>(xa[u], ks + r0 * LDE + 16 * u * LDE + 16 * kk, LDE, lane);
                    rtc_tc_mma_rows<E, NJ, true, MT, LO, HI>(st, xa, qs + 16 * kk, LDE, NJ, lane);
                    if (want_dk) {
#pragma unroll
                        for (int u = LO; u < HI; u++)
                            rtc_tc_lda<E>(xa[u], vs + r0 * LDE + 16 * u * LDE + 16 * kk, LDE, lane);
                        rtc_tc_mma_rows<E, NJ, true, MT, LO, HI>(dpt, xa, dos + 16 * kk, LDE, NJ,
                                                                 lane);
                    }
                }
            }
            // P^T (into st) and dS^T (into dpt): element i of st[u][j] is key tk[u][i / 2],
            // query column c = 8 j + 2 t + i % 2. Only tiles reaching past T or (causal)
            // holding queries before the key tile's last key have pairs to hide.
            bool mask[MT];
#pragma unroll
            for (int u = LO; u < HI; u++)
                mask[u] = x.q0 + BR > T || k0 + r0 + 16 * u + 16 > T ||
                          (a.causal && x.q0 < k0 + r0 + 16 * u + 15);
#pragma unroll
            for (int j = 0; j < NJ; j++) {
#pragma unroll
                for (int ci = 0; ci < 2; ci++) {
                    const int c = 8 * j + 2 * t + ci;
                    // p = 2^(s sl2 + nb) / l
                    const float nb = -ms[c] * RTC_TC_LOG2E, inv = invs[c];
#pragma unroll
                    for (int u = LO; u < HI; u++) {
#pragma unroll
                        for (int i = ci; i < 4; i += 2) {
                            const float p =
                                mask[u] && !rtc_fa_visible(x.q0 + c, tk[u][i >> 1], T, a.causal)
                                    ? 0.0f
                                    : rtc_tc_exp2(fmaf(st[u][j][i], sl2, nb)) * inv;
                            if constexpr (DROP) {
                                const float z = rtc_fa_drop(a, (size_t)b * a.NH + x.h, x.q0 + c,
                                                            tk[u][i >> 1]);
                                st[u][j][i] = p * z;
                                if (want_dk) dpt[u][j][i] = p * (z * dpt[u][j][i] - Ds[c]);
                            } else {
                                st[u][j][i] = p;
                                if (want_dk) dpt[u][j][i] = p * (dpt[u][j][i] - Ds[c]);
                            }
                        }
                    }
                }
            }
            // dV += P^T dO, dK += dS^T Q (k = query down the tiles, n = dim along their rows)
#pragma unroll
            for (int kk = 0; kk < BR / 16; kk++) {
                reg xa[MT][4];
                if (want_dv) {
#pragma unroll
                    for (int u = LO; u < HI; u++) rtc_tc_acc_to_a<E, NJ>(xa[u], st[u], kk);
                    rtc_tc_mma_rows<E, ND, false, MT, LO, HI>(dv, xa, dos + 16 * kk * LDE, LDE,
                                                              nd, lane);
                }
                if (want_dk) {
#pragma unroll
                    for (int u = LO; u < HI; u++) rtc_tc_acc_to_a<E, NJ>(xa[u], dpt[u], kk);
                    rtc_tc_mma_rows<E, ND, false, MT, LO, HI>(dk, xa, qs + 16 * kk * LDE, LDE,
                                                              nd, lane);
                }
            }
        };
        rtc_tc_on_tiles<MT, true>(act, tiles);
        __syncthreads();  // every reader of buffer n % 2 is done before tile n + 2 lands there
    }
    const bool rnd = a.dt != RT_F32;
#pragma unroll
    for (int u = 0; u < MT; u++) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            if (tk[u][r] >= T) continue;
            const size_t row = (size_t)b * T + tk[u][r], col = (size_t)hk * HD + 2 * t;
            if (want_dv)  // x * 1 is x, bit for bit
                rtc_tc_add_grad_row<E, ND>(a.dv, a.grads16 & RTC_FA_ASSIGN_DV, row * lddv + col,
                                           dv[u], r, 1.0f, nd, a.assign & RTC_FA_ASSIGN_DV, rnd);
            if (want_dk)
                rtc_tc_add_grad_row<E, ND>(a.dk, a.grads16 & RTC_FA_ASSIGN_DK, row * lddk + col,
                                           dk[u], r, a.scale, nd, a.assign & RTC_FA_ASSIGN_DK,
                                           rnd);
        }
    }
}

// ----------------------------------------------------------------------------
// backward 3: grid (B*NH, ceil(T/QBR)), QBR/(16 QMT) warps of QMT row tiles; dQ of the
// block's queries

template <class E, class C, bool DROP>
__global__ void __launch_bounds__(C::QNT, C::QMB) rtc_fa_tc_dq_kernel(rtc_fa_args a) {
    typedef rtc_tc_dq_layout<E, C> L;
    typedef typename rtc_tc_reg<E>::type reg;
    enum { BR = L::BR, BC = L::BC, MT = L::MT, NT = L::NT, LDE = L::LDE };
    enum { NK = C::HDP / 16, ND = C::HDP / 8, NJ = BC / 8 };
    RTC_TC_SMEM(rtc_tc_smem);
    E* qs = (E*)(rtc_tc_smem + L::q);
    E* dos = (E*)(rtc_tc_smem + L::dout);
    float* ms = (float*)(rtc_tc_smem + L::m);
    float* invs = (float*)(rtc_tc_smem + L::inv);
    float* Ds = (float*)(rtc_tc_smem + L::D);
    const int T = a.T, HD = a.HD, nk = HD / 16, nd = HD / 8;
    const int b = blockIdx.x / a.NH, h = blockIdx.x % a.NH, hk = h / (a.NH / a.NKV);
    const int qt = a.causal ? (int)gridDim.y - 1 - (int)blockIdx.y : (int)blockIdx.y;
    const int q0 = qt * BR;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * 16 * MT;
    const int g = lane >> 2, t = lane & 3;
    int tq[MT][2];  // this lane's two queries of each row tile u (rows r0 + 16 u to + 15)
#pragma unroll
    for (int u = 0; u < MT; u++)
        tq[u][0] = q0 + r0 + 16 * u + g, tq[u][1] = q0 + r0 + 16 * u + g + 8;
    const size_t ldq = (size_t)a.NH * HD, ldk = (size_t)a.NKV * HD;
    const size_t qoff = (size_t)b * T * ldq + (size_t)h * HD;
    const size_t lddq = a.ld_dq ? (size_t)a.ld_dq : ldq;
    const E* kg = (const E*)a.k16 + (size_t)b * T * ldk + (size_t)hk * HD;
    const E* vg = (const E*)a.v16 + (size_t)b * T * ldk + (size_t)hk * HD;
    const int kend = a.causal ? (q0 + BR < T ? q0 + BR : T) : T;
    const int ntiles = (kend + BC - 1) / BC;

    rtc_tc_load<E, NT, LDE, BR>(qs, (const E*)a.q16 + qoff, ldq, q0, T, HD);
    rtc_tc_load<E, NT, LDE, BR>(dos, (const E*)a.dout16 + qoff, ldq, q0, T, HD);
    rtc_tc_load_stats<NT>(ms, invs, Ds, a, b, h, q0, BR);
    rtc_cp_commit();
    rtc_tc_kv_issue<E, L, NT>(rtc_tc_smem, kg, vg, ldk, 0, T, HD);  // groups: Q, dO, stats; tile 0
    rtc_cp_wait<1>();                                             // Q, dO, stats
    __syncthreads();
    reg qa[MT][NK][4], doa[MT][NK][4];
#pragma unroll
    for (int u = 0; u < MT; u++) {
#pragma unroll
        for (int kk = 0; kk < NK; kk++) {
            if (kk < nk) {
                rtc_tc_lda<E>(qa[u][kk], qs + r0 * LDE + 16 * u * LDE + 16 * kk, LDE, lane);
                rtc_tc_lda<E>(doa[u][kk], dos + r0 * LDE + 16 * u * LDE + 16 * kk, LDE, lane);
            }
        }
    }
    float mr[MT][2], invr[MT][2], Dr[MT][2];  // the stats of this lane's rows
#pragma unroll
    for (int u = 0; u < MT; u++) {
        mr[u][0] = ms[r0 + 16 * u + g], mr[u][1] = ms[r0 + 16 * u + g + 8];
        invr[u][0] = invs[r0 + 16 * u + g], invr[u][1] = invs[r0 + 16 * u + g + 8];
        Dr[u][0] = Ds[r0 + 16 * u + g], Dr[u][1] = Ds[r0 + 16 * u + g + 8];
    }
    // p = 2^(s sl2 + nb) / l for the unscaled score s (m: the scaled scores' max)
    const float sl2 = a.scale * RTC_TC_LOG2E;
    float nb[MT][2];
#pragma unroll
    for (int u = 0; u < MT; u++)
        nb[u][0] = -mr[u][0] * RTC_TC_LOG2E, nb[u][1] = -mr[u][1] * RTC_TC_LOG2E;
    float dq[MT][ND][4];
#pragma unroll
    for (int u = 0; u < MT; u++) rtc_tc_zero<ND>(dq[u]);
    for (int j = 0; j < ntiles; j++) {
        const int k0 = j * BC;
        const E *ks, *vs;
        rtc_tc_kv_next<E, L, NT>(rtc_tc_smem, kg, vg, ldk, j, ntiles, T, HD, ks, vs);
        bool act[MT];
        rtc_tc_query_tiles_busy<MT>(act, q0 + r0, k0, T, a.causal);
        auto tiles = [&](auto lo, auto hi) {  // row tiles [LO, HI)
            constexpr int LO = decltype(lo)::value, HI = decltype(hi)::value;
            // S = Q K^T and dP = dO V^T
            float s[MT][NJ][4], dp[MT][NJ][4];
#pragma unroll
            for (int u = LO; u < HI; u++) rtc_tc_zero<NJ>(s[u]), rtc_tc_zero<NJ>(dp[u]);
            rtc_tc_mma_nt<E, NJ, NK, MT, LO, HI>(s, qa, ks, LDE, nk, lane);
            rtc_tc_mma_nt<E, NJ, NK, MT, LO, HI>(dp, doa, vs, LDE, nk, lane);
#pragma unroll
            for (int u = LO; u < HI; u++) {
                // dS (into s): element i of s[u][jj] is query tq[u][i / 2], key
                // k0 + 8 jj + 2 t + i % 2; hidden keys as the forward's (-inf: P and dS 0)
                if (k0 + BC > T || (a.causal && k0 + BC - 1 > q0 + r0 + 16 * u))
                    rtc_tc_mask_rows<NJ>(s[u], tq[u], k0 + 2 * t, T, a.causal);
                if constexpr (DROP)  // Z dP: then dS = P (Z dP - D)
                    rtc_tc_drop_rows<NJ>(dp[u], a, blockIdx.x, tq[u], k0 + 2 * t);
#pragma unroll
                for (int jj = 0; jj < NJ; jj++) {
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const int r = i >> 1;
                        const float p =
                            rtc_tc_exp2(fmaf(s[u][jj][i], sl2, nb[u][r])) * invr[u][r];
                        s[u][jj][i] = p * (dp[u][jj][i] - Dr[u][r]);
                    }
                }
            }
            // dQ += dS K (k = key down the tile, n = dim along its rows)
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++) {
                reg dsa[MT][4];
#pragma unroll
                for (int u = LO; u < HI; u++) rtc_tc_acc_to_a<E, NJ>(dsa[u], s[u], kk);
                rtc_tc_mma_rows<E, ND, false, MT, LO, HI>(dq, dsa, ks + 16 * kk * LDE, LDE, nd,
                                                          lane);
            }
        };
        rtc_tc_on_tiles<MT, false>(act, tiles);
        __syncthreads();  // every reader of buffer j % 2 is done before tile j + 2 lands there
    }
    const bool rnd = a.dt != RT_F32;
#pragma unroll
    for (int u = 0; u < MT; u++) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            if (tq[u][r] >= T) continue;
            const size_t row = (size_t)b * T + tq[u][r], col = (size_t)h * HD + 2 * t;
            rtc_tc_add_grad_row<E, ND>(a.dq, a.grads16 & RTC_FA_ASSIGN_DQ, row * lddq + col,
                                       dq[u], r, a.scale, nd, a.assign & RTC_FA_ASSIGN_DQ, rnd);
        }
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

template <class E, class C, class Launch>
void rtc_fa_tc_forward_hd(Launch& launch, const rtc_fa_args& a) {
    typedef rtc_tc_fwd_layout<E, C> L;
    const dim3 grid((unsigned)(a.B * a.NH), rtc_fa_tiles(a.T, L::BR));
    if (a.drop_p > 0.0f)
        launch(rtc_fa_tc_forward_kernel<E, C, true>, grid, (unsigned)L::NT, L::bytes, a);
    else
        launch(rtc_fa_tc_forward_kernel<E, C, false>, grid, (unsigned)L::NT, L::bytes, a);
}

template <class E, class C, class Launch>
void rtc_fa_tc_backward_hd(Launch& launch, const rtc_fa_args& a) {
    typedef rtc_tc_dkdv_layout<E, C> K;
    typedef rtc_tc_dq_layout<E, C> Q;
    const bool drop = a.drop_p > 0.0f;
    if (a.dk || a.dv) {
        const dim3 grid((unsigned)(a.B * a.NKV), rtc_fa_tiles(a.T, K::BC));
        if (drop)
            launch(rtc_fa_tc_dkdv_kernel<E, C, true>, grid, (unsigned)K::NT, K::bytes, a);
        else
            launch(rtc_fa_tc_dkdv_kernel<E, C, false>, grid, (unsigned)K::NT, K::bytes, a);
    }
    if (a.dq) {
        const dim3 grid((unsigned)(a.B * a.NH), rtc_fa_tiles(a.T, Q::BR));
        if (drop)
            launch(rtc_fa_tc_dq_kernel<E, C, true>, grid, (unsigned)Q::NT, Q::bytes, a);
        else
            launch(rtc_fa_tc_dq_kernel<E, C, false>, grid, (unsigned)Q::NT, Q::bytes, a);
    }
}

// The entry points below take the configurations of HDP 64 and 128 as template arguments,
// rtc_tc_cfg's by default (tests/cuda/test_flash_tc_emu.cc runs others against them).

// Calls set(kernel, smem_bytes) for the kernels of configuration C, with dropout or not.
template <class E, class C, bool DROP, class Set>
void rtc_fa_tc_each_kernel_cfg(Set& set) {
    set(rtc_fa_tc_forward_kernel<E, C, DROP>, rtc_tc_fwd_layout<E, C>::bytes);
    set(rtc_fa_tc_dkdv_kernel<E, C, DROP>, rtc_tc_dkdv_layout<E, C>::bytes);
    set(rtc_fa_tc_dq_kernel<E, C, DROP>, rtc_tc_dq_layout<E, C>::bytes);
}

// Calls set(kernel, smem_bytes) for every tensor-core kernel of element type E.
template <class E, class C64 = rtc_tc_cfg<64>, class C128 = rtc_tc_cfg<128>, class Set>
void rtc_fa_tc_each_kernel(Set& set) {
    rtc_fa_tc_each_kernel_cfg<E, C64, false>(set);
    rtc_fa_tc_each_kernel_cfg<E, C128, false>(set);
    rtc_fa_tc_each_kernel_cfg<E, C64, true>(set);
    rtc_fa_tc_each_kernel_cfg<E, C128, true>(set);
}

// Forward: out and stats. B, T > 0 and rtc_fa_tc_hdp(HD) != 0 (the caller checks); a.q16,
// a.k16, a.v16 hold q, k, v narrowed to E.
template <class E, class C64 = rtc_tc_cfg<64>, class C128 = rtc_tc_cfg<128>, class Launch>
void rtc_fa_tc_forward(Launch& launch, const rtc_fa_args& a) {
    if (rtc_fa_tc_hdp(a.HD) == 64)
        rtc_fa_tc_forward_hd<E, C64>(launch, a);
    else
        rtc_fa_tc_forward_hd<E, C128>(launch, a);
}

// Backward: D into a.D (when dq or dk is wanted; a.D is the scratch), then dK/dV and dQ;
// a.q16, a.k16, a.v16, a.dout16 hold q, k, v, dout narrowed to E.
template <class E, class C64 = rtc_tc_cfg<64>, class C128 = rtc_tc_cfg<128>, class Launch>
void rtc_fa_tc_backward(Launch& launch, rtc_fa_args a) {
    if (!a.dq && !a.dk && !a.dv) return;
    if (a.dq || a.dk) {
        rtc_fa_dot(launch, a);
    } else {
        a.D = NULL;  // dV alone needs no dS
    }
    if (rtc_fa_tc_hdp(a.HD) == 64)
        rtc_fa_tc_backward_hd<E, C64>(launch, a);
    else
        rtc_fa_tc_backward_hd<E, C128>(launch, a);
}

#endif
