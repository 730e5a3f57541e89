// Scaled-dot-product attention on the GPU, multi-head and grouped-query: the same
// straightforward algorithm as runtime/kernels/cpu/attention.c, one (batch, head) at a
// time. Per head: S = scale * Q K^T (cuBLAS SGEMM), a row-softmax kernel (causal rows stop
// at the diagonal; one block per row, statistics in double as the CPU), O = P V (SGEMM).
// Heads are addressed in place through the leading dimension of the [B,T,heads*HD]
// layouts, so there are no transposes or copies.
//
// The probs variant materialises P [B,NH,T,T] like the CPU one; the lowmem variant keeps
// (max, 1/sum) per row and recomputes P in backward with the same SGEMM call and the same
// float operations. The two variants give the same bits as long as cuBLAS picks the same
// kernel for the S GEMM of both, which it does for equal shapes, strides and operand
// alignment (the output slice of the probs variant starts at a multiple of T*T floats,
// the lowmem scratch at its base; cuBLAS may choose by pointer alignment when T*T*4 is not
// a multiple of 16 bytes).
//
// Backward's scratch is one [T,T] matrix (the API's rt_attention_scratch_floats), so the
// backward GEMMs run per head: B*NH*(4 or 5) small GEMMs and a softmax-backward kernel per
// head. Correct, not fast.
// TODO(issue 5): a flash-attention kernel (tiled online softmax, no [T,T] buffer, one
// launch for all heads, recomputation in backward; FlashAttention-2 on sm_90a, later
// wgmma/TMA as in FlashAttention-3), bf16 inputs on tensor cores, and batched GEMMs over
// heads where the scratch allows.
#include "cuda_common.cuh"

// ----------------------------------------------------------------------------
// sizes (same as the CPU backend: the memory plan must not depend on the backend)

size_t rt_attention_probs_floats(int B, int NH, int T) { return (size_t)B * NH * T * T; }

size_t rt_attention_scratch_floats(int T) { return (size_t)T * T; }

size_t rt_attention_stats_floats(int B, int NH, int T) { return (size_t)B * NH * T * 2; }

size_t rt_attention_lowmem_scratch_floats(int T) { return (size_t)T * T * 2; }

static void attention_check(int NH, int NKV, int HD) {
    RTC_KCHECK(NH > 0 && NKV > 0 && NH % NKV == 0, "n_heads must be a multiple of n_kv_heads",
               "attention with %d query heads and %d kv heads", NH, NKV);
    RTC_KCHECK(HD > 0, "head dim must be positive", "attention head dim %d", HD);
}

// Where one (b, h) pair's operands live inside the [B,T,heads*HD] buffers.
typedef struct {
    size_t qoff, koff;  // offsets of q/out/dq and of k/v/dk/dv
    int ldq, ldk;       // row strides: NH*HD and NKV*HD
} head_view;

static inline head_view head_view_of(int b, int h, int T, int NH, int NKV, int HD) {
    head_view v;
    v.ldq = NH * HD;
    v.ldk = NKV * HD;
    v.qoff = (size_t)b * T * v.ldq + (size_t)h * HD;
    v.koff = (size_t)b * T * v.ldk + (size_t)(h / (NH / NKV)) * HD;  // kv head of query head h
    return v;
}

static inline float attention_scale(int HD) { return (float)(1.0 / sqrt((double)HD)); }

// S[T,T] = scale * Q[T,HD] K[T,HD]^T (causal: the upper triangle is computed, then
// overwritten by the softmax kernels)
static void scores(float* S, const float* q, const float* k, head_view hv, int T, int HD) {
    rtc_sgemm_rm(0, 1, T, T, HD, attention_scale(HD), q + hv.qoff, hv.ldq, k + hv.koff, hv.ldk,
                 0.0f, S, T);
}

// ----------------------------------------------------------------------------
// softmax over rows of [rows, T] score matrices (one block per row; row r is query
// position r % T). Writes P in place; stats (nullable) gets (max, 1/sum) per row.

__global__ void softmax_rows_kernel(float* P, float* stats, int T, int causal) {
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
    if (threadIdx.x == 0 && stats) {
        stats[2 * r] = mx;
        stats[2 * r + 1] = inv;
    }
}

static void softmax_rows(float* P, float* stats, size_t rows, int T, int causal) {
    softmax_rows_kernel<<<(unsigned)rows, rtc_row_threads(T), 0, rtc_stream()>>>(P, stats, T,
                                                                                causal);
    RTC_CHECK_LAUNCH(softmax_rows_kernel);
}

// Rebuilds one head's P [T,T] from S and the saved (max, 1/sum) with the forward's float
// operations (e = expf(s - max), p = e * inv).
__global__ void recompute_probs_kernel(float* P, const float* stats, int T, int causal) {
    const size_t n = (size_t)T * T;
    RTC_GRID_STRIDE(i, n) {
        const int t = (int)(i / (size_t)T), s = (int)(i % (size_t)T);
        const int len = causal ? t + 1 : T;
        if (s < len) {
            const float e = expf(P[i] - stats[2 * t]);
            P[i] = e * stats[2 * t + 1];
        } else {
            P[i] = 0.0f;
        }
    }
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
                          head_view hv, int T, int HD, int causal) {
    const float* dop = dout + hv.qoff;
    if (dv) rtc_sgemm_rm(1, 0, T, HD, T, 1.0f, P, T, dop, hv.ldq, 1.0f, dv + hv.koff, hv.ldk);
    if (!dq && !dk) return;
    rtc_sgemm_rm(0, 1, T, T, HD, 1.0f, dop, hv.ldq, v + hv.koff, hv.ldk, 0.0f, dS, T);
    softmax_backward_rows_kernel<<<(unsigned)T, rtc_row_threads(T), 0, rtc_stream()>>>(
        dS, P, T, causal);
    RTC_CHECK_LAUNCH(softmax_backward_rows_kernel);
    const float scale = attention_scale(HD);
    if (dq)
        rtc_sgemm_rm(0, 0, T, HD, T, scale, dS, T, k + hv.koff, hv.ldk, 1.0f, dq + hv.qoff,
                     hv.ldq);
    if (dk)
        rtc_sgemm_rm(1, 0, T, HD, T, scale, dS, T, q + hv.qoff, hv.ldq, 1.0f, dk + hv.koff,
                     hv.ldk);
}

// O[T,HD] = P[T,T] V[T,HD]
static void probs_times_v(float* out, const float* P, const float* v, head_view hv, int T,
                          int HD) {
    rtc_sgemm_rm(0, 0, T, HD, T, 1.0f, P, T, v + hv.koff, hv.ldk, 0.0f, out + hv.qoff, hv.ldq);
}

// ----------------------------------------------------------------------------
// probs variant

void rt_attention_forward(float* out, float* probs, const float* q, const float* k,
                          const float* v, int B, int T, int NH, int NKV, int HD, int causal) {
    attention_check(NH, NKV, HD);
    if (B <= 0 || T <= 0) return;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            scores(probs + ((size_t)b * NH + h) * T * T, q, k, head_view_of(b, h, T, NH, NKV, HD),
                   T, HD);
    softmax_rows(probs, NULL, (size_t)B * NH * T, T, causal);  // every row in one launch
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            probs_times_v(out, probs + ((size_t)b * NH + h) * T * T, v,
                          head_view_of(b, h, T, NH, NKV, HD), T, HD);
}

void rt_attention_backward(float* dq, float* dk, float* dv, float* scratch, const float* dout,
                           const float* q, const float* k, const float* v, const float* probs,
                           int B, int T, int NH, int NKV, int HD, int causal) {
    attention_check(NH, NKV, HD);
    if (B <= 0 || T <= 0) return;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            backward_head(dq, dk, dv, scratch, probs + ((size_t)b * NH + h) * T * T, dout, q, k,
                          v, head_view_of(b, h, T, NH, NKV, HD), T, HD, causal);
}

// ----------------------------------------------------------------------------
// lowmem variant: forward keeps (max, 1/sum) per row; backward recomputes P per head
// into the first half of the scratch and uses the second half as dS.

void rt_attention_lowmem_forward(float* out, float* stats, float* scratch, const float* q,
                                 const float* k, const float* v, int B, int T, int NH, int NKV,
                                 int HD, int causal) {
    attention_check(NH, NKV, HD);
    if (B <= 0 || T <= 0) return;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const head_view hv = head_view_of(b, h, T, NH, NKV, HD);
            scores(scratch, q, k, hv, T, HD);
            softmax_rows(scratch, stats + ((size_t)b * NH + h) * T * 2, (size_t)T, T, causal);
            probs_times_v(out, scratch, v, hv, T, HD);
        }
}

void rt_attention_lowmem_backward(float* dq, float* dk, float* dv, float* scratch,
                                  const float* dout, const float* q, const float* k,
                                  const float* v, const float* stats, int B, int T, int NH,
                                  int NKV, int HD, int causal) {
    attention_check(NH, NKV, HD);
    if (B <= 0 || T <= 0) return;
    float* P = scratch;
    float* dS = scratch + (size_t)T * T;
    const size_t tt = (size_t)T * T;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const head_view hv = head_view_of(b, h, T, NH, NKV, HD);
            scores(P, q, k, hv, T, HD);
            recompute_probs_kernel<<<rtc_blocks(tt, RTC_THREADS), RTC_THREADS, 0, rtc_stream()>>>(
                P, stats + ((size_t)b * NH + h) * T * 2, T, causal);
            RTC_CHECK_LAUNCH(recompute_probs_kernel);
            backward_head(dq, dk, dv, dS, P, dout, q, k, v, hv, T, HD, causal);
        }
}
