// Elementwise activations on the GPU (exact GELU, ReLU, SiLU, the SwiGLU gate) and rotary
// position embeddings: same contracts and float expressions as
// runtime/cpu/kernels/activation.c and rope.c. Backward kernels take the forward input.
// Forward kernels allow out == inp (no __restrict__ on them). Every value written is
// rounded to dt at its store (rtc_round_to, rtc_st, rtc_stv). Every kernel also reads and writes
// packed 16-bit storage (rt_kernels.h "packed 16-bit storage").
#include "cuda_common.cuh"

#define RTC_SQRT1_2 0.70710678118654752440f       // 1/sqrt(2)
#define RTC_INV_SQRT_2PI 0.39894228040143267794f  // 1/sqrt(2*pi)

__device__ __forceinline__ float rtc_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// d/dx [x * s(x)] = s * (1 + x * (1 - s)), from s = rtc_sigmoidf(x) (SwiGLU's backward has it
// already: one expf and one division less per element)
__device__ __forceinline__ float rtc_silu_grad_s(float x, float s) {
    return s * (1.0f + x * (1.0f - s));
}
__device__ __forceinline__ float rtc_silu_grad(float x) {
    return rtc_silu_grad_s(x, rtc_sigmoidf(x));
}

// Storage: the forwards' O and I and the backwards' G (dinp), D (dout) and I are float (fp32
// storage) or uint16_t (packed 16-bit values of dt, rt_kernels.h "packed 16-bit storage").
// GELU, ReLU and SiLU are vectorised flat kernels (rtc_flat): W elements per access, each
// computed alone as one at a time would be.

// out = f(inp), element by element (the forwards).
template <int W, class O, class I, class F>
__device__ __forceinline__ void rtc_map_flat(O* out, const I* inp, size_t n, rt_dtype dt, F f) {
    rtc_flat<W>(n, [&](auto w, size_t i) {
        constexpr int K = decltype(w)::value;
        float x[K];
        rtc_ldv(inp, i, dt, x);
        for (int u = 0; u < K; u++) x[u] = f(x[u]);
        rtc_stv(out, i, x, dt);
    });
}

// dinp (+)= dout * grad(inp), element by element (GELU's and SiLU's backward).
template <int W, class G, class D, class I, class F>
__device__ __forceinline__ void rtc_grad_flat(G* __restrict__ dinp, const D* __restrict__ dout,
                                              const I* __restrict__ inp, size_t n, rt_dtype dt,
                                              int as, F grad) {
    rtc_flat<W>(n, [&](auto w, size_t i) {
        constexpr int K = decltype(w)::value;
        float x[K], d[K], g[K] = {};
        rtc_ldv(inp, i, dt, x);
        rtc_ldv(dout, i, dt, d);
        if (!as) rtc_ldv(dinp, i, dt, g);
        for (int u = 0; u < K; u++) g[u] = RT_KBASE(g[u], as) + d[u] * grad(x[u]);
        rtc_stv(dinp, i, g, dt);
    });
}

// ----------------------------------------------------------------------------
// exact GELU: 0.5 * x * (1 + erf(x / sqrt(2))); backward Phi(x) + x * phi(x)

template <int W, class O, class I>
__global__ void gelu_forward_kernel(O* out, const I* inp, size_t n, rt_dtype dt) {
    rtc_map_flat<W>(out, inp, n, dt,
                    [](float x) { return 0.5f * x * (1.0f + erff(x * RTC_SQRT1_2)); });
}

template <int W, class G, class D, class I>
__global__ void gelu_backward_kernel(G* __restrict__ dinp, const D* __restrict__ dout,
                                     const I* __restrict__ inp, size_t n, rt_dtype dt, int as) {
    rtc_grad_flat<W>(dinp, dout, inp, n, dt, as, [](float x) {
        const float cdf = 0.5f * (1.0f + erff(x * RTC_SQRT1_2));
        const float pdf = RTC_INV_SQRT_2PI * expf(-0.5f * x * x);
        return cdf + x * pdf;
    });
}

// ----------------------------------------------------------------------------
// ReLU (gradient 0 at x == 0, as PyTorch's threshold_backward)

template <int W, class O, class I>
__global__ void relu_forward_kernel(O* out, const I* inp, size_t n, rt_dtype dt) {
    rtc_map_flat<W>(out, inp, n, dt, [](float x) { return x > 0.0f ? x : 0.0f; });
}

// Stores element by element: an accumulated dinp at x <= 0 keeps its bits (a group store
// would round them to dt).
template <int W, class G, class D, class I>
__global__ void relu_backward_kernel(G* __restrict__ dinp, const D* __restrict__ dout,
                                     const I* __restrict__ inp, size_t n, rt_dtype dt, int as) {
    rtc_flat<W>(n, [&](auto w, size_t i) {
        constexpr int K = decltype(w)::value;
        float x[K], d[K], g[K] = {};
        rtc_ldv(inp, i, dt, x);
        rtc_ldv(dout, i, dt, d);
        if (!as) rtc_ldv(dinp, i, dt, g);
        for (int u = 0; u < K; u++) {
            if (x[u] > 0.0f)
                rtc_st(dinp, i + u, RT_KBASE(g[u], as) + d[u], dt);
            else if (as)
                rtc_st(dinp, i + u, 0.0f, dt);
        }
    });
}

// ----------------------------------------------------------------------------
// SiLU: x * sigmoid(x)

template <int W, class O, class I>
__global__ void silu_forward_kernel(O* out, const I* inp, size_t n, rt_dtype dt) {
    rtc_map_flat<W>(out, inp, n, dt, [](float x) { return x * rtc_sigmoidf(x); });
}

template <int W, class G, class D, class I>
__global__ void silu_backward_kernel(G* __restrict__ dinp, const D* __restrict__ dout,
                                     const I* __restrict__ inp, size_t n, rt_dtype dt, int as) {
    rtc_grad_flat<W>(dinp, dout, inp, n, dt, as, [](float x) { return rtc_silu_grad(x); });
}

// The launches of GELU, ReLU and SiLU, for any storage of out and inp, and in backward of
// dinp, dout and inp (packed: the RT_PACKED_* bits).
#define RTC_ACTIVATION(name)                                                                  \
    static void name##_forward(void* out, const void* inp, size_t n, int packed, rt_dtype dt) { \
        const bool aligned = rtc_aligned16({out, inp});                                       \
        rtc_with_storage(packed & RT_PACKED_OUT, out, [&](auto o) {                            \
            rtc_with_storage(packed & RT_PACKED_INP, inp, [&](auto x) {                        \
                RTC_LAUNCH_VEC(name##_forward_kernel, n, aligned, o, x, n, dt);                \
            });                                                                                \
        });                                                                                    \
    }                                                                                          \
    static void name##_backward(void* dinp, const void* dout, const void* inp, size_t n,      \
                                int packed, rt_dtype dt, int assign) {                         \
        const bool aligned = rtc_aligned16({dinp, dout, inp});                                \
        rtc_with_storage(packed & RT_PACKED_DINP, dinp, [&](auto g) {                          \
            rtc_with_storage(packed & RT_PACKED_OUT, dout, [&](auto d) {                       \
                rtc_with_storage(packed & RT_PACKED_INP, inp, [&](auto x) {                    \
                    RTC_LAUNCH_VEC(name##_backward_kernel, n, aligned, g, d, x, n, dt,         \
                                   assign & RT_ASSIGN_1);                                      \
                });                                                                            \
            });                                                                                \
        });                                                                                    \
    }                                                                                          \
    void rt_##name##_forward(float* out, const float* inp, size_t n, rt_dtype dt) {            \
        RT_KCHECK_DT(dt, "rt_" #name "_forward");                                              \
        name##_forward(out, inp, n, 0, dt);                                                    \
    }                                                                                          \
    void rt_##name##_backward(float* dinp, const float* dout, const float* inp, size_t n,      \
                              rt_dtype dt, int assign) {                                       \
        RT_KCHECK_DT(dt, "rt_" #name "_backward");                                             \
        name##_backward(dinp, dout, inp, n, 0, dt, assign);                                    \
    }                                                                                          \
    void rt_##name##_packed_forward(void* out, const void* inp, size_t n, int packed,          \
                                    rt_dtype dt) {                                             \
        RT_KCHECK_PACKED_DT(dt, "rt_" #name "_packed_forward");                                \
        name##_forward(out, inp, n, packed, dt);                                               \
    }                                                                                          \
    void rt_##name##_packed_backward(void* dinp, const void* dout, const void* inp, size_t n,  \
                                     int packed, rt_dtype dt, int assign) {                    \
        RT_KCHECK_PACKED_DT(dt, "rt_" #name "_packed_backward");                               \
        name##_backward(dinp, dout, inp, n, packed, dt, assign);                               \
    }

RTC_ACTIVATION(gelu)
RTC_ACTIVATION(relu)
RTC_ACTIVATION(silu)

// ----------------------------------------------------------------------------
// SwiGLU gate: out = silu(a) * b; one kernel for both gradients. The intermediates are
// rounded to dt where separate silu and mul kernels would have rounded their outputs, and
// out, da, db at their stores. da == db (swiglu(x, x); fp32 storage) gets both
// contributions, da's first, and one rounding. Vectorised flat kernels (rtc_flat): W
// elements per access, each computed alone as before.

template <int W, class O, class A, class B>
__global__ void swiglu_forward_kernel(O* out, const A* a, const B* b, size_t n, rt_dtype dt) {
    rtc_flat<W>(n, [&](auto w, size_t i) {
        constexpr int K = decltype(w)::value;
        float x[K], y[K];
        rtc_ldv(a, i, dt, x);
        rtc_ldv(b, i, dt, y);
        for (int u = 0; u < K; u++) y[u] = rtc_round_to(x[u] * rtc_sigmoidf(x[u]), dt) * y[u];
        rtc_stv(out, i, y, dt);
    });
}

template <int W, class GA, class GB, class D, class A, class B>
__global__ void swiglu_backward_kernel(GA* da, GB* db,  // may be one buffer
                                       const D* __restrict__ dout, const A* __restrict__ a,
                                       const B* __restrict__ b, size_t n, rt_dtype dt, int as1,
                                       int as2) {
    const bool aliased = da && (const void*)da == (const void*)db;
    rtc_flat<W>(n, [&](auto w, size_t i) {
        constexpr int K = decltype(w)::value;
        float x[K], y[K], d[K], g[K] = {}, h[K] = {};  // a, b, dout; da's and db's values
        rtc_ldv(a, i, dt, x);
        rtc_ldv(b, i, dt, y);
        rtc_ldv(dout, i, dt, d);
        if (aliased || (da && !as1)) rtc_ldv(da, i, dt, g);
        if (db && !aliased && !as2) rtc_ldv(db, i, dt, h);
        for (int u = 0; u < K; u++) {
            const float s = rtc_sigmoidf(x[u]);
            const float silu = rtc_round_to(x[u] * s, dt);  // the forward's rounded silu(a)
            const float ga = rtc_round_to(d[u] * y[u], dt) * rtc_silu_grad_s(x[u], s);
            if (aliased) {  // adds whatever the bits say
                g[u] = g[u] + ga;
                g[u] += d[u] * silu;
                continue;
            }
            if (da) g[u] = RT_KBASE(g[u], as1) + ga;
            if (db) h[u] = RT_KBASE(h[u], as2) + d[u] * silu;
        }
        if (da) rtc_stv(da, i, g, dt);
        if (db && !aliased) rtc_stv(db, i, h, dt);
    });
}

// packed: RT_PACKED_OUT (out, dout), RT_PACKED_INP (a), RT_PACKED_INP2 (b), RT_PACKED_DINP
// (da), RT_PACKED_DINP2 (db).
static void swiglu_forward(void* out, const void* a, const void* b, size_t n, int packed,
                           rt_dtype dt) {
    const bool aligned = rtc_aligned16({out, a, b});
    rtc_with_storage(packed & RT_PACKED_OUT, out, [&](auto o) {
        rtc_with_storage(packed & RT_PACKED_INP, a, [&](auto x) {
            rtc_with_storage(packed & RT_PACKED_INP2, b, [&](auto y) {
                RTC_LAUNCH_VEC(swiglu_forward_kernel, n, aligned, o, x, y, n, dt);
            });
        });
    });
}

static void swiglu_backward(void* da, void* db, const void* dout, const void* a, const void* b,
                            size_t n, int packed, rt_dtype dt, int assign) {
    if (!da && !db) return;
    const bool aligned = rtc_aligned16({da, db, dout, a, b});
    rtc_with_storage(packed & RT_PACKED_DINP, da, [&](auto ga) {
        rtc_with_storage(packed & RT_PACKED_DINP2, db, [&](auto gb) {
            rtc_with_storage(packed & RT_PACKED_OUT, dout, [&](auto d) {
                rtc_with_storage(packed & RT_PACKED_INP, a, [&](auto x) {
                    rtc_with_storage(packed & RT_PACKED_INP2, b, [&](auto y) {
                        RTC_LAUNCH_VEC(swiglu_backward_kernel, n, aligned, ga, gb, d, x, y, n, dt,
                                       assign & RT_ASSIGN_1, assign & RT_ASSIGN_2);
                    });
                });
            });
        });
    });
}

void rt_swiglu_forward(float* out, const float* a, const float* b, size_t n, rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_swiglu_forward");
    swiglu_forward(out, a, b, n, 0, dt);
}

void rt_swiglu_backward(float* da, float* db, const float* dout, const float* a, const float* b,
                        size_t n, rt_dtype dt, int assign) {
    RT_KCHECK_DT(dt, "rt_swiglu_backward");
    swiglu_backward(da, db, dout, a, b, n, 0, dt, assign);
}

void rt_swiglu_packed_forward(void* out, const void* a, const void* b, size_t n, int packed,
                              rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_swiglu_packed_forward");
    swiglu_forward(out, a, b, n, packed, dt);
}

void rt_swiglu_packed_backward(void* da, void* db, const void* dout, const void* a,
                               const void* b, size_t n, int packed, rt_dtype dt, int assign) {
    RT_KCHECK_PACKED_DT(dt, "rt_swiglu_packed_backward");
    RT_KCHECK_PACKED_ALIAS(da, db, packed, "rt_swiglu_packed_backward");
    swiglu_backward(da, db, dout, a, b, n, packed, dt, assign);
}

// ----------------------------------------------------------------------------
// rotary position embeddings over [B,T,NH,HD]: pair (x[2i], x[2i+1]) at position t rotated
// by t * theta^(-2i/HD). The angle is computed as the CPU kernel does
// (float exponent, float frequency and angle, cos/sin in double rounded to float). powf
// is taken through double pow rounded to float: the correctly rounded value, as glibc's
// powf gives, where the device powf may be 2 ulp off.

__device__ __forceinline__ void rtc_rope_cos_sin(int t, int i, int HD, float theta, float* cs,
                                                 float* sn) {
    const float e = (float)(2 * i) / (float)HD;
    const float freq = 1.0f / (float)pow((double)theta, (double)e);
    const float ang = (float)t * freq;
    *cs = (float)cos((double)ang);
    *sn = (float)sin((double)ang);
}

// Block (t, y): the cos and sin of position t's HD/2 angles, computed once into shared
// memory, then the pairs at t of batches y, y + gridDim.y, ... (an angle per pair, in
// double, made both kernels FP64-bound: 3.1 ms each per Llama 1B step on an H100, every
// angle computed B * NH times). The pair arithmetic is unchanged: the same bits.
__device__ __forceinline__ void rtc_rope_angles(int t, int HD, float theta, float* cs,
                                                float* sn) {
    for (int i = threadIdx.x; i < HD / 2; i += blockDim.x)
        rtc_rope_cos_sin(t, i, HD, theta, &cs[i], &sn[i]);
    __syncthreads();
}

template <class O, class I>
__global__ void rope_forward_kernel(O* out, const I* inp, int B, int T, int NH, int HD,
                                    float theta, rt_dtype dt) {
    const int t = blockIdx.x, half = HD / 2, per_t = NH * half;
    __shared__ float cs[RT_ROPE_MAX_HD / 2], sn[RT_ROPE_MAX_HD / 2];
    rtc_rope_angles(t, HD, theta, cs, sn);
    for (int b = blockIdx.y; b < B; b += gridDim.y) {
        const size_t p0 = ((size_t)b * T + t) * per_t;  // pair (b, t, 0, 0)
        for (int q = threadIdx.x; q < per_t; q += blockDim.x) {
            const int i = q % half;
            const size_t p = p0 + q;
            // read both first: out == inp ok
            const float x0 = rtc_ld(inp, 2 * p, dt), x1 = rtc_ld(inp, 2 * p + 1, dt);
            rtc_st(out, 2 * p, x0 * cs[i] - x1 * sn[i], dt);
            rtc_st(out, 2 * p + 1, x0 * sn[i] + x1 * cs[i], dt);
        }
    }
}

// backward (accumulating): rotation by -angle
template <class G, class D>
__global__ void rope_backward_kernel(G* __restrict__ dinp, const D* __restrict__ dout, int B,
                                     int T, int NH, int HD, float theta, rt_dtype dt, int as) {
    const int t = blockIdx.x, half = HD / 2, per_t = NH * half;
    __shared__ float cs[RT_ROPE_MAX_HD / 2], sn[RT_ROPE_MAX_HD / 2];
    rtc_rope_angles(t, HD, theta, cs, sn);
    for (int b = blockIdx.y; b < B; b += gridDim.y) {
        const size_t p0 = ((size_t)b * T + t) * per_t;
        for (int q = threadIdx.x; q < per_t; q += blockDim.x) {
            const int i = q % half;
            const size_t p = p0 + q;
            const float d0 = rtc_ld(dout, 2 * p, dt), d1 = rtc_ld(dout, 2 * p + 1, dt);
            const float g0 = d0 * cs[i] + d1 * sn[i], g1 = -d0 * sn[i] + d1 * cs[i];
            rtc_st(dinp, 2 * p, RT_KBASE(rtc_ld(dinp, 2 * p, dt), as) + g0, dt);
            rtc_st(dinp, 2 * p + 1, RT_KBASE(rtc_ld(dinp, 2 * p + 1, dt), as) + g1, dt);
        }
    }
}

static dim3 rope_grid(int B, int T) { return dim3((unsigned)T, (unsigned)(B < 32 ? B : 32)); }

// packed: RT_PACKED_OUT (out, dout), RT_PACKED_INP (inp), RT_PACKED_DINP (dinp).
static void rope_forward(void* out, const void* inp, int B, int T, int NH, int HD, float theta,
                         int packed, rt_dtype dt) {
    RT_KCHECK_ROPE_HD(HD);
    if (B <= 0 || T <= 0 || NH <= 0) return;
    rtc_with_storage(packed & RT_PACKED_OUT, out, [&](auto o) {
        rtc_with_storage(packed & RT_PACKED_INP, inp, [&](auto x) {
            rope_forward_kernel<<<rope_grid(B, T), RTC_THREADS, 0, rtc_stream()>>>(o, x, B, T, NH,
                                                                                   HD, theta, dt);
            RTC_CHECK_LAUNCH(rope_forward_kernel);
        });
    });
}

static void rope_backward(void* dinp, const void* dout, int B, int T, int NH, int HD, float theta,
                          int packed, rt_dtype dt, int assign) {
    RT_KCHECK_ROPE_HD(HD);
    if (B <= 0 || T <= 0 || NH <= 0) return;
    rtc_with_storage(packed & RT_PACKED_DINP, dinp, [&](auto g) {
        rtc_with_storage(packed & RT_PACKED_OUT, dout, [&](auto d) {
            rope_backward_kernel<<<rope_grid(B, T), RTC_THREADS, 0, rtc_stream()>>>(
                g, d, B, T, NH, HD, theta, dt, assign & RT_ASSIGN_1);
            RTC_CHECK_LAUNCH(rope_backward_kernel);
        });
    });
}

void rt_rope_forward(float* out, const float* inp, int B, int T, int NH, int HD, float theta,
                     rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_rope_forward");
    rope_forward(out, inp, B, T, NH, HD, theta, 0, dt);
}

void rt_rope_backward(float* dinp, const float* dout, int B, int T, int NH, int HD,
                      float theta, rt_dtype dt, int assign) {
    RT_KCHECK_DT(dt, "rt_rope_backward");
    rope_backward(dinp, dout, B, T, NH, HD, theta, 0, dt, assign);
}

void rt_rope_packed_forward(void* out, const void* inp, int B, int T, int NH, int HD,
                            float theta, int packed, rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_rope_packed_forward");
    rope_forward(out, inp, B, T, NH, HD, theta, packed, dt);
}

void rt_rope_packed_backward(void* dinp, const void* dout, int B, int T, int NH, int HD,
                             float theta, int packed, rt_dtype dt, int assign) {
    RT_KCHECK_PACKED_DT(dt, "rt_rope_packed_backward");
    rope_backward(dinp, dout, B, T, NH, HD, theta, packed, dt, assign);
}
