// rt_cuda.h — what only the CUDA backend of rt_kernels.h / rt_optim.h (runtime/cuda) has:
// the stream its kernels run on, and (with graph capture in mind) device-side variants of
// the calls whose arguments change from step to step. Plain C, usable from gcc and nvcc;
// pointers are device pointers. The CPU backend has no such functions: only the CUDA step
// backend (runtime/cuda/step) calls them.
//
// Streams. Each host thread (one per rank) has its own kernel context: cuBLAS handle with
// a fixed 32 MiB workspace, a small device scratch for reductions and device-computed
// kernel arguments, and a stream. Every
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
// work (an event) before issuing more. One exception: the graph-safe optimizer steps below
// use a slot of the scratch that nothing else does, so they may run on a stream of their
// own beside the thread's other kernels, provided they are ordered among themselves.
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

#include "rt_dtype.h"

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
// From now on this thread's GEMMs (cuBLAS and cuBLASLt) are planned for `sms` SMs, not the
// device's count (0, the initial setting: the device's), so that the SMs left over run
// other streams' kernels beside them, as TransformerEngine's GEMMs leave SMs to NCCL's
// (cublasSetSmCountTarget, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET). cuBLAS chooses its
// kernels for that count: the bits of a GEMM may change with it. Creates the thread's
// context first if it has none.
void rt_cuda_set_gemm_sms(int sms);
// From now on this thread's fused cross-entropy (rt_cross_entropy_packed_forward_backward)
// stages each row's first `bytes` (at most the device's opt-in shared memory per block, the
// initial setting) in shared memory, so that its gradient pass reads them there rather than
// from DRAM again; 0 reads every row twice. The bits do not change: bench/loss.sh times the
// two. Creates the thread's context first if it has none.
void rt_cuda_set_loss_stage(size_t bytes);
// From now on this thread's linear backward computes a bias gradient it assigns with its
// weight's in the weight gradient's product (epilogue 1, the initial setting: cuBLASLt's
// bias-gradient epilogue, where cuBLASLt takes it) or by column sums reading dout again
// (0). The sums differ within a float rounding: bench/run.sh times the two. Creates the
// thread's context first if it has none.
void rt_cuda_set_bias_grad_epilogue(int epilogue);

// ----------------------------------------------------------------------------
// graph-safe optimizer steps: rt_optim.h's steps with the 1-based step count and the
// learning rate read from device memory (d_step, an int64, and d_lr, a double, that the
// step backend uploads before each step) when the kernel runs, so one captured graph
// serves every step, learning-rate schedules included. A training step with `per`
// optimizer steps gives its k-th one (1-based) the count (*d_step - 1) * per + k
// (k = per = 1: *d_step). Same element arithmetic as
// rt_sgd_step / rt_adam_step / rt_adamw_step (one shared function): for the same step the
// results are bit-identical. adamw != 0: AdamW (decoupled weight decay), else Adam (L2).
// Adam's per-step scalars are computed on the device by a one-thread kernel (beta^step as
// an exact integer power, on the host path too; their fp32 values equal the CPU backend's,
// which uses glibc pow, for every step checked: tests/cuda/test_optim_math.cu).
// grad_dt: the gradients are read rounded to it (bf16, fp16), the bits of rounding them
// first; RT_F32 reads them as they are. In-place gradients (one rank: the backward
// accumulated the sharded gradients themselves in fp32; generator/memory/memory.lua) get
// the reduction's rounding here instead of in a pass of their own.
// packed_grads (the _rows_ variants): g holds n 16-bit values of grad_dt (RT_BF16 or
// RT_F16; the backward wrote them rounded, rt_kernels.h RT_PACKED_DWEIGHT), read exactly:
// the bits of fp32 gradients holding those values, at half the bytes read; 0: n floats.

void rt_cuda_adam_step_dev(float* p, const float* g, float* m, float* v, size_t n,
                           const int64_t* d_step, int k, int per, const double* d_lr,
                           double beta1, double beta2, double eps, double weight_decay, int adamw,
                           rt_dtype grad_dt);
void rt_cuda_sgd_step_dev(float* p, const float* g, float* momentum_buf, size_t n,
                          const int64_t* d_step, int k, int per, const double* d_lr,
                          double momentum, double dampening, double weight_decay, int nesterov,
                          rt_dtype grad_dt);

// The rows of a 2-D parameter that a step updates (rt_step.h rt_step_optimizer_rows): its n
// elements are rows of row_len, and row i is stepped where (i < vocab && mask[i] != 0) equals
// looked_up != 0. Pass g NULL for a zero gradient (the rows no token looked up); with
// looked_up, each stepped row's gradient is set to 0 once read (packed: its 16-bit zeros).
typedef struct rt_cuda_rows {
    const uint8_t* mask;  // device; NULL: every element
    int64_t vocab, row_len;
    int looked_up;
} rt_cuda_rows;
// With cast (NULL: none), each new parameter value is also written, rounded to cast->dt,
// into one rank's unsharded parameters kept across steps (rt_model_group kept_across), as
// the all-gather's copy would write it: llm.c's AdamW writing its bf16 copy, which saves
// that copy's fp32 read. Element i of p is shard element cast->base + i; a run (sorted by
// src, disjoint) maps shard elements [src, src + n) to elements dst.. of cast->un, 16-bit
// values of dt where packed (rt_model_param packed), else fp32 values rounded to dt.
// Elements in no run (a parameter the lookups read from the shards) are not written.
typedef struct rt_cuda_cast_run {
    int64_t src, n, dst;
    int packed;
} rt_cuda_cast_run;
typedef struct rt_cuda_cast {
    const rt_cuda_cast_run* runs;  // device
    int nruns;
    void* un;                      // device
    rt_dtype dt;
    int64_t base;
} rt_cuda_cast;
void rt_cuda_adam_step_rows_dev(float* p, void* g, float* m, float* v, size_t n,
                                const int64_t* d_step, int k, int per, const double* d_lr,
                                double beta1, double beta2, double eps, double weight_decay,
                                int adamw, rt_dtype grad_dt, int packed_grads,
                                const rt_cuda_rows* rows, const rt_cuda_cast* cast);
void rt_cuda_sgd_step_rows_dev(float* p, void* g, float* momentum_buf, size_t n,
                               const int64_t* d_step, int k, int per, const double* d_lr,
                               double momentum, double dampening, double weight_decay,
                               int nesterov, rt_dtype grad_dt, int packed_grads,
                               const rt_cuda_rows* rows, const rt_cuda_cast* cast);
// Frees the calling thread's GEMM operand scratch unless a capture used it (a graph may read
// it): after start-up work that grew it (the attention timing of a shape fsdpgen's kernels
// run in fp32), so that its memory is not held for the run; the next GEMM that needs one
// allocates it again.
void rt_cuda_release_scratch(void);

// mask[t] = 1 for each of the n token ids t in [0, vocab) (device pointers; the mask zeroed
// before: cudaMemsetAsync). Ids out of range are left to the lookups to refuse.
void rt_cuda_rows_mark(uint8_t* mask, int64_t vocab, const int32_t* tokens, size_t n);

// ----------------------------------------------------------------------------
// graph-safe gradient clipping, the device-side form of what the CPU step does
// (local = sum of rt_sumsq over the rank's shards in double; sum = (float)local, all-reduced
// over the shard group; total_norm = sqrt(sum); each shard scaled by rt_clip_coef):
//   cudaMemsetAsync(d_acc, 0, sizeof(double), stream);
//   for each shard: rt_cuda_sumsq_accumulate(d_acc, grad, n);
//   rt_cuda_sumsq_to_float(d_sum, d_acc);  then all-reduce d_sum (NCCL, fp32 sum);
//   for each shard: rt_cuda_clip_by_total(grad, n, d_sum, max_norm);

// *d_acc += sum of x[i]^2 (in double, deterministic: fixed order for a given n; the
// partial sums are rt_sumsq's), on the thread's stream.
void rt_cuda_sumsq_accumulate(double* d_acc, const float* x, size_t n);
// *d_out = (float)*d_acc, on the thread's stream.
void rt_cuda_sumsq_to_float(float* d_out, const double* d_acc);
// x *= rt_clip_coef(sqrt((double)*d_total_sumsq), max_norm), the coefficient computed on the
// device when the kernel runs (no-op when it is 1); the same bits as rt_clip_grad_norm with
// that norm.
void rt_cuda_clip_by_total(float* x, size_t n, const float* d_total_sumsq, double max_norm);

#ifdef __cplusplus
}
#endif

#endif
