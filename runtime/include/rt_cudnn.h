// Scaled-dot-product attention through cuDNN 9's fused flash-attention engines (the
// backend API in C, the graphs NVIDIA's cudnn-frontend builds for its SDPA nodes), as an
// alternative to the hand-written kernels of rt_kernels.h on CUDA.
//   * Plans are built once per shape at start-up (rt_cudnn_sdpa_create); where cuDNN or a
//     GPU is missing, or cuDNN refuses the shape, create returns NULL with a one-line
//     reason and the caller keeps the hand-written kernels. cuDNN itself is loaded then
//     (rt_cudnn_load), not linked.
//   * Tensors are packed 16-bit (bf16 or fp16 bits, uint16 storage) in the runtime's
//     layout: q, out, dout, dq [B,T,NH*HD]; k, v, dk, dv [B,T,NKV*HD]. NH % NKV == 0;
//     query head h uses kv head h / (NH/NKV); scale 1/sqrt(HD); causal masks keys after
//     the query. stats: one fp32 logsumexp per (b, head, query row), [B,NH,T]. dq, dk, dv
//     may have rows of ld_dq, ld_dk, ld_dv elements instead (column slices of one wider
//     matrix: rt_kernels.h "Gradient row lengths"; 0 dense), fixed when the plan is built.
//   * forward/backward allocate nothing, never synchronize and read nothing back, so they
//     run inside CUDA-graph capture; they need a workspace of
//     rt_cudnn_sdpa_workspace_bytes (one buffer serves both). A cuDNN failure at run time
//     stops the program through rt_check_fail with one line naming the call.
//   * No dropout (the frontend's RNG / dropout-mask nodes are not built here).
#ifndef RT_CUDNN_H
#define RT_CUDNN_H

#include <stddef.h>
#include <stdint.h>

#include "rt_dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_cudnn_sdpa rt_cudnn_sdpa;

typedef struct CUstream_st* rt_cudnn_stream;  // cudaStream_t without cuda_runtime.h

// cuDNN is loaded on first use (cudnn_load.c: RT_CUDNN_SO, else libcudnn.so.9), not linked,
// so programs start without it. 0 once loaded; else -1 and a one-line reason in why.
int rt_cudnn_load(char* why, size_t why_len);

// Builds and finalizes the forward and backward plans for one shape and precision
// (RT_BF16 or RT_F16), the backward writing dq, dk, dv in rows of ld_dq, ld_dk, ld_dv
// elements (0: dense; else a multiple of 8 of at least NH*HD, NKV*HD). deterministic: only
// the backward with dQ straight from its matmul (the same bits every run, as fsdpgen's
// kernels); else the frontend's default first (dQ accumulated in fp32 with atomics), then
// that one. NULL, with a one-line reason in why, when the arguments are invalid, no GPU or
// cuDNN is usable, or cuDNN has no engine for the shape.
rt_cudnn_sdpa* rt_cudnn_sdpa_create(int B, int T, int NH, int NKV, int HD, int causal,
                                    rt_dtype prec, int deterministic, int ld_dq, int ld_dk,
                                    int ld_dv, char* why, size_t why_len);
void rt_cudnn_sdpa_destroy(rt_cudnn_sdpa* s);
// 1 when s's backward is the deterministic form (dQ straight from its matmul), 0 when dQ is
// accumulated with atomics.
int rt_cudnn_sdpa_deterministic(const rt_cudnn_sdpa* s);
// The plans this thread creates from now on are chosen for `sms` SMs (cuDNN's engine
// heuristics, CUDNN_ATTR_ENGINEHEUR_SM_COUNT_TARGET; 0, the initial setting, or less: the
// device's), as rt_cuda_set_gemm_sms (rt_cuda.h) plans the GEMMs.
void rt_cudnn_set_sm_count(int sms);

// Bytes of device workspace forward and backward need (the larger of the two).
size_t rt_cudnn_sdpa_workspace_bytes(const rt_cudnn_sdpa* s);
// Floats of stats: B*NH*T.
size_t rt_cudnn_sdpa_stats_floats(int B, int NH, int T);

void rt_cudnn_sdpa_forward(const rt_cudnn_sdpa* s, void* out, float* stats, const void* q,
                           const void* k, const void* v, void* workspace,
                           rt_cudnn_stream stream);
// Overwrites dq, dk, dv; out and stats are what rt_cudnn_sdpa_forward wrote.
void rt_cudnn_sdpa_backward(const rt_cudnn_sdpa* s, void* dq, void* dk, void* dv,
                            const void* dout, const void* out, const void* q, const void* k,
                            const void* v, const float* stats, void* workspace,
                            rt_cudnn_stream stream);
// The first run of a plan, before it is trusted (a plan that finalized may still fail to
// run): the forward and the backward on the given tensors, then a synchronization of the
// stream. 0; or -1 and a one-line reason in why where cuDNN refused a call or the GPU
// reported an error, so that the caller keeps fsdpgen's kernels instead of stopping. Not
// inside a capture.
int rt_cudnn_sdpa_try(const rt_cudnn_sdpa* s, void* out, float* stats, void* dq, void* dk,
                      void* dv, const void* dout, const void* q, const void* k, const void* v,
                      void* workspace, rt_cudnn_stream stream, char* why, size_t why_len);

// ---- host-only parts, usable without cuDNN or a GPU ---------------------------------------

// 0 when the arguments are usable, else -1 and a one-line reason in why.
int rt_cudnn_sdpa_check(int B, int T, int NH, int NKV, int HD, rt_dtype prec, int ld_dq,
                        int ld_dk, int ld_dv, char* why, size_t why_len);
// cuDNN's view [B, heads, T, HD] of a packed [B,T,heads*HD] tensor whose rows hold ld
// elements (0: heads*HD): dims and strides (elements). transpose != 0 swaps the last two
// (K^T as the SDPA graphs take it).
void rt_cudnn_sdpa_layout(int B, int T, int heads, int HD, int ld, int transpose,
                          int64_t dim[4], int64_t stride[4]);

// Builds and finalizes every tensor and operation descriptor of the graphs and their
// operation graphs, without a cuDNN handle or a GPU (cuDNN checks each operation's shapes
// and types and the graph's connections; engines are not consulted): the composite
// forward, and without causal also the unified forward operation; the backward in the
// form dq_acc picks (1: the default, dQ accumulated in fp32), dq, dk, dv in rows of ld_dq,
// ld_dk, ld_dv (0: dense). 0, or -1 with the reason.
int rt_cudnn_sdpa_lower(int B, int T, int NH, int NKV, int HD, int causal, rt_dtype prec,
                        int dq_acc, int ld_dq, int ld_dk, int ld_dv, char* why, size_t why_len);

#ifdef __cplusplus
}
#endif

#endif
