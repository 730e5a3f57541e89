// Internals of rt_cudnn.h shared by cudnn_sdpa_graphs.c (the two SDPA graphs) and
// cudnn_attention.c (plans, workspace, execution): the plan object and the tensor UIDs.
#ifndef RT_CUDNN_SDPA_H
#define RT_CUDNN_SDPA_H

#include "cudnn_desc.h"
#include "rt_cudnn.h"

enum { U_Q = 1, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV, U_SCALE, U_NEG_INF, U_ONE,
       U_SUM, U_DQ_ACC };

struct rt_cudnn_sdpa {
    int B, T, NH, NKV, HD, causal;
    int ld_dq, ld_dk, ld_dv;      // the gradients' row lengths (0: dense)
    cudnnHandle_t handle;
    cg fwd, bwd;                  // own every descriptor of the two plans
    cg_desc fwd_plan, bwd_plan;
    int64_t fwd_ws, bwd_ws;       // the engines' workspace bytes
    int dq_acc;                   // backward accumulates dQ in fp32 at offset 0
    int zero_dq_acc;              // ... which cuDNN before 9.6 expects zeroed (the frontend
                                  // memsets it there)
    size_t sum_off, bwd_own;      // rowsum(dO * O) offset; bytes before the engine's part
    size_t ws;
    float scale, neg_inf, one;    // by-value scalars (their addresses go to cuDNN)
};

// Build the forward graph in s->fwd and the backward graph in s->bwd (io: the 16-bit
// type; dq_acc: the frontend's default backward, dQ accumulated in fp32 in the workspace,
// else dQ straight from its matmul). With a handle in the builder they end in a plan
// (s->fwd_plan / s->bwd_plan, NULL on failure); without one (no GPU needed) they stop at
// the finalized operation graph, which checks every operation's shapes and types.
void cudnn_sdpa_build_forward(rt_cudnn_sdpa* s, cudnnDataType_t io);
// The forward as one unified SDPA operation, the frontend's choice without a mask from
// cuDNN 9.13.1 (UnifiedSDPANode); not causal only.
void cudnn_sdpa_build_forward_unified(rt_cudnn_sdpa* s, cudnnDataType_t io);
void cudnn_sdpa_build_backward(rt_cudnn_sdpa* s, cudnnDataType_t io, int dq_acc);

#endif
