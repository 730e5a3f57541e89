// Scaled-dot-product attention (F.scaled_dot_product_attention with is_causal and
// enable_gqa semantics), multi-head and grouped-query, forward and backward.
// Per (batch, head): S = scale * Q K^T (sgemm), row softmax (causal rows stop at the
// diagonal), O = P V (sgemm). Heads are addressed in place through the leading
// dimension of the [B,T,heads*HD] layouts, so no transposes or copies are needed.
//
// Two ways to carry the softmax to backward, same numbers:
//   * probs: forward keeps P [B,NH,T,T]; backward reads it.
//   * lowmem: forward keeps each row's (max, 1/sum) [B,NH,T,2]; backward recomputes S
//     with the same sgemm call and rebuilds P with the same float operations, so P is
//     bit-identical to the stored one, for O(T) instead of O(T^2) memory per head. The
//     scratch holds S/P and dS, [T,T] each (the size also covers the CUDA kernel's D).
// The lowmem variant's dropout entry points draw each probability's mask from its index
// (rt_dropout_uniform) in forward and again in backward, so no mask is stored either.
#include "rt_kernels.h"

#include <cblas.h>
#include <math.h>

#include "../../common/attention_shape.h"
#include "../../common/philox.h"
#include "kcheck.h"
#include "kround.h"
#include "vmath.h"

// ----------------------------------------------------------------------------
// sizes

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

// S[T,T] = scale * Q[T,HD] K[T,HD]^T (causal: the upper triangle is computed and then
// overwritten; one full GEMM is still faster than T small ones)
static inline void scores_(float* S, const float* q, const float* k, rt_head_view v, int T,
                           int HD) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HD, rt_attention_scale(HD),
                q + v.qoff, v.ldq, k + v.koff, v.ldk, 0.0f, S, T);
}

// ----------------------------------------------------------------------------
// attention dropout (rt_kernels.h rt_attention_lowmem_dropout_*): one head's mask factors,
// drawn per element from its index ((b*NH + h)*T + i)*T + j

typedef struct drop_ {
    float p, scale;         // p > 0
    uint64_t seed, stream;  // rt_dropout_uniform's
    uint64_t head;          // (b*NH + h)*T*T: the head's first index
} drop_;

static drop_ drop_head_(float p, uint64_t seed, uint64_t stream, int b, int h, int NH, int T) {
    const drop_ d = {p, rt_dropout_scale_inl(p), seed, stream, ((uint64_t)b * NH + h) * T * T};
    return d;
}

// Z[i,j]: scale where P[i,j] is kept, else 0.
static inline float keep_(const drop_* d, int T, int i, int j) {
    const float u = rt_philox_uniform_inl(d->seed, d->stream, d->head + (uint64_t)i * T + j);
    return rt_dropout_factor_inl(u, d->p, d->scale);
}

// row[s] = exp(row[s] - mx) * scale for s < len: its own loop, which vectorises (vmath.h);
// the sums over it stay in order, so the bits do not depend on the vector width.
RT_VEC_CLONES
static void exp_row_(float* row, int len, float mx, float scale) {
    for (int s = 0; s < len; s++) row[s] = rt_vexpf(row[s] - mx) * scale;
}

// ----------------------------------------------------------------------------
// forward core: P (probs slice or scratch) gets the probabilities; stats (nullable)
// gets each row's (max, 1/sum); with drop (nullable) P * Z is what multiplies v (and what P
// holds after the call)

static void forward_head_(float* out, float* P, float* stats, const float* q, const float* k,
                          const float* v, rt_head_view hv, int T, int HD, int causal,
                          const drop_* drop) {
    scores_(P, q, k, hv, T, HD);
    for (int t = 0; t < T; t++) {
        float* row = P + (size_t)t * T;
        const int len = causal ? t + 1 : T;  // keys visible to query t
        float mx = row[0];
        for (int s = 1; s < len; s++) mx = row[s] > mx ? row[s] : mx;
        exp_row_(row, len, mx, 1.0f);
        double sum = 0.0;
        for (int s = 0; s < len; s++) sum += row[s];
        const float inv = (float)(1.0 / sum);
        for (int s = 0; s < len; s++) row[s] *= inv;
        for (int s = len; s < T; s++) row[s] = 0.0f;
        if (stats) {
            stats[2 * t] = mx;
            stats[2 * t + 1] = inv;
        }
        if (drop)
            for (int s = 0; s < len; s++) row[s] *= keep_(drop, T, t, s);
    }
    // O[T,HD] = P[T,T] V[T,HD]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HD, T, 1.0f, P, T, v + hv.koff,
                hv.ldk, 0.0f, out + hv.qoff, hv.ldq);
}

// Rebuilds P from the saved statistics with the forward's exact float operations.
static void recompute_probs_(float* P, const float* stats, const float* q, const float* k,
                             rt_head_view hv, int T, int HD, int causal) {
    scores_(P, q, k, hv, T, HD);
    for (int t = 0; t < T; t++) {
        float* row = P + (size_t)t * T;
        const int len = causal ? t + 1 : T;
        const float mx = stats[2 * t], inv = stats[2 * t + 1];
        exp_row_(row, len, mx, inv);
        for (int s = len; s < T; s++) row[s] = 0.0f;
    }
}

// ----------------------------------------------------------------------------
// backward core (accumulating), with P the probabilities and dS a [T,T] scratch:
//   dV += P^T dO;  dP = dO V^T;  dS = P * (dP - rowsum(dP * P));
//   dQ += scale * dS K;  dK += scale * dS^T Q
// Query heads sharing a kv head accumulate into the same dK/dV slice (GQA).

// dQ += scale * dS K;  dK += scale * dS^T Q (each where not NULL)
static void dq_dk_(float* dq, float* dk, const float* dS, const float* q, const float* k,
                   rt_head_view hv, int T, int HD) {
    const float scale = rt_attention_scale(HD);
    if (dq) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HD, T, scale, dS, T,
                    k + hv.koff, hv.ldk, 1.0f, dq + hv.qoff, hv.ldq);
    }
    if (dk) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HD, T, scale, dS, T, q + hv.qoff,
                    hv.ldq, 1.0f, dk + hv.koff, hv.ldk);
    }
}

static void backward_head_(float* dq, float* dk, float* dv, float* dS, const float* P,
                           const float* dout, const float* q, const float* k, const float* v,
                           rt_head_view hv, int T, int HD, int causal) {
    const float* dop = dout + hv.qoff;
    if (dv) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HD, T, 1.0f, P, T, dop, hv.ldq,
                    1.0f, dv + hv.koff, hv.ldk);
    }
    if (!dq && !dk) return;
    // dP[T,T] = dO[T,HD] V[T,HD]^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HD, 1.0f, dop, hv.ldq, v + hv.koff,
                hv.ldk, 0.0f, dS, T);
    for (int t = 0; t < T; t++) {
        const float* p = P + (size_t)t * T;
        float* d = dS + (size_t)t * T;
        const int len = causal ? t + 1 : T;
        double dot = 0.0;
        for (int s = 0; s < len; s++) dot += (double)d[s] * p[s];
        const float df = (float)dot;
        for (int s = 0; s < len; s++) d[s] = p[s] * (d[s] - df);
        for (int s = len; s < T; s++) d[s] = 0.0f;  // masked keys: no probability, no gradient
    }
    dq_dk_(dq, dk, dS, q, k, hv, T, HD);
}

// The backward core with dropout, P the undropped probabilities (overwritten): per row,
// dP = Z * (dO V^T) and D = rowsum(dP * P), then dS = P * (dP - D) and P * Z in place of P;
// then dV += (P * Z)^T dO and dQ, dK as backward_head_. Z is drawn twice per element (the
// first pass needs D before the second can write dS).
static void backward_head_drop_(float* dq, float* dk, float* dv, float* dS, float* P,
                                const float* dout, const float* q, const float* k,
                                const float* v, rt_head_view hv, int T, int HD, int causal,
                                const drop_* drop) {
    const float* dop = dout + hv.qoff;
    // dP[T,T] = dO[T,HD] V[T,HD]^T, then masked by Z
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HD, 1.0f, dop, hv.ldq, v + hv.koff,
                hv.ldk, 0.0f, dS, T);
    for (int t = 0; t < T; t++) {
        float* p = P + (size_t)t * T;
        float* d = dS + (size_t)t * T;
        const int len = causal ? t + 1 : T;
        double dot = 0.0;
        for (int s = 0; s < len; s++) {
            d[s] *= keep_(drop, T, t, s);
            dot += (double)d[s] * p[s];
        }
        const float df = (float)dot;
        for (int s = 0; s < len; s++) {
            d[s] = p[s] * (d[s] - df);
            p[s] *= keep_(drop, T, t, s);
        }
        for (int s = len; s < T; s++) d[s] = 0.0f;
    }
    if (dv) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HD, T, 1.0f, P, T, dop, hv.ldq,
                    1.0f, dv + hv.koff, hv.ldk);
    }
    dq_dk_(dq, dk, dS, q, k, hv, T, HD);
}

// ----------------------------------------------------------------------------
// probs variant

void rt_attention_forward(float* out, float* probs, const float* q, const float* k,
                          const float* v, int B, int T, int NH, int NKV, int HD, int causal) {
    RT_KCHECK_ATTENTION_HEADS(NH, NKV, HD);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            forward_head_(out, probs + ((size_t)b * NH + h) * T * T, NULL, q, k, v,
                          rt_head_view_of(b, h, T, NH, NKV, HD), T, HD, causal, NULL);
}

void rt_attention_backward(float* dq, float* dk, float* dv, float* scratch, const float* dout,
                           const float* q, const float* k, const float* v, const float* probs,
                           int B, int T, int NH, int NKV, int HD, int causal) {
    RT_KCHECK_ATTENTION_HEADS(NH, NKV, HD);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            backward_head_(dq, dk, dv, scratch, probs + ((size_t)b * NH + h) * T * T, dout, q, k,
                           v, rt_head_view_of(b, h, T, NH, NKV, HD), T, HD, causal);
}

// ----------------------------------------------------------------------------
// lowmem variant

// The forward of both entry points; kernel: the name the argument checks give.
static void lowmem_forward_(const char* kernel, float* out, float* stats, float* scratch,
                            const float* q, const float* k, const float* v, int B, int T,
                            int NH, int NKV, int HD, int causal, rt_dtype prec, rt_dtype dt,
                            float p, uint64_t seed, uint64_t stream) {
    RT_KCHECK_DT(prec, kernel);
    RT_KCHECK_DT(dt, kernel);
    RT_KCHECK_ATTENTION_HEADS(NH, NKV, HD);
    RT_KCHECK_ATTENTION_DROPOUT(p, kernel);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const drop_ d = drop_head_(p, seed, stream, b, h, NH, T);
            forward_head_(out, scratch, stats + ((size_t)b * NH + h) * T * 2, q, k, v,
                          rt_head_view_of(b, h, T, NH, NKV, HD), T, HD, causal,
                          p > 0.0f ? &d : NULL);
        }
    if (B > 0 && T > 0) rt_kround_buf(out, (size_t)B * T * NH * HD, dt);
}

void rt_attention_lowmem_forward(float* out, float* stats, float* scratch, const float* q,
                                 const float* k, const float* v, int B, int T, int NH, int NKV,
                                 int HD, int causal, rt_dtype prec, rt_dtype dt) {
    lowmem_forward_("rt_attention_lowmem_forward", out, stats, scratch, q, k, v, B, T, NH, NKV,
                    HD, causal, prec, dt, 0.0f, 0, 0);
}

void rt_attention_lowmem_dropout_forward(float* out, float* stats, float* scratch,
                                         const float* q, const float* k, const float* v, int B,
                                         int T, int NH, int NKV, int HD, int causal,
                                         rt_dtype prec, rt_dtype dt, float p, uint64_t seed,
                                         uint64_t stream) {
    lowmem_forward_("rt_attention_lowmem_dropout_forward", out, stats, scratch, q, k, v, B, T,
                    NH, NKV, HD, causal, prec, dt, p, seed, stream);
}

// An assigned gradient output of lowmem backward, zeroed (its contributions then add
// onto zeros: the Assign contract's bits); nothing when it is NULL, not assigned, or one
// buffer with another output (then both accumulate).
static void zero_assigned_(float* x, const float* o1, const float* o2, int assigned, size_t n) {
    if (!x || !assigned || x == o1 || x == o2) return;
    for (size_t i = 0; i < n; i++) x[i] = 0.0f;
}

// out is not read: the backward cores take rowsum(dP * P) from whole rows of the scratch,
// which keeps the result bit-identical to the probs variant (without dropout).
static void lowmem_backward_(const char* kernel, float* dq, float* dk, float* dv,
                             float* scratch, const float* dout, const float* q, const float* k,
                             const float* v, const float* stats, int B, int T, int NH, int NKV,
                             int HD, int causal, rt_dtype prec, rt_dtype dt, int assign, float p,
                             uint64_t seed, uint64_t stream) {
    RT_KCHECK_DT(prec, kernel);
    RT_KCHECK_DT(dt, kernel);
    RT_KCHECK_ATTENTION_ALIAS(dq, dk, dv, dt);
    RT_KCHECK_ATTENTION_HEADS(NH, NKV, HD);
    RT_KCHECK_ATTENTION_DROPOUT(p, kernel);
    if (B <= 0 || T <= 0) return;
    const size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    zero_assigned_(dq, dk, dv, assign & RT_ASSIGN_1, nq);
    zero_assigned_(dk, dq, dv, assign & RT_ASSIGN_2, nk);
    zero_assigned_(dv, dq, dk, assign & RT_ASSIGN_3, nk);
    float* P = scratch;
    float* dS = scratch + (size_t)T * T;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const rt_head_view hv = rt_head_view_of(b, h, T, NH, NKV, HD);
            recompute_probs_(P, stats + ((size_t)b * NH + h) * T * 2, q, k, hv, T, HD, causal);
            if (p > 0.0f) {
                const drop_ d = drop_head_(p, seed, stream, b, h, NH, T);
                backward_head_drop_(dq, dk, dv, dS, P, dout, q, k, v, hv, T, HD, causal, &d);
            } else {
                backward_head_(dq, dk, dv, dS, P, dout, q, k, v, hv, T, HD, causal);
            }
        }
    if (dq) rt_kround_buf(dq, nq, dt);
    if (dk) rt_kround_buf(dk, nk, dt);
    if (dv) rt_kround_buf(dv, nk, dt);
}

void rt_attention_lowmem_backward(float* dq, float* dk, float* dv, float* scratch,
                                  const float* dout, const float* out, const float* q,
                                  const float* k, const float* v, const float* stats, int B,
                                  int T, int NH, int NKV, int HD, int causal, rt_dtype prec,
                                  rt_dtype dt, int assign) {
    (void)out;
    lowmem_backward_("rt_attention_lowmem_backward", dq, dk, dv, scratch, dout, q, k, v, stats,
                     B, T, NH, NKV, HD, causal, prec, dt, assign, 0.0f, 0, 0);
}

void rt_attention_lowmem_dropout_backward(float* dq, float* dk, float* dv, float* scratch,
                                          const float* dout, const float* out, const float* q,
                                          const float* k, const float* v, const float* stats,
                                          int B, int T, int NH, int NKV, int HD, int causal,
                                          rt_dtype prec, rt_dtype dt, int assign, float p,
                                          uint64_t seed, uint64_t stream) {
    (void)out;
    lowmem_backward_("rt_attention_lowmem_dropout_backward", dq, dk, dv, scratch, dout, q, k, v,
                     stats, B, T, NH, NKV, HD, causal, prec, dt, assign, p, seed, stream);
}
