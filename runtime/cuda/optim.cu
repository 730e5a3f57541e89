// Optimizer steps and gradient clipping on the GPU, one fused kernel per step over a whole
// flat shard (param, grad and state read and written once). Same semantics and the same
// float expressions as runtime/optim/cpu/*.c: scalars computed in double on the host and
// rounded to float where they meet the fp32 tensors, elementwise math in fp32 in
// torch/optim's single-tensor order. With -fmad=false and IEEE sqrt/division the GPU step
// gives the CPU step's bits. param, grad and the state buffers are device pointers.
// TODO(issue 5): bf16/fp16 params with an fp32 master copy, and multi-shard (foreach)
// launches over several buffers at once, once the step backend has them.
#include "cuda_common.cuh"

// ----------------------------------------------------------------------------
// SGD

__global__ void sgd_kernel(float* __restrict__ param, const float* __restrict__ grad,
                           float* __restrict__ momentum_buf, size_t n, int first, int use_wd,
                           int use_momentum, int nesterov, float wd, float mom, float damp1,
                           float neg_lr) {
    RTC_GRID_STRIDE(i, n) {
        float g = grad[i];
        if (use_wd) g = g + wd * param[i];  // grad.add(param, alpha=wd)
        if (use_momentum) {
            float buf;
            if (first) {
                buf = g;  // buffer is born as a clone of the first gradient
            } else {
                buf = momentum_buf[i] * mom;  // buf.mul_(momentum)
                buf = buf + damp1 * g;        //    .add_(grad, alpha=1-dampening)
            }
            momentum_buf[i] = buf;
            g = nesterov ? g + mom * buf : buf;
        }
        param[i] = param[i] + neg_lr * g;  // param.add_(grad, alpha=-lr)
    }
}

void rt_sgd_step(float* param, const float* grad, float* momentum_buf, size_t n, int64_t step,
                 double lr, double momentum, double dampening, double weight_decay,
                 int nesterov) {
    if (n == 0) return;
    sgd_kernel<<<rtc_blocks(n, RTC_THREADS), RTC_THREADS, 0, rtc_stream()>>>(
        param, grad, momentum_buf, n, step <= 1, weight_decay != 0.0, momentum != 0.0, nesterov,
        (float)weight_decay, (float)momentum, (float)(1.0 - dampening), (float)(-lr));
    RTC_CHECK_LAUNCH(sgd_kernel);
}

// ----------------------------------------------------------------------------
// Adam / AdamW (decay = the AdamW factor 1 - lr*wd applied to the param first, or 1)

typedef struct {
    float neg_step_size, bc2_sqrt, w1, b2, c2, eps, wd, decay;
    int w1_small, use_l2, use_decay;
} adam_scalars;

__global__ void adam_kernel(float* __restrict__ param, const float* __restrict__ grad,
                            float* __restrict__ exp_avg, float* __restrict__ exp_avg_sq, size_t n,
                            adam_scalars s) {
    RTC_GRID_STRIDE(i, n) {
        float p = param[i];
        if (s.use_decay) p = p * s.decay;  // AdamW: param.mul_(1 - lr*weight_decay)
        float g = grad[i];
        if (s.use_l2) g = g + s.wd * p;  // Adam: grad.add(param, alpha=wd)
        // exp_avg.lerp_(grad, 1-beta1), ATen's two-sided lerp formula
        float m = exp_avg[i];
        m = s.w1_small ? m + s.w1 * (g - m) : g - (g - m) * (1.0f - s.w1);
        exp_avg[i] = m;
        // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2)
        float v = exp_avg_sq[i] * s.b2;
        v = v + s.c2 * g * g;
        exp_avg_sq[i] = v;
        // denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        const float denom = sqrtf(v) / s.bc2_sqrt + s.eps;
        // param.addcdiv_(exp_avg, denom, value=-step_size)
        param[i] = p + s.neg_step_size * m / denom;
    }
}

static void adam_launch(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                        size_t n, int64_t step, double lr, double beta1, double beta2, double eps,
                        double l2_decay, double decoupled_decay) {
    if (n == 0) return;
    const double bc1 = 1.0 - pow(beta1, (double)step);
    const double bc2 = 1.0 - pow(beta2, (double)step);
    adam_scalars s;
    s.neg_step_size = (float)(-(lr / bc1));
    s.bc2_sqrt = (float)sqrt(bc2);
    s.w1 = (float)(1.0 - beta1);
    s.w1_small = fabs((double)s.w1) < 0.5;
    s.b2 = (float)beta2;
    s.c2 = (float)(1.0 - beta2);
    s.eps = (float)eps;
    s.wd = (float)l2_decay;
    s.use_l2 = l2_decay != 0.0;
    s.use_decay = decoupled_decay != 0.0;
    s.decay = (float)(1.0 - lr * decoupled_decay);
    adam_kernel<<<rtc_blocks(n, RTC_THREADS), RTC_THREADS, 0, rtc_stream()>>>(param, grad, exp_avg,
                                                                              exp_avg_sq, n, s);
    RTC_CHECK_LAUNCH(adam_kernel);
}

void rt_adam_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, size_t n,
                  int64_t step, double lr, double beta1, double beta2, double eps,
                  double weight_decay) {
    adam_launch(param, grad, exp_avg, exp_avg_sq, n, step, lr, beta1, beta2, eps, weight_decay,
                0.0);
}

void rt_adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, size_t n,
                   int64_t step, double lr, double beta1, double beta2, double eps,
                   double weight_decay) {
    adam_launch(param, grad, exp_avg, exp_avg_sq, n, step, lr, beta1, beta2, eps, 0.0,
                weight_decay);
}

// ----------------------------------------------------------------------------
// gradient clipping: the coefficient is host arithmetic (as the CPU backend, whose
// rt_clip_coef this repeats), the scaling a kernel on the shard

float rt_clip_coef(double total_norm, double max_norm) {
    const float denom = (float)total_norm + (float)RT_CLIP_EPS;
    const float coef = (1.0f / denom) * (float)max_norm;
    return coef > 1.0f ? 1.0f : coef;  // a NaN norm propagates, as through torch.clamp
}

__global__ void clip_scale_kernel(float* __restrict__ grad, size_t n, float coef) {
    RTC_GRID_STRIDE(i, n) grad[i] *= coef;
}

float rt_clip_grad_norm(float* grad, size_t n, double total_norm, double max_norm) {
    const float coef = rt_clip_coef(total_norm, max_norm);
    if (coef != 1.0f && n > 0) {
        clip_scale_kernel<<<rtc_blocks(n, RTC_THREADS), RTC_THREADS, 0, rtc_stream()>>>(grad, n,
                                                                                        coef);
        RTC_CHECK_LAUNCH(clip_scale_kernel);
    }
    return coef;
}
