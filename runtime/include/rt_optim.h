// rt_optim.h — optimizer steps on a flat fp32 shard, with PyTorch semantics and defaults.
//
// Each step is elementwise over one rank's flat shard: param[n], grad[n] and the state
// buffers[n] of the same shard (padding included: zero grads and zero state keep zero
// padding at zero for SGD/Adam; AdamW's decay keeps it zero too). The generated code owns
// the buffers and the step counter:
//   * step is the 1-based count of this update (PyTorch's state["step"] after its
//     increment): 1 on the first optimizer.step().
//   * Adam/AdamW exp_avg and exp_avg_sq must be zero before step 1.
//   * SGD's momentum_buf needs no initialization: at step 1 it is set to the gradient, as
//     PyTorch creates the buffer as a clone of the first gradient. NULL when momentum == 0.
// Hyperparameters are doubles because PyTorch computes its scalar arithmetic (1 - beta1,
// bias corrections, lr / bias_correction1) in Python floats before it reaches the fp32
// tensors; elementwise math is fp32 in the order of torch/optim's single-tensor
// implementations (_single_tensor_sgd, _single_tensor_adam with decoupled weight decay
// for AdamW). The grad buffer is only read; NULL is a zero gradient (the bits of a zeroed
// buffer: the rows of an embedding that no token of the step looks up, rt_step.h
// rt_step_optimizer_rows).
#ifndef FSDPGEN_RT_OPTIM_H
#define FSDPGEN_RT_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// PyTorch defaults
#define RT_SGD_MOMENTUM 0.0
#define RT_SGD_DAMPENING 0.0
#define RT_SGD_WEIGHT_DECAY 0.0
#define RT_ADAM_LR 1e-3
#define RT_ADAM_BETA1 0.9
#define RT_ADAM_BETA2 0.999
#define RT_ADAM_EPS 1e-8
#define RT_ADAM_WEIGHT_DECAY 0.0
#define RT_ADAMW_WEIGHT_DECAY 1e-2
#define RT_CLIP_EPS 1e-6  // clip_grad_norm_'s max_norm / (total_norm + 1e-6)

// ----------------------------------------------------------------------------
// SGD (torch.optim.SGD): g = grad + wd*p; with momentum: buf = g at step 1, else
// buf = momentum*buf + (1-dampening)*g; g = nesterov ? g + momentum*buf : buf; p -= lr*g.
void rt_sgd_step(float* param, const float* grad, float* momentum_buf, size_t n, int64_t step,
                 double lr, double momentum, double dampening, double weight_decay,
                 int nesterov);

// Adam (torch.optim.Adam): weight_decay is L2 added to the gradient.
//   g = grad + wd*p; m = lerp(m, g, 1-beta1); v = beta2*v + (1-beta2)*g*g;
//   p += -(lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps), bc_i = 1 - beta_i^step.
void rt_adam_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, size_t n,
                  int64_t step, double lr, double beta1, double beta2, double eps,
                  double weight_decay);

// AdamW (torch.optim.AdamW): decoupled weight decay p *= 1 - lr*wd first, then Adam
// without L2. PyTorch's default weight_decay here is RT_ADAMW_WEIGHT_DECAY.
void rt_adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, size_t n,
                   int64_t step, double lr, double beta1, double beta2, double eps,
                   double weight_decay);

// ----------------------------------------------------------------------------
// gradient clipping (torch.nn.utils.clip_grad_norm_). The caller computes the global
// norm: total_norm = sqrt(sum over ranks and shards of rt_sumsq(grad shard)).
// Coefficient as PyTorch, in fp32: min(1, max_norm / (total_norm + 1e-6)) — below 1
// exactly when total_norm + 1e-6 > max_norm.
float rt_clip_coef(double total_norm, double max_norm);
// Scales grad[n] by rt_clip_coef (no-op when it is 1) and returns the coefficient.
float rt_clip_grad_norm(float* grad, size_t n, double total_norm, double max_norm);

#ifdef __cplusplus
}
#endif

#endif
