// SGD step on a flat shard, in the order of torch/optim/sgd.py _single_tensor_sgd.
#include "rt_optim.h"

// ----------------------------------------------------------------------------
// step

void rt_sgd_step(float* param, const float* grad, float* momentum_buf, size_t n, int64_t step,
                 double lr, double momentum, double dampening, double weight_decay,
                 int nesterov) {
    // Python scalars become fp32 when they meet fp32 tensors.
    const float wd = (float)weight_decay;
    const float mom = (float)momentum;
    const float damp1 = (float)(1.0 - dampening);
    const float neg_lr = (float)(-lr);
    for (size_t i = 0; i < n; i++) {
        float g = grad ? grad[i] : 0.0f;
        if (weight_decay != 0.0) g = g + wd * param[i];  // grad.add(param, alpha=wd)
        if (momentum != 0.0) {
            float buf;
            if (step <= 1) {
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
