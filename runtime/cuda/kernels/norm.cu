// LayerNorm and RMSNorm over the last dimension on the GPU (same contracts as
// runtime/cpu/kernels/layernorm.c and rmsnorm.c). Fused: one block per row computes the
// statistics (in double, two passes as the CPU kernel) and writes the normalised row in
// the same kernel; backward computes a row's input gradient in one kernel and the
// weight/bias gradients (column reductions over rows, in double, in row chunks:
// column_sums.cuh) in one or two more.
// out and dinp are rounded to dt at their stores; mean, rstd, dweight, dbias stay fp32. The
// kernels also read and write packed 16-bit rows (rt_kernels.h "packed 16-bit storage"): O,
// I, D and G below, the storage of out, inp, dout and dinp, are float or uint16_t (rtc_ld,
// rtc_st).
// TODO(issue 5): one-kernel backward (the chunk partials written by the input-gradient
// kernel, llm.c style) and vectorised float4 loads once the shapes are known to allow them.
#include "column_sums.cuh"

// ----------------------------------------------------------------------------
// a row's values in registers (the LayerNorm and RMSNorm row kernels)

// Values a thread keeps of a row: rtc_row_threads gives it at most 4 up to rows of 4096
// (GPT-2's 768, Llama's 2048 and 4096); longer rows are read again where used.
#define RTC_ROW_REGS 4

// A thread's values of a row of len elements of S: those at c = threadIdx.x + k * blockDim.x,
// k = 0, 1, ... (RTC_ROW_FOR's order). R > 0 (len <= R * blockDim.x): all loaded at
// construction, every load issued before the first is used, and kept for a second pass;
// R == 0: each read where used. A loop widening each value as its load came kept one load
// of a thread in flight: RMSNorm at a third (forward) to a half (backward) of an H100's
// bandwidth. Each pass keeps its per-thread order, so the double sums keep their bits.
template <int R, class S>
struct rtc_row_vals {
    const S* p;
    rt_dtype dt;
    float v[R > 0 ? R : 1];
    __device__ rtc_row_vals(const S* p_, int len, rt_dtype dt_) : p(p_), dt(dt_) {
        if constexpr (R > 0) {
            S raw[R];
            for (int k = 0; k < R; k++) {
                const int c = threadIdx.x + k * blockDim.x;
                raw[k] = c < len ? p[c] : S(0);
            }
            for (int k = 0; k < R; k++) v[k] = rtc_val(raw[k], dt);
        }
    }
    __device__ float operator[](int k) const {  // column threadIdx.x + k * blockDim.x
        if constexpr (R > 0) return v[k];
        else return rtc_ld(p, threadIdx.x + (size_t)k * blockDim.x, dt);
    }
};

// The thread's columns c of a row of len, k counting them (rtc_row_vals<R>).
#define RTC_ROW_FOR(k, c, R, len) \
    for (int k = 0, c = threadIdx.x; (R == 0 || k < R) && c < (len); k++, c += blockDim.x)

// A row kernel (kernel<R>: one block of rtc_row_threads(len) threads per row) over `rows`
// rows on the thread's stream: R = RTC_ROW_REGS when a thread's values of a row fit in
// registers, else 0.
#define RTC_LAUNCH_ROWS(kernel, rows, len, ...)                                            \
    do {                                                                                   \
        const unsigned rtc_t_ = rtc_row_threads(len);                                      \
        if ((len) <= RTC_ROW_REGS * (int)rtc_t_)                                           \
            kernel<RTC_ROW_REGS><<<(unsigned)(rows), rtc_t_, 0, rtc_stream()>>>(__VA_ARGS__); \
        else                                                                               \
            kernel<0><<<(unsigned)(rows), rtc_t_, 0, rtc_stream()>>>(__VA_ARGS__);          \
        RTC_CHECK_LAUNCH(kernel);                                                          \
    } while (0)

// ----------------------------------------------------------------------------
// LayerNorm forward: out = (inp - mean) * rstd * weight + bias, one block per row

template <int R, class O, class I>
__global__ void layernorm_forward_kernel(O* out, float* mean, float* rstd, const I* inp,
                                         const float* weight, const float* bias, int C,
                                         float eps, rt_dtype dt) {
    const size_t n = blockIdx.x;
    const I* x = inp + n * C;
    O* o = out + n * C;
    const rtc_row_vals<R, I> xv(x, C, dt);
    const rtc_row_vals<R, float> wv(weight, weight ? C : 0, dt);
    const rtc_row_vals<R, float> bv(bias, bias ? C : 0, dt);
    double s = 0.0;
    RTC_ROW_FOR(k, c, R, C) s += xv[k];
    const double m = rtc_block_sum(s) / C;
    double v = 0.0;
    RTC_ROW_FOR(k, c, R, C) {
        const double d = xv[k] - m;
        v += d * d;
    }
    v = rtc_block_sum(v) / C;  // biased variance, as PyTorch's layer_norm
    const float mf = (float)m;
    const float rs = (float)(1.0 / sqrt(v + (double)eps));
    RTC_ROW_FOR(k, c, R, C) {
        float y = (xv[k] - mf) * rs;
        if (weight) y *= wv[k];
        if (bias) y += bv[k];
        rtc_st(o, c, y, dt);
    }
    if (threadIdx.x == 0) {
        if (mean) mean[n] = mf;
        if (rstd) rstd[n] = rs;
    }
}

// packed: RT_PACKED_OUT (out), RT_PACKED_INP (inp).
static void layernorm_forward(void* out, float* mean, float* rstd, const void* inp,
                              const float* weight, const float* bias, int N, int C, float eps,
                              int packed, rt_dtype dt) {
    if (N <= 0 || C <= 0) return;
    rtc_with_storage(packed & RT_PACKED_OUT, out, [&](auto o) {
        rtc_with_storage(packed & RT_PACKED_INP, inp, [&](auto x) {
            RTC_LAUNCH_ROWS(layernorm_forward_kernel, N, C, o, mean, rstd, x, weight, bias, C,
                            eps, dt);
        });
    });
}

void rt_layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                          const float* weight, const float* bias, int N, int C, float eps,
                          rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_layernorm_forward");
    layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps, 0, dt);
}

void rt_layernorm_packed_forward(void* out, float* mean, float* rstd, const void* inp,
                                 const float* weight, const float* bias, int N, int C, float eps,
                                 int packed, rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_layernorm_packed_forward");
    RT_KCHECK_PACKED_ROWS(C, "rt_layernorm_packed_forward");
    layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps, packed, dt);
}

// ----------------------------------------------------------------------------
// LayerNorm backward (accumulating). With xhat = (x - mean) * rstd and g = dout * weight:
//   dinp    += rstd * (g - mean(g) - xhat * mean(g * xhat))
//   dweight += sum_rows(dout * xhat),  dbias += sum_rows(dout)

template <int R, class G, class I, class D>
__global__ void layernorm_backward_dinp_kernel(G* __restrict__ dinp,
                                               const D* __restrict__ dout,
                                               const I* __restrict__ inp,
                                               const float* __restrict__ weight,
                                               const float* __restrict__ mean,
                                               const float* __restrict__ rstd, int C,
                                               rt_dtype dt, int as) {
    const size_t n = blockIdx.x;
    const I* x = inp + n * C;
    const D* d = dout + n * C;
    G* dx = dinp + n * C;
    const float mf = mean[n], rs = rstd[n];
    const rtc_row_vals<R, D> dv(d, C, dt);
    const rtc_row_vals<R, I> xv(x, C, dt);
    const rtc_row_vals<R, float> wv(weight, weight ? C : 0, dt);
    const rtc_row_vals<R, G> gv(dx, as ? 0 : C, dt);  // not read when assigning
    double sg = 0.0, sgx = 0.0;
    RTC_ROW_FOR(k, c, R, C) {
        const float xhat = (xv[k] - mf) * rs;
        const float g = weight ? dv[k] * wv[k] : dv[k];
        sg += g;
        sgx += (double)g * xhat;
    }
    sg = rtc_block_sum(sg);
    sgx = rtc_block_sum(sgx);
    const float mg = (float)(sg / C), mgx = (float)(sgx / C);
    RTC_ROW_FOR(k, c, R, C) {
        const float xhat = (xv[k] - mf) * rs;
        const float g = weight ? dv[k] * wv[k] : dv[k];
        rtc_st(dx, c, RT_KBASE(gv[k], as) + rs * (g - mg - xhat * mgx), dt);
    }
}

// dweight += sum_rows(dout * xhat), dbias += sum_rows(dout), xhat = (inp - mean) * rstd
template <class I, class D>
struct layernorm_dwb_term {
    const D* dout;
    const I* inp;
    const float *mean, *rstd;
    int C;
    rt_dtype dt;
    __device__ void operator()(int r, int c, double* acc) const {
        const size_t i = (size_t)r * C + c;
        const float d = rtc_ld(dout, i, dt);
        acc[0] += (double)d * ((rtc_ld(inp, i, dt) - mean[r]) * rstd[r]);
        acc[1] += d;
    }
};

template <class G, class I, class D>
static void layernorm_backward_on(G* dinp, float* dweight, float* dbias, const D* dout,
                                  const I* inp, const float* weight, const float* mean,
                                  const float* rstd, int N, int C, rt_dtype dt, int as) {
    if (dinp)
        RTC_LAUNCH_ROWS(layernorm_backward_dinp_kernel, N, C, dinp, dout, inp, weight, mean, rstd,
                        C, dt, as);
    if (dweight || dbias)
        rtc_column_sums<2>(dweight, dbias, layernorm_dwb_term<I, D>{dout, inp, mean, rstd, C, dt},
                           N, C);
}

// packed: RT_PACKED_OUT (dout), RT_PACKED_INP (inp), RT_PACKED_DINP (dinp).
static void layernorm_backward(void* dinp, float* dweight, float* dbias, const void* dout,
                               const void* inp, const float* weight, const float* mean,
                               const float* rstd, int N, int C, int packed, rt_dtype dt,
                               int assign) {
    if (N <= 0 || C <= 0) return;
    rtc_with_storage(packed & RT_PACKED_DINP, dinp, [&](auto g) {
        rtc_with_storage(packed & RT_PACKED_OUT, dout, [&](auto d) {
            rtc_with_storage(packed & RT_PACKED_INP, inp, [&](auto x) {
                layernorm_backward_on(g, dweight, dbias, d, x, weight, mean, rstd, N, C, dt,
                                      assign & RT_ASSIGN_1);
            });
        });
    });
}

void rt_layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                           const float* inp, const float* weight, const float* mean,
                           const float* rstd, int N, int C, rt_dtype dt, int assign) {
    RT_KCHECK_DT(dt, "rt_layernorm_backward");
    layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, 0, dt, assign);
}

void rt_layernorm_packed_backward(void* dinp, float* dweight, float* dbias, const void* dout,
                                  const void* inp, const float* weight, const float* mean,
                                  const float* rstd, int N, int C, int packed, rt_dtype dt,
                                  int assign) {
    RT_KCHECK_PACKED_DT(dt, "rt_layernorm_packed_backward");
    RT_KCHECK_PACKED_ROWS(C, "rt_layernorm_packed_backward");
    layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, packed, dt,
                       assign);
}

// ----------------------------------------------------------------------------
// RMSNorm forward: out = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) + eps)

template <int R, class O, class I>
__global__ void rmsnorm_forward_kernel(O* out, float* rstd, const I* inp, const float* weight,
                                       int C, float eps, rt_dtype dt) {
    const size_t n = blockIdx.x;
    const I* x = inp + n * C;
    O* o = out + n * C;
    const rtc_row_vals<R, I> xv(x, C, dt);
    const rtc_row_vals<R, float> wv(weight, weight ? C : 0, dt);
    double ss = 0.0;
    RTC_ROW_FOR(k, c, R, C) {
        const double xc = xv[k];
        ss += xc * xc;
    }
    ss = rtc_block_sum(ss);
    const float rs = (float)(1.0 / sqrt(ss / C + (double)eps));
    RTC_ROW_FOR(k, c, R, C) {
        const float y = xv[k] * rs;
        rtc_st(o, c, weight ? y * wv[k] : y, dt);
    }
    if (threadIdx.x == 0 && rstd) rstd[n] = rs;
}

// packed: RT_PACKED_OUT (out), RT_PACKED_INP (inp).
static void rmsnorm_forward(void* out, float* rstd, const void* inp, const float* weight, int N,
                            int C, float eps, int packed, rt_dtype dt) {
    if (N <= 0 || C <= 0) return;
    rtc_with_storage(packed & RT_PACKED_OUT, out, [&](auto o) {
        rtc_with_storage(packed & RT_PACKED_INP, inp, [&](auto x) {
            RTC_LAUNCH_ROWS(rmsnorm_forward_kernel, N, C, o, rstd, x, weight, C, eps, dt);
        });
    });
}

void rt_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N,
                        int C, float eps, rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_rmsnorm_forward");
    rmsnorm_forward(out, rstd, inp, weight, N, C, eps, 0, dt);
}

void rt_rmsnorm_packed_forward(void* out, float* rstd, const void* inp, const float* weight,
                               int N, int C, float eps, int packed, rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_rmsnorm_packed_forward");
    RT_KCHECK_PACKED_ROWS(C, "rt_rmsnorm_packed_forward");
    rmsnorm_forward(out, rstd, inp, weight, N, C, eps, packed, dt);
}

// ----------------------------------------------------------------------------
// RMSNorm backward (accumulating). With xhat = x * rstd and g = dout * weight:
//   dinp += rstd * (g - xhat * mean(g * xhat)),  dweight += sum_rows(dout * xhat)

template <int R, class G, class I, class D>
__global__ void rmsnorm_backward_dinp_kernel(G* __restrict__ dinp,
                                             const D* __restrict__ dout,
                                             const I* __restrict__ inp,
                                             const float* __restrict__ weight,
                                             const float* __restrict__ rstd, int C, rt_dtype dt,
                                             int as) {
    const size_t n = blockIdx.x;
    const I* x = inp + n * C;
    const D* d = dout + n * C;
    G* dx = dinp + n * C;
    const float rs = rstd[n];
    const rtc_row_vals<R, D> dv(d, C, dt);
    const rtc_row_vals<R, I> xv(x, C, dt);
    const rtc_row_vals<R, float> wv(weight, weight ? C : 0, dt);
    const rtc_row_vals<R, G> gv(dx, as ? 0 : C, dt);  // not read when assigning
    double sgx = 0.0;
    RTC_ROW_FOR(k, c, R, C) {
        const float g = weight ? dv[k] * wv[k] : dv[k];
        sgx += (double)g * (xv[k] * rs);
    }
    sgx = rtc_block_sum(sgx);
    const float mgx = (float)(sgx / C);
    RTC_ROW_FOR(k, c, R, C) {
        const float g = weight ? dv[k] * wv[k] : dv[k];
        rtc_st(dx, c, RT_KBASE(gv[k], as) + rs * (g - (xv[k] * rs) * mgx), dt);
    }
}

// dweight += sum_rows(dout * inp * rstd)
template <class I, class D>
struct rmsnorm_dw_term {
    const D* dout;
    const I* inp;
    const float* rstd;
    int C;
    rt_dtype dt;
    __device__ void operator()(int r, int c, double* acc) const {
        const size_t i = (size_t)r * C + c;
        acc[0] += (double)rtc_ld(dout, i, dt) * (rtc_ld(inp, i, dt) * rstd[r]);
    }
};

template <class G, class I, class D>
static void rmsnorm_backward_on(G* dinp, float* dweight, const D* dout, const I* inp,
                                const float* weight, const float* rstd, int N, int C, rt_dtype dt,
                                int as) {
    if (dinp)
        RTC_LAUNCH_ROWS(rmsnorm_backward_dinp_kernel, N, C, dinp, dout, inp, weight, rstd, C, dt,
                        as);
    if (dweight)
        rtc_column_sums<1>(dweight, (float*)NULL, rmsnorm_dw_term<I, D>{dout, inp, rstd, C, dt}, N,
                           C);
}

// packed: RT_PACKED_OUT (dout), RT_PACKED_INP (inp), RT_PACKED_DINP (dinp).
static void rmsnorm_backward(void* dinp, float* dweight, const void* dout, const void* inp,
                             const float* weight, const float* rstd, int N, int C, int packed,
                             rt_dtype dt, int assign) {
    if (N <= 0 || C <= 0) return;
    rtc_with_storage(packed & RT_PACKED_DINP, dinp, [&](auto g) {
        rtc_with_storage(packed & RT_PACKED_OUT, dout, [&](auto d) {
            rtc_with_storage(packed & RT_PACKED_INP, inp, [&](auto x) {
                rmsnorm_backward_on(g, dweight, d, x, weight, rstd, N, C, dt,
                                    assign & RT_ASSIGN_1);
            });
        });
    });
}

void rt_rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                         const float* weight, const float* rstd, int N, int C, rt_dtype dt,
                         int assign) {
    RT_KCHECK_DT(dt, "rt_rmsnorm_backward");
    rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, 0, dt, assign);
}

void rt_rmsnorm_packed_backward(void* dinp, float* dweight, const void* dout, const void* inp,
                                const float* weight, const float* rstd, int N, int C, int packed,
                                rt_dtype dt, int assign) {
    RT_KCHECK_PACKED_DT(dt, "rt_rmsnorm_packed_backward");
    RT_KCHECK_PACKED_ROWS(C, "rt_rmsnorm_packed_backward");
    rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, packed, dt, assign);
}
