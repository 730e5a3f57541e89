// step_backend.h — what a step backend implements under the shared FSDP state machine
// (runtime/step/state.c). state.c checks every call against the group's state, records
// events and counts, and resolves the model's numbers; the backend only moves data:
//   cpu   runtime/cpu/step/backend.c: host arena, rt_fsdp's host copies, synchronous
//         collectives;
//   cuda  runtime/cuda/step/: device arena, copy kernels, collectives and compute on their
//         own streams ordered by events, CUDA graphs.
// Internal to the step libraries; generated code and the driver see rt_step.h only.
#ifndef FSDPGEN_STEP_BACKEND_H
#define FSDPGEN_STEP_BACKEND_H

#include "rt_step.h"

// ---- rank lifetime ----------------------------------------------------------------------

// After state.c set up the mesh, the layouts and R->groups: the arena (arena_bytes) and
// whatever the backend keeps per rank in R->backend. Returns 0, or prints and returns 1.
int rtb_rank_init(rt_rank* R);
void rtb_rank_free(rt_rank* R);

// ---- step -------------------------------------------------------------------------------

// Start of a step: stage the inputs (the gradients are not zeroed: rt_step_begin).
void rtb_step_begin(rt_rank* R);
// A step item (schedule section) begins: "forward", "backward", "optimizer", ...
void rtb_section(rt_rank* R, const char* phase);
// End of a step: everything the step issued is ordered before the next step's work.
void rtb_step_end(rt_rank* R);

// ---- FSDP data movement (the state checks are done) ----------------------------------------

// The all-gather streams wait for everything issued on compute so far (rt_step.h); the
// all-gathers themselves wait for nothing on compute.
void rtb_all_gather_sync(rt_rank* R);
// Copy-in of the shards (sub: the post-forward shards at pf_off) into this rank's block of
// the output at out_off, then the all-gather over layout L's communicator.
void rtb_all_gather(rt_rank* R, int g, int sub, size_t out_off, size_t pf_off);
// One rank (rt_step_all_gather_direct): the shards, cast to param_dtype, into the
// unsharded parameters at unsharded_off.
void rtb_all_gather_direct(rt_rank* R, int g, size_t unsharded_off, int beside);
// One rank, the unsharded parameters at unsharded_off kept by a reshard
// (rt_step_all_gather_kept): 0, nothing to do; or 1 where the backend copied the shards
// again as rtb_all_gather_direct (CUDA's RT_KEEP_UNSHARDED=copy), to be waited for as one.
int rtb_all_gather_kept(rt_rank* R, int g, size_t unsharded_off);
// One rank, the unsharded parameters at unsharded_off kept across steps (rt_model_group
// kept_across): the shards cast into them as rtb_all_gather_direct would. After the
// group's optimizer step (ordered after it, beside what follows where the backend can);
// and outside a step, for rt_step_refresh_kept (done when the next step starts).
void rtb_optimizer_cast_kept(rt_rank* R, int g, size_t unsharded_off);
void rtb_refresh_kept(rt_rank* R, int g, size_t unsharded_off);
// The issued all-gather is needed now: copy-out into the unsharded parameters.
void rtb_all_gather_wait(rt_rank* R, int g, int sub, size_t out_off, size_t unsharded_off);
// Compute waits for the issued all-gather, and copies nothing: its result is not needed
// (its buffer may be reused after it ends), or a direct one wrote it where it belongs.
void rtb_all_gather_drop(rt_rank* R, int g);
void rtb_reshard_post_forward(rt_rank* R, int g, size_t unsharded_off, size_t pf_off);
void rtb_accumulate_grads(rt_rank* R, int g, size_t ugrad_off, size_t acc_off);
// r: reduction r (rt_step_reduce_scatter). accumulate: the sharded grads already hold this
// step's earlier reduce-scatters; without it, a reduction of some parameters (r > 0) also
// zeroes the others' sharded grads.
void rtb_reduce_scatter(rt_rank* R, int g, int r, size_t grads_off, rt_dtype grads_dtype,
                        size_t rs_in_off, size_t rs_out_off, int accumulate);
// One rank, values unchanged (rt_step_reduce_direct): sharded (+)= grads rounded to grads_dtype.
void rtb_reduce_direct(rt_rank* R, int g, int r, size_t grads_off, rt_dtype grads_dtype, int accumulate);
void rtb_clip_grad_norm(rt_rank* R);
// The optimizer step over elements [lo, lo + n) of group g's rank block (its parameters
// with a gradient: rt_step_optimizer; of reduction r's, a part, if r > 0), whose gradients
// and state are elements [glo, glo + n) of the group's (rt_step_optim_span), the group's
// k-th of `per` optimizer steps in a training step: PyTorch's state["step"] is
// R->step * per + k; its learning rate is rt_step_lr(R, item).
void rtb_optimizer(rt_rank* R, int g, int r, int64_t lo, int64_t glo, int64_t n, int k, int per,
                   int item);
// The same over a 2-D parameter's rows x row_len elements at lo (glo in the gradients;
// rt_step_optimizer_rows), by `mode`: RT_ROWS_LOOKED_UP, the rows the step's tokens look up
// (ids < model->vocab over its forwards); RT_ROWS_UNUSED, the others, with a zero gradient
// (their grads are not read); RT_ROWS_FINAL, the others, with their gradients.
void rtb_optimizer_rows(rt_rank* R, int g, int r, int64_t lo, int64_t glo, int64_t rows,
                        int64_t row_len, int k, int per, int item, int mode);
void rtb_loss(rt_rank* R, int k, const float* loss);

// ---- attention sites (runtime/step/attention.c) -------------------------------------------

// fsdpgen's packed kernels on a site's shape: every tensor packed in its dtype, dq, dk, dv
// assigned (what rt_step_attention_* run unless the backend runs cuDNN).
void rtb_attention_kernels_forward(const rt_model_attention* a, void* out, float* stats,
                                   float* scratch, const void* q, const void* k, const void* v);
void rtb_attention_kernels_backward(const rt_model_attention* a, void* dq, void* dk, void* dv,
                                    float* scratch, const void* dout, const void* out,
                                    const void* q, const void* k, const void* v,
                                    const float* stats);
// Site `site`'s attention on cuDNN, returning 1, where the backend chose cuDNN for the site at
// start (cuda); else 0, and the caller runs fsdpgen's packed kernels.
int rtb_attention_forward(rt_rank* R, int site, void* out, float* stats, float* scratch,
                          const void* q, const void* k, const void* v);
int rtb_attention_backward(rt_rank* R, int site, void* dq, void* dk, void* dv, float* scratch,
                           const void* dout, const void* out, const void* q, const void* k,
                           const void* v, const float* stats);

// ---- shared helpers (state.c) -------------------------------------------------------------

// Per-parameter pointers of group g into the arena at byte offset off (checked): out[i] its
// parameter i in the unsharded parameters there (rt_model_param unsharded_word, in its
// storage, rt_rank_group unsharded_dtypes; NULL from_shard) ...
void rt_step_param_ptrs(rt_rank* R, int g, size_t off, void** out);
// ... or its fp32 gradient in the unsharded gradients there (unsharded_offset; NULL frozen).
void rt_step_grad_ptrs(rt_rank* R, int g, size_t off, void** out);
// Elements of group g's unsharded gradients: its trainable parameters' padded shards
// (rt_model_grad_numel) times the shard world.
int64_t rt_step_ugrad_numel(rt_rank* R, int g);
// Group g's fp32 sharded gradients, the whole rank block of them (rt_model_grad_numel
// elements: the trainable parameters' alone).
float* rt_step_sharded_grads(rt_rank* R, int g);
// fp32 view [elem, elem + n) of the buffer at byte offset off (checked).
float* rt_step_f32(rt_rank* R, size_t off, int64_t elem, int64_t n);
// Group g's optimizer operands over rank-block elements [lo, lo + n) of the parameters:
// their gradients and state at elements [glo, glo + n) of the group's (the trainable
// parameters' alone: rt_model_grad_offset), the state nstates blocks of rt_model_grad_numel
// (SGD's momentum; Adam's exp_avg, exp_avg_sq), NULL where the optimizer keeps fewer.
// Packed gradients (rt_model_group grads_packed) are grads16's param_dtype values, and
// grads is NULL.
typedef struct rt_optim_span {
    float *params, *grads, *state1, *state2;
    uint16_t* grads16;
} rt_optim_span;
rt_optim_span rt_step_optim_span(rt_rank* R, int g, int64_t lo, int64_t glo, int64_t n);
// Reduction r of group g (rt_step_reduce_scatter): its layout, the group's own for r = 0.
static inline rt_fsdp_layout* rt_step_reduction_layout(rt_rank* R, int g, int r) {
    return r ? &R->groups[g].reductions[r - 1] : &R->groups[g].layout;
}
// Byte end of the persistent buffers (sharded params, grads, optimizer state) of every group.
size_t rt_step_persistent_end(const rt_model* m);
// Error message of a failed rt_fsdp call on the rank's communicator (for rt_rank_die).
#define RTB_FSDP_CHECK(R, st, layout) \
    do { if (st) rt_rank_die((R), "%s", (layout)->error); } while (0)

#endif
