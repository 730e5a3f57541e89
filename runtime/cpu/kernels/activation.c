// Elementwise activations: exact GELU, ReLU, SiLU and the SwiGLU gate, forward and
// backward. Backward kernels take the forward input and recompute what they need, so
// no activation output has to be kept alive for them. Every value written is rounded to
// dt at its store (rt_kernels.h "Mixed precision"). exp and erf are vmath.h's, and each
// loop is compiled per dtype (RT_KBY_DT) and per x86-64 level (RT_VEC_CLONES), so that the
// loops vectorise.
#include "rt_kernels.h"

#include <math.h>

#include "kround.h"
#include "vmath.h"

// ----------------------------------------------------------------------------
// exact GELU (nn.GELU() default, approximate='none')

#define RT_SQRT1_2 0.70710678118654752440f      // 1/sqrt(2)
#define RT_INV_SQRT_2PI 0.39894228040143267794f // 1/sqrt(2*pi)

RT_VEC_CLONES
void rt_gelu_forward(float* out, const float* inp, size_t n, rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_gelu_forward");
    RT_KBY_DT(for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = rt_kround(0.5f * x * (1.0f + rt_verff(x * RT_SQRT1_2)), dt);
    });
}

// d/dx [x * Phi(x)] = Phi(x) + x * phi(x)
RT_VEC_CLONES
void rt_gelu_backward(float* dinp, const float* dout, const float* inp, size_t n, rt_dtype dt,
                      int assign) {
    const int as = assign & RT_ASSIGN_1;
    RT_KCHECK_DT(dt, "rt_gelu_backward");
    RT_KBY_DT(for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cdf = 0.5f * (1.0f + rt_verff(x * RT_SQRT1_2));
        float pdf = RT_INV_SQRT_2PI * rt_vexpf(-0.5f * x * x);
        dinp[i] = rt_kround(RT_KBASE(dinp[i], as) + dout[i] * (cdf + x * pdf), dt);
    });
}

// ----------------------------------------------------------------------------
// ReLU

void rt_relu_forward(float* out, const float* inp, size_t n, rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_relu_forward");
    for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? rt_kround(inp[i], dt) : 0.0f;
}

// Gradient 0 at x == 0, as PyTorch's threshold_backward (assigned: written as 0).
void rt_relu_backward(float* dinp, const float* dout, const float* inp, size_t n, rt_dtype dt,
                      int assign) {
    const int as = assign & RT_ASSIGN_1;
    RT_KCHECK_DT(dt, "rt_relu_backward");
    for (size_t i = 0; i < n; i++)
        if (inp[i] > 0.0f) dinp[i] = rt_kround(RT_KBASE(dinp[i], as) + dout[i], dt);
        else if (as) dinp[i] = 0.0f;
}

// ----------------------------------------------------------------------------
// SiLU: x * sigmoid(x)

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + rt_vexpf(-x)); }

RT_VEC_CLONES
void rt_silu_forward(float* out, const float* inp, size_t n, rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_silu_forward");
    RT_KBY_DT(for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = rt_kround(x * sigmoidf_(x), dt);
    });
}

// d/dx [x * s(x)] = s * (1 + x * (1 - s))
static inline float silu_grad_(float x) {
    float s = sigmoidf_(x);
    return s * (1.0f + x * (1.0f - s));
}

RT_VEC_CLONES
void rt_silu_backward(float* dinp, const float* dout, const float* inp, size_t n, rt_dtype dt,
                      int assign) {
    RT_KCHECK_DT(dt, "rt_silu_backward");
    const int as = assign & RT_ASSIGN_1;
    RT_KBY_DT(for (size_t i = 0; i < n; i++) dinp[i] =
                  rt_kround(RT_KBASE(dinp[i], as) + dout[i] * silu_grad_(inp[i]), dt););
}

// ----------------------------------------------------------------------------
// SwiGLU gate: out = silu(a) * b, with the intermediates rounded to dt where separate silu
// and mul kernels would have rounded their outputs (rt_kernels.h)

RT_VEC_CLONES
void rt_swiglu_forward(float* out, const float* a, const float* b, size_t n, rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_swiglu_forward");
    RT_KBY_DT(for (size_t i = 0; i < n; i++) {
        float x = a[i];
        out[i] = rt_kround(rt_kround(x * sigmoidf_(x), dt) * b[i], dt);
    });
}

// da += round(dout * b) * silu'(a) (the mul's gradient of silu(a), then the silu's);
// db += dout * round(silu(a)). da == db (swiglu(x, x)) gets both, da's first, then one
// rounding.
RT_VEC_CLONES
void rt_swiglu_backward(float* da, float* db, const float* dout, const float* a, const float* b,
                        size_t n, rt_dtype dt, int assign) {
    RT_KCHECK_DT(dt, "rt_swiglu_backward");
    const int as1 = assign & RT_ASSIGN_1, as2 = assign & RT_ASSIGN_2;
    RT_KBY_DT({
        if (da && da == db) {
            for (size_t i = 0; i < n; i++) {
                float x = a[i];
                float v = da[i] + rt_kround(dout[i] * b[i], dt) * silu_grad_(x);
                v += dout[i] * rt_kround(x * sigmoidf_(x), dt);
                da[i] = rt_kround(v, dt);
            }
            return;
        }
        if (da)
            for (size_t i = 0; i < n; i++)
                da[i] = rt_kround(
                    RT_KBASE(da[i], as1) + rt_kround(dout[i] * b[i], dt) * silu_grad_(a[i]),
                    dt);
        if (db)
            for (size_t i = 0; i < n; i++) {
                float x = a[i];
                db[i] = rt_kround(
                    RT_KBASE(db[i], as2) + dout[i] * rt_kround(x * sigmoidf_(x), dt), dt);
            }
    });
}
