// Gradient divide factors of FSDP2's reduce-scatter (PyTorch's
// _get_gradient_divide_factors): which reduction each collective uses and what is divided
// before and after, so fp16 sums neither overflow nor underflow.
#include <math.h>

#include "rt_fsdp.h"

// ---- factors ----------------------------------------------------------------------------

rt_fsdp_divide rt_fsdp_gradient_divide_factors(int shard_size, int replicate_size,
                                               rt_dtype reduce_dtype, double factor,
                                               int force_sum) {
    rt_fsdp_divide d = {1.0, 1.0, rt_red_sum(), rt_red_sum()};
    // fp32 and bf16 have fp32's range: let the collective divide (AVG / PREMUL_SUM).
    int overflow_risk = reduce_dtype != RT_F32 && reduce_dtype != RT_BF16;
    int dp_size = shard_size * (replicate_size > 0 ? replicate_size : 1);
    int has_factor = factor > 0;
    if (!overflow_risk && !force_sum) {
        if (!has_factor) {
            // NCCL's AVG is unreliable for a world of 1, hence SUM there.
            if (dp_size != 1) d.rs_op = d.ar_op = rt_red_avg();
            return d;
        }
        d.rs_op = factor == (double)shard_size ? rt_red_avg() : rt_red_premul_sum(1.0 / factor);
        return d;
    }
    if (!has_factor) factor = (double)dp_size;
    if (overflow_risk) {
        // Divide by about sqrt(factor) before the sum and by the rest after it.
        double pre = 1.0;
        while (fmod(factor, pre) == 0.0 && factor / pre > pre) pre *= 2.0;
        d.predivide = pre;
        d.postdivide = factor / pre;
    } else {
        // Post-dividing touches less data than pre-dividing.
        d.postdivide = factor;
    }
    return d;
}
