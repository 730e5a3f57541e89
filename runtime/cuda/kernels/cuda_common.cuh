// Internal to the CUDA kernels (runtime/cuda/kernels/*.cu): error checks, the per-thread context
// (stream, cuBLAS handle and workspace, a small reduction scratch), launch helpers, the
// 16-byte accesses of vectorised flat kernels, block reductions and the row-major SGEMM
// wrapper. Not part of the public API: generated code sees only rt_kernels.h and
// rt_optim.h, whose functions this backend implements with the same names and semantics,
// on device pointers (the CUDA step backend also rt_cuda.h).
//
// Streams. Every kernel, memset, copy and cuBLAS call here runs on the calling thread's
// stream (rt_cuda_set_stream in rt_cuda.h; the legacy default stream until one is set) on
// the thread's current device. Nothing here synchronizes, allocates or uses the legacy
// stream behind the caller's back, so a whole training step can be captured into a CUDA
// graph; the few functions that return a host value (rt_sumsq) synchronize only the
// thread's stream and cannot be captured (rt_cuda.h lists them).
//
// Numerics. Compiled with -fmad=false, IEEE division and sqrt, so a*b+c rounds twice as
// the CPU kernels (built with -ffp-contract=off) do: the optimizers and the pure
// add/multiply kernels give the CPU kernels' bits; transcendental functions (expf, erff)
// and reductions (tree order instead of sequential, in double as the CPU) differ in the
// last bits. GEMMs are cuBLAS: fp32 (CUBLAS_DEFAULT_MATH: no TF32), or bf16/fp16 tensor
// cores on 16-bit copies of the operands when their values are bf16/fp16 (rtc_gemm_rm).
//
// Mixed precision. Kernels with a dt (rt_kernels.h) round each value they write at its
// store with rtc_round_to, the bit-level converters of common/dtype_bits.h that the host
// uses too, so a rounded store has the CPU kernels' (and rt_step_round's) bits; GEMM
// outputs are rounded by cuBLAS into a 16-bit copy (rtc_gemm16_rounded), or by rtc_round_buf
// after it where they accumulate onto an fp32 buffer.
#ifndef FSDPGEN_CUDA_COMMON_CUH
#define FSDPGEN_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <initializer_list>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../common/dtype_bits.h"
#include "../../common/kcheck.h"  // RT_KCHECK, RT_KCHECK_DT: host-side argument checks
#include "rt_check.h"  // RT_CHECK_CUDA reports through core/check.c as everywhere else
#include "rt_cuda.h"
#include "rt_kernels.h"
#include "rt_optim.h"

// ----------------------------------------------------------------------------
// error checks

// Hint for a cuBLAS status (rt_check.h has tables for CUDA and NCCL only).
const char* rtc_cublas_hint(int status);

// RT_CHECK_CUBLAS(cublasSgemm(...)): `file:line: error: CALL failed: WHY (hint: ...)`, exit 1.
#define RT_CHECK_CUBLAS(call)                                                          \
    do {                                                                               \
        cublasStatus_t rt_st_ = (call);                                                \
        if (rt_st_ != CUBLAS_STATUS_SUCCESS)                                           \
            rt_check_fail(__FILE__, __LINE__, #call, cublasGetStatusString(rt_st_),    \
                          rtc_cublas_hint((int)rt_st_));                               \
    } while (0)

// After every kernel launch: a bad configuration (grid too large, no kernel image for this
// GPU) is reported here, at the launch that caused it. Errors inside a running kernel are
// asynchronous and surface at the next checked call.
#define RTC_CHECK_LAUNCH(name)                                                         \
    do {                                                                               \
        cudaError_t rt_le_ = cudaGetLastError();                                       \
        if (rt_le_ != cudaSuccess)                                                     \
            rt_check_fail(__FILE__, __LINE__, "launch of " #name,                      \
                          cudaGetErrorString(rt_le_), rt_check_cuda_hint((int)rt_le_)); \
    } while (0)

// Device-side data checks (token ids, targets live on the device): the first thread that
// sees a bad value prints the CPU kernels' message and traps. The trap makes the next CUDA
// call on this context fail (cudaErrorLaunchFailure), which RT_CHECK_CUDA reports; the
// context is unusable afterwards, as the CPU kernels abort on the same data.
#define RTC_DEVICE_FAIL(hint, fmt, ...)                                                \
    do {                                                                               \
        printf("%s:%d: error: " fmt " (hint: %s)\n", __FILE__, __LINE__, __VA_ARGS__,  \
               hint);                                                                  \
        __trap();                                                                      \
    } while (0)

// ----------------------------------------------------------------------------
// rounding to a kernel's dt (rt_kernels.h "Mixed precision")

// v rounded to nearest even in dt (RT_F32: v).
__device__ __forceinline__ float rtc_round_to(float v, rt_dtype dt) { return rt_round_inl(v, dt); }

// The value of an element of fp32 storage, or of packed 16-bit storage of dt (rt_kernels.h
// "packed 16-bit storage"), from its stored bits.
__device__ __forceinline__ float rtc_val(float v, rt_dtype) { return v; }
__device__ __forceinline__ float rtc_val(uint16_t h, rt_dtype dt) {
    return rt_bits16_to_f32_inl(h, dt);
}

// Element j of such storage, and its store rounded to dt: kernels templated on their storage
// type use these.
__device__ __forceinline__ float rtc_ld(const float* p, size_t j, rt_dtype dt) {
    return rtc_val(p[j], dt);
}
__device__ __forceinline__ float rtc_ld(const uint16_t* p, size_t j, rt_dtype dt) {
    return rtc_val(p[j], dt);
}
__device__ __forceinline__ void rtc_st(float* p, size_t j, float v, rt_dtype dt) {
    p[j] = rtc_round_to(v, dt);
}
__device__ __forceinline__ void rtc_st(uint16_t* p, size_t j, float v, rt_dtype dt) {
    p[j] = rt_bits16_from_f32_inl(v, dt);
}

// Host: calls f with p cast to its storage, const or not as p is: uint16_t (packed, a
// kernel templated on its storage then reads it with rtc_ld / writes it with rtc_st) or float.
template <class F>
static inline void rtc_with_storage(bool packed, const void* p, F f) {
    if (packed) f((const uint16_t*)p);
    else f((const float*)p);
}
template <class F>
static inline void rtc_with_storage(bool packed, void* p, F f) {
    if (packed) f((uint16_t*)p);
    else f((float*)p);
}

// x[0..n) rounded to dt in place on the thread's stream (linear.cu); nothing for RT_F32.
void rtc_round_buf(float* x, size_t n, rt_dtype dt);

// ----------------------------------------------------------------------------
// per-thread context

// Number of per-block partial results a deterministic two-pass reduction may use; the
// scratch holds 2 * RTC_PARTIALS doubles and a few result slots.
#define RTC_PARTIALS 1024
#define RTC_SCRATCH_DOUBLES (2 * RTC_PARTIALS + 8)
// Slot of ctx->scratch that receives a reduction's double result (a few more follow it).
#define RTC_RESULT_SLOT (2 * RTC_PARTIALS)

// cuBLAS workspace per handle, allocated with the context and set after every stream
// change (cublasSetStream resets it): with a workspace of its own cuBLAS never allocates
// inside a GEMM, which graph capture requires. 32 MiB is NVIDIA's recommendation for Hopper.
#define RTC_BLAS_WORKSPACE ((size_t)32 << 20)
// Doubles of per-chunk column sums (column_sums.cuh): 8 MiB, 64 chunks of 2 x 8192 columns.
#define RTC_COLSUM_PARTIAL_DOUBLES ((size_t)1 << 20)
// Counts of the blocks done (column_sums.cuh rtc_last_block), one per 32-column stripe of
// a column sum in chunks: two chunks of K >= 1 sums fit the partials only up to
// RTC_COLSUM_PARTIAL_DOUBLES / 2 columns, so this many stripes.
#define RTC_COLSUM_COUNTS ((int)(RTC_COLSUM_PARTIAL_DOUBLES / 2 / 32))

// One per host thread, created on the thread's first kernel call (or by rt_kernels_init /
// rt_cuda_set_stream on the calling thread) for the device current on that thread, and
// freed when the thread exits. A thread must keep the same current device afterwards
// (checked on every call): cuBLAS handles and device memory belong to one device.
typedef struct rtc_ctx {
    cublasHandle_t blas;
    cublasLtHandle_t blas_lt;  // the bias epilogues (rtc_gemm16_rounded, rtc_gemm16_bgrad)
    int bgrad_declined;    // the output types (bits) rtc_gemm16_bgrad leaves to the column
                           // sums: cuBLASLt declined it, or rt_cuda_set_bias_grad_epilogue(0)
    int gemm_sms;          // SMs both plan their GEMMs for; 0: the device's (rt_cuda_set_gemm_sms)
    int device;
    cudaStream_t stream;   // where this thread's work goes (0: the legacy default stream)
    cudaStream_t blas_stream;  // the stream cuBLAS is bound to: `stream` from the next GEMM
    double* scratch;       // RTC_SCRATCH_DOUBLES on the device: reduction partials, results
    void* blas_workspace;  // RTC_BLAS_WORKSPACE bytes on the device, cuBLAS's own
    double* host_result;   // one pinned host double: a reduction's result copied back
    double* colsum_partials;  // RTC_COLSUM_PARTIAL_DOUBLES: column-sum chunks (column_sums.cuh)
    unsigned* colsum_counts;  // RTC_COLSUM_COUNTS, zeros between kernels (rtc_last_block)
    int dw_blocks;         // the norm backward's blocks with weight gradients (norm.cu)
    size_t ce_stage;       // shared memory bytes the fused cross-entropy stages a row in
    size_t ce_stage_max;   // (loss.cu rtc_ce_staged): at most this, the device's opt-in
    void* operands;        // 16-bit GEMM operands and rounded outputs (rtc_gemm_rm, the
                           // linear kernels), operand_bytes long; reused by every GEMM of
                           // the thread, ordered by its one stream
    size_t operand_bytes;
    bool operands_captured;  // a capture has used `operands`: a graph may read it
    void** retired;        // the captured operand scratches it replaced, nretired of them:
    int nretired;          // a graph may still read one, so they are freed at thread exit
} rtc_ctx;

rtc_ctx* rtc_get(void);

// Per-device setup of the attention, norm and loss kernels (attention.cu, norm.cu, loss.cu:
// the dynamic shared memory they may take), run by rtc_get when it creates a thread's context.
void rtc_attention_init(void);
void rtc_norm_init(rtc_ctx* c);
void rtc_loss_init(rtc_ctx* c);

// The calling thread's stream: pass it to every launch (<<<grid, block, smem,
// rtc_stream()>>>), memset and copy.
static inline cudaStream_t rtc_stream(void) { return rtc_get()->stream; }

// ----------------------------------------------------------------------------
// launch helpers

#define RTC_THREADS 256

// Blocks for a grid-stride loop over n items (n > 0), capped so the grid stays legal.
static inline unsigned rtc_blocks(size_t n, unsigned threads) {
    size_t b = (n + threads - 1) / threads;
    const size_t cap = (size_t)1 << 20;
    return (unsigned)(b < cap ? b : cap);
}

// Threads for one block per row of `len` values: a power of two from 32 to 1024 with at
// least ~4 values per thread. Fixed by len, so a row's reduction order (and its result)
// does not depend on anything else.
static inline unsigned rtc_row_threads(int len) {
    unsigned t = 32;
    while (t < 1024 && (int)(4 * t) < len) t *= 2;
    return t;
}

// One grid-stride kernel over n items on the thread's stream (nothing when n == 0).
#define RTC_LAUNCH_FLAT(kernel, n, ...)                                                    \
    do {                                                                                   \
        if ((n) == 0) break;                                                               \
        kernel<<<rtc_blocks((n), RTC_THREADS), RTC_THREADS, 0, rtc_stream()>>>(__VA_ARGS__); \
        RTC_CHECK_LAUNCH(kernel);                                                          \
    } while (0)

#define RTC_GRID_STRIDE(i, n)                                                              \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                \
         i += (size_t)blockDim.x * gridDim.x)

// ----------------------------------------------------------------------------
// vectorised flat kernels: RTC_VEC consecutive elements per access

// Elements per access of a vectorised flat kernel: 8, one 16-byte load or store of packed
// 16-bit storage, two of fp32 storage. With a 2-byte access per element and thread the
// flat kernels of a Llama 1B step on packed bf16 ran at a third of an H100's bandwidth.
#define RTC_VEC 8

// The width of a group of elements, as a type: a kernel body written once for rtc_width<K>
// (K = RTC_VEC or 1) gets K as a constant from decltype(w)::value.
template <int K>
struct rtc_width {
    static constexpr int value = K;
};

// 8 packed 16-bit elements: one 16-byte access.
struct alignas(16) rtc_u16x8 {
    uint16_t h[RTC_VEC];
};

// v[0..K) = the values of elements i .. i + K - 1 of fp32 or packed storage (K = RTC_VEC: i
// a multiple of RTC_VEC, p 16-byte aligned). Every load is issued before the first value is
// widened, and the dtype's branch is taken once for the group.
template <int K>
__device__ __forceinline__ void rtc_ldv(const float* p, size_t i, rt_dtype, float (&v)[K]) {
    if constexpr (K == 1) {
        v[0] = p[i];
    } else {
        static_assert(K == RTC_VEC, "groups of 1 or RTC_VEC elements");
        const float4 q0 = *(const float4*)(p + i), q1 = *(const float4*)(p + i + 4);
        v[0] = q0.x, v[1] = q0.y, v[2] = q0.z, v[3] = q0.w;
        v[4] = q1.x, v[5] = q1.y, v[6] = q1.z, v[7] = q1.w;
    }
}
template <int K>
__device__ __forceinline__ void rtc_ldv(const uint16_t* p, size_t i, rt_dtype dt, float (&v)[K]) {
    if constexpr (K == 1) {
        v[0] = rtc_val(p[i], dt);
    } else {
        static_assert(K == RTC_VEC, "groups of 1 or RTC_VEC elements");
        const rtc_u16x8 q = *(const rtc_u16x8*)(p + i);
        if (dt == RT_BF16)
            for (int u = 0; u < K; u++) v[u] = rt_bf16_to_f32_inl(q.h[u]);
        else
            for (int u = 0; u < K; u++) v[u] = rt_f16_to_f32_inl(q.h[u]);
    }
}

// Elements i .. i + K - 1 of fp32 or packed storage = v[0..K) rounded to dt (rtc_st's bits).
template <int K>
__device__ __forceinline__ void rtc_stv(float* p, size_t i, const float (&v)[K], rt_dtype dt) {
    if constexpr (K == 1) {
        rtc_st(p, i, v[0], dt);
    } else {
        static_assert(K == RTC_VEC, "groups of 1 or RTC_VEC elements");
        float r[K];
        for (int u = 0; u < K; u++) r[u] = rtc_round_to(v[u], dt);
        *(float4*)(p + i) = make_float4(r[0], r[1], r[2], r[3]);
        *(float4*)(p + i + 4) = make_float4(r[4], r[5], r[6], r[7]);
    }
}
template <int K>
__device__ __forceinline__ void rtc_stv(uint16_t* p, size_t i, const float (&v)[K], rt_dtype dt) {
    if constexpr (K == 1) {
        rtc_st(p, i, v[0], dt);
    } else {
        static_assert(K == RTC_VEC, "groups of 1 or RTC_VEC elements");
        rtc_u16x8 q;
        if (dt == RT_BF16)
            for (int u = 0; u < K; u++) q.h[u] = rt_bf16_from_f32_inl(v[u]);
        else
            for (int u = 0; u < K; u++) q.h[u] = rt_f16_from_f32_inl(v[u]);
        *(rtc_u16x8*)(p + i) = q;
    }
}

// Thread t of `threads` over n elements: f(rtc_width<W>(), i) for its groups of W elements
// (i a multiple of W) up to n rounded down to W, then f(rtc_width<1>(), j) for its elements
// among the last n % W. W = 1: each element alone.
template <int W, class F>
__device__ __forceinline__ void rtc_groups(size_t n, size_t t, size_t threads, F f) {
    const size_t body = n / W * W;
    for (size_t i = t * W; i < body; i += threads * W) f(rtc_width<W>(), i);
    for (size_t j = body + t; j < n; j += threads) f(rtc_width<1>(), j);
}

// The grid-stride loop of a vectorised flat kernel over n elements (rtc_groups).
template <int W, class F>
__device__ __forceinline__ void rtc_flat(size_t n, F f) {
    rtc_groups<W>(n, (size_t)blockIdx.x * blockDim.x + threadIdx.x,
                  (size_t)blockDim.x * gridDim.x, f);
}

// out = a + b over n elements of fp32 or packed storage, rounded to dt at the store: the
// body of the residual add and of the linear backward's packed-gradient add (out may be a).
template <int W, class O, class A, class B>
__device__ __forceinline__ void rtc_add_flat(O* out, const A* a, const B* b, size_t n,
                                             rt_dtype dt) {
    rtc_flat<W>(n, [&](auto w, size_t i) {
        constexpr int K = decltype(w)::value;
        float x[K], y[K];
        rtc_ldv(a, i, dt, x);
        rtc_ldv(b, i, dt, y);
        for (int u = 0; u < K; u++) x[u] = x[u] + y[u];
        rtc_stv(out, i, x, dt);
    });
}

// Whether every pointer is 16-byte aligned (NULL is): what the groups of RTC_VEC need.
static inline bool rtc_aligned16(std::initializer_list<const void*> ps) {
    for (const void* p : ps)
        if ((uintptr_t)p % 16) return false;
    return true;
}

// A vectorised flat kernel (kernel<W>, looping with rtc_flat<W>) over n elements on the
// thread's stream: W = RTC_VEC when `aligned` (rtc_aligned16 of its pointers), else 1;
// nothing when n == 0.
#define RTC_LAUNCH_VEC(kernel, n, aligned, ...)                                            \
    do {                                                                                   \
        if ((n) == 0) break;                                                               \
        const bool rtc_vec_ = (aligned);                                                   \
        const unsigned rtc_nb_ =                                                           \
            rtc_blocks(rtc_vec_ ? ((n) + RTC_VEC - 1) / RTC_VEC : (n), RTC_THREADS);       \
        if (rtc_vec_)                                                                      \
            kernel<RTC_VEC><<<rtc_nb_, RTC_THREADS, 0, rtc_stream()>>>(__VA_ARGS__);       \
        else                                                                               \
            kernel<1><<<rtc_nb_, RTC_THREADS, 0, rtc_stream()>>>(__VA_ARGS__);             \
        RTC_CHECK_LAUNCH(kernel);                                                          \
    } while (0)

// ----------------------------------------------------------------------------
// block reductions (blockDim.x a multiple of 32, at most 1024; every thread gets the
// result; call from all threads of the block)

template <typename T>
__device__ __forceinline__ T rtc_warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float rtc_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

template <typename T>
__device__ __forceinline__ T rtc_block_sum(T v) {
    __shared__ T sh[32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = rtc_warp_sum(v);
    __syncthreads();  // an earlier call's readers are done with sh
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : T(0);
    return rtc_warp_sum(v);  // every warp reduces the same partials: same result everywhere
}

__device__ __forceinline__ float rtc_block_max(float v) {
    __shared__ float sh[32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = rtc_warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return rtc_warp_max(v);
}

// ----------------------------------------------------------------------------
// GEMM (cuBLAS)

// Row-major C[M,N] = alpha * op(A) op(B) + beta * C, op(X) = X or X^T (ta, tb); lda, ldb,
// ldc are row strides; A, B, C fp32. Runs as the column-major product C^T = op(B)^T op(A)^T.
// prec (rt_kernels.h "Operand precision": the linear kernels' dt, attention's prec) is the
// dtype A's and B's values are representable in. RT_F32 is fp32 arithmetic
// (CUBLAS_COMPUTE_32F under CUBLAS_DEFAULT_MATH: no TF32). RT_BF16 / RT_F16: A and B are
// narrowed (exactly, being such values) into 16-bit copies in the context's operand
// scratch, then multiplied on bf16/fp16 tensor cores with fp32 accumulation and an fp32 C.
// Measured on an H100: handed the fp32 operands with CUBLAS_COMPUTE_32F_FAST_16BF instead,
// cuBLAS picked TF32 kernels (sm90_xmma_gemm_f32f32_tf32f32, cutlass s1688gemm); GPT-2's
// LM head (16384 x 768 x 50257) ran at about 120 TFLOP/s. C is not rounded (the linear
// kernels round it after, or use rtc_gemm16_rounded).
// The buffers stored packed (rt_kernels.h "packed 16-bit storage") reach cuBLAS without
// these copies (rtc_gemm16); the ones the generator leaves in fp32 storage
// (generator/memory/packing.lua says which) are narrowed here at every call.
void rtc_gemm_rm(int ta, int tb, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc, rt_dtype prec);

// 16-bit operands (context.cu). A row-major rows x cols matrix narrowed to bf16/fp16 with
// its row stride padded to 8 elements (16 bytes: cuBLAS's fast kernels need aligned rows;
// an odd stride such as GPT-2's vocabulary of 50257 sent it to align1 kernels 5x slower).
typedef struct rtc_operand16 {
    const void* p;
    int ld;
} rtc_operand16;
static inline int rtc_ld16(int cols) { return RT_LD16(cols); }  // packed buffers' rows too
// Elements of such a copy; consecutive copies in one scratch stay 16-byte aligned.
static inline size_t rtc_elems16(int rows, int cols) { return (size_t)rows * rtc_ld16(cols); }
// The thread's operand scratch, at least `bytes` long: grown on an eager step, a capture
// that needs more stops with a message. One per thread, reused by each GEMM in stream order.
void* rtc_operand_scratch(size_t bytes);
// Narrows src (row stride ld) into dst, which holds rtc_elems16(rows, cols) elements; the
// padding columns are zeros.
rtc_operand16 rtc_narrow(void* dst, const float* src, int rows, int cols, int ld, rt_dtype prec);
// Columns [0, cols) of dst's rows (stride ldd) of prec's 16-bit type = src[rows, cols]
// (row stride cols) narrowed; the columns past cols are not touched (dst may be a column
// slice of a wider matrix).
void rtc_narrow_into(void* dst, int ldd, const float* src, int rows, int cols, rt_dtype prec);
// dst[rows, cols] (row stride cols) = src's rows (stride lds) of prec's 16-bit type widened.
void rtc_widen(float* dst, const void* src, int rows, int cols, int lds, rt_dtype prec);
// Zeros rows [from, to) of o (rows a copy was allocated beyond those narrowed into it).
void rtc_zero_rows16(rtc_operand16 o, int from, int to);
// rtc_gemm_rm on narrowed operands (prec RT_BF16 / RT_F16), fp32 C.
void rtc_gemm16(int ta, int tb, int M, int N, int K, float alpha, rtc_operand16 A, rtc_operand16 B,
                float beta, float* C, int ldc, rt_dtype prec);
// C[M,N] (row-major, fp32, row stride N) = alpha op(A) op(B), or op(A) op(B) plus bias16[j]
// on column j when bias16 is not NULL (cuBLASLt's bias epilogue, alpha 1: a scaled linear
// has no bias; rtc_ld16(N) values of prec's type), rounded to prec without a rounding
// pass: cuBLAS writes the result into T, M rows of ldt 16-bit values of prec's type,
// rounding the fp32 sum (times alpha) to nearest even in its epilogue as rtc_round_to does,
// and one pass widens T into C. The product spans rtc_ld16(N) columns (an output row length
// that is not a multiple of 8 sends cuBLAS to align1 kernels: GPT-2's LM head, vocabulary
// 50257, took 13.2 ms on an H100 against 1.8 ms padded to 50264), so op(B) must have that
// many columns, the extra ones zeros: a narrowed B's padding (op N) or rows zeroed with
// rtc_zero_rows16 (op T). ldt: rtc_ld16(N) (a block of rtc_elems16(M, N) elements), or a
// longer row, a multiple of 8, whose columns past the product's are not touched (a column
// slice of a wider matrix). C NULL: the result stays in T (a packed output, rt_kernels.h
// "packed 16-bit storage").
void rtc_gemm16_rounded(int ta, int tb, int M, int N, int K, float alpha, rtc_operand16 A,
                        rtc_operand16 B, const void* bias16, void* T, int ldt, float* C,
                        rt_dtype prec);

// A weight gradient with its bias gradient (rt_kernels.h RT_ASSIGN_DWEIGHT: both assigned):
// C[M,N] (row-major, row stride ldc) = op(A) op(B) with ta = 1 (A is dout[K, M] as stored,
// the bias's gradient reduced over its K rows) and bgrad[M] = sum over k of A[k, m], by
// cuBLASLt's BGRADB epilogue, both in C's type: fp32 (c16 0) or prec's 16-bit type rounded in
// the epilogue (c16 1, M and N multiples of 8). Returns false, having written nothing, where
// an operand or row is not 16-byte aligned or cuBLASLt declines the epilogue for that output
// type (then, for the thread, at once): the caller adds the column sums itself.
bool rtc_gemm16_bgrad(int M, int N, int K, rtc_operand16 A, rtc_operand16 B, void* C, int c16,
                      int ldc, void* bgrad, rt_dtype prec);

// ----------------------------------------------------------------------------
// column sums (linear.cu): db[c] += sum over rows of d[r, c] for d[rows, cols], in double,
// deterministic (fixed order for given rows, cols)

void rtc_colsum_acc(float* db, const float* d, int rows, int cols);

// ----------------------------------------------------------------------------
// deterministic reductions over a flat array (two passes through the context scratch)

// Sum of x[i] (squares != 0: of x[i]^2) over n values, in double, left in
// ctx->scratch[RTC_RESULT_SLOT] on the device; when fout is not NULL also rounded to float
// into fout[0], and when dacc is not NULL added to dacc[0] (dacc[0] = dacc[0] + sum); both
// are device pointers. Fixed block count and order for a given n: the same n gives the
// same bits run after run. Runs on ctx->stream.
void rtc_reduce_sum(rtc_ctx* ctx, const float* x, size_t n, int squares, float* fout,
                    double* dacc);

#endif
