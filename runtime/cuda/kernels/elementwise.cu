// Binary elementwise ops (residual add, product, broadcast add), the product by a number
// and the flat buffer helpers (zero, copy, scale, accumulate, axpy, sum of squares) on the
// GPU; same contracts as runtime/cpu/kernels/elementwise.c. Forward kernels allow out == a
// or out == b. The ops round what they write to dt at the store (rtc_round_to); the buffer
// helpers do not.
#include "cuda_common.cuh"

// ----------------------------------------------------------------------------
// residual add: out = a + b; backward da += dout, db += dout (one kernel for both). A and B,
// GA, GB and D (dout): fp32 or packed 16-bit storage (rt_kernels.h), read with rtc_ldv,
// written with rtc_stv: vectorised flat kernels (rtc_flat), W elements per access.

template <int W, class O, class A, class B>
__global__ void add_kernel(O* out, const A* a, const B* b, size_t n, rt_dtype dt) {
    rtc_add_flat<W>(out, a, b, n, dt);
}

// da and db may be the same buffer (x + x; fp32 storage): no __restrict__ on them; then the
// element gets both contributions, da's first, and one rounding (the assign bits are then
// ignored). rt_accumulate uses it with RT_F32.
template <int W, class GA, class GB, class D>
__global__ void acc2_kernel(GA* da, GB* db, const D* __restrict__ dout, size_t n, rt_dtype dt,
                            int as1, int as2) {
    const bool aliased = da && (const void*)da == (const void*)db;
    rtc_flat<W>(n, [&](auto w, size_t i) {
        constexpr int K = decltype(w)::value;
        float d[K], g[K] = {}, h[K] = {};  // dout; da's and db's values
        rtc_ldv(dout, i, dt, d);
        if (aliased || (da && !as1)) rtc_ldv(da, i, dt, g);
        if (db && !aliased && !as2) rtc_ldv(db, i, dt, h);
        for (int u = 0; u < K; u++) {
            if (aliased) {
                g[u] = (g[u] + d[u]) + d[u];
                continue;
            }
            g[u] = RT_KBASE(g[u], as1) + d[u];
            h[u] = RT_KBASE(h[u], as2) + d[u];
        }
        if (da) rtc_stv(da, i, g, dt);
        if (db && !aliased) rtc_stv(db, i, h, dt);
    });
}

// acc2_kernel on the thread's stream (nothing when n == 0)
template <class GA, class GB, class D>
static void acc2(GA* da, GB* db, const D* dout, size_t n, rt_dtype dt, int as1, int as2) {
    RTC_LAUNCH_VEC(acc2_kernel, n, rtc_aligned16({da, db, dout}), da, db, dout, n, dt, as1, as2);
}

// packed: RT_PACKED_OUT (out; dout in backward), RT_PACKED_INP (a), RT_PACKED_INP2 (b),
// RT_PACKED_DINP (da), RT_PACKED_DINP2 (db).
static void residual_forward(void* out, const void* a, const void* b, size_t n, int packed,
                             rt_dtype dt) {
    const bool aligned = rtc_aligned16({out, a, b});
    rtc_with_storage(packed & RT_PACKED_OUT, out, [&](auto o) {
        rtc_with_storage(packed & RT_PACKED_INP, a, [&](auto x) {
            rtc_with_storage(packed & RT_PACKED_INP2, b, [&](auto y) {
                RTC_LAUNCH_VEC(add_kernel, n, aligned, o, x, y, n, dt);
            });
        });
    });
}

static void residual_backward(void* da, void* db, const void* dout, size_t n, int packed,
                              rt_dtype dt, int assign) {
    if (!da && !db) return;
    rtc_with_storage(packed & RT_PACKED_DINP, da, [&](auto ga) {
        rtc_with_storage(packed & RT_PACKED_DINP2, db, [&](auto gb) {
            rtc_with_storage(packed & RT_PACKED_OUT, dout, [&](auto d) {
                acc2(ga, gb, d, n, dt, assign & RT_ASSIGN_1, assign & RT_ASSIGN_2);
            });
        });
    });
}

void rt_residual_forward(float* out, const float* a, const float* b, size_t n, rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_residual_forward");
    residual_forward(out, a, b, n, 0, dt);
}

void rt_residual_backward(float* da, float* db, const float* dout, size_t n, rt_dtype dt,
                          int assign) {
    RT_KCHECK_DT(dt, "rt_residual_backward");
    residual_backward(da, db, dout, n, 0, dt, assign);
}

void rt_residual_packed_forward(void* out, const void* a, const void* b, size_t n, int packed,
                                rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_residual_packed_forward");
    residual_forward(out, a, b, n, packed, dt);
}

void rt_residual_packed_backward(void* da, void* db, const void* dout, size_t n, int packed,
                                 rt_dtype dt, int assign) {
    RT_KCHECK_PACKED_DT(dt, "rt_residual_packed_backward");
    RT_KCHECK_PACKED_ALIAS(da, db, packed, "rt_residual_packed_backward");
    residual_backward(da, db, dout, n, packed, dt, assign);
}

// ----------------------------------------------------------------------------
// product: out = a * b; backward da += dout * b, db += dout * a

__global__ void mul_kernel(float* out, const float* a, const float* b, size_t n, rt_dtype dt) {
    RTC_GRID_STRIDE(i, n) out[i] = rtc_round_to(a[i] * b[i], dt);
}

// da and db may be one buffer (x * x): both contributions, da's first, one rounding.
__global__ void mul_backward_kernel(float* da, float* db,
                                    const float* __restrict__ dout, const float* __restrict__ a,
                                    const float* __restrict__ b, size_t n, rt_dtype dt, int as1,
                                    int as2) {
    RTC_GRID_STRIDE(i, n) {
        const float d = dout[i];
        if (da && da == db) {
            da[i] = rtc_round_to((da[i] + d * b[i]) + d * a[i], dt);
            continue;
        }
        if (da) da[i] = rtc_round_to(RT_KBASE(da[i], as1) + d * b[i], dt);
        if (db) db[i] = rtc_round_to(RT_KBASE(db[i], as2) + d * a[i], dt);
    }
}

void rt_mul_forward(float* out, const float* a, const float* b, size_t n, rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_mul_forward");
    RTC_LAUNCH_FLAT(mul_kernel, n, out, a, b, n, dt);
}

void rt_mul_backward(float* da, float* db, const float* dout, const float* a, const float* b,
                     size_t n, rt_dtype dt, int assign) {
    RT_KCHECK_DT(dt, "rt_mul_backward");
    if (!da && !db) return;
    RTC_LAUNCH_FLAT(mul_backward_kernel, n, da, db, dout, a, b, n, dt, assign & RT_ASSIGN_1,
                    assign & RT_ASSIGN_2);
}

// ----------------------------------------------------------------------------
// product by a number: out = inp * s; backward dinp += dout * s (s already fp32). O and I,
// G (dinp) and D (dout): fp32 or packed 16-bit storage, as the residual add's.

template <int W, class O, class I>
__global__ void scale_forward_kernel(O* out, const I* inp, size_t n, float s, rt_dtype dt) {
    rtc_flat<W>(n, [&](auto w, size_t i) {
        constexpr int K = decltype(w)::value;
        float x[K];
        rtc_ldv(inp, i, dt, x);
        for (int u = 0; u < K; u++) x[u] = x[u] * s;
        rtc_stv(out, i, x, dt);
    });
}

template <int W, class G, class D>
__global__ void scale_backward_kernel(G* __restrict__ dinp, const D* __restrict__ dout, size_t n,
                                      float s, rt_dtype dt, int as) {
    rtc_flat<W>(n, [&](auto w, size_t i) {
        constexpr int K = decltype(w)::value;
        float d[K], g[K] = {};
        rtc_ldv(dout, i, dt, d);
        if (!as) rtc_ldv(dinp, i, dt, g);
        for (int u = 0; u < K; u++) g[u] = RT_KBASE(g[u], as) + d[u] * s;
        rtc_stv(dinp, i, g, dt);
    });
}

// packed: RT_PACKED_OUT (out; dout in backward), RT_PACKED_INP (inp), RT_PACKED_DINP (dinp).
static void scale_forward(void* out, const void* inp, size_t n, float s, int packed,
                          rt_dtype dt) {
    const bool aligned = rtc_aligned16({out, inp});
    rtc_with_storage(packed & RT_PACKED_OUT, out, [&](auto o) {
        rtc_with_storage(packed & RT_PACKED_INP, inp, [&](auto x) {
            RTC_LAUNCH_VEC(scale_forward_kernel, n, aligned, o, x, n, s, dt);
        });
    });
}

static void scale_backward(void* dinp, const void* dout, size_t n, float s, int packed,
                           rt_dtype dt, int assign) {
    if (!dinp) return;
    const bool aligned = rtc_aligned16({dinp, dout});
    rtc_with_storage(packed & RT_PACKED_DINP, dinp, [&](auto g) {
        rtc_with_storage(packed & RT_PACKED_OUT, dout, [&](auto d) {
            RTC_LAUNCH_VEC(scale_backward_kernel, n, aligned, g, d, n, s, dt, assign & RT_ASSIGN_1);
        });
    });
}

void rt_scale_forward(float* out, const float* inp, size_t n, float s, rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_scale_forward");
    scale_forward(out, inp, n, s, 0, dt);
}

void rt_scale_backward(float* dinp, const float* dout, size_t n, float s, rt_dtype dt,
                       int assign) {
    RT_KCHECK_DT(dt, "rt_scale_backward");
    scale_backward(dinp, dout, n, s, 0, dt, assign);
}

void rt_scale_packed_forward(void* out, const void* inp, size_t n, float s, int packed,
                             rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_scale_packed_forward");
    scale_forward(out, inp, n, s, packed, dt);
}

void rt_scale_packed_backward(void* dinp, const void* dout, size_t n, float s, int packed,
                              rt_dtype dt, int assign) {
    RT_KCHECK_PACKED_DT(dt, "rt_scale_packed_backward");
    scale_backward(dinp, dout, n, s, packed, dt, assign);
}

// ----------------------------------------------------------------------------
// broadcast add: out[rows,cols] = a[rows,cols] + b[cols]; backward da += dout (rounded),
// db += column sums of dout (double, deterministic: rtc_colsum_acc; not rounded)

__global__ void broadcast_add_kernel(float* out, const float* a, const float* b, int cols,
                                     size_t n, rt_dtype dt) {
    RTC_GRID_STRIDE(i, n) out[i] = rtc_round_to(a[i] + b[i % (size_t)cols], dt);
}

void rt_broadcast_add_forward(float* out, const float* a, const float* b, int rows, int cols,
                              rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_broadcast_add_forward");
    if (rows <= 0 || cols <= 0) return;
    const size_t n = (size_t)rows * cols;
    RTC_LAUNCH_FLAT(broadcast_add_kernel, n, out, a, b, cols, n, dt);
}

void rt_broadcast_add_backward(float* da, float* db, const float* dout, int rows, int cols,
                               rt_dtype dt, int assign) {
    RT_KCHECK_DT(dt, "rt_broadcast_add_backward");
    if (rows <= 0 || cols <= 0) return;
    const size_t n = (size_t)rows * cols;
    if (da) acc2(da, (float*)NULL, dout, n, dt, assign & RT_ASSIGN_1, 0);
    if (db) rtc_colsum_acc(db, dout, rows, cols);
}

// ----------------------------------------------------------------------------
// buffer helpers

__global__ void scale_kernel(float* out, const float* inp, size_t n, float s) {
    RTC_GRID_STRIDE(i, n) out[i] = s * inp[i];
}

__global__ void axpy_kernel(float* __restrict__ dst, const float* __restrict__ src, size_t n,
                            float alpha) {
    RTC_GRID_STRIDE(i, n) dst[i] += alpha * src[i];
}

void rt_zero(float* x, size_t n) {
    if (n) RT_CHECK_CUDA(cudaMemsetAsync(x, 0, n * sizeof(float), rtc_stream()));
}

// dst and src must not overlap partially (the CPU kernel's memmove allows it; no generated
// copy needs it, and cudaMemcpyAsync's result is undefined then). dst == src is a no-op.
void rt_copy(float* dst, const float* src, size_t n) {
    if (n && dst != src)
        RT_CHECK_CUDA(
            cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDefault, rtc_stream()));
}

void rt_scale(float* out, const float* inp, size_t n, float s) {
    RTC_LAUNCH_FLAT(scale_kernel, n, out, inp, n, s);
}

void rt_accumulate(float* dst, const float* src, size_t n) {
    acc2(dst, (float*)NULL, src, n, RT_F32, 0, 0);
}

void rt_axpy(float* dst, const float* src, size_t n, float alpha) {
    RTC_LAUNCH_FLAT(axpy_kernel, n, dst, src, n, alpha);
}

// ----------------------------------------------------------------------------
// sum of squares in double, on the device. rt_sumsq copies the result back into the
// context's pinned double and waits for the thread's stream (the caller needs the number
// on the host), so it cannot be captured in a graph; rt_cuda_sumsq_accumulate (rt_cuda.h)
// leaves it on the device.

double rt_sumsq(const float* x, size_t n) {
    rtc_ctx* ctx = rtc_get();
    rtc_reduce_sum(ctx, x, n, 1, NULL, NULL);
    RT_CHECK_CUDA(cudaMemcpyAsync(ctx->host_result, ctx->scratch + RTC_RESULT_SLOT, sizeof(double),
                                  cudaMemcpyDeviceToHost, ctx->stream));
    RT_CHECK_CUDA(cudaStreamSynchronize(ctx->stream));
    return *ctx->host_result;
}
