// Private: the element-wise reduction kernel of the threads backend. Accumulates in fp32
// in source order and rounds once per element to the output dtype.
#ifndef RT_COMM_REDUCE_H
#define RT_COMM_REDUCE_H

#include <stddef.h>

#include "rt_dtype.h"

// For i in [0, count): v = sum over s = 0..nsrc-1 of (src[s][i] * scale if use_scale else
// src[s][i]), accumulated in fp32 in that order; writes round(v) into every dst[d][i].
// dst may alias a src exactly (in-place): each tile is read in full before it is written.
// dtype must be fp32, bf16 or fp16; nsrc >= 1.
void rt_reduce_sum(void* const* dst, int ndst, const void* const* src, int nsrc, size_t count,
                   rt_dtype dtype, int use_scale, float scale);

#endif
