// Scaled-dot-product attention on the GPU, multi-head and grouped-query.
//
// lowmem variant (what the generated code calls): flash attention. Forward keeps only
// (max, 1/sum) per query row in stats; backward recomputes the probabilities tile by tile
// from q, k and stats, with D = rowsum(dout * out) in the scratch; no T x T matrix ever
// reaches global memory, every launch covers all heads, and the gradients are
// deterministic (no atomics). Two sets of kernels, chosen per call by prec and HD:
//   * prec RT_BF16 / RT_F16 with HD a multiple of 16 up to 128: tensor cores
//     (flash_attention_tc.cuh; 16-bit operands, fp32 accumulation, P and dS narrowed to
//     the 16-bit type before their products as in FlashAttention-2);
//   * otherwise (prec RT_F32, or other head dims up to 256): fp32 on CUDA cores
//     (flash_attention.cuh), the reference path.
// Both write the same stats (m, 1/l), so either backward accepts either forward's stats,
// and both store each element of out, dq, dk and dv once, rounded to dt there (and dq, dk,
// dv added to or assigned), so rounding and assigning cost no pass of their own. The
// packed entry points (rt_kernels.h "packed 16-bit storage") hand the tensor-core kernels
// packed q, k, v, out and dout in place of 16-bit copies. The dropout entry points run the
// kernels' dropout instantiations (each probability's mask drawn in the kernel from its
// index, rtc_fa_args drop_*); p = 0 runs the same kernels as the plain calls.
//
// probs variant: the straightforward algorithm of runtime/cpu/kernels/attention.c, one
// (batch, head) at a time. Per head: S = scale * Q K^T (cuBLAS SGEMM), a row-softmax
// kernel (causal rows stop at the diagonal; one block per row, statistics in double as
// the CPU), O = P V (SGEMM); P [B,NH,T,T] is kept for backward, whose scratch is one [T,T]
// matrix, so its GEMMs run per head. Heads are addressed in place through the leading
// dimension of the [B,T,heads*HD] layouts, so there are no transposes or copies.
//
// The two variants agree within fp32 round-off (different summation orders: cuBLAS tiles
// against in-kernel dot products, the online softmax's rescaling), not bit for bit as on
// the CPU.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/attention_shape.h"
#include "cuda_common.cuh"
#include "flash_attention.cuh"
#include "flash_attention_tc.cuh"

// ----------------------------------------------------------------------------
// sizes (attention_shape.h: the CPU backend's, as the memory plan needs)

size_t rt_attention_probs_floats(int B, int NH, int T) {
    return rt_attention_probs_floats_inl(B, NH, T);
}

size_t rt_attention_scratch_floats(int T) { return rt_attention_scratch_floats_inl(T); }

size_t rt_attention_stats_floats(int B, int NH, int T) {
    return rt_attention_stats_floats_inl(B, NH, T);
}

size_t rt_attention_lowmem_scratch_floats(int B, int NH, int T) {
    return rt_attention_lowmem_scratch_floats_inl(B, NH, T);
}

// S[T,T] = scale * Q[T,HD] K[T,HD]^T (causal: the upper triangle is computed, then
// overwritten by the softmax kernels)
static void scores(float* S, const float* q, const float* k, rt_head_view hv, int T, int HD) {
    rtc_gemm_rm(0, 1, T, T, HD, rt_attention_scale(HD), q + hv.qoff, hv.ldq, k + hv.koff, hv.ldk,
                0.0f, S, T, RT_F32);
}

// ----------------------------------------------------------------------------
// softmax over rows of [rows, T] score matrices (one block per row; row r is query
// position r % T). Writes P in place.

__global__ void softmax_rows_kernel(float* P, int T, int causal) {
    const size_t r = blockIdx.x;
    const int t = (int)(r % (size_t)T);
    float* row = P + r * T;
    const int len = causal ? t + 1 : T;  // keys visible to query t
    float mx = -INFINITY;
    for (int s = threadIdx.x; s < len; s += blockDim.x) mx = fmaxf(mx, row[s]);
    mx = rtc_block_max(mx);
    double sum = 0.0;
    for (int s = threadIdx.x; s < len; s += blockDim.x) {
        const float e = expf(row[s] - mx);
        row[s] = e;
        sum += e;
    }
    sum = rtc_block_sum(sum);
    const float inv = (float)(1.0 / sum);
    for (int s = threadIdx.x; s < T; s += blockDim.x) row[s] = s < len ? row[s] * inv : 0.0f;
}

static void softmax_rows(float* P, size_t rows, int T, int causal) {
    softmax_rows_kernel<<<(unsigned)rows, rtc_row_threads(T), 0, rtc_stream()>>>(P, T, causal);
    RTC_CHECK_LAUNCH(softmax_rows_kernel);
}

// dS = P * (dP - rowsum(dP * P)) in place over one head's dP [T,T], one block per row;
// masked keys get 0 (no probability, no gradient).
__global__ void softmax_backward_rows_kernel(float* __restrict__ dS, const float* __restrict__ P,
                                             int T, int causal) {
    const int t = blockIdx.x;
    const float* p = P + (size_t)t * T;
    float* d = dS + (size_t)t * T;
    const int len = causal ? t + 1 : T;
    double dot = 0.0;
    for (int s = threadIdx.x; s < len; s += blockDim.x) dot += (double)d[s] * p[s];
    const float df = (float)rtc_block_sum(dot);
    for (int s = threadIdx.x; s < T; s += blockDim.x) d[s] = s < len ? p[s] * (d[s] - df) : 0.0f;
}

// ----------------------------------------------------------------------------
// per-head backward (accumulating), P the head's probabilities, dS a [T,T] scratch:
//   dV += P^T dO;  dP = dO V^T;  dS = P * (dP - rowsum(dP * P));
//   dQ += scale * dS K;  dK += scale * dS^T Q
// Query heads sharing a kv head accumulate into the same dK/dV slice one after another
// (in query-head order, as the CPU kernel), so the sums are deterministic.

static void backward_head(float* dq, float* dk, float* dv, float* dS, const float* P,
                          const float* dout, const float* q, const float* k, const float* v,
                          rt_head_view hv, int T, int HD, int causal) {
    const float* dop = dout + hv.qoff;
    if (dv)
        rtc_gemm_rm(1, 0, T, HD, T, 1.0f, P, T, dop, hv.ldq, 1.0f, dv + hv.koff, hv.ldk, RT_F32);
    if (!dq && !dk) return;
    rtc_gemm_rm(0, 1, T, T, HD, 1.0f, dop, hv.ldq, v + hv.koff, hv.ldk, 0.0f, dS, T, RT_F32);
    softmax_backward_rows_kernel<<<(unsigned)T, rtc_row_threads(T), 0, rtc_stream()>>>(
        dS, P, T, causal);
    RTC_CHECK_LAUNCH(softmax_backward_rows_kernel);
    const float scale = rt_attention_scale(HD);
    if (dq)
        rtc_gemm_rm(0, 0, T, HD, T, scale, dS, T, k + hv.koff, hv.ldk, 1.0f, dq + hv.qoff,
                    hv.ldq, RT_F32);
    if (dk)
        rtc_gemm_rm(1, 0, T, HD, T, scale, dS, T, q + hv.qoff, hv.ldq, 1.0f, dk + hv.koff,
                    hv.ldk, RT_F32);
}

// O[T,HD] = P[T,T] V[T,HD]
static void probs_times_v(float* out, const float* P, const float* v, rt_head_view hv, int T,
                          int HD) {
    rtc_gemm_rm(0, 0, T, HD, T, 1.0f, P, T, v + hv.koff, hv.ldk, 0.0f, out + hv.qoff, hv.ldq,
                RT_F32);
}

// ----------------------------------------------------------------------------
// probs variant

void rt_attention_forward(float* out, float* probs, const float* q, const float* k,
                          const float* v, int B, int T, int NH, int NKV, int HD, int causal) {
    RT_KCHECK_ATTENTION_HEADS(NH, NKV, HD);
    if (B <= 0 || T <= 0) return;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            scores(probs + ((size_t)b * NH + h) * T * T, q, k,
                   rt_head_view_of(b, h, T, NH, NKV, HD), T, HD);
    softmax_rows(probs, (size_t)B * NH * T, T, causal);  // every row in one launch
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            probs_times_v(out, probs + ((size_t)b * NH + h) * T * T, v,
                          rt_head_view_of(b, h, T, NH, NKV, HD), T, HD);
}

void rt_attention_backward(float* dq, float* dk, float* dv, float* scratch, const float* dout,
                           const float* q, const float* k, const float* v, const float* probs,
                           int B, int T, int NH, int NKV, int HD, int causal) {
    RT_KCHECK_ATTENTION_HEADS(NH, NKV, HD);
    if (B <= 0 || T <= 0) return;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            backward_head(dq, dk, dv, scratch, probs + ((size_t)b * NH + h) * T * T, dout, q, k,
                          v, rt_head_view_of(b, h, T, NH, NKV, HD), T, HD, causal);
}

// ----------------------------------------------------------------------------
// lowmem variant: flash attention (flash_attention.cuh, flash_attention_tc.cuh)

// Lets every flash kernel, fp32 and tensor-core, use its dynamic shared memory (above the
// default 48 KiB for most): a per-device function attribute, set when a thread's context
// is created (rtc_get), so launches, captured ones included, set nothing.
void rtc_attention_init(void) {
    struct setter {
        void operator()(rtc_fa_kernel kernel, size_t smem) const {
            RT_CHECK_CUDA(cudaFuncSetAttribute((const void*)kernel,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)smem));
        }
    } set;
    rtc_fa_each_kernel(set);
    rtc_fa_tc_each_kernel<__nv_bfloat16>(set);
    rtc_fa_tc_each_kernel<__half>(set);
}

// Launches one flash kernel with `smem` bytes of dynamic shared memory on the thread's
// stream: RTC_FA_NT threads (flash_attention.cuh's launch logic) or `threads`
// (flash_attention_tc.cuh's).
struct rtc_fa_launcher {
    cudaStream_t stream;
    void operator()(rtc_fa_kernel kernel, dim3 grid, size_t smem, const rtc_fa_args& a) const {
        (*this)(kernel, grid, (unsigned)RTC_FA_NT, smem, a);
    }
    void operator()(rtc_fa_kernel flash_kernel, dim3 grid, unsigned threads, size_t smem,
                    const rtc_fa_args& a) const {
        flash_kernel<<<grid, threads, smem, stream>>>(a);
        RTC_CHECK_LAUNCH(rtc_fa_kernel);
    }
};

// The tensor-core kernels serve this call: 16-bit operands, a head dim they support, and
// outputs rounded to the operands' type or not at all (rtc_tc_round).
static bool use_tensor_cores(rt_dtype prec, rt_dtype dt, int HD) {
    RT_KCHECK(prec == RT_F32 || prec == RT_BF16 || prec == RT_F16,
              "prec is the operands' dtype: RT_F32, RT_BF16 or RT_F16",
              "lowmem attention with prec %d", (int)prec);
    return prec != RT_F32 && rtc_fa_tc_hdp(HD) != 0 && (dt == RT_F32 || dt == prec);
}

// p: the dropout probability (0: none; the entry points check [0, 1)).
static rtc_fa_args flash_args(int B, int T, int NH, int NKV, int HD, int causal, float p,
                              uint64_t seed, uint64_t stream) {
    RT_KCHECK_ATTENTION_HEADS(NH, NKV, HD);
    RT_KCHECK(rtc_fa_hdp(HD) != 0, "use the probs variant (rt_attention_forward) for larger heads",
              "CUDA flash attention supports head dims up to %d, got %d", RTC_FA_MAX_HD, HD);
    RT_KCHECK(T <= 65535 * 16, "sequence too long for the flash kernels' grid",
              "CUDA flash attention with T = %d", T);
    return rtc_fa_make_args(B, T, NH, NKV, HD, causal, p, seed, stream);
}

// The tensor-core kernels' 16-bit operands: q, k, v (and dout when it is not NULL) as they
// are when packed (the RT_PACKED_INP, _INP2, _INP3, _OUT bits), else narrowed into dense
// 16-bit copies of prec's type in the operand scratch, for the kernels' cp.async tile loads
// (2 bytes an element instead of 4, no conversion on the way into shared memory). Rows of
// NH*HD or NKV*HD elements, multiples of 16: rtc_narrow adds no padding.
static void operands16(rtc_fa_args& a, const void* q, const void* k, const void* v,
                       const void* dout, int packed, rt_dtype prec) {
    const int rows = a.B * a.T, cq = a.NH * a.HD, ck = a.NKV * a.HD;
    const bool pq = packed & RT_PACKED_INP, pk = packed & RT_PACKED_INP2,
               pv = packed & RT_PACKED_INP3, pd = packed & RT_PACKED_OUT;
    const size_t nq = rtc_elems16(rows, cq), nk = rtc_elems16(rows, ck);
    char* s = (char*)rtc_operand_scratch(
        ((pq ? 0 : nq) + (pk ? 0 : nk) + (pv ? 0 : nk) + (dout && !pd ? nq : 0)) * 2);
    auto operand = [&](const void* x, bool p, int cols, size_t n) -> const void* {
        if (p) return x;
        const void* c = rtc_narrow(s, (const float*)x, rows, cols, cols, prec).p;
        s += n * 2;
        return c;
    };
    a.q16 = operand(q, pq, cq, nq);
    a.k16 = operand(k, pk, ck, nk);
    a.v16 = operand(v, pv, ck, nk);
    if (dout) a.dout16 = operand(dout, pd, cq, nq);
}

// The fp32 kernels' operand: x itself, or its packed values widened at *s (advanced), in
// the operand scratch.
static const float* widened(float** s, const void* x, bool packed, int rows, int cols,
                            rt_dtype dt) {
    if (!packed) return (const float*)x;
    float* w = *s;
    rtc_widen(w, x, rows, cols, cols, dt);
    *s += (size_t)rows * cols;
    return w;
}

// The fp32 kernels' q, k, v (widened at *s where packed: RT_PACKED_INP, _INP2, _INP3).
static void operands32(rtc_fa_args& a, float** s, const void* q, const void* k, const void* v,
                       int packed, rt_dtype dt) {
    const int rows = a.B * a.T, cq = a.NH * a.HD, ck = a.NKV * a.HD;
    a.q = widened(s, q, packed & RT_PACKED_INP, rows, cq, dt);
    a.k = widened(s, k, packed & RT_PACKED_INP2, rows, ck, dt);
    a.v = widened(s, v, packed & RT_PACKED_INP3, rows, ck, dt);
}

// The forward of both entry points (packed 0: fp32 storage; rt_kernels.h "packed 16-bit
// storage"), with dropout p (0: none). The tensor-core kernels read packed q, k, v in place
// of their narrowed copies and write a packed out in place of out's rounded floats; the fp32
// kernels (head dims the tensor cores do not take) run on packed operands widened into the
// operand scratch. The scratch is not used: tiles live in shared memory.
static void lowmem_forward(void* out, float* stats, const void* q, const void* k, const void* v,
                           int B, int T, int NH, int NKV, int HD, int causal, rt_dtype prec,
                           int packed, rt_dtype dt, float p, uint64_t seed, uint64_t stream) {
    rtc_fa_args a = flash_args(B, T, NH, NKV, HD, causal, p, seed, stream);
    const bool tc = use_tensor_cores(prec, dt, HD), po = packed & RT_PACKED_OUT;
    if (B <= 0 || T <= 0) return;
    a.dt = dt;
    a.stats = stats;
    rtc_fa_launcher launch = {rtc_stream()};
    if (tc) {  // then prec is dt, the packed values' type
        a.out = po ? NULL : (float*)out;
        a.out16 = po ? out : NULL;
        operands16(a, q, k, v, NULL, packed, prec);
        if (prec == RT_BF16) rtc_fa_tc_forward<__nv_bfloat16>(launch, a);
        else rtc_fa_tc_forward<__half>(launch, a);
        return;
    }
    const int rows = B * T, cq = NH * HD, ck = NKV * HD;
    float* s = packed ? (float*)rtc_operand_scratch((size_t)(2 * cq + 2 * ck) * rows * 4) : NULL;
    operands32(a, &s, q, k, v, packed, dt);
    a.out = po ? s : (float*)out;
    rtc_fa_forward(launch, a);
    if (po) rtc_narrow(out, a.out, rows, cq, cq, dt);
}

// The kernels' assign bits (rt_kernels.h RT_ASSIGN_1..3 for dq, dk, dv); the bits of
// outputs that are one buffer are ignored: both contributions add.
static int attention_assign_bits(const void* dq, const void* dk, const void* dv, int assign) {
    const bool qk = dq && dq == dk, qv = dq && dq == dv, kv = dk && dk == dv;
    return ((assign & RT_ASSIGN_1) && !qk && !qv ? RTC_FA_ASSIGN_DQ : 0) |
           ((assign & RT_ASSIGN_2) && !qk && !kv ? RTC_FA_ASSIGN_DK : 0) |
           ((assign & RT_ASSIGN_3) && !qv && !kv ? RTC_FA_ASSIGN_DV : 0);
}

// The backward of both entry points, as lowmem_forward; RT_PACKED_OUT: out and dout packed
// (D reads them in place); RT_PACKED_DINP, _DINP2, _DINP3: dq, dk, dv packed, in rows of
// ld_dq, ld_dk, ld_dv (0: dense; rt_kernels.h "Gradient row lengths", checked by the
// caller), which the tensor-core kernels add to or assign in place; for the fp32 kernels
// they are widened into dense copies in the operand scratch unless assigned, and narrowed
// back into their columns. The scratch holds D [B,NH,T] (rt_attention_lowmem_scratch_floats
// >= B*NH*T).
static void lowmem_backward(void* dq, void* dk, void* dv, float* scratch, const void* dout,
                            const void* out, const void* q, const void* k, const void* v,
                            const float* stats, int B, int T, int NH, int NKV, int HD, int causal,
                            rt_dtype prec, int packed, rt_dtype dt, int assign, int ld_dq,
                            int ld_dk, int ld_dv, float p, uint64_t seed, uint64_t stream) {
    RT_KCHECK_ATTENTION_ALIAS(dq, dk, dv, dt);
    rtc_fa_args a = flash_args(B, T, NH, NKV, HD, causal, p, seed, stream);
    const bool tc = use_tensor_cores(prec, dt, HD), po = packed & RT_PACKED_OUT;
    if (B <= 0 || T <= 0 || (!dq && !dk && !dv)) return;
    a.dt = dt;
    a.assign = attention_assign_bits(dq, dk, dv, assign);
    a.grads16 = (dq && (packed & RT_PACKED_DINP) ? RTC_FA_ASSIGN_DQ : 0) |
                (dk && (packed & RT_PACKED_DINP2) ? RTC_FA_ASSIGN_DK : 0) |
                (dv && (packed & RT_PACKED_DINP3) ? RTC_FA_ASSIGN_DV : 0);
    a.dq = (float*)dq, a.dk = (float*)dk, a.dv = (float*)dv;
    a.stats_in = stats;
    a.D = scratch;
    rtc_fa_launcher launch = {rtc_stream()};
    if (tc) {
        a.dout = po ? NULL : (const float*)dout;
        a.out_in = po ? NULL : (const float*)out;
        a.out16_in = po ? out : NULL;
        a.ld_dq = ld_dq, a.ld_dk = ld_dk, a.ld_dv = ld_dv;
        operands16(a, q, k, v, dout, packed, prec);
        if (prec == RT_BF16) rtc_fa_tc_backward<__nv_bfloat16>(launch, a);
        else rtc_fa_tc_backward<__half>(launch, a);
        return;
    }
    const int rows = B * T, cq = NH * HD, ck = NKV * HD;
    float* s = packed ? (float*)rtc_operand_scratch((size_t)(4 * cq + 4 * ck) * rows * 4) : NULL;
    a.dout = widened(&s, dout, po, rows, cq, dt);
    a.out_in = widened(&s, out, po, rows, cq, dt);
    operands32(a, &s, q, k, v, packed, dt);
    // packed gradients: dense fp32 copies (their values unless assigned) for the fp32 kernels
    struct {
        float** g;
        int bit, cols, ld;
    } grads[3] = {{&a.dq, RTC_FA_ASSIGN_DQ, cq, ld_dq ? ld_dq : cq},
                  {&a.dk, RTC_FA_ASSIGN_DK, ck, ld_dk ? ld_dk : ck},
                  {&a.dv, RTC_FA_ASSIGN_DV, ck, ld_dv ? ld_dv : ck}};
    void* g16[3] = {dq, dk, dv};
    for (int i = 0; i < 3; i++) {
        if (!(a.grads16 & grads[i].bit)) continue;
        float* w = s;
        s += (size_t)rows * grads[i].cols;
        if (!(a.assign & grads[i].bit))
            rtc_widen(w, g16[i], rows, grads[i].cols, grads[i].ld, dt);
        *grads[i].g = w;
    }
    rtc_fa_backward(launch, a);  // the fp32 kernels ignore grads16
    for (int i = 0; i < 3; i++)
        if (a.grads16 & grads[i].bit)
            rtc_narrow_into(g16[i], grads[i].ld, *grads[i].g, rows, grads[i].cols, dt);
}

void rt_attention_lowmem_forward(float* out, float* stats, float* scratch, const float* q,
                                 const float* k, const float* v, int B, int T, int NH, int NKV,
                                 int HD, int causal, rt_dtype prec, rt_dtype dt) {
    (void)scratch;
    RT_KCHECK_DT(dt, "rt_attention_lowmem_forward");
    lowmem_forward(out, stats, q, k, v, B, T, NH, NKV, HD, causal, prec, 0, dt, 0.0f, 0, 0);
}

void rt_attention_lowmem_dropout_forward(float* out, float* stats, float* scratch,
                                         const float* q, const float* k, const float* v, int B,
                                         int T, int NH, int NKV, int HD, int causal,
                                         rt_dtype prec, rt_dtype dt, float p, uint64_t seed,
                                         uint64_t stream) {
    static const char* kernel = "rt_attention_lowmem_dropout_forward";
    (void)scratch;
    RT_KCHECK_DT(dt, kernel);
    RT_KCHECK_ATTENTION_DROPOUT(p, kernel);
    lowmem_forward(out, stats, q, k, v, B, T, NH, NKV, HD, causal, prec, 0, dt, p, seed, stream);
}

void rt_attention_lowmem_backward(float* dq, float* dk, float* dv, float* scratch,
                                  const float* dout, const float* out, const float* q,
                                  const float* k, const float* v, const float* stats, int B,
                                  int T, int NH, int NKV, int HD, int causal, rt_dtype prec,
                                  rt_dtype dt, int assign) {
    RT_KCHECK_DT(dt, "rt_attention_lowmem_backward");
    lowmem_backward(dq, dk, dv, scratch, dout, out, q, k, v, stats, B, T, NH, NKV, HD, causal, prec,
                    0, dt, assign, 0, 0, 0, 0.0f, 0, 0);
}

void rt_attention_lowmem_dropout_backward(float* dq, float* dk, float* dv, float* scratch,
                                          const float* dout, const float* out, const float* q,
                                          const float* k, const float* v, const float* stats,
                                          int B, int T, int NH, int NKV, int HD, int causal,
                                          rt_dtype prec, rt_dtype dt, int assign, float p,
                                          uint64_t seed, uint64_t stream) {
    static const char* kernel = "rt_attention_lowmem_dropout_backward";
    RT_KCHECK_DT(dt, kernel);
    RT_KCHECK_ATTENTION_DROPOUT(p, kernel);
    lowmem_backward(dq, dk, dv, scratch, dout, out, q, k, v, stats, B, T, NH, NKV, HD, causal, prec,
                    0, dt, assign, 0, 0, 0, p, seed, stream);
}

void rt_attention_lowmem_packed_forward(void* out, float* stats, float* scratch, const void* q,
                                        const void* k, const void* v, int B, int T, int NH,
                                        int NKV, int HD, int causal, rt_dtype prec, int packed,
                                        rt_dtype dt) {
    (void)scratch;
    RT_KCHECK_PACKED_DT(dt, "rt_attention_lowmem_packed_forward");
    lowmem_forward(out, stats, q, k, v, B, T, NH, NKV, HD, causal, prec, packed, dt, 0.0f, 0, 0);
}

void rt_attention_lowmem_packed_dropout_forward(void* out, float* stats, float* scratch,
                                                const void* q, const void* k, const void* v,
                                                int B, int T, int NH, int NKV, int HD,
                                                int causal, rt_dtype prec, int packed,
                                                rt_dtype dt, float p, uint64_t seed,
                                                uint64_t stream) {
    static const char* kernel = "rt_attention_lowmem_packed_dropout_forward";
    (void)scratch;
    RT_KCHECK_PACKED_DT(dt, kernel);
    RT_KCHECK_ATTENTION_DROPOUT(p, kernel);
    lowmem_forward(out, stats, q, k, v, B, T, NH, NKV, HD, causal, prec, packed, dt, p, seed,
                   stream);
}

// The packed backward's argument checks (kernel: the entry point's name).
static void packed_backward_checks(const char* kernel, int NH, int NKV, int HD, int packed,
                                   rt_dtype dt, int ld_dq, int ld_dk, int ld_dv) {
    RT_KCHECK_PACKED_DT(dt, kernel);
    RT_KCHECK_PACKED_LD(ld_dq, NH * HD, packed & RT_PACKED_DINP, "dq", kernel);
    RT_KCHECK_PACKED_LD(ld_dk, NKV * HD, packed & RT_PACKED_DINP2, "dk", kernel);
    RT_KCHECK_PACKED_LD(ld_dv, NKV * HD, packed & RT_PACKED_DINP3, "dv", kernel);
}

void rt_attention_lowmem_packed_backward(void* dq, void* dk, void* dv, float* scratch,
                                         const void* dout, const void* out, const void* q,
                                         const void* k, const void* v, const float* stats, int B,
                                         int T, int NH, int NKV, int HD, int causal,
                                         rt_dtype prec, int packed, rt_dtype dt, int assign,
                                         int ld_dq, int ld_dk, int ld_dv) {
    packed_backward_checks("rt_attention_lowmem_packed_backward", NH, NKV, HD, packed, dt, ld_dq,
                           ld_dk, ld_dv);
    lowmem_backward(dq, dk, dv, scratch, dout, out, q, k, v, stats, B, T, NH, NKV, HD, causal, prec,
                    packed, dt, assign, ld_dq, ld_dk, ld_dv, 0.0f, 0, 0);
}

void rt_attention_lowmem_packed_dropout_backward(void* dq, void* dk, void* dv, float* scratch,
                                                 const void* dout, const void* out,
                                                 const void* q, const void* k, const void* v,
                                                 const float* stats, int B, int T, int NH,
                                                 int NKV, int HD, int causal, rt_dtype prec,
                                                 int packed, rt_dtype dt, int assign,
                                                 int ld_dq, int ld_dk, int ld_dv, float p,
                                                 uint64_t seed, uint64_t stream) {
    static const char* kernel = "rt_attention_lowmem_packed_dropout_backward";
    packed_backward_checks(kernel, NH, NKV, HD, packed, dt, ld_dq, ld_dk, ld_dv);
    RT_KCHECK_ATTENTION_DROPOUT(p, kernel);
    lowmem_backward(dq, dk, dv, scratch, dout, out, q, k, v, stats, B, T, NH, NKV, HD, causal, prec,
                    packed, dt, assign, ld_dq, ld_dk, ld_dv, p, seed, stream);
}
