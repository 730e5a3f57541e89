// rt_cuda.h — what only the CUDA backend of rt_kernels.h / rt_optim.h (runtime/cuda) has:
// the stream its kernels run on, and (with graph capture in mind) device-side variants of
// the calls whose arguments change from step to step. Plain C, usable from gcc and nvcc;
// pointers are device pointers. The CPU backend has no such functions: only the CUDA step
// backend (runtime/cuda_step) calls them.
//
// Streams. Each host thread (one per rank) has its own kernel context: cuBLAS handle with
// a fixed 32 MiB workspace, a small device scratch for reductions, and a stream. Every
// kernel, memset, copy and cuBLAS call of rt_kernels.h / rt_optim.h made by that thread is
// issued on its stream, asynchronously. No kernel function synchronizes, allocates or
// frees, or touches the legacy default stream once a stream is set, so a whole training
// step of such calls can be captured into a CUDA graph (cudaStreamBeginCapture on the
// thread's stream), provided that:
//   * the thread's context exists before capture begins (rt_kernels_init or
//     rt_cuda_set_stream on that thread: creating it allocates);
//   * the captured step calls none of the synchronizing functions listed below.
// The reduction scratch and the cuBLAS workspace belong to the thread, not to a stream:
// after switching streams, order the new stream after the old one's outstanding kernel
// work (an event) before issuing more.
//
// Synchronizing functions (they return a host value, so they wait for the thread's stream
// with cudaStreamSynchronize, never for the device; never call them inside a captured
// step): rt_sumsq. rt_clip_grad_norm and rt_clip_coef do not synchronize (the norm is a
// host argument) but a captured graph freezes that argument: inside a graph use
// rt_cuda_sumsq_accumulate and rt_cuda_clip_by_total instead.
#ifndef FSDPGEN_RT_CUDA_H
#define FSDPGEN_RT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ----------------------------------------------------------------------------
// streams

// Sets the cudaStream_t (passed as void*) on which this host thread's kernels run from now
// on; NULL is the legacy default stream (the initial setting). Creates the thread's
// context on its current device first if it has none. Cheap: may be called per phase.
void rt_cuda_set_stream(void* stream);
// This thread's current stream (NULL: the legacy default stream).
void* rt_cuda_get_stream(void);

#ifdef __cplusplus
}
#endif

#endif
