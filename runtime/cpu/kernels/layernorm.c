// LayerNorm over the last dimension (nn.LayerNorm): forward saves mean and rstd per row,
// backward uses them instead of recomputing the statistics. out and dinp are rounded to
// dt at their stores (each loop compiled per dtype: RT_KBY_DT); mean, rstd, dweight and
// dbias stay fp32.
#include "rt_kernels.h"

#include <math.h>

#include "kround.h"

// ----------------------------------------------------------------------------
// forward: out[N,C] = (inp - mean) * rstd * weight + bias, rstd = 1/sqrt(var + eps)

void rt_layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                          const float* weight, const float* bias, int N, int C, float eps,
                          rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_layernorm_forward");
    RT_KBY_DT(for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float* o = out + (size_t)n * C;
        // Two passes in double: exact enough that the statistics do not depend on C or
        // on the magnitude of the mean (one-pass E[x^2]-E[x]^2 cancels badly).
        double s = 0.0;
        for (int c = 0; c < C; c++) s += x[c];
        double m = s / C;
        double v = 0.0;
        for (int c = 0; c < C; c++) {
            double d = x[c] - m;
            v += d * d;
        }
        v /= C;  // biased variance, as PyTorch's layer_norm
        float mf = (float)m;
        float rs = (float)(1.0 / sqrt(v + (double)eps));
        for (int c = 0; c < C; c++) {
            float y = (x[c] - mf) * rs;
            if (weight) y *= weight[c];
            if (bias) y += bias[c];
            o[c] = rt_kround(y, dt);
        }
        if (mean) mean[n] = mf;
        if (rstd) rstd[n] = rs;
    });
}

// ----------------------------------------------------------------------------
// backward (accumulating). With xhat = (x - mean) * rstd and g = dout * weight:
//   dinp    += rstd * (g - mean(g) - xhat * mean(g * xhat))
//   dweight += sum_rows(dout * xhat),  dbias += sum_rows(dout)
// (RT_ASSIGN_1: dinp =, RT_ASSIGN_DWEIGHT: dweight and dbias =)

void rt_layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                           const float* inp, const float* weight, const float* mean,
                           const float* rstd, int N, int C, rt_dtype dt, int assign) {
    RT_KCHECK_DT(dt, "rt_layernorm_backward");
    const int as = assign & RT_ASSIGN_1, as_w = assign & RT_ASSIGN_DWEIGHT;
    if (dinp) {
        RT_KBY_DT(for (int n = 0; n < N; n++) {
            const float* x = inp + (size_t)n * C;
            const float* d = dout + (size_t)n * C;
            float* dx = dinp + (size_t)n * C;
            float mf = mean[n], rs = rstd[n];
            double sg = 0.0, sgx = 0.0;
            for (int c = 0; c < C; c++) {
                float xhat = (x[c] - mf) * rs;
                float g = weight ? d[c] * weight[c] : d[c];
                sg += g;
                sgx += (double)g * xhat;
            }
            float mg = (float)(sg / C), mgx = (float)(sgx / C);
            for (int c = 0; c < C; c++) {
                float xhat = (x[c] - mf) * rs;
                float g = weight ? d[c] * weight[c] : d[c];
                dx[c] = rt_kround(RT_KBASE(dx[c], as) + rs * (g - mg - xhat * mgx), dt);
            }
        });
    }
    if (dweight || dbias) {
        // Column reductions over rows, in double, one block of columns at a time.
        for (int c0 = 0; c0 < C; c0 += RT_COLBLOCK) {
            int cn = C - c0 < RT_COLBLOCK ? C - c0 : RT_COLBLOCK;
            double aw[RT_COLBLOCK] = {0}, ab[RT_COLBLOCK] = {0};
            for (int n = 0; n < N; n++) {
                const float* x = inp + (size_t)n * C + c0;
                const float* d = dout + (size_t)n * C + c0;
                float mf = mean[n], rs = rstd[n];
                for (int c = 0; c < cn; c++) {
                    aw[c] += (double)d[c] * ((x[c] - mf) * rs);
                    ab[c] += d[c];
                }
            }
            for (int c = 0; c < cn; c++) {
                if (dweight) dweight[c0 + c] = RT_KBASE(dweight[c0 + c], as_w) + (float)aw[c];
                if (dbias) dbias[c0 + c] = RT_KBASE(dbias[c0 + c], as_w) + (float)ab[c];
            }
        }
    }
}
