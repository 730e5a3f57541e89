// Private: the element-wise reduction kernel of the cuda_local backend (cuda_reduce.cu),
// the device twin of reduce.h: every element is accumulated in fp32 in source order
// (src[0] + src[1] + ... , each term multiplied by the fp32 scale first when use_scale)
// and rounded once to the output dtype with the same bit-level rounding as
// runtime/common/dtype_bits.h, so every non-NaN result has rt_reduce_sum's bits (compiled
// with -fmad=false, no FTZ: products and sums round separately, subnormals kept). NaN
// results are NaN in both, payload and sign may differ (the GPU makes canonical NaNs).
#ifndef RT_COMM_CUDA_REDUCE_H
#define RT_COMM_CUDA_REDUCE_H

#include <stddef.h>

#include "rt_dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

// Most sources and destinations one launch takes (the pointer lists travel as kernel
// parameters: 2 x 128 pointers stay under the 4 KiB parameter limit of every CUDA).
#define RT_CUDA_REDUCE_MAX 128

// Enqueues on stream (a cudaStream_t): for i in [0, count), writes the rounded sum over
// s = 0..nsrc-1 of src[s][i] (times scale when use_scale) into every dst[d][i]. A dst may
// alias a src exactly (in-place): each element is read from every source before it is
// written. dtype fp32, bf16 or fp16; 1 <= nsrc, ndst <= RT_CUDA_REDUCE_MAX; device
// pointers. Returns the launch's cudaError_t as an int (0 = enqueued).
int rt_cuda_reduce_sum(void* const* dst, int ndst, const void* const* src, int nsrc, size_t count,
                       rt_dtype dtype, int use_scale, float scale, void* stream);

#ifdef __cplusplus
}
#endif

#endif
