// Scaled-dot-product attention (F.scaled_dot_product_attention with is_causal and
// enable_gqa semantics), multi-head and grouped-query, forward and backward.
// Per (batch, head): S = scale * Q K^T (sgemm), row softmax (causal rows stop at the
// diagonal), O = P V (sgemm). Heads are addressed in place through the leading
// dimension of the [B,T,heads*HD] layouts, so no transposes or copies are needed.
#include "rt_kernels.h"

#include <cblas.h>
#include <math.h>

#include "kcheck.h"

// ----------------------------------------------------------------------------
// sizes

size_t rt_attention_probs_floats(int B, int NH, int T) { return (size_t)B * NH * T * T; }

size_t rt_attention_scratch_floats(int T) { return (size_t)T * T; }

static void attention_check_(int NH, int NKV, int HD) {
    RT_KCHECK(NH > 0 && NKV > 0 && NH % NKV == 0, "n_heads must be a multiple of n_kv_heads",
              "attention with %d query heads and %d kv heads", NH, NKV);
    RT_KCHECK(HD > 0, "head dim must be positive", "attention head dim %d", HD);
}

// ----------------------------------------------------------------------------
// forward: out[B,T,NH*HD], probs[B,NH,T,T] (masked entries stored as exact zeros)

void rt_attention_forward(float* out, float* probs, const float* q, const float* k,
                          const float* v, int B, int T, int NH, int NKV, int HD, int causal) {
    attention_check_(NH, NKV, HD);
    const int group = NH / NKV;        // query heads per kv head
    const int ldq = NH * HD, ldk = NKV * HD;
    const float scale = (float)(1.0 / sqrt((double)HD));
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const int hk = h / group;
            const float* qp = q + (size_t)b * T * ldq + (size_t)h * HD;
            const float* kp = k + (size_t)b * T * ldk + (size_t)hk * HD;
            const float* vp = v + (size_t)b * T * ldk + (size_t)hk * HD;
            float* op = out + (size_t)b * T * ldq + (size_t)h * HD;
            float* P = probs + ((size_t)b * NH + h) * T * T;
            // S[T,T] = scale * Q[T,HD] K[T,HD]^T (causal: upper triangle computed then
            // overwritten; a full GEMM is still faster than T small ones)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HD, scale, qp, ldq, kp,
                        ldk, 0.0f, P, T);
            for (int t = 0; t < T; t++) {
                float* row = P + (size_t)t * T;
                const int len = causal ? t + 1 : T;  // keys visible to query t
                float mx = row[0];
                for (int s = 1; s < len; s++) mx = row[s] > mx ? row[s] : mx;
                double sum = 0.0;
                for (int s = 0; s < len; s++) {
                    float e = expf(row[s] - mx);
                    row[s] = e;
                    sum += e;
                }
                const float inv = (float)(1.0 / sum);
                for (int s = 0; s < len; s++) row[s] *= inv;
                for (int s = len; s < T; s++) row[s] = 0.0f;
            }
            // O[T,HD] = P[T,T] V[T,HD]
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HD, T, 1.0f, P, T, vp, ldk,
                        0.0f, op, ldq);
        }
    }
}

// ----------------------------------------------------------------------------
// backward (accumulating), per (b, h) with P the saved probabilities:
//   dV += P^T dO;  dP = dO V^T;  dS = P * (dP - rowsum(dP * P));
//   dQ += scale * dS K;  dK += scale * dS^T Q
// Query heads sharing a kv head accumulate into the same dK/dV slice (GQA).

void rt_attention_backward(float* dq, float* dk, float* dv, float* scratch, const float* dout,
                           const float* q, const float* k, const float* v, const float* probs,
                           int B, int T, int NH, int NKV, int HD, int causal) {
    attention_check_(NH, NKV, HD);
    const int group = NH / NKV;
    const int ldq = NH * HD, ldk = NKV * HD;
    const float scale = (float)(1.0 / sqrt((double)HD));
    float* dS = scratch;  // [T,T]: dP, then dS in place
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const int hk = h / group;
            const size_t qoff = (size_t)b * T * ldq + (size_t)h * HD;
            const size_t koff = (size_t)b * T * ldk + (size_t)hk * HD;
            const float* P = probs + ((size_t)b * NH + h) * T * T;
            const float* dop = dout + qoff;
            if (dv) {
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HD, T, 1.0f, P, T, dop,
                            ldq, 1.0f, dv + koff, ldk);
            }
            if (!dq && !dk) continue;
            // dP[T,T] = dO[T,HD] V[T,HD]^T
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HD, 1.0f, dop, ldq,
                        v + koff, ldk, 0.0f, dS, T);
            for (int t = 0; t < T; t++) {
                const float* p = P + (size_t)t * T;
                float* d = dS + (size_t)t * T;
                const int len = causal ? t + 1 : T;
                double dot = 0.0;
                for (int s = 0; s < len; s++) dot += (double)d[s] * p[s];
                const float df = (float)dot;
                for (int s = 0; s < len; s++) d[s] = p[s] * (d[s] - df);
                // masked keys got no probability, so no gradient
                for (int s = len; s < T; s++) d[s] = 0.0f;
            }
            if (dq) {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HD, T, scale, dS, T,
                            k + koff, ldk, 1.0f, dq + qoff, ldq);
            }
            if (dk) {
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HD, T, scale, dS, T,
                            q + qoff, ldq, 1.0f, dk + koff, ldk);
            }
        }
    }
}
