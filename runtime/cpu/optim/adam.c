// Adam and AdamW steps on a flat shard, in the order of torch/optim/adam.py
// _single_tensor_adam (AdamW = decoupled weight decay applied to the param first).
#include "rt_optim.h"

#include <math.h>

#include "../kernels/kround.h"  // RT_VEC_CLONES

// ----------------------------------------------------------------------------
// shared update. Scalars follow PyTorch: computed in double (Python floats), converted
// to fp32 where they meet the fp32 tensors; tensor ops in fp32, left to right as ATen's
// CPU kernels evaluate them (addcmul: self + value*t1*t2; addcdiv: self + value*t1/t2).

RT_VEC_CLONES
static void adam_update_(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                         size_t n, int64_t step, double lr, double beta1, double beta2,
                         double eps, double l2_decay) {
    const double bc1 = 1.0 - pow(beta1, (double)step);
    const double bc2 = 1.0 - pow(beta2, (double)step);
    const double step_size = lr / bc1;
    const float neg_step_size = (float)(-step_size);
    const float bc2_sqrt = (float)sqrt(bc2);
    const float w1 = (float)(1.0 - beta1);  // lerp weight
    const int w1_small = fabs((double)w1) < 0.5;
    const float b2 = (float)beta2;
    const float c2 = (float)(1.0 - beta2);
    const float epsf = (float)eps;
    const float wd = (float)l2_decay;
    for (size_t i = 0; i < n; i++) {
        float g = grad ? grad[i] : 0.0f;
        if (l2_decay != 0.0) g = g + wd * param[i];  // grad.add(param, alpha=wd)
        // exp_avg.lerp_(grad, 1-beta1), ATen's two-sided lerp formula
        float m = exp_avg[i];
        m = w1_small ? m + w1 * (g - m) : g - (g - m) * (1.0f - w1);
        exp_avg[i] = m;
        // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2)
        float v = exp_avg_sq[i] * b2;
        v = v + c2 * g * g;
        exp_avg_sq[i] = v;
        // denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        const float denom = sqrtf(v) / bc2_sqrt + epsf;
        // param.addcdiv_(exp_avg, denom, value=-step_size)
        param[i] = param[i] + neg_step_size * m / denom;
    }
}

// ----------------------------------------------------------------------------
// Adam: weight decay as L2 on the gradient

void rt_adam_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, size_t n,
                  int64_t step, double lr, double beta1, double beta2, double eps,
                  double weight_decay) {
    adam_update_(param, grad, exp_avg, exp_avg_sq, n, step, lr, beta1, beta2, eps,
                 weight_decay);
}

// ----------------------------------------------------------------------------
// AdamW: param.mul_(1 - lr*weight_decay), then Adam without L2

void rt_adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, size_t n,
                   int64_t step, double lr, double beta1, double beta2, double eps,
                   double weight_decay) {
    if (weight_decay != 0.0) {
        const float decay = (float)(1.0 - lr * weight_decay);
        for (size_t i = 0; i < n; i++) param[i] = param[i] * decay;
    }
    adam_update_(param, grad, exp_avg, exp_avg_sq, n, step, lr, beta1, beta2, eps, 0.0);
}
