// RMSNorm over the last dimension (nn.RMSNorm / Llama): forward saves rstd per row. out
// and dinp are rounded to dt at their stores (each loop compiled per dtype: RT_KBY_DT);
// rstd and dweight stay fp32.
#include "rt_kernels.h"

#include <math.h>

#include "kround.h"

// ----------------------------------------------------------------------------
// forward: out[N,C] = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) + eps)

void rt_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N,
                        int C, float eps, rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_rmsnorm_forward");
    RT_KBY_DT(for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float* o = out + (size_t)n * C;
        double ss = 0.0;
        for (int c = 0; c < C; c++) ss += (double)x[c] * x[c];
        float rs = (float)(1.0 / sqrt(ss / C + (double)eps));
        for (int c = 0; c < C; c++) {
            float y = x[c] * rs;
            o[c] = rt_kround(weight ? y * weight[c] : y, dt);
        }
        if (rstd) rstd[n] = rs;
    });
}

// ----------------------------------------------------------------------------
// backward (accumulating). With xhat = x * rstd and g = dout * weight:
//   dinp += rstd * (g - xhat * mean(g * xhat)),  dweight += sum_rows(dout * xhat)
// (RT_ASSIGN_1: dinp =, RT_ASSIGN_DWEIGHT: dweight =)

void rt_rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                         const float* weight, const float* rstd, int N, int C, rt_dtype dt,
                         int assign) {
    RT_KCHECK_DT(dt, "rt_rmsnorm_backward");
    const int as = assign & RT_ASSIGN_1, as_w = assign & RT_ASSIGN_DWEIGHT;
    if (dinp) {
        RT_KBY_DT(for (int n = 0; n < N; n++) {
            const float* x = inp + (size_t)n * C;
            const float* d = dout + (size_t)n * C;
            float* dx = dinp + (size_t)n * C;
            float rs = rstd[n];
            double sgx = 0.0;
            for (int c = 0; c < C; c++) {
                float g = weight ? d[c] * weight[c] : d[c];
                sgx += (double)g * (x[c] * rs);
            }
            float mgx = (float)(sgx / C);
            for (int c = 0; c < C; c++) {
                float g = weight ? d[c] * weight[c] : d[c];
                dx[c] = rt_kround(RT_KBASE(dx[c], as) + rs * (g - (x[c] * rs) * mgx), dt);
            }
        });
    }
    if (dweight) {
        for (int c0 = 0; c0 < C; c0 += RT_COLBLOCK) {
            int cn = C - c0 < RT_COLBLOCK ? C - c0 : RT_COLBLOCK;
            double aw[RT_COLBLOCK] = {0};
            for (int n = 0; n < N; n++) {
                const float* x = inp + (size_t)n * C + c0;
                const float* d = dout + (size_t)n * C + c0;
                float rs = rstd[n];
                for (int c = 0; c < cn; c++) aw[c] += (double)d[c] * (x[c] * rs);
            }
            for (int c = 0; c < cn; c++)
                dweight[c0 + c] = RT_KBASE(dweight[c0 + c], as_w) + (float)aw[c];
        }
    }
}
