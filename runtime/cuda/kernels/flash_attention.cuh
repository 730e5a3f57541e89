// Flash attention kernels (fp32, causal or not, multi-head and grouped-query) behind
// rt_attention_lowmem_forward / rt_attention_lowmem_backward (attention.cu): scores and
// probabilities live only in shared memory, tile by tile; nothing of size T x T is
// written to global memory.
//   forward   one block per (batch, query head, tile of FBR queries); walks the key tiles
//             with the online softmax (running max m and sum l, the output rescaled as m
//             grows), writes out and the row statistics (m, 1/l) that backward reuses.
//   backward  FlashAttention-2 without atomics, deterministic:
//             1. D = rowsum(dO * O) per query row, into the scratch [B,NH,T];
//             2. dK, dV: one block per (batch, kv head, tile of KBC keys) walks the query
//                tiles of every query head sharing that kv head (GQA), in head order,
//                recomputing P = exp(s - m) / l and dS = P (dP - D) per tile, and owns
//                its dK/dV rows (one store each: added to, or assigned, and rounded);
//             3. dQ: one block per (batch, query head, tile of QBR queries) walks the key
//                tiles, recomputing the same P and dS (same float operations, same bits
//                as in 2), and owns its dQ rows.
//             The price of no atomics is computing P and dP twice (in 2 and 3).
// Attention dropout (rt_kernels.h rt_attention_lowmem_dropout_forward): the kernels' DROP
// instantiations multiply each visible probability by its mask factor Z (rtc_fa_drop, one
// Philox draw per element, the same in forward, dK/dV and dQ): O sums (P Z) V while m and l
// stay the undropped softmax's; dV sums (P Z)^T dO and dS = P (Z dP - D), D = rowsum(dO O)
// being rowsum(P Z dP) still. The other instantiations (a.drop_p 0) have no dropout code.
//
// Threads: RTC_FA_NT per block; a block's rows (queries, or keys in the dK/dV kernel) get
// TPR = RTC_FA_NT / rows threads each. Thread j of a row computes the dot products with
// the other side's rows j, j + TPR, ... of the tile, and owns head dims j, j + TPR, ... of
// the row's accumulators. Every dot product is one float sum over d = 0..HD-1 in order
// (-fmad=false), so the backward's recomputed scores equal the forward's bit for bit.
// Shared-memory rows are padded to HDP + 1 floats (no bank conflicts between rows); HD is
// rounded up to HDP in {32, 64, 128, 256} to pick a tile configuration (rtc_fa_cfg);
// larger head dims are rejected by the caller.
//
// Only CUDA C++ that also compiles for the host with tests/cuda/cuda_emu.h (__syncthreads
// as the only synchronisation, no warp intrinsics): tests/cuda/test_flash_emu.cc runs
// these very kernels and their launch logic on the CPU, one thread per CUDA thread.
// These fp32 kernels serve prec RT_F32 and head dims the tensor-core kernels do not take;
// bf16/fp16 operands run on tensor cores in flash_attention_tc.cuh.
#ifndef FSDPGEN_CUDA_FLASH_ATTENTION_CUH
#define FSDPGEN_CUDA_FLASH_ATTENTION_CUH

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "../../common/attention_shape.h"  // rt_attention_scale
#include "../../common/dtype_bits.h"  // rt_round_inl
#include "../../common/philox.h"      // rt_philox_block_inl, rt_philox_u01_inl

// Dynamic shared memory of a kernel (the emulator supplies its own).
#ifndef RTC_FA_SMEM
#define RTC_FA_SMEM(name) extern __shared__ float name[]
#endif

#define RTC_FA_NT 128     // threads per block
#define RTC_FA_MAX_HD 256

// Shapes (B batch, T sequence, NH query heads, NKV kv heads, HD head dim) and buffers:
//   q, out, dout, dq [B,T,NH*HD]; k, v, dk, dv [B,T,NKV*HD]; stats [B,NH,T,2] (m, 1/l);
//   D [B,NH,T]. dq, dk, dv nullable (backward adds to them, or assigns those whose
//   RTC_FA_ASSIGN_ bit is set; never two of them one buffer with a bit set or dt 16-bit).
typedef struct {
    const float *q, *k, *v, *dout, *out_in;
    float *out, *stats, *D, *dq, *dk, *dv;
    const float* stats_in;
    // the tensor-core kernels' operands (flash_attention_tc.cuh): q, k, v, dout narrowed to
    // their 16-bit type, dense in the same layout (dout16 for backward only), or packed
    // (rt_kernels.h "packed 16-bit storage")
    const void *q16, *k16, *v16, *dout16;
    // packed 16-bit storage of dt: the tensor-core forward writes out16 when it is set
    // (out is then NULL); D reads out16_in when out_in is NULL, dout16 when dout is NULL
    void* out16;
    const void* out16_in;
    int B, T, NH, NKV, HD, causal;
    float scale;  // 1/sqrt(HD), as the CPU kernel rounds it
    rt_dtype dt;  // out, dq, dk, dv rounded to it at their one store (RT_F32: not rounded)
    int assign;   // RTC_FA_ASSIGN_DQ | _DK | _DV (rt_kernels.h RT_ASSIGN_1, _2, _3)
    // the same bits: the gradients the tensor-core backward reads and writes as packed
    // 16-bit storage of dt (dq, dk, dv then point at it); the fp32 kernels take none
    int grads16;
    // row lengths (elements) of dq, dk, dv as the tensor-core backward reads and writes them,
    // 0 dense (rt_kernels.h "Gradient row lengths"); the fp32 kernels write dense rows
    int ld_dq, ld_dk, ld_dv;
    // attention dropout: probability (b, h, i, j) kept iff rt_dropout_uniform(drop_seed,
    // drop_stream, ((b NH + h) T + i) T + j) >= drop_p, kept ones times drop_scale (1/(1-p));
    // drop_p 0: no dropout (the kernels without it run)
    float drop_p, drop_scale;
    uint64_t drop_seed, drop_stream;
} rtc_fa_args;

enum { RTC_FA_ASSIGN_DQ = 1, RTC_FA_ASSIGN_DK = 2, RTC_FA_ASSIGN_DV = 4 };

// Tile sizes per padded head dim: forward FBR queries x FBC keys, dK/dV KBC keys x KBR
// queries, dQ QBR queries x QBC keys. Each row count divides RTC_FA_NT; each column count
// and HDP are multiples of the threads per row.
template <int HDP>
struct rtc_fa_cfg;
template <>
struct rtc_fa_cfg<32> {
    enum { FBR = 32, FBC = 64, KBC = 32, KBR = 64, QBR = 32, QBC = 64 };
};
template <>
struct rtc_fa_cfg<64> {
    enum { FBR = 32, FBC = 64, KBC = 32, KBR = 32, QBR = 32, QBC = 32 };
};
template <>
struct rtc_fa_cfg<128> {
    enum { FBR = 32, FBC = 32, KBC = 32, KBR = 32, QBR = 32, QBC = 32 };
};
template <>
struct rtc_fa_cfg<256> {
    enum { FBR = 16, FBC = 32, KBC = 16, KBR = 16, QBR = 16, QBC = 16 };
};

// Shared-memory floats of each kernel.
template <int HDP>
constexpr size_t rtc_fa_fwd_smem() {
    typedef rtc_fa_cfg<HDP> c;
    return (size_t)c::FBR * (HDP + 1) + (size_t)c::FBC * (HDP + 1) + (size_t)c::FBR * (c::FBC + 1);
}
template <int HDP>
constexpr size_t rtc_fa_dkdv_smem() {
    typedef rtc_fa_cfg<HDP> c;
    return 2 * (size_t)c::KBC * (HDP + 1) + 2 * (size_t)c::KBR * (HDP + 1) +
           2 * (size_t)c::KBC * (c::KBR + 1) + 3 * (size_t)c::KBR;
}
template <int HDP>
constexpr size_t rtc_fa_dq_smem() {
    typedef rtc_fa_cfg<HDP> c;
    return 2 * (size_t)c::QBR * (HDP + 1) + 2 * (size_t)c::QBC * (HDP + 1) +
           (size_t)c::QBR * (c::QBC + 1) + 3 * (size_t)c::QBR;
}

// ----------------------------------------------------------------------------
// device helpers

// Rows [t0, t0 + R) of one head (row t at src + t * ld, HD values) into a shared tile with
// row stride HDP + 1; rows past T are zero (finite, masked later), dims past HD unused.
template <int HDP>
__device__ __forceinline__ void rtc_fa_load(float* dst, const float* src, size_t ld, int t0,
                                            int R, int T, int HD) {
    for (int i = threadIdx.x; i < R * HD; i += RTC_FA_NT) {
        const int r = i / HD, d = i % HD, t = t0 + r;
        dst[r * (HDP + 1) + d] = t < T ? src[(size_t)t * ld + d] : 0.0f;
    }
}

// acc[i] = sum over d < HD of x[d] * y[i * TPR * LD + d], summed in order d = 0, 1, ...
// (x is one shared row; y the thread's first row of the other side, then every TPR-th).
template <int N, int TPR, int LD>
__device__ __forceinline__ void rtc_fa_dots(float* acc, const float* x, const float* y,
                                            int HD) {
#pragma unroll
    for (int i = 0; i < N; i++) acc[i] = 0.0f;
    for (int d = 0; d < HD; d++) {
        const float xd = x[d];
#pragma unroll
        for (int i = 0; i < N; i++) acc[i] += xd * y[i * TPR * LD + d];
    }
}

// A gradient element's one store: its call's total v added to the old value, or to 0 when
// assigned (0 + v: the bits of accumulating onto a zeroed buffer; *g not read), rounded.
__device__ __forceinline__ void rtc_fa_store_grad(float* g, float v, bool assign, rt_dtype dt) {
    *g = rt_round_inl((assign ? 0.0f : *g) + v, dt);
}

// The arguments of a call of shape (B, T, NH, NKV, HD), causal or not, scale 1/sqrt(HD),
// with dropout of probability p in [0, 1) (0: none) drawn from seed and stream; every
// pointer NULL, for the caller to set.
static inline rtc_fa_args rtc_fa_make_args(int B, int T, int NH, int NKV, int HD, int causal,
                                           float p, uint64_t seed, uint64_t stream) {
    rtc_fa_args a;
    memset(&a, 0, sizeof a);
    a.B = B, a.T = T, a.NH = NH, a.NKV = NKV, a.HD = HD, a.causal = causal;
    a.scale = rt_attention_scale(HD);
    if (p > 0.0f) {
        a.drop_p = p, a.drop_scale = rt_dropout_scale_inl(p);
        a.drop_seed = seed, a.drop_stream = stream;
    }
    return a;
}

// The dropout mask factor Z of probability (query tq, key tk) of head bh = b NH + h: drop_scale
// when its draw keeps it, else 0 (rt_dropout_uniform's draw of element (bh T + tq) T + tk).
__device__ __forceinline__ float rtc_fa_drop(const rtc_fa_args& a, size_t bh, int tq, int tk) {
    const uint64_t e = ((uint64_t)bh * a.T + tq) * a.T + tk;
    return rt_dropout_factor_inl(rt_philox_uniform_inl(a.drop_seed, a.drop_stream, e), a.drop_p,
                                 a.drop_scale);
}

// Key tk visible from query tq (both inside the sequence, causal mask).
__device__ __forceinline__ bool rtc_fa_visible(int tq, int tk, int T, int causal) {
    return tq < T && tk < T && !(causal && tk > tq);
}

// ----------------------------------------------------------------------------
// forward: grid (B*NH, ceil(T/FBR)); out and stats of the block's FBR queries

template <int HDP, bool DROP>
__global__ void __launch_bounds__(RTC_FA_NT) rtc_fa_forward_kernel(rtc_fa_args a) {
    typedef rtc_fa_cfg<HDP> cfg;
    enum { BR = cfg::FBR, BC = cfg::FBC, TPR = RTC_FA_NT / BR, KPT = BC / TPR };
    enum { DPT = HDP / TPR, LD = HDP + 1, LDS = BC + 1 };
    RTC_FA_SMEM(sm);
    float* qs = sm;              // [BR][LD] the block's queries
    float* kvs = qs + BR * LD;   // [BC][LD] the key tile, then the value tile
    float* ss = kvs + BC * LD;   // [BR][LDS] scores, then exp(score - m)
    const int T = a.T, HD = a.HD;
    const int b = blockIdx.x / a.NH, h = blockIdx.x % a.NH, hk = h / (a.NH / a.NKV);
    const int q0 = blockIdx.y * BR;
    const int r = threadIdx.x / TPR, j = threadIdx.x % TPR, tq = q0 + r;
    const size_t ldq = (size_t)a.NH * HD, ldk = (size_t)a.NKV * HD;
    const float* qg = a.q + (size_t)b * T * ldq + (size_t)h * HD;
    const float* kg = a.k + (size_t)b * T * ldk + (size_t)hk * HD;
    const float* vg = a.v + (size_t)b * T * ldk + (size_t)hk * HD;

    rtc_fa_load<HDP>(qs, qg, ldq, q0, BR, T, HD);
    float o[DPT];
#pragma unroll
    for (int i = 0; i < DPT; i++) o[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;  // running max and sum of exp(score - m), row tq
    const int kend = a.causal ? (q0 + BR < T ? q0 + BR : T) : T;
    for (int k0 = 0; k0 < kend; k0 += BC) {
        __syncthreads();  // the previous tile's readers of kvs and ss are done
        rtc_fa_load<HDP>(kvs, kg, ldk, k0, BC, T, HD);
        __syncthreads();
        float s[KPT];
        rtc_fa_dots<KPT, TPR, LD>(s, qs + r * LD, kvs + j * LD, HD);
#pragma unroll
        for (int i = 0; i < KPT; i++) {
            const int c = j + i * TPR;
            ss[r * LDS + c] = rtc_fa_visible(tq, k0 + c, T, a.causal) ? a.scale * s[i] : -INFINITY;
        }
        __syncthreads();
        // every thread of the row takes the tile max over the whole row (same order, same
        // value); a fully masked row keeps m (its first tile has key 0 visible)
        float mt = -INFINITY;
        for (int c = 0; c < BC; c++) mt = fmaxf(mt, ss[r * LDS + c]);
        const float mnew = fmaxf(m, mt);
        const float mref = mnew == -INFINITY ? 0.0f : mnew;
        const float alpha = expf(m - mref);  // 0 on the first tile
        __syncthreads();  // the row's scores are read before they turn into exponentials
#pragma unroll
        for (int i = 0; i < KPT; i++) {
            const int c = j + i * TPR;
            ss[r * LDS + c] = expf(ss[r * LDS + c] - mref);
        }
        rtc_fa_load<HDP>(kvs, vg, ldk, k0, BC, T, HD);  // score reads of the keys are done
        __syncthreads();
        float lt = 0.0f;
        for (int c = 0; c < BC; c++) lt += ss[r * LDS + c];
        l = l * alpha + lt;
        m = mnew;
        if constexpr (DROP) {  // l summed the undropped exponentials; P Z multiplies V
            __syncthreads();
#pragma unroll
            for (int i = 0; i < KPT; i++) {
                const int c = j + i * TPR;
                if (rtc_fa_visible(tq, k0 + c, T, a.causal))
                    ss[r * LDS + c] *= rtc_fa_drop(a, blockIdx.x, tq, k0 + c);
            }
            __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < DPT; i++) o[i] *= alpha;
        for (int c = 0; c < BC; c++) {
            const float p = ss[r * LDS + c];
            const float* vr = kvs + c * LD;
#pragma unroll
            for (int i = 0; i < DPT; i++) {
                const int d = j + i * TPR;
                if (d < HD) o[i] += p * vr[d];
            }
        }
    }
    if (tq < T) {
        const float inv = 1.0f / l;
        float* og = a.out + ((size_t)b * T + tq) * ldq + (size_t)h * HD;
#pragma unroll
        for (int i = 0; i < DPT; i++) {
            const int d = j + i * TPR;
            if (d < HD) og[d] = rt_round_inl(o[i] * inv, a.dt);
        }
        if (j == 0) {
            float* st = a.stats + (((size_t)b * a.NH + h) * T + tq) * 2;
            st[0] = m;
            st[1] = inv;
        }
    }
}

// ----------------------------------------------------------------------------
// backward 1: D[b,h,t] = sum over d of dout * out (in double, rounded once). Rows are
// consecutive in memory in (b, t, h) order; RTC_FA_DOT_LANES threads share a row, thread j
// summing d = j, j + LANES, ... in order, and the row's first thread adds the LANES partial
// sums in order: a warp's loads cover a 32-byte sector of each of its 4 rows (one thread
// per row walked 32 rows at once, 4 bytes of each sector per load).

#define RTC_FA_DOT_LANES 8

// Element j of f, or (f NULL) of h's packed 16-bit values of dt.
__device__ __forceinline__ float rtc_fa_ld(const float* f, const void* h, size_t j, rt_dtype dt) {
    return f ? f[j] : rt_bits16_to_f32_inl(((const uint16_t*)h)[j], dt);
}

__global__ void __launch_bounds__(RTC_FA_NT) rtc_fa_dot_kernel(rtc_fa_args a) {
    RTC_FA_SMEM(sm);
    double* part = (double*)sm;  // RTC_FA_NT partial sums
    const size_t rows = (size_t)a.B * a.T * a.NH, per = RTC_FA_NT / RTC_FA_DOT_LANES;
    const int lane = threadIdx.x % RTC_FA_DOT_LANES;
    for (size_t r0 = (size_t)blockIdx.x * per; r0 < rows; r0 += (size_t)gridDim.x * per) {
        const size_t i = r0 + threadIdx.x / RTC_FA_DOT_LANES;
        double acc = 0.0;
        if (i < rows) {
            const size_t e0 = i * a.HD;
            for (int d = lane; d < a.HD; d += RTC_FA_DOT_LANES)
                acc += (double)rtc_fa_ld(a.dout, a.dout16, e0 + d, a.dt) *
                       rtc_fa_ld(a.out_in, a.out16_in, e0 + d, a.dt);
        }
        part[threadIdx.x] = acc;
        __syncthreads();
        if (lane == 0 && i < rows) {
            double sum = 0.0;
            for (int j = 0; j < RTC_FA_DOT_LANES; j++) sum += part[threadIdx.x + j];
            const size_t h = i % a.NH, bt = i / a.NH, t = bt % a.T, b = bt / a.T;
            a.D[(b * a.NH + h) * a.T + t] = (float)sum;
        }
        __syncthreads();  // the partials are read before the next rows overwrite them
    }
}

// D of every row of a into a.D: one launch of rtc_fa_dot_kernel.
template <class Launch>
void rtc_fa_dot(Launch& launch, const rtc_fa_args& a) {
    const size_t rows = (size_t)a.B * a.T * a.NH, per = RTC_FA_NT / RTC_FA_DOT_LANES;
    size_t blocks = (rows + per - 1) / per;
    if (blocks > 65535) blocks = 65535;
    launch(rtc_fa_dot_kernel, dim3((unsigned)blocks), RTC_FA_NT * sizeof(double), a);
}

// Loads (m, 1/l) and D of query rows [q0, q0 + R) of head h (zeros past T; D is not read
// when it is NULL, i.e. when no dS is needed), with the block's NT threads (the tensor-core
// kernels of flash_attention_tc.cuh run other block sizes).
template <int NT = RTC_FA_NT>
__device__ __forceinline__ void rtc_fa_load_stats(float* ms, float* invs, float* Ds,
                                                  const rtc_fa_args& a, int b, int h, int q0,
                                                  int R) {
    for (int i = threadIdx.x; i < R; i += NT) {
        const int t = q0 + i;
        const size_t row = ((size_t)b * a.NH + h) * a.T + t;
        const bool in = t < a.T;
        ms[i] = in ? a.stats_in[2 * row] : 0.0f;
        invs[i] = in ? a.stats_in[2 * row + 1] : 0.0f;
        Ds[i] = in && a.D ? a.D[row] : 0.0f;
    }
}

// ----------------------------------------------------------------------------
// backward 2: grid (B*NKV, ceil(T/KBC)); dK and dV of the block's KBC keys, summed over
// the query tiles of the NH/NKV query heads that share the kv head

template <int HDP, bool DROP>
__global__ void __launch_bounds__(RTC_FA_NT) rtc_fa_dkdv_kernel(rtc_fa_args a) {
    typedef rtc_fa_cfg<HDP> cfg;
    enum { BC = cfg::KBC, BR = cfg::KBR, TPR = RTC_FA_NT / BC, QPT = BR / TPR };
    enum { DPT = HDP / TPR, LD = HDP + 1, LDP = BR + 1 };
    RTC_FA_SMEM(sm);
    float* ks = sm;                // [BC][LD] the block's keys
    float* vs = ks + BC * LD;      // [BC][LD] ... and values
    float* qs = vs + BC * LD;      // [BR][LD] the query tile
    float* dos = qs + BR * LD;     // [BR][LD] ... and its output gradient
    float* ps = dos + BR * LD;     // [BC][LDP] P^T of the tile
    float* dss = ps + BC * LDP;    // [BC][LDP] dS^T of the tile
    float* ms = dss + BC * LDP;    // [BR] row max m
    float* invs = ms + BR;         // [BR] 1/l
    float* Ds = invs + BR;         // [BR] D
    const int T = a.T, HD = a.HD, G = a.NH / a.NKV;
    const int b = blockIdx.x / a.NKV, hk = blockIdx.x % a.NKV;
    const int k0 = blockIdx.y * BC;
    const int c = threadIdx.x / TPR, j = threadIdx.x % TPR, tk = k0 + c;
    const size_t ldq = (size_t)a.NH * HD, ldk = (size_t)a.NKV * HD;
    const size_t kvoff = (size_t)b * T * ldk + (size_t)hk * HD;
    const bool want_dk = a.dk != NULL;

    rtc_fa_load<HDP>(ks, a.k + kvoff, ldk, k0, BC, T, HD);
    rtc_fa_load<HDP>(vs, a.v + kvoff, ldk, k0, BC, T, HD);
    float dk[DPT], dv[DPT];
#pragma unroll
    for (int i = 0; i < DPT; i++) dk[i] = dv[i] = 0.0f;
    const int qstart = a.causal ? k0 / BR * BR : 0;  // earlier queries see none of these keys
    for (int g = 0; g < G; g++) {
        const int h = hk * G + g;
        const size_t qoff = (size_t)b * T * ldq + (size_t)h * HD;
        for (int q0 = qstart; q0 < T; q0 += BR) {
            __syncthreads();  // the previous tile's readers are done
            rtc_fa_load<HDP>(qs, a.q + qoff, ldq, q0, BR, T, HD);
            rtc_fa_load<HDP>(dos, a.dout + qoff, ldq, q0, BR, T, HD);
            rtc_fa_load_stats(ms, invs, Ds, a, b, h, q0, BR);
            __syncthreads();
            float s[QPT], dp[QPT];
            rtc_fa_dots<QPT, TPR, LD>(s, ks + c * LD, qs + j * LD, HD);
            if (want_dk) {
                rtc_fa_dots<QPT, TPR, LD>(dp, vs + c * LD, dos + j * LD, HD);
            } else {
#pragma unroll
                for (int i = 0; i < QPT; i++) dp[i] = 0.0f;  // no dS without dK
            }
#pragma unroll
            for (int i = 0; i < QPT; i++) {
                const int r = j + i * TPR;
                const bool vis = rtc_fa_visible(q0 + r, tk, T, a.causal);
                const float p = vis ? expf(a.scale * s[i] - ms[r]) * invs[r] : 0.0f;
                if constexpr (DROP) {
                    const float z =
                        vis ? rtc_fa_drop(a, (size_t)b * a.NH + h, q0 + r, tk) : 0.0f;
                    ps[c * LDP + r] = p * z;
                    dss[c * LDP + r] = p * (z * dp[i] - Ds[r]);
                } else {
                    ps[c * LDP + r] = p;
                    dss[c * LDP + r] = p * (dp[i] - Ds[r]);
                }
            }
            __syncthreads();
            for (int r = 0; r < BR; r++) {
                const float p = ps[c * LDP + r], ds = dss[c * LDP + r];
                const float* dor = dos + r * LD;
                const float* qr = qs + r * LD;
#pragma unroll
                for (int i = 0; i < DPT; i++) {
                    const int d = j + i * TPR;
                    if (d < HD) {
                        dv[i] += p * dor[d];
                        dk[i] += ds * qr[d];
                    }
                }
            }
        }
    }
    if (tk < T) {
        float* dkg = a.dk ? a.dk + kvoff + (size_t)tk * ldk : NULL;
        float* dvg = a.dv ? a.dv + kvoff + (size_t)tk * ldk : NULL;
#pragma unroll
        for (int i = 0; i < DPT; i++) {
            const int d = j + i * TPR;
            if (d >= HD) continue;
            if (dvg) rtc_fa_store_grad(dvg + d, dv[i], a.assign & RTC_FA_ASSIGN_DV, a.dt);
            if (dkg)
                rtc_fa_store_grad(dkg + d, a.scale * dk[i], a.assign & RTC_FA_ASSIGN_DK, a.dt);
        }
    }
}

// ----------------------------------------------------------------------------
// backward 3: grid (B*NH, ceil(T/QBR)); dQ of the block's QBR queries

template <int HDP, bool DROP>
__global__ void __launch_bounds__(RTC_FA_NT) rtc_fa_dq_kernel(rtc_fa_args a) {
    typedef rtc_fa_cfg<HDP> cfg;
    enum { BR = cfg::QBR, BC = cfg::QBC, TPR = RTC_FA_NT / BR, KPT = BC / TPR };
    enum { DPT = HDP / TPR, LD = HDP + 1, LDS = BC + 1 };
    RTC_FA_SMEM(sm);
    float* qs = sm;                // [BR][LD] the block's queries
    float* dos = qs + BR * LD;     // [BR][LD] ... and their output gradient
    float* ks = dos + BR * LD;     // [BC][LD] the key tile
    float* vs = ks + BC * LD;      // [BC][LD] ... and value tile
    float* dss = vs + BC * LD;     // [BR][LDS] dS of the tile
    float* ms = dss + BR * LDS;    // [BR] row max m
    float* invs = ms + BR;         // [BR] 1/l
    float* Ds = invs + BR;         // [BR] D
    const int T = a.T, HD = a.HD;
    const int b = blockIdx.x / a.NH, h = blockIdx.x % a.NH, hk = h / (a.NH / a.NKV);
    const int q0 = blockIdx.y * BR;
    const int r = threadIdx.x / TPR, j = threadIdx.x % TPR, tq = q0 + r;
    const size_t ldq = (size_t)a.NH * HD, ldk = (size_t)a.NKV * HD;
    const size_t qoff = (size_t)b * T * ldq + (size_t)h * HD;
    const size_t kvoff = (size_t)b * T * ldk + (size_t)hk * HD;

    rtc_fa_load<HDP>(qs, a.q + qoff, ldq, q0, BR, T, HD);
    rtc_fa_load<HDP>(dos, a.dout + qoff, ldq, q0, BR, T, HD);
    rtc_fa_load_stats(ms, invs, Ds, a, b, h, q0, BR);
    float dq[DPT];
#pragma unroll
    for (int i = 0; i < DPT; i++) dq[i] = 0.0f;
    const int kend = a.causal ? (q0 + BR < T ? q0 + BR : T) : T;
    for (int k0 = 0; k0 < kend; k0 += BC) {
        __syncthreads();  // the previous tile's readers of ks, vs and dss are done
        rtc_fa_load<HDP>(ks, a.k + kvoff, ldk, k0, BC, T, HD);
        rtc_fa_load<HDP>(vs, a.v + kvoff, ldk, k0, BC, T, HD);
        __syncthreads();
        float s[KPT], dp[KPT];
        rtc_fa_dots<KPT, TPR, LD>(s, qs + r * LD, ks + j * LD, HD);
        rtc_fa_dots<KPT, TPR, LD>(dp, dos + r * LD, vs + j * LD, HD);
#pragma unroll
        for (int i = 0; i < KPT; i++) {
            const int c = j + i * TPR;
            const bool vis = rtc_fa_visible(tq, k0 + c, T, a.causal);
            const float p = vis ? expf(a.scale * s[i] - ms[r]) * invs[r] : 0.0f;
            if constexpr (DROP) {
                const float z = vis ? rtc_fa_drop(a, blockIdx.x, tq, k0 + c) : 0.0f;
                dss[r * LDS + c] = p * (z * dp[i] - Ds[r]);
            } else {
                dss[r * LDS + c] = p * (dp[i] - Ds[r]);
            }
        }
        __syncthreads();
        for (int c = 0; c < BC; c++) {
            const float ds = dss[r * LDS + c];
            const float* kr = ks + c * LD;
#pragma unroll
            for (int i = 0; i < DPT; i++) {
                const int d = j + i * TPR;
                if (d < HD) dq[i] += ds * kr[d];
            }
        }
    }
    if (tq < T) {
        float* dqg = a.dq + qoff + (size_t)tq * ldq;
#pragma unroll
        for (int i = 0; i < DPT; i++) {
            const int d = j + i * TPR;
            if (d < HD)
                rtc_fa_store_grad(dqg + d, a.scale * dq[i], a.assign & RTC_FA_ASSIGN_DQ, a.dt);
        }
    }
}

// ----------------------------------------------------------------------------
// launch logic, shared with the emulator: `launch(kernel, grid, smem_bytes, args)` runs
// kernel<<<grid, RTC_FA_NT, smem_bytes, stream>>>(args) (attention.cu) or emulates it

typedef void (*rtc_fa_kernel)(rtc_fa_args);

// Padded head dim: 32, 64, 128 or 256; 0 when HD is out of range.
static inline int rtc_fa_hdp(int HD) {
    return HD <= 0 ? 0 : HD <= 32 ? 32 : HD <= 64 ? 64 : HD <= 128 ? 128 : HD <= 256 ? 256 : 0;
}

static inline unsigned rtc_fa_tiles(int T, int rows) { return (unsigned)((T + rows - 1) / rows); }

template <int HDP, bool DROP, class Launch>
void rtc_fa_forward_hd(Launch& launch, const rtc_fa_args& a) {
    typedef rtc_fa_cfg<HDP> c;
    launch(rtc_fa_forward_kernel<HDP, DROP>,
           dim3((unsigned)(a.B * a.NH), rtc_fa_tiles(a.T, c::FBR)),
           rtc_fa_fwd_smem<HDP>() * sizeof(float), a);
}

template <int HDP, bool DROP, class Launch>
void rtc_fa_backward_hd(Launch& launch, const rtc_fa_args& a) {
    typedef rtc_fa_cfg<HDP> c;
    if (a.dk || a.dv)
        launch(rtc_fa_dkdv_kernel<HDP, DROP>,
               dim3((unsigned)(a.B * a.NKV), rtc_fa_tiles(a.T, c::KBC)),
               rtc_fa_dkdv_smem<HDP>() * sizeof(float), a);
    if (a.dq)
        launch(rtc_fa_dq_kernel<HDP, DROP>,
               dim3((unsigned)(a.B * a.NH), rtc_fa_tiles(a.T, c::QBR)),
               rtc_fa_dq_smem<HDP>() * sizeof(float), a);
}

// Calls set(kernel, smem_bytes) for every kernel that takes dynamic shared memory, with the
// most it uses (what cudaFuncAttributeMaxDynamicSharedMemorySize must allow).
template <int HDP, class Set>
void rtc_fa_each_kernel_hd(Set& set) {
    set(rtc_fa_forward_kernel<HDP, false>, rtc_fa_fwd_smem<HDP>() * sizeof(float));
    set(rtc_fa_dkdv_kernel<HDP, false>, rtc_fa_dkdv_smem<HDP>() * sizeof(float));
    set(rtc_fa_dq_kernel<HDP, false>, rtc_fa_dq_smem<HDP>() * sizeof(float));
    set(rtc_fa_forward_kernel<HDP, true>, rtc_fa_fwd_smem<HDP>() * sizeof(float));
    set(rtc_fa_dkdv_kernel<HDP, true>, rtc_fa_dkdv_smem<HDP>() * sizeof(float));
    set(rtc_fa_dq_kernel<HDP, true>, rtc_fa_dq_smem<HDP>() * sizeof(float));
}

template <class Set>
void rtc_fa_each_kernel(Set& set) {
    rtc_fa_each_kernel_hd<32>(set);
    rtc_fa_each_kernel_hd<64>(set);
    rtc_fa_each_kernel_hd<128>(set);
    rtc_fa_each_kernel_hd<256>(set);
}

// The forward's kernels with dropout or without (DROP), for the call's padded head dim.
template <bool DROP, class Launch>
void rtc_fa_forward_drop(Launch& launch, const rtc_fa_args& a) {
    switch (rtc_fa_hdp(a.HD)) {
        case 32: rtc_fa_forward_hd<32, DROP>(launch, a); break;
        case 64: rtc_fa_forward_hd<64, DROP>(launch, a); break;
        case 128: rtc_fa_forward_hd<128, DROP>(launch, a); break;
        default: rtc_fa_forward_hd<256, DROP>(launch, a); break;
    }
}

// Forward: out and stats. B, T > 0 and rtc_fa_hdp(HD) != 0 (the caller checks).
template <class Launch>
void rtc_fa_forward(Launch& launch, const rtc_fa_args& a) {
    if (a.drop_p > 0.0f)
        rtc_fa_forward_drop<true>(launch, a);
    else
        rtc_fa_forward_drop<false>(launch, a);
}

// The backward's dK/dV and dQ kernels, as rtc_fa_forward_drop.
template <bool DROP, class Launch>
void rtc_fa_backward_drop(Launch& launch, const rtc_fa_args& a) {
    switch (rtc_fa_hdp(a.HD)) {
        case 32: rtc_fa_backward_hd<32, DROP>(launch, a); break;
        case 64: rtc_fa_backward_hd<64, DROP>(launch, a); break;
        case 128: rtc_fa_backward_hd<128, DROP>(launch, a); break;
        default: rtc_fa_backward_hd<256, DROP>(launch, a); break;
    }
}

// Backward: D into a.D (when dq or dk is wanted; a.D is the scratch), then dK/dV and dQ.
template <class Launch>
void rtc_fa_backward(Launch& launch, rtc_fa_args a) {
    if (!a.dq && !a.dk && !a.dv) return;
    if (a.dq || a.dk) {
        rtc_fa_dot(launch, a);
    } else {
        a.D = NULL;  // dV alone needs no dS
    }
    if (a.drop_p > 0.0f)
        rtc_fa_backward_drop<true>(launch, a);
    else
        rtc_fa_backward_drop<false>(launch, a);
}

#endif
