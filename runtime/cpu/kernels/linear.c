// Linear layer (nn.Linear): forward and backward through OpenBLAS sgemm (fp32 for every
// dt: products of bf16/fp16 values are exact in fp32). out and dinp are rounded to dt in
// a pass after the sgemm; dweight and dbias are parameter gradients (not rounded). The
// scaled linear (a power of two folded into sgemm's alpha) shares the code.
#include "rt_kernels.h"

#include <cblas.h>

#include "kround.h"

// ----------------------------------------------------------------------------
// forward: out[N,OC] = inp[N,C] · weight[OC,C]^T + bias[OC]

// out = alpha * inp·weight^T + bias: alpha 1, or a scaled linear's power of two (no bias)
static void linear_forward(float* out, const float* inp, const float* weight, const float* bias,
                           int N, int C, int OC, rt_dtype dt, float alpha) {
    if (N <= 0 || OC <= 0) return;
    float beta = 0.0f;
    if (bias) {
        // Seed every row with the bias and let the GEMM accumulate onto it (beta = 1),
        // which saves a second pass over out.
        for (int n = 0; n < N; n++) {
            float* o = out + (size_t)n * OC;
            for (int j = 0; j < OC; j++) o[j] = bias[j];
        }
        beta = 1.0f;
    }
    if (C <= 0) {
        if (!bias)
            for (size_t i = 0; i < (size_t)N * OC; i++) out[i] = 0.0f;
        return;  // bias values are exact in dt
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, alpha, inp, C, weight, C, beta,
                out, OC);
    rt_kround_buf(out, (size_t)N * OC, dt);
}

void rt_linear_forward(float* out, const float* inp, const float* weight, const float* bias,
                       int N, int C, int OC, rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_linear_forward");
    linear_forward(out, inp, weight, bias, N, C, OC, dt, 1.0f);
}

void rt_linear_scaled_forward(float* out, const float* inp, const float* weight, int N, int C,
                              int OC, float alpha, rt_dtype dt) {
    RT_KCHECK_LINEAR_ALPHA(alpha, dt, "rt_linear_scaled_forward");
    linear_forward(out, inp, weight, NULL, N, C, OC, dt, alpha);
}

// ----------------------------------------------------------------------------
// backward (accumulating): dinp += dout·W, dW += dout^T·inp, dbias += column sums of dout
// (RT_ASSIGN_DWEIGHT: dW and dbias =)

// The products times alpha: 1, or a scaled linear's power of two (no bias)
static void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* weight, int N, int C, int OC,
                            rt_dtype dt, int assign, float alpha) {
    const int as = assign & RT_ASSIGN_1, as_w = assign & RT_ASSIGN_DWEIGHT;
    if (dinp && as && C > 0 && (N <= 0 || OC <= 0))  // assigned, no contribution: zeros
        for (size_t i = 0; i < (size_t)(N > 0 ? N : 0) * C; i++) dinp[i] = 0.0f;
    if (dweight && as_w && C > 0 && OC > 0 && N <= 0)
        for (size_t i = 0; i < (size_t)OC * C; i++) dweight[i] = 0.0f;
    if (dbias && as_w && N <= 0)
        for (int j = 0; j < OC; j++) dbias[j] = 0.0f;
    if (N <= 0 || OC <= 0) return;
    if (dinp && C > 0) {
        // dinp[N,C] += dout[N,OC] · weight[OC,C] (assigned: beta = 0, dinp not read)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, alpha, dout, OC, weight,
                    C, as ? 0.0f : 1.0f, dinp, C);
        rt_kround_buf(dinp, (size_t)N * C, dt);
    }
    if (dweight && C > 0) {
        // dweight[OC,C] += dout^T[OC,N] · inp[N,C] (assigned: beta = 0)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, alpha, dout, OC, inp, C,
                    as_w ? 0.0f : 1.0f, dweight, C);
    }
    if (dbias) {
        // Column sums in double over blocks of RT_COLBLOCK columns: the accumulators stay
        // in registers/L1, rows are read contiguously, and N can be large (B*T) without
        // float round-off growing with it.
        for (int j0 = 0; j0 < OC; j0 += RT_COLBLOCK) {
            int jn = OC - j0 < RT_COLBLOCK ? OC - j0 : RT_COLBLOCK;
            double acc[RT_COLBLOCK] = {0};
            for (int n = 0; n < N; n++) {
                const float* d = dout + (size_t)n * OC + j0;
                for (int j = 0; j < jn; j++) acc[j] += d[j];
            }
            for (int j = 0; j < jn; j++)
                dbias[j0 + j] = RT_KBASE(dbias[j0 + j], as_w) + (float)acc[j];
        }
    }
}

void rt_linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, int N, int C, int OC,
                        rt_dtype dt, int assign) {
    RT_KCHECK_DT(dt, "rt_linear_backward");
    linear_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, dt, assign, 1.0f);
}

void rt_linear_scaled_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                               const float* weight, int N, int C, int OC, float alpha,
                               rt_dtype dt, int assign) {
    RT_KCHECK_LINEAR_ALPHA(alpha, dt, "rt_linear_scaled_backward");
    linear_backward(dinp, dweight, NULL, dout, inp, weight, N, C, OC, dt, assign, alpha);
}
