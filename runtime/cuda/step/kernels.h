// kernels.h — the CUDA step backend's own kernels (kernels.cu), callable from C: FSDP2's
// copies from a copy plan (rt_fsdp_copy.h) held on the device, gradient division and rounding to
// bf16/fp16. Every call is asynchronous on the stream it is given (a cudaStream_t) and
// capturable in a CUDA graph.
#ifndef FSDPGEN_CUDA_STEP_KERNELS_H
#define FSDPGEN_CUDA_STEP_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "rt_dtype.h"
#include "rt_fsdp_copy.h"

#ifdef __cplusplus
extern "C" {
#endif

// A copy plan uploaded once: runs and their end offsets (prefix sums of n).
typedef struct rtcs_plan {
    rt_copy_run* runs;    // device
    int64_t* ends;        // device: ends[k] = runs 0..k's elements
    int nruns;
    int64_t total;
} rtcs_plan;

// Uploads p (synchronously; setup only). Returns 0, or a cudaError_t.
int rtcs_plan_upload(rtcs_plan* out, const rt_copy_plan* p);
void rtcs_plan_free(rtcs_plan* p);

// Applies the plan on stream: as rt_copy_apply with flat sides (dtype casts round to nearest
// even).
void rtcs_copy(const rtcs_plan* p, void* dst, rt_dtype dst_dt, const void* src, rt_dtype src_dt,
               int accumulate, void* stream);
// rtcs_copy of fp32 src, each value rounded to round_dt first, as rtcs_round before the copy
// would do without its pass over src (which keeps its unrounded values).
void rtcs_copy_rounded(const rtcs_plan* p, void* dst, rt_dtype dst_dt, const float* src,
                       rt_dtype round_dt, int accumulate, void* stream);
// buf[i] /= factor in fp32, rounded once to dt (rt_fsdp_divide_buffer). factor 1: nothing.
void rtcs_divide(void* buf, int64_t n, rt_dtype dt, double factor, void* stream);
// x[i] = (float)(dtype)x[i] (rt_step_round). fp32: nothing.
void rtcs_round(float* x, size_t n, rt_dtype dt, void* stream);

// A failed launch (no kernel image for this GPU, bad configuration) exits with a
// `file:line: error:` line (rt_check_fail); faults inside a kernel surface at the step's
// synchronization.

#ifdef __cplusplus
}
#endif
#endif
