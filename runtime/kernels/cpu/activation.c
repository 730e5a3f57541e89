// Elementwise activations: exact GELU, ReLU, SiLU and the SwiGLU gate, forward and
// backward. Backward kernels take the forward input and recompute what they need, so
// no activation output has to be kept alive for them.
#include "rt_kernels.h"

#include <math.h>

#include "../../core/dtype_bits.h"

// ----------------------------------------------------------------------------
// exact GELU (nn.GELU() default, approximate='none')

#define RT_SQRT1_2 0.70710678118654752440f      // 1/sqrt(2)
#define RT_INV_SQRT_2PI 0.39894228040143267794f // 1/sqrt(2*pi)

void rt_gelu_forward(float* out, const float* inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + erff(x * RT_SQRT1_2));
    }
}

// d/dx [x * Phi(x)] = Phi(x) + x * phi(x)
void rt_gelu_backward(float* dinp, const float* dout, const float* inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cdf = 0.5f * (1.0f + erff(x * RT_SQRT1_2));
        float pdf = RT_INV_SQRT_2PI * expf(-0.5f * x * x);
        dinp[i] += dout[i] * (cdf + x * pdf);
    }
}

// ----------------------------------------------------------------------------
// ReLU

void rt_relu_forward(float* out, const float* inp, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

// Gradient 0 at x == 0, as PyTorch's threshold_backward.
void rt_relu_backward(float* dinp, const float* dout, const float* inp, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (inp[i] > 0.0f) dinp[i] += dout[i];
}

// ----------------------------------------------------------------------------
// SiLU: x * sigmoid(x)

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

void rt_silu_forward(float* out, const float* inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = x * sigmoidf_(x);
    }
}

// d/dx [x * s(x)] = s * (1 + x * (1 - s))
static inline float silu_grad_(float x) {
    float s = sigmoidf_(x);
    return s * (1.0f + x * (1.0f - s));
}

void rt_silu_backward(float* dinp, const float* dout, const float* inp, size_t n) {
    for (size_t i = 0; i < n; i++) dinp[i] += dout[i] * silu_grad_(inp[i]);
}

// ----------------------------------------------------------------------------
// SwiGLU gate: out = silu(a) * b, with the intermediates rounded to dt where separate silu
// and mul kernels would have rounded their outputs (rt_kernels.h)

static inline float round_to_(float v, rt_dtype dt) {
    if (dt == RT_BF16) return rt_bf16_to_f32_inl(rt_bf16_from_f32_inl(v));
    if (dt == RT_F16) return rt_f16_to_f32_inl(rt_f16_from_f32_inl(v));
    return v;
}

void rt_swiglu_forward(float* out, const float* a, const float* b, size_t n, rt_dtype dt) {
    for (size_t i = 0; i < n; i++) {
        float x = a[i];
        out[i] = round_to_(x * sigmoidf_(x), dt) * b[i];
    }
}

// da += round(dout * b) * silu'(a) (the mul's gradient of silu(a), then the silu's);
// db += dout * round(silu(a)).
void rt_swiglu_backward(float* da, float* db, const float* dout, const float* a, const float* b,
                        size_t n, rt_dtype dt) {
    if (da)
        for (size_t i = 0; i < n; i++) da[i] += round_to_(dout[i] * b[i], dt) * silu_grad_(a[i]);
    if (db)
        for (size_t i = 0; i < n; i++) {
            float x = a[i];
            db[i] += dout[i] * round_to_(x * sigmoidf_(x), dt);
        }
}
