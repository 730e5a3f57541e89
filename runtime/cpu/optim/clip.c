// Global-norm gradient clipping (torch.nn.utils.clip_grad_norm_) applied to one shard.
// The norm itself is global: the caller sums rt_sumsq over every rank's shards.
#include "rt_optim.h"

// ----------------------------------------------------------------------------
// coefficient, in fp32 as PyTorch computes it on the fp32 total_norm tensor:
// clip_coef = max_norm / (total_norm + 1e-6) — Python's scalar / tensor is
// tensor.reciprocal() * scalar — then clamp(max=1.0).

float rt_clip_coef(double total_norm, double max_norm) {
    const float denom = (float)total_norm + (float)RT_CLIP_EPS;
    const float coef = (1.0f / denom) * (float)max_norm;
    return coef > 1.0f ? 1.0f : coef;  // a NaN norm propagates, as through torch.clamp
}

// ----------------------------------------------------------------------------
// apply: grads.mul_(clip_coef_clamped); multiplying by exactly 1 is skipped (a no-op)

float rt_clip_grad_norm(float* grad, size_t n, double total_norm, double max_norm) {
    const float coef = rt_clip_coef(total_norm, max_norm);
    if (coef != 1.0f)
        for (size_t i = 0; i < n; i++) grad[i] *= coef;
    return coef;
}
