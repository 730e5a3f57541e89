// backend.h — what the files of the CUDA step backend share: one rank's device state
// (streams, events, arena, staged inputs, copy plans, graph), the CUDA error check that
// fails the rank (rt_rank_die: its communicator is aborted, so no peer waits), and the
// GPU-timed trace spans.
//   backend.c  the step calls (step_backend.h), rt_step_run, rt_step_launch
//   rank.c     rtb_rank_init / rtb_rank_free
//   attention.c  the attention sites: cuDNN's plans or fsdpgen's kernels, chosen at start
//   attention_time.c  their timing under the spec's `auto`
//   trace.c    --trace spans timed with CUDA events, one Chrome-trace thread per stream
#ifndef FSDPGEN_CUDA_STEP_BACKEND_H
#define FSDPGEN_CUDA_STEP_BACKEND_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels.h"
#include "rt_check.h"
#include "rt_cuda.h"
#include "rt_cudnn.h"
#include "rt_trace.h"
#include "step_backend.h"

// ---- errors -------------------------------------------------------------------------------

// CS(R, cudaCall(...)): on failure "fsdpgen: rank R: file:line: call failed: why (hint)".
void cs_check(rt_rank* R, int err, const char* call, const char* file, int line);
#define CS(R, call) cs_check((R), (int)(call), #call, __FILE__, __LINE__)
// GPUs the ranks of the running rt_step_launch share (rt_step_device).
int cs_launch_devices(void);

// ---- one rank ---------------------------------------------------------------------------

// The plans that read or write unsharded parameters come one per storage of theirs: fp32
// (UN_F32) and param_dtype's bits (UN_PACKED: rt_model.h `packed`; offsets in 16-bit
// elements, from the same base: twice unsharded_word).
enum { UN_F32, UN_PACKED, UN_STORAGES };

// The copy plans of one reduction (rt_step_reduce_scatter r): of the whole group, or of the
// parameters with gradients (r > 0), which also has zero_rest, zeros for the others' sharded
// gradients (written by the group's first reduction of a step).
typedef struct cuda_reduction {
    rtcs_plan rs_in, view_out;        // reduce-scatter copy-in, view-out
    rtcs_plan rs_direct;              // one rank: both in one (rt_copy_reduce_direct)
    rtcs_plan zero_rest;
    cudaEvent_t reduced;              // a part (rt_model_reduction part): it finished (its
                                      // optimizer step waits for it, not for the group's)
} cuda_reduction;

typedef struct cuda_group {
    rtcs_plan ag_in;                  // all-gather from the shards: copy-in,
    rtcs_plan ag_out[UN_STORAGES];    // copy-out
    rtcs_plan ag_direct[UN_STORAGES]; // one rank: both in one (rt_copy_all_gather_direct)
    rtcs_plan pf_ag_in;               // ... from the post-forward shards
    rtcs_plan pf_ag_out[UN_STORAGES];
    rtcs_plan pf_shards[UN_STORAGES]; // post-forward reshard
    cuda_reduction rs;                // the whole group's reduction
    cuda_reduction* rs_some;          // reductions 1..nreductions (rt_model_reduction)
    cudaEvent_t ag_done;              // its last all-gather finished (all-gather stream)
    cudaEvent_t reduced;              // its last reduction finished: the sharded gradients
                                      // are complete (the optimizer stream waits for it)
    rt_dtype grads_round;             // in-place gradients (rtb_reduce_direct): the dtype the
                                      // optimizer rounds them to as it reads them; else RT_F32
    rt_cuda_cast_run* cast_runs;      // kept across steps (rt_model_group kept_across): where
    int ncast_runs;                   // the optimizer step writes the new values (device)
} cuda_group;

typedef struct cs_span {
    cudaEvent_t start, end;
    int tid;
    const char* name;
    const char* cat;
} cs_span;

#define CS_SIDE_STREAMS 5
#define CS_MAX_SPANS 4096

typedef struct cuda_rank {
    int device;
    cudaStream_t compute;             // the generated kernels (rt_cuda_set_stream)
    cudaStream_t ag_copy, ag, rs, ar; // FSDP2's all-gather copy-in, all-gather,
                                      // reduce-scatter and all-reduce streams
    cudaStream_t opt;                 // the optimizer steps beside the backward
    cudaEvent_t fork, copied, forked_ar, join[CS_SIDE_STREAMS];
    cudaEvent_t rs_done;              // the last reduce-scatter collective finished
                                      // (reduce-scatter stream; FSDP2's reduce_scatter_event)
    cudaEvent_t post_done;            // ... its all-reduce, post-divide and view-out too
                                      // (FSDP2's post_reduce_event)
    int rs_pending, post_pending;     // recorded, and compute has not waited for it yet
    int rs_g, post_g;                 // the groups they finish the reduction of
    int rs_part;                      // rs_done's reduction if a part (r), else 0
    const char* post_wait;            // --trace: the category of compute's wait for post_done
    unsigned used;                    // side streams (bits in ag_copy, ag, rs, ar, opt
                                      // order) this step issued work on
    int opt_side;                     // RT_OPTIMIZER_STREAM=side (cs_optimizer_side, at setup):
                                      // without clipping the optimizer steps on its stream
    int copy_kept;                    // RT_KEEP_UNSHARDED=copy (cs_keep_unsharded, at setup):
                                      // a kept all-gather copies the shards again
    int clipped;                      // this step clipped: the optimizer steps on compute
    int opt_pending;                  // steps on the optimizer stream compute has not
                                      // waited for
    cuda_group* groups;
    uint8_t* arena;                   // device, model->arena_bytes
    uint8_t* mirror;                  // pinned host copy of the persistent buffers
    size_t mirror_bytes;
    size_t input_bytes;               // one forward item's tokens (or float inputs)
    int32_t** d_tokens;               // [n_forward] device copies of R->tokens ...
    int32_t** d_targets;
    float** d_inputs;
    float* h_losses;                  // pinned [n_backward], written by the step
    int64_t* h_step;                  // pinned: the 1-based step the next run executes
    int64_t* d_step;                  // device copy (the optimizer reads it; graph-safe)
    double* h_lr;                     // pinned [n_optimizer]: each optimizer item's lr in
    double* d_lr;                     // the next run (rt_step_lr), and its device copy
    double* d_sumsq;                  // clipping: sum of squares of every shard
    float* d_total;                   // ... as fp32, all-reduced over the shard group
    float* d_one;                     // 1.0f (rt_step_one)
    uint8_t* d_rows;                  // model->optimizer_rows: the vocab rows the step's tokens
                                      // look up (rtb_optimizer_rows), else NULL
    cudaEvent_t tokens_in;            // the step's tokens are on the device (compute)
    rt_cudnn_sdpa** attention;        // per attention site: cuDNN's plans, or NULL where
                                      // fsdpgen's kernels run it (attention.c)
    // CUDA graph
    int decided, use_graph, warm;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    // --trace
    cs_span* spans;
    int nspans, section;              // section: index of the open compute span, or -1
    cudaEvent_t t0, t_end;            // the step's start and end on the compute stream
    int dropped;                      // spans past CS_MAX_SPANS this step
} cuda_rank;

// ---- attention sites (attention.c) ----------------------------------------------------------

// Each site's implementation (rt_model.h attention_choice, RT_ATTENTION), decided and printed
// by rank 0 before the arena exists; 0, or 1 after a message.
int cs_attention_init(rt_rank* R);
void cs_attention_free(rt_rank* R);
// RT_ATTENTION is unset, empty, auto, cudnn or fsdpgen, and RT_ATTENTION_BACKWARD unset,
// empty, deterministic or atomic: 0; else 2 after a one-line message.
int cs_attention_check_env(void);
// RT_ATTENTION_BACKWARD's choice of cuDNN's backward: 1 deterministic (also unset or empty),
// 0 atomic, -1 anything else.
int cs_attention_deterministic(void);
// cuDNN's plan for site a run once, forward and backward, on zeroed tensors of its own
// (rt_cudnn_sdpa_try): 1 when it ran, or could not be tried for want of memory; 0 and why.
int cs_attention_try(rt_rank* R, const rt_model_attention* a, const rt_cudnn_sdpa* plan, char* why,
                     size_t why_len);
// Milliseconds of one forward + backward of cuDNN's plan and of fsdpgen's kernels on a's
// shape (attention_time.c; both < 0: not timed, no device memory for the tensors).
void cs_attention_time(rt_rank* R, const rt_model_attention* a, const rt_cudnn_sdpa* plan,
                       double* t_cudnn, double* t_ours);

// ---- settings in the environment (backend.c) ----------------------------------------------

// A two-way setting: 1 for `yes` (also unset or empty), 0 for `no`, -1 for anything else.
int cs_env_choice(const char* var, const char* yes, const char* no);
// 0 where var is a two-way setting (cs_env_choice); else 2 after the line
// "fsdpgen: VAR=VALUE: must be ALLOWED".
int cs_env_check(const char* var, const char* yes, const char* no, const char* allowed);

// ---- optimizer stream (backend.c) -----------------------------------------------------------

// RT_OPTIMIZER_STREAM is unset, empty, side or compute: 0; else 2 after a one-line message.
int cs_optimizer_check_env(void);
// RT_OPTIMIZER_STREAM's choice: 1 side (also unset or empty), 0 compute, -1 anything else.
int cs_optimizer_side(void);

// ---- bias gradients (backend.c) --------------------------------------------------------------

// RT_BIAS_GRAD is unset, empty, epilogue or sums: 0; else 2 after a one-line message.
int cs_bias_grad_check_env(void);
// RT_BIAS_GRAD's choice: 1 epilogue (also unset or empty), 0 sums, -1 anything else.
int cs_bias_grad_epilogue(void);

// ---- parameters kept by a reshard (backend.c) ----------------------------------------------

// RT_KEEP_UNSHARDED is unset, empty, keep or copy: 0; else 2 after a one-line message.
int cs_keep_unsharded_check_env(void);
// RT_KEEP_UNSHARDED's choice: 1 keep (also unset or empty), 0 copy, -1 anything else.
int cs_keep_unsharded(void);

// ---- SMs left to the side streams (backend.c) -----------------------------------------------

// RT_SM_MARGIN is unset, empty or a whole number of SMs from 0 to 1023 that leaves GPU 0 at
// least one SM: 0; else 2 after a one-line message. Rank start checks each rank's GPU.
int cs_sm_margin_check_env(void);
// RT_SM_MARGIN's value: the SMs the GEMMs and cuDNN's attention leave to the other streams'
// kernels (0 when unset or empty; -1 when not a number from 0 to 1023).
int cs_sm_margin(void);
// 1 after a one-line message where a margin leaves a GPU of `sms` SMs none; else 0.
int cs_sm_margin_refused(int margin, int sms);

// ---- trace (no-ops without R->trace) --------------------------------------------------------

void cs_trace_begin(rt_rank* R);
// Opens a span on stream; returns its index for cs_trace_close, or -1.
int cs_trace_open(rt_rank* R, cudaStream_t stream, int tid, const char* name, const char* cat);
void cs_trace_close(rt_rank* R, int span, cudaStream_t stream);
// Closes the open compute section and opens the next (phase NULL: none).
void cs_trace_section(rt_rank* R, const char* phase);
// After the step's work finished: writes its spans to R->trace.
void cs_trace_flush(rt_rank* R);

#endif
