// Elementwise activations on the GPU (exact GELU, ReLU, SiLU, the SwiGLU gate) and rotary
// position embeddings: same contracts and float expressions as
// runtime/cpu/kernels/activation.c and rope.c. Backward kernels take the forward input.
// Forward kernels allow out == inp (no __restrict__ on them). Every value written is
// rounded to dt at its store (rtc_round_to, rtc_st, rtc_stv). Every kernel also reads and writes
// packed 16-bit storage (rt_kernels.h "packed 16-bit storage").
#include "cuda_common.cuh"

#include <type_traits>

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
// elements per access, each computed alone as before. In backward da and db may be column
// slices of wider matrices (rt_kernels.h "Gradient row lengths"): element i of the dense
// rows of C is at rtc_slice_at(i, C, ld) of a gradient in rows of ld.

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

// Element i of dense rows of C in rows of ld: i itself where ld == C (the division left
// out), else its row's start plus its column. A group of RTC_VEC (i a multiple of RTC_VEC)
// stays in one row, 16-byte aligned, where C and ld are multiples of RTC_VEC.
__device__ __forceinline__ size_t rtc_slice_at(size_t i, int C, int ld) {
    return ld == C ? i : i / (size_t)C * (size_t)ld + i % (size_t)C;
}

template <int W, class GA, class GB, class D, class A, class B>
__global__ void swiglu_backward_kernel(GA* da, GB* db,  // may be one buffer
                                       const D* __restrict__ dout, const A* __restrict__ a,
                                       const B* __restrict__ b, size_t n, int C, int lda,
                                       int ldb, rt_dtype dt, int as1, int as2) {
    const bool aliased = da && (const void*)da == (const void*)db;  // then lda == ldb == C
    rtc_flat<W>(n, [&](auto w, size_t i) {
        constexpr int K = decltype(w)::value;
        float x[K], y[K], d[K], g[K] = {}, h[K] = {};  // a, b, dout; da's and db's values
        const size_t ia = rtc_slice_at(i, C, lda), ib = rtc_slice_at(i, C, ldb);
        rtc_ldv(a, i, dt, x);
        rtc_ldv(b, i, dt, y);
        rtc_ldv(dout, i, dt, d);
        if (aliased || (da && !as1)) rtc_ldv(da, ia, dt, g);
        if (db && !aliased && !as2) rtc_ldv(db, ib, dt, h);
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
        if (da) rtc_stv(da, ia, g, dt);
        if (db && !aliased) rtc_stv(db, ib, h, dt);
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

// da and db in rows of lda and ldb, dout, a and b in rows of C (checked by the caller).
static void swiglu_backward(void* da, void* db, const void* dout, const void* a, const void* b,
                            size_t n, int packed, rt_dtype dt, int assign, int C, int lda,
                            int ldb) {
    if (!da && !db) return;
    if (n == (size_t)C || !da) lda = C;  // one row: dense, whatever the ld; no da: unused
    if (n == (size_t)C || !db) ldb = C;
    // groups of RTC_VEC where each group's elements are consecutive in every gradient
    const bool aligned = rtc_aligned16({da, db, dout, a, b}) &&
                         (C % RTC_VEC == 0 || (lda == C && ldb == C));
    rtc_with_storage(packed & RT_PACKED_DINP, da, [&](auto ga) {
        rtc_with_storage(packed & RT_PACKED_DINP2, db, [&](auto gb) {
            rtc_with_storage(packed & RT_PACKED_OUT, dout, [&](auto d) {
                rtc_with_storage(packed & RT_PACKED_INP, a, [&](auto x) {
                    rtc_with_storage(packed & RT_PACKED_INP2, b, [&](auto y) {
                        RTC_LAUNCH_VEC(swiglu_backward_kernel, n, aligned, ga, gb, d, x, y, n, C,
                                       lda, ldb, dt, assign & RT_ASSIGN_1,
                                       assign & RT_ASSIGN_2);
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
    swiglu_backward(da, db, dout, a, b, n, 0, dt, assign, 1, 1, 1);  // dense: rows of 1
}

void rt_swiglu_packed_forward(void* out, const void* a, const void* b, size_t n, int packed,
                              rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_swiglu_packed_forward");
    swiglu_forward(out, a, b, n, packed, dt);
}

void rt_swiglu_packed_backward(void* da, void* db, const void* dout, const void* a,
                               const void* b, size_t n, int packed, rt_dtype dt, int assign,
                               int C, int ld_da, int ld_db) {
    static const char* kernel = "rt_swiglu_packed_backward";
    RT_KCHECK_PACKED_DT(dt, kernel);
    RT_KCHECK_PACKED_ALIAS(da, db, packed, kernel);
    RT_KCHECK_SWIGLU_ROWS(n, C, da, db, ld_da, ld_db, packed, kernel);
    swiglu_backward(da, db, dout, a, b, n, packed, dt, assign, C, ld_da, ld_db);
}

// ----------------------------------------------------------------------------
// rotary position embeddings over [B,T,NH,HD]: pair (x[2i], x[2i+1]) at position t rotated
// by t * freq_i, freq_i = 1 / theta^(2i/HD). The frequencies are computed on the host as
// the CPU kernel computes them (powf in float), the angle in float, its cos and sin in
// double rounded to float: the CPU kernel's values.
//
// A block per position (and per batch slice where T is short) computes the position's
// HD/2 cos and sin once into shared memory, then rotates the pairs of its batch rows:
// with a block per (position, batch row), every angle was computed B times, and a thread
// of Llama 1B's k rotation (512 elements a row) had one pair to rotate after that
// double-precision latency. Blocks are as wide as a row's groups (32 to 256 threads), so
// a short row leaves few threads idle.
// Pairs go four to a 16-byte access (RTC_VEC elements) where HD % RTC_VEC == 0 and the
// pointers are 16-byte aligned, else one at a time; the arithmetic is the same.

struct rtc_rope_freqs {
    float f[RT_ROPE_MAX_HD / 2];
};

static rtc_rope_freqs rope_freqs(int HD, float theta) {
    rtc_rope_freqs fr = {};  // the unused tail zero: the same parameter bytes every launch
    for (int i = 0; i < HD / 2; i++) fr.f[i] = 1.0f / powf(theta, (float)(2 * i) / (float)HD);
    return fr;
}

// W elements of fp32 or packed storage at i (W = RTC_VEC: rtc_ldv's groups; W = 2: a pair)
template <int W, class S>
__device__ __forceinline__ void rtc_rope_ld(const S* p, size_t i, rt_dtype dt, float (&v)[W]) {
    if constexpr (W == RTC_VEC) rtc_ldv(p, i, dt, v);
    else for (int u = 0; u < W; u++) v[u] = rtc_ld(p, i + u, dt);
}
template <int W, class S>
__device__ __forceinline__ void rtc_rope_st(S* p, size_t i, const float (&v)[W], rt_dtype dt) {
    if constexpr (W == RTC_VEC) rtc_stv(p, i, v, dt);
    else for (int u = 0; u < W; u++) rtc_st(p, i + u, v[u], dt);
}

// One rotation's operands in a launch: out's rows of ldo elements, inp's of `row` (NH * HD,
// dense); as (backward) RT_ASSIGN_1 assigns out. A launch takes one or two (a pair: an
// attention's q and k, rotated at the same positions), side by side in each row's groups.
template <class O, class I>
struct rtc_rope_part {
    O* out;
    const I* inp;
    int row, ldo, as;
};

// Block (t, y): cos (threads j < HD/2) and sin (the next HD/2) of position t's angles into
// shared memory; then rows (b, t) for b = y, y + gridDim.y, ..., a.row + b.row elements each
// (a's, then b's), in groups of W (e % HD even). Forward: out = rotate(inp), out == inp
// allowed. Backward (back): out is dinp, out (+)= inp (dout) rotated by -angle.
template <int W, class O, class I>
__global__ void rope_kernel(rtc_rope_part<O, I> a, rtc_rope_part<O, I> b, int B, int T, int HD,
                            rtc_rope_freqs fr, rt_dtype dt, int back) {
    const int t = blockIdx.x, half = HD / 2;
    __align__(16) __shared__ float cs[RT_ROPE_MAX_HD / 2], sn[RT_ROPE_MAX_HD / 2];
    for (int j = threadIdx.x; j < HD; j += blockDim.x) {
        const int i = j < half ? j : j - half;
        const double ang = (double)((float)t * fr.f[i]);
        if (j < half) cs[i] = (float)cos(ang);
        else sn[i] = (float)sin(ang);
    }
    __syncthreads();
    const int row = a.row + b.row;
    for (int r = blockIdx.y; r < B; r += gridDim.y) {
        const size_t bt = (size_t)r * T + t;
        for (int e = threadIdx.x * W; e < row; e += blockDim.x * W) {
            // a's or b's, field by field: selects in registers (a reference to either
            // parameter struct would copy both to local memory)
            const bool in_a = e < a.row;  // a.row is whole heads: no group straddles it
            O* out = in_a ? a.out : b.out;
            const I* inp = in_a ? a.inp : b.inp;
            const int as = in_a ? a.as : b.as, c = in_a ? e : e - a.row;
            const size_t base = bt * (in_a ? a.row : b.row) + c;
            const size_t obase = bt * (in_a ? a.ldo : b.ldo) + c;
            float x[W], g[W] = {};
            rtc_rope_ld(inp, base, dt, x);
            if (back && !as) rtc_rope_ld(out, obase, dt, g);
            const int i0 = c % HD / 2;  // a multiple of 4 in groups of RTC_VEC
            float ca[W / 2], sa[W / 2];
            if constexpr (W == RTC_VEC) {  // one 16-byte shared load each, not four
                *(float4*)ca = *(const float4*)&cs[i0];
                *(float4*)sa = *(const float4*)&sn[i0];
            } else {
                for (int u = 0; u < W / 2; u++) ca[u] = cs[i0 + u], sa[u] = sn[i0 + u];
            }
#pragma unroll
            for (int u = 0; u < W / 2; u++) {
                const float cu = ca[u], s = sa[u], x0 = x[2 * u], x1 = x[2 * u + 1];
                if (back) {
                    x[2 * u] = RT_KBASE(g[2 * u], as) + (x0 * cu + x1 * s);
                    x[2 * u + 1] = RT_KBASE(g[2 * u + 1], as) + (-x0 * s + x1 * cu);
                } else {
                    x[2 * u] = x0 * cu - x1 * s;
                    x[2 * u + 1] = x0 * s + x1 * cu;
                }
            }
            rtc_rope_st(out, obase, x, dt);
        }
    }
}

// The launch: W = RTC_VEC where the groups of RTC_VEC fit the heads and the pointers are
// aligned (out's rows of ldo, a multiple of 8 where it is not NH * HD, stay so), else W = 2.
// b.row == 0: a alone.
template <class O, class I>
static void rope_launch(rtc_rope_part<O, I> a, rtc_rope_part<O, I> b, int B, int T, int HD,
                        float theta, rt_dtype dt, int back) {
    const bool vec = HD % RTC_VEC == 0 && rtc_aligned16({a.out, a.inp, b.out, b.inp});
    const int w = vec ? RTC_VEC : 2;
    const int groups = (a.row + b.row) / w;  // of a row
    const int threads = groups >= RTC_THREADS ? RTC_THREADS : (groups + 31) / 32 * 32;
    // blocks per position: about 2^19 threads in all (two waves of an H100's 132 SMs at
    // 2048 threads each) before a block takes several batch rows in turn (they cannot
    // overlap: out may be inp); Llama 1B's q and k rotations, 320 groups a row, 256
    // threads, one block per position
    const long per_t = (long)threads * T, want = ((1L << 19) + per_t - 1) / per_t;
    const int per = (int)(want < B ? want : B < 65535 ? B : 65535);  // gridDim.y <= 65535
    const dim3 grid((unsigned)T, (unsigned)per);
    const rtc_rope_freqs fr = rope_freqs(HD, theta);
    if (vec)
        rope_kernel<RTC_VEC><<<grid, threads, 0, rtc_stream()>>>(a, b, B, T, HD, fr, dt, back);
    else
        rope_kernel<2><<<grid, threads, 0, rtc_stream()>>>(a, b, B, T, HD, fr, dt, back);
    RTC_CHECK_LAUNCH(rope_kernel);
}

// One rotation's pointers and storage (packed: its RT_PACKED_OUT for out, RT_PACKED_INP for
// inp; the backward's RT_PACKED_DINP for out, RT_PACKED_OUT for inp, its dout), row lengths
// and assign bit.
struct rope_operand {
    void* out;
    const void* inp;
    int NH, out_packed, inp_packed, ldo, as;
};

// The rotations of a and b (NH 0: none) in one launch where both storages agree, else one
// launch each.
static void rope_run(rope_operand a, rope_operand b, int B, int T, int HD, float theta,
                     rt_dtype dt, int back) {
    RT_KCHECK_ROPE_HD(HD);
    if (B <= 0 || T <= 0) return;
    if (a.NH <= 0) {  // b alone
        a = b;
        b.NH = 0;
    }
    if (a.NH <= 0) return;
    if (b.NH > 0 && (b.out_packed != a.out_packed || b.inp_packed != a.inp_packed)) {
        rope_run(a, rope_operand{}, B, T, HD, theta, dt, back);
        rope_run(b, rope_operand{}, B, T, HD, theta, dt, back);
        return;
    }
    rtc_with_storage(a.out_packed, a.out, [&](auto o) {
        rtc_with_storage(a.inp_packed, a.inp, [&](auto x) {
            using O = std::remove_pointer_t<decltype(o)>;
            using I = std::remove_const_t<std::remove_pointer_t<decltype(x)>>;
            const rtc_rope_part<O, I> pa{o, x, a.NH * HD, a.ldo ? a.ldo : a.NH * HD, a.as};
            rtc_rope_part<O, I> pb{(O*)b.out, (const I*)b.inp, 0, 0, 0};
            if (b.NH > 0) pb = {(O*)b.out, (const I*)b.inp, b.NH * HD, b.ldo ? b.ldo : b.NH * HD, b.as};
            rope_launch(pa, pb, B, T, HD, theta, dt, back);
        });
    });
}

static rope_operand rope_fwd_operand(void* out, const void* inp, int NH, int packed) {
    return {out, inp, NH, !!(packed & RT_PACKED_OUT), !!(packed & RT_PACKED_INP), 0, 0};
}

static rope_operand rope_bwd_operand(void* dinp, const void* dout, int NH, int packed,
                                     int assign, int ld_dinp) {
    return {dinp, dout, NH, !!(packed & RT_PACKED_DINP), !!(packed & RT_PACKED_OUT), ld_dinp,
            assign & RT_ASSIGN_1};
}

void rt_rope_forward(float* out, const float* inp, int B, int T, int NH, int HD, float theta,
                     rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_rope_forward");
    rope_run(rope_fwd_operand(out, inp, NH, 0), rope_operand{}, B, T, HD, theta, dt, 0);
}

void rt_rope_backward(float* dinp, const float* dout, int B, int T, int NH, int HD,
                      float theta, rt_dtype dt, int assign) {
    RT_KCHECK_DT(dt, "rt_rope_backward");
    rope_run(rope_bwd_operand(dinp, dout, NH, 0, assign, 0), rope_operand{}, B, T, HD, theta, dt,
             1);
}

void rt_rope_packed_forward(void* out, const void* inp, int B, int T, int NH, int HD,
                            float theta, int packed, rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_rope_packed_forward");
    rope_run(rope_fwd_operand(out, inp, NH, packed), rope_operand{}, B, T, HD, theta, dt, 0);
}

void rt_rope_packed_backward(void* dinp, const void* dout, int B, int T, int NH, int HD,
                             float theta, int packed, rt_dtype dt, int assign, int ld_dinp) {
    RT_KCHECK_PACKED_DT(dt, "rt_rope_packed_backward");
    RT_KCHECK_PACKED_LD(ld_dinp, NH * HD, packed & RT_PACKED_DINP, "dinp",
                        "rt_rope_packed_backward");
    rope_run(rope_bwd_operand(dinp, dout, NH, packed, assign, ld_dinp), rope_operand{}, B, T, HD,
             theta, dt, 1);
}

void rt_rope_pair_packed_forward(void* out_a, const void* inp_a, int NH_a, int packed_a,
                                 void* out_b, const void* inp_b, int NH_b, int packed_b, int B,
                                 int T, int HD, float theta, rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_rope_pair_packed_forward");
    rope_run(rope_fwd_operand(out_a, inp_a, NH_a, packed_a),
             rope_fwd_operand(out_b, inp_b, NH_b, packed_b), B, T, HD, theta, dt, 0);
}

void rt_rope_pair_packed_backward(void* dinp_a, const void* dout_a, int NH_a, int packed_a,
                                  int assign_a, int ld_a, void* dinp_b, const void* dout_b,
                                  int NH_b, int packed_b, int assign_b, int ld_b, int B, int T,
                                  int HD, float theta, rt_dtype dt) {
    static const char* kernel = "rt_rope_pair_packed_backward";
    RT_KCHECK_PACKED_DT(dt, kernel);
    RT_KCHECK_PACKED_LD(ld_a, NH_a * HD, packed_a & RT_PACKED_DINP, "dinp_a", kernel);
    RT_KCHECK_PACKED_LD(ld_b, NH_b * HD, packed_b & RT_PACKED_DINP, "dinp_b", kernel);
    rope_run(rope_bwd_operand(dinp_a, dout_a, NH_a, packed_a, assign_a, ld_a),
             rope_bwd_operand(dinp_b, dout_b, NH_b, packed_b, assign_b, ld_b), B, T, HD, theta,
             dt, 1);
}
