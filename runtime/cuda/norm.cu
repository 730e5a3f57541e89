// LayerNorm and RMSNorm over the last dimension on the GPU (same contracts as
// runtime/kernels/cpu/layernorm.c and rmsnorm.c). Fused: one block per row computes the
// statistics (in double, two passes as the CPU kernel) and writes the normalised row in
// the same kernel; backward computes a row's input gradient in one kernel and the
// weight/bias gradients (column reductions over rows, in double) in one more.
// out and dinp are rounded to dt at their stores; mean, rstd, dweight, dbias stay fp32.
// TODO(issue 5): one-kernel backward (per-block partial dweight/dbias in a planned scratch,
// llm.c style) and vectorised float4 loads once the shapes are known to allow them.
#include "cuda_common.cuh"

#define RTC_NORM_COL_Y 16  // rows walked in parallel by a column-reduction block (32 x this)

// ----------------------------------------------------------------------------
// LayerNorm forward: out = (inp - mean) * rstd * weight + bias, one block per row

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int C,
                                         float eps, rt_dtype dt) {
    const size_t n = blockIdx.x;
    const float* x = inp + n * C;
    float* o = out + n * C;
    double s = 0.0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += x[c];
    const double m = rtc_block_sum(s) / C;
    double v = 0.0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const double d = x[c] - m;
        v += d * d;
    }
    v = rtc_block_sum(v) / C;  // biased variance, as PyTorch's layer_norm
    const float mf = (float)m;
    const float rs = (float)(1.0 / sqrt(v + (double)eps));
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float y = (x[c] - mf) * rs;
        if (weight) y *= weight[c];
        if (bias) y += bias[c];
        o[c] = rtc_round_to(y, dt);
    }
    if (threadIdx.x == 0) {
        if (mean) mean[n] = mf;
        if (rstd) rstd[n] = rs;
    }
}

void rt_layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                          const float* weight, const float* bias, int N, int C, float eps,
                          rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_layernorm_forward");
    if (N <= 0 || C <= 0) return;
    layernorm_forward_kernel<<<(unsigned)N, rtc_row_threads(C), 0, rtc_stream()>>>(
        out, mean, rstd, inp, weight, bias, C, eps, dt);
    RTC_CHECK_LAUNCH(layernorm_forward_kernel);
}

// ----------------------------------------------------------------------------
// LayerNorm backward (accumulating). With xhat = (x - mean) * rstd and g = dout * weight:
//   dinp    += rstd * (g - mean(g) - xhat * mean(g * xhat))
//   dweight += sum_rows(dout * xhat),  dbias += sum_rows(dout)

__global__ void layernorm_backward_dinp_kernel(float* __restrict__ dinp,
                                               const float* __restrict__ dout,
                                               const float* __restrict__ inp,
                                               const float* __restrict__ weight,
                                               const float* __restrict__ mean,
                                               const float* __restrict__ rstd, int C,
                                               rt_dtype dt, int as) {
    const size_t n = blockIdx.x;
    const float* x = inp + n * C;
    const float* d = dout + n * C;
    float* dx = dinp + n * C;
    const float mf = mean[n], rs = rstd[n];
    double sg = 0.0, sgx = 0.0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float xhat = (x[c] - mf) * rs;
        const float g = weight ? d[c] * weight[c] : d[c];
        sg += g;
        sgx += (double)g * xhat;
    }
    sg = rtc_block_sum(sg);
    sgx = rtc_block_sum(sgx);
    const float mg = (float)(sg / C), mgx = (float)(sgx / C);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float xhat = (x[c] - mf) * rs;
        const float g = weight ? d[c] * weight[c] : d[c];
        dx[c] = rtc_round_to(RTC_BASE(dx[c], as) + rs * (g - mg - xhat * mgx), dt);
    }
}

// Block (32, RTC_NORM_COL_Y): x walks columns, y strides rows; fixed-order final sum.
__global__ void layernorm_backward_dwb_kernel(float* __restrict__ dweight,
                                              float* __restrict__ dbias,
                                              const float* __restrict__ dout,
                                              const float* __restrict__ inp,
                                              const float* __restrict__ mean,
                                              const float* __restrict__ rstd, int N, int C) {
    __shared__ double shw[RTC_NORM_COL_Y][33], shb[RTC_NORM_COL_Y][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    double aw = 0.0, ab = 0.0;
    if (c < C)
        for (int r = threadIdx.y; r < N; r += RTC_NORM_COL_Y) {
            const size_t i = (size_t)r * C + c;
            const float mf = mean[r], rs = rstd[r];
            aw += (double)dout[i] * ((inp[i] - mf) * rs);
            ab += dout[i];
        }
    shw[threadIdx.y][threadIdx.x] = aw;
    shb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        double sw = 0.0, sb = 0.0;
        for (int y = 0; y < RTC_NORM_COL_Y; y++) {
            sw += shw[y][threadIdx.x];
            sb += shb[y][threadIdx.x];
        }
        if (dweight) dweight[c] += (float)sw;
        if (dbias) dbias[c] += (float)sb;
    }
}

void rt_layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                           const float* inp, const float* weight, const float* mean,
                           const float* rstd, int N, int C, rt_dtype dt, int assign) {
    RT_KCHECK_DT(dt, "rt_layernorm_backward");
    if (N <= 0 || C <= 0) return;
    if (dinp) {
        layernorm_backward_dinp_kernel<<<(unsigned)N, rtc_row_threads(C), 0, rtc_stream()>>>(
            dinp, dout, inp, weight, mean, rstd, C, dt, assign & RT_ASSIGN_1);
        RTC_CHECK_LAUNCH(layernorm_backward_dinp_kernel);
    }
    if (dweight || dbias) {
        const dim3 grid((unsigned)((C + 31) / 32)), block(32, RTC_NORM_COL_Y);
        layernorm_backward_dwb_kernel<<<grid, block, 0, rtc_stream()>>>(dweight, dbias, dout, inp,
                                                                        mean, rstd, N, C);
        RTC_CHECK_LAUNCH(layernorm_backward_dwb_kernel);
    }
}

// ----------------------------------------------------------------------------
// RMSNorm forward: out = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) + eps)

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp,
                                       const float* weight, int C, float eps, rt_dtype dt) {
    const size_t n = blockIdx.x;
    const float* x = inp + n * C;
    float* o = out + n * C;
    double ss = 0.0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) ss += (double)x[c] * x[c];
    ss = rtc_block_sum(ss);
    const float rs = (float)(1.0 / sqrt(ss / C + (double)eps));
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float y = x[c] * rs;
        o[c] = rtc_round_to(weight ? y * weight[c] : y, dt);
    }
    if (threadIdx.x == 0 && rstd) rstd[n] = rs;
}

void rt_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N,
                        int C, float eps, rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_rmsnorm_forward");
    if (N <= 0 || C <= 0) return;
    rmsnorm_forward_kernel<<<(unsigned)N, rtc_row_threads(C), 0, rtc_stream()>>>(
        out, rstd, inp, weight, C, eps, dt);
    RTC_CHECK_LAUNCH(rmsnorm_forward_kernel);
}

// ----------------------------------------------------------------------------
// RMSNorm backward (accumulating). With xhat = x * rstd and g = dout * weight:
//   dinp += rstd * (g - xhat * mean(g * xhat)),  dweight += sum_rows(dout * xhat)

__global__ void rmsnorm_backward_dinp_kernel(float* __restrict__ dinp,
                                             const float* __restrict__ dout,
                                             const float* __restrict__ inp,
                                             const float* __restrict__ weight,
                                             const float* __restrict__ rstd, int C, rt_dtype dt,
                                             int as) {
    const size_t n = blockIdx.x;
    const float* x = inp + n * C;
    const float* d = dout + n * C;
    float* dx = dinp + n * C;
    const float rs = rstd[n];
    double sgx = 0.0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float g = weight ? d[c] * weight[c] : d[c];
        sgx += (double)g * (x[c] * rs);
    }
    sgx = rtc_block_sum(sgx);
    const float mgx = (float)(sgx / C);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float g = weight ? d[c] * weight[c] : d[c];
        dx[c] = rtc_round_to(RTC_BASE(dx[c], as) + rs * (g - (x[c] * rs) * mgx), dt);
    }
}

__global__ void rmsnorm_backward_dw_kernel(float* __restrict__ dweight,
                                           const float* __restrict__ dout,
                                           const float* __restrict__ inp,
                                           const float* __restrict__ rstd, int N, int C) {
    __shared__ double shw[RTC_NORM_COL_Y][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    double aw = 0.0;
    if (c < C)
        for (int r = threadIdx.y; r < N; r += RTC_NORM_COL_Y) {
            const size_t i = (size_t)r * C + c;
            aw += (double)dout[i] * (inp[i] * rstd[r]);
        }
    shw[threadIdx.y][threadIdx.x] = aw;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        double sw = 0.0;
        for (int y = 0; y < RTC_NORM_COL_Y; y++) sw += shw[y][threadIdx.x];
        dweight[c] += (float)sw;
    }
}

void rt_rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                         const float* weight, const float* rstd, int N, int C, rt_dtype dt,
                         int assign) {
    RT_KCHECK_DT(dt, "rt_rmsnorm_backward");
    if (N <= 0 || C <= 0) return;
    if (dinp) {
        rmsnorm_backward_dinp_kernel<<<(unsigned)N, rtc_row_threads(C), 0, rtc_stream()>>>(
            dinp, dout, inp, weight, rstd, C, dt, assign & RT_ASSIGN_1);
        RTC_CHECK_LAUNCH(rmsnorm_backward_dinp_kernel);
    }
    if (dweight) {
        const dim3 grid((unsigned)((C + 31) / 32)), block(32, RTC_NORM_COL_Y);
        rmsnorm_backward_dw_kernel<<<grid, block, 0, rtc_stream()>>>(dweight, dout, inp, rstd, N,
                                                                     C);
        RTC_CHECK_LAUNCH(rmsnorm_backward_dw_kernel);
    }
}
