// Error bounds for the tensor-core flash attention (runtime/cuda/kernels/flash_attention_tc.cuh)
// against the CPU attention kernel, per output element, shared by test_flash_tc_emu.cc
// (emulated kernels) and test_cuda_kernels' kernels_attention.c (on a GPU). C11 and C++.
//
// Derivation. The operands q, k, v, dout hold 16-bit values, so every product the kernels
// form on tensor cores is exact and their sums are fp32: apart from fp32 round-off, the
// only difference from the CPU's fp32 arithmetic is the narrowing of the probabilities
// and their gradients to the 16-bit type before their products (FlashAttention-2,
// PyTorch SDPA). Narrowing x gives x (1 + d) + e with |d| <= u, the unit roundoff
// (bf16: 2^-8, 8 significant bits; fp16: 2^-11, 11 bits), and |e| <= eta, half the
// spacing below the normal range (fp16: 2^-25 under 2^-14; bf16: 2^-134, negligible).
// First order, per element, with P, dP = dO V^T, D = rowsum(P * dP), dS = P (dP - D)
// computed here in double from the same (rounded) operands:
//   out[r,d]  O = sum_c p_c v[c,d] / l with p = exp(s - m) narrowed (p <= 1, and l sums
//             the unrounded p):                 u sum_c P[r,c] |v[c,d]| + eta/l_r sum_c |v[c,d]|
//   dv[c,d]   sum over query rows (and heads of the group) of narrowed P times dO:
//                                               sum_r (u P[r,c] + eta) |dO[r,d]|
//   dq[r,d]   scale sum_c narrowed dS[r,c] k[c,d]:  scale sum_c (u |dS[r,c]| + eta) |k[c,d]|
//   dk[c,d]   scale sum_r narrowed dS[r,c] q[r,d]:  scale sum_r (u |dS[r,c]| + eta) |q[r,d]|
// (sums over visible pairs: masked entries are exact zeros). When the backward's D comes
// from a forward output that carries its own bound (the kernels' forward fed to their
// backward), dS[r,c] also moves by P[r,c] dD_r with |dD_r| <= sum_d |dO[r,d]| bout[r,d]:
//   dq += scale sum_c P[r,c] |dD_r| |k[c,d]|,   dk += scale sum_r P[r,c] |dD_r| |q[r,d]|.
// To these the comparison adds the fp32 part: tol32 * max(1, |want|), the tolerance the
// fp32 flash kernels meet against the same CPU kernel (different summation orders on both
// sides, expf vs exp2f, the accumulation onto a non-zero gradient). An element passes
// when |got - want| <= bound + tol32 * max(1, |want|). The u-terms add every rounding
// error with the same sign, so measured errors sit well below them (the tests print the
// largest ratio |got - want| / allowance).
#ifndef FSDPGEN_TESTS_CUDA_ATTENTION_TC_REF_H
#define FSDPGEN_TESTS_CUDA_ATTENTION_TC_REF_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    size_t nq, nk;          // B*T*NH*HD, B*T*NKV*HD
    double *out, *dq, *dk, *dv;  // the 16-bit narrowing bound of each element
    double *dq_D, *dk_D;    // the extra when D comes from an out within `out`'s bound
} attn_tc_bound;

// u and eta of the 16-bit format: bf16 (is_bf16 != 0) or fp16.
static inline double attn_tc_u(int is_bf16) { return is_bf16 ? ldexp(1.0, -8) : ldexp(1.0, -11); }
static inline double attn_tc_eta(int is_bf16) {
    return is_bf16 ? ldexp(1.0, -134) : ldexp(1.0, -25);
}

static inline double* attn_tc_zeros(size_t n) {
    double* p = (double*)calloc(n ? n : 1, sizeof(double));
    if (!p) abort();
    return p;
}

// The bounds for operands q, k, v, dout ([B,T,heads*HD] as rt_kernels.h).
static inline void attn_tc_bound_compute(attn_tc_bound* bd, const float* q, const float* k,
                                         const float* v, const float* dout, int B, int T,
                                         int NH, int NKV, int HD, int causal, double u,
                                         double eta) {
    const size_t ldq = (size_t)NH * HD, ldk = (size_t)NKV * HD;
    bd->nq = (size_t)B * T * ldq;
    bd->nk = (size_t)B * T * ldk;
    bd->out = attn_tc_zeros(bd->nq), bd->dq = attn_tc_zeros(bd->nq);
    bd->dq_D = attn_tc_zeros(bd->nq);
    bd->dk = attn_tc_zeros(bd->nk), bd->dv = attn_tc_zeros(bd->nk);
    bd->dk_D = attn_tc_zeros(bd->nk);
    const double scale = (float)(1.0 / sqrt((double)HD));  // the kernels' float scale
    double* P = attn_tc_zeros((size_t)T * T);
    double* dS = attn_tc_zeros((size_t)T * T);
    double* dD = attn_tc_zeros((size_t)T);
    double* il = attn_tc_zeros((size_t)T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int hk = h / (NH / NKV);
            const float* qh = q + (size_t)b * T * ldq + (size_t)h * HD;
            const float* oh = dout + (size_t)b * T * ldq + (size_t)h * HD;
            const float* kh = k + (size_t)b * T * ldk + (size_t)hk * HD;
            const float* vh = v + (size_t)b * T * ldk + (size_t)hk * HD;
            const size_t qo = (size_t)b * T * ldq + (size_t)h * HD;
            const size_t ko = (size_t)b * T * ldk + (size_t)hk * HD;
            for (int r = 0; r < T; r++) {
                const int len = causal ? r + 1 : T;
                double* Pr = P + (size_t)r * T;
                double mx = -INFINITY, l = 0.0;
                for (int c = 0; c < len; c++) {
                    double s = 0.0;
                    for (int d = 0; d < HD; d++) s += (double)qh[r * ldq + d] * kh[c * ldk + d];
                    Pr[c] = scale * s;
                    if (Pr[c] > mx) mx = Pr[c];
                }
                for (int c = 0; c < len; c++) l += (Pr[c] = exp(Pr[c] - mx));
                for (int c = 0; c < len; c++) Pr[c] /= l;
                for (int c = len; c < T; c++) Pr[c] = 0.0;
                il[r] = 1.0 / l;
                double D = 0.0;
                double* dSr = dS + (size_t)r * T;
                for (int c = 0; c < len; c++) {
                    double dp = 0.0;
                    for (int d = 0; d < HD; d++) dp += (double)oh[r * ldq + d] * vh[c * ldk + d];
                    dSr[c] = dp;
                    D += Pr[c] * dp;
                }
                for (int c = 0; c < len; c++) dSr[c] = Pr[c] * (dSr[c] - D);
                for (int c = len; c < T; c++) dSr[c] = 0.0;
                dD[r] = 0.0;
                for (int d = 0; d < HD; d++) {
                    double a = 0.0, e = 0.0;
                    for (int c = 0; c < len; c++) {
                        a += Pr[c] * fabs(vh[c * ldk + d]);
                        e += fabs(vh[c * ldk + d]);
                    }
                    const double bo = u * a + eta * il[r] * e;
                    bd->out[qo + r * ldq + d] = bo;
                    dD[r] += fabs(oh[r * ldq + d]) * bo;
                }
            }
            for (int r = 0; r < T; r++) {
                const int len = causal ? r + 1 : T;
                const double* Pr = P + (size_t)r * T;
                const double* dSr = dS + (size_t)r * T;
                for (int d = 0; d < HD; d++) {
                    double a = 0.0, e = 0.0;
                    for (int c = 0; c < len; c++) {
                        const double kk = fabs(kh[c * ldk + d]);
                        a += (u * fabs(dSr[c]) + eta) * kk;
                        e += Pr[c] * dD[r] * kk;
                    }
                    bd->dq[qo + r * ldq + d] = scale * a;
                    bd->dq_D[qo + r * ldq + d] = scale * e;
                }
                for (int c = 0; c < len; c++)
                    for (int d = 0; d < HD; d++) {
                        const size_t i = ko + (size_t)c * ldk + d;
                        bd->dk[i] += scale * (u * fabs(dSr[c]) + eta) * fabs(qh[r * ldq + d]);
                        bd->dk_D[i] += scale * Pr[c] * dD[r] * fabs(qh[r * ldq + d]);
                        bd->dv[i] += (u * Pr[c] + eta) * fabs(oh[r * ldq + d]);
                    }
            }
        }
    free(P), free(dS), free(dD), free(il);
}

static inline void attn_tc_bound_free(attn_tc_bound* bd) {
    free(bd->out), free(bd->dq), free(bd->dk), free(bd->dv), free(bd->dq_D), free(bd->dk_D);
    memset(bd, 0, sizeof *bd);
}

// What a comparison found: the largest |got - want| / max(1, |want|) (as every other
// CUDA test prints), the largest |got - want| / allowance (<= 1 passes), and the largest
// allowance / max(1, |want|) (how much room the bound gives).
typedef struct {
    double diff, ratio, allow;
} attn_tc_cmp_result;

// allowance[i] = bound[i] (+ bound2[i] when given) + tol32 * max(1, |want[i]|); NaN fails.
static inline attn_tc_cmp_result attn_tc_compare(const float* got, const float* want,
                                                 const double* bound, const double* bound2,
                                                 size_t n, double tol32) {
    attn_tc_cmp_result r = {0.0, 0.0, 0.0};
    for (size_t i = 0; i < n; i++) {
        const double g = got[i], w = want[i];
        const double one = fabs(w) > 1.0 ? fabs(w) : 1.0;
        const double allow = bound[i] + (bound2 ? bound2[i] : 0.0) + tol32 * one;
        const double e = (isnan(g) || isnan(w)) ? INFINITY : fabs(g - w);
        if (e / one > r.diff) r.diff = e / one;
        if (e / allow > r.ratio) r.ratio = e / allow;
        if (allow / one > r.allow) r.allow = allow / one;
    }
    return r;
}

#endif
