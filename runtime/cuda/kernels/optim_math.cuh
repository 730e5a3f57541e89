// Element math and per-step scalars of the optimizers and of gradient clipping, as
// __host__ __device__ functions: the one copy used by every CUDA entry point (rt_sgd_step,
// rt_adam_step, rt_adamw_step, rt_clip_grad_norm with host step and norm; the rt_cuda_*_dev
// and rt_cuda_clip_by_total variants with the step count and norm in device memory), and
// compiled for the host by tests/cuda/test_optim_math.cu, which checks them against the CPU
// optimizers without a GPU.
//
// Same float expressions as runtime/cpu/optim/*.c (PyTorch's single-tensor order): scalars
// in double, rounded to float where they meet the fp32 tensors; elementwise math in fp32.
// Compiled with -fmad=false (device) and without FMA contraction (host), IEEE division
// and sqrt on both, so host and device give the same bits.
//
// One difference from the CPU code: the bias corrections 1 - beta^step use rtc_pow_int, an
// integer power in double-double (exact to ~2^-100, then rounded once), because the device
// has no glibc pow. glibc's pow is not always correctly rounded, so the double
// 1 - beta^step can differ in its last bit (for beta2 = 0.999 in ~0.02% of steps); the
// float scalars derived from it (step size, sqrt of the correction) were equal for every
// step 1..1e7 of 12 betas tested, and tests/cuda/test_optim_math.cu checks it on each run.
#ifndef FSDPGEN_CUDA_OPTIM_MATH_CUH
#define FSDPGEN_CUDA_OPTIM_MATH_CUH

#include <math.h>
#include <stdint.h>

#include "rt_optim.h"

#define RTC_HD __host__ __device__ __forceinline__

// ----------------------------------------------------------------------------
// integer power b^n (n >= 0) correctly rounded to double: binary exponentiation in
// double-double (a product's rounding error recovered exactly with fma)

typedef struct {
    double hi, lo;
} rtc_dd;

RTC_HD rtc_dd rtc_dd_mul(rtc_dd a, rtc_dd b) {
    const double p = a.hi * b.hi;
    double e = fma(a.hi, b.hi, -p);  // exact: a.hi * b.hi = p + e
    e = e + (a.hi * b.lo + a.lo * b.hi);
    const double s = p + e;
    rtc_dd r = {s, e - (s - p)};
    return r;
}

RTC_HD double rtc_pow_int(double b, int64_t n) {
    rtc_dd r = {1.0, 0.0}, x = {b, 0.0};
    while (n > 0) {
        if (n & 1) r = rtc_dd_mul(r, x);
        n >>= 1;
        if (n > 0) x = rtc_dd_mul(x, x);
    }
    return r.hi + r.lo;
}

// ----------------------------------------------------------------------------
// SGD: g = grad + wd*p; with momentum: buf = g at step 1, else buf = momentum*buf +
// (1-dampening)*g; g = nesterov ? g + momentum*buf : buf; p -= lr*g

typedef struct {
    float wd, mom, damp1, neg_lr;
    int use_wd, use_momentum, nesterov;
} rtc_sgd_scalars;

static inline rtc_sgd_scalars rtc_sgd_scalars_of(double lr, double momentum, double dampening,
                                                 double weight_decay, int nesterov) {
    rtc_sgd_scalars s;
    s.wd = (float)weight_decay;
    s.mom = (float)momentum;
    s.damp1 = (float)(1.0 - dampening);
    s.neg_lr = (float)(-lr);
    s.use_wd = weight_decay != 0.0;
    s.use_momentum = momentum != 0.0;
    s.nesterov = nesterov;
    return s;
}

// The new param; *buf (momentum buffer element, unused without momentum) is updated.
RTC_HD float rtc_sgd_elem(const rtc_sgd_scalars& s, int first, float p, float g, float* buf) {
    if (s.use_wd) g = g + s.wd * p;  // grad.add(param, alpha=wd)
    if (s.use_momentum) {
        float b;
        if (first) {
            b = g;  // buffer is born as a clone of the first gradient
        } else {
            b = *buf * s.mom;    // buf.mul_(momentum)
            b = b + s.damp1 * g;  //    .add_(grad, alpha=1-dampening)
        }
        *buf = b;
        g = s.nesterov ? g + s.mom * b : b;
    }
    return p + s.neg_lr * g;  // param.add_(grad, alpha=-lr)
}

// ----------------------------------------------------------------------------
// Adam / AdamW: hyperparameters (l2 = Adam's weight decay on the gradient, decoupled =
// AdamW's, applied to the param first as p *= 1 - lr*wd) and the per-step scalars

typedef struct {
    double lr, beta1, beta2, eps, l2, decoupled;
} rtc_adam_hyper;

typedef struct {
    float neg_step_size, bc2_sqrt, w1, b2, c2, eps, wd, decay;
    int w1_small, use_l2, use_decay;
} rtc_adam_scalars;

RTC_HD rtc_adam_scalars rtc_adam_scalars_at(const rtc_adam_hyper& h, int64_t step) {
    const double bc1 = 1.0 - rtc_pow_int(h.beta1, step);
    const double bc2 = 1.0 - rtc_pow_int(h.beta2, step);
    rtc_adam_scalars s;
    s.neg_step_size = (float)(-(h.lr / bc1));
    s.bc2_sqrt = (float)sqrt(bc2);
    s.w1 = (float)(1.0 - h.beta1);  // lerp weight
    s.w1_small = fabs((double)s.w1) < 0.5;
    s.b2 = (float)h.beta2;
    s.c2 = (float)(1.0 - h.beta2);
    s.eps = (float)h.eps;
    s.wd = (float)h.l2;
    s.use_l2 = h.l2 != 0.0;
    s.use_decay = h.decoupled != 0.0;
    s.decay = (float)(1.0 - h.lr * h.decoupled);
    return s;
}

// The new param; *m (exp_avg) and *v (exp_avg_sq) are updated.
RTC_HD float rtc_adam_elem(const rtc_adam_scalars& s, float p, float g, float* m, float* v) {
    if (s.use_decay) p = p * s.decay;  // AdamW: param.mul_(1 - lr*weight_decay)
    if (s.use_l2) g = g + s.wd * p;    // Adam: grad.add(param, alpha=wd)
    // exp_avg.lerp_(grad, 1-beta1), ATen's two-sided lerp formula
    float mm = *m;
    mm = s.w1_small ? mm + s.w1 * (g - mm) : g - (g - mm) * (1.0f - s.w1);
    *m = mm;
    // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2)
    float vv = *v * s.b2;
    vv = vv + s.c2 * g * g;
    *v = vv;
    // denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
    const float denom = sqrtf(vv) / s.bc2_sqrt + s.eps;
    // param.addcdiv_(exp_avg, denom, value=-step_size)
    return p + s.neg_step_size * mm / denom;
}

// ----------------------------------------------------------------------------
// clipping coefficient, in fp32 as PyTorch: min(1, max_norm / (total_norm + 1e-6)), where
// Python's scalar / tensor is tensor.reciprocal() * scalar; a NaN norm propagates

RTC_HD float rtc_clip_coef(double total_norm, double max_norm) {
    const float denom = (float)total_norm + (float)RT_CLIP_EPS;
    const float coef = (1.0f / denom) * (float)max_norm;
    return coef > 1.0f ? 1.0f : coef;
}

#endif
