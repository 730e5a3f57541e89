// FSDP2's copies as a copy plan: one table of contiguous runs per copy (all-gather copy-in /
// copy-out, post-forward shards, reduce-scatter copy-in, view-out, sharding), built from an
// rt_fsdp_layout. The one representation of these copies: runtime/fsdp's host collectives
// (rt_fsdp.h) build a plan per call and apply it with rt_copy_apply; the CUDA step backend
// builds its plans once at setup with arena offsets and runs each with one kernel
// (runtime/cuda/step/kernels.cu), whose host reference is rt_copy_apply.
//
// Run k copies n elements from src[src .. src + n) to dst[dst .. dst + n) (element offsets,
// each side in its own dtype), or writes n zeros when src < 0; it moves elements of
// parameter `param` of the layout. Each side of a copy is either one flat buffer (offsets
// into it) or one buffer per parameter (offsets into the run's parameter's buffer):
// builders take, per parameter side, an array of per-parameter offsets into one flat
// buffer (the CUDA arena), or NULL for per-parameter buffers (offset 0 in each). Adjacent
// runs that continue each other on both sides are merged; runs of different parameters
// only where every side is one flat buffer (then `param` is the first one's).
#ifndef RT_FSDP_COPY_H
#define RT_FSDP_COPY_H

#include <stdint.h>

#include "rt_dtype.h"
#include "rt_fsdp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_copy_run {
    int64_t dst, src, n;  // element offsets and count; src < 0: n zeros
    int64_t param;        // the layout's parameter whose elements it moves (-1: none)
} rt_copy_run;

typedef struct rt_copy_plan {
    rt_copy_run* runs;
    int nruns, cap;
    int64_t total;        // elements written (sum of n)
} rt_copy_plan;

void rt_copy_plan_free(rt_copy_plan* p);

// ---- builders (append to p; return 0, RT_ERR_NOMEM, or RT_ERR_ARG where noted) ------------
// An offsets array has one entry per parameter of the layout, in elements; NULL: one buffer
// per parameter. A negative entry leaves the parameter out where noted (the CUDA backend
// builds one plan per storage of its unsharded buffer).

// Sharding (rt_fsdp_shard_params): this rank's rows of full parameter i (full_off) into its
// padded shard (shard_off), zero-padded to chunk rows.
int rt_copy_shard_params(rt_copy_plan* p, const rt_fsdp_layout* l, const int64_t* full_off,
                         const int64_t* shard_off);
// All-gather copy-in: shard i (in_numel elements at shard_off[i]) into this rank's block of
// the flat all-gather output.
int rt_copy_all_gather_in(rt_copy_plan* p, const rt_fsdp_layout* l, const int64_t* shard_off);
// All-gather copy-out: every block's rows of parameter i of the flat all-gather output into
// the unsharded parameter (unsharded_off; negative: left out), padding dropped;
// post-forward layouts concatenate flat slices.
int rt_copy_all_gather_out(rt_copy_plan* p, const rt_fsdp_layout* l, const int64_t* unsharded_off);
// A layout of one rank: copy-in and copy-out as one plan, shard i (shard_off) straight into
// the unsharded parameter (unsharded_off; negative: left out), for a one-rank all-gather,
// which leaves its buffer as the copy-in wrote it. RT_ERR_ARG for more ranks or a
// post-forward layout.
int rt_copy_all_gather_direct(rt_copy_plan* p, const rt_fsdp_layout* l, const int64_t* shard_off,
                              const int64_t* unsharded_off);
// Post-forward reshard (pf layout): the rank's flat slice of unsharded parameter i
// (unsharded_off; negative: left out) into its post-forward shard (shard_off), zero-padded
// to in_numel.
int rt_copy_post_forward(rt_copy_plan* p, const rt_fsdp_layout* pf, const int64_t* unsharded_off,
                         const int64_t* shard_off);
// Reduce-scatter copy-in: every rank block's rows of gradient i (grad_off) into the flat
// reduce-scatter input, zero-padded to chunk rows.
int rt_copy_reduce_scatter_in(rt_copy_plan* p, const rt_fsdp_layout* l, const int64_t* grad_off);
// View-out: parameter i's unpadded shard of the flat reduce-scatter output into its sharded
// gradient (sharded_off).
int rt_copy_view_out(rt_copy_plan* p, const rt_fsdp_layout* l, const int64_t* sharded_off);
// A layout of one rank: reduce-scatter copy-in and view-out as one plan, gradient i
// (grad_off) straight into its sharded gradient (sharded_off), for a reduction that leaves
// the values alone. RT_ERR_ARG for more ranks or a post-forward layout.
int rt_copy_reduce_direct(rt_copy_plan* p, const rt_fsdp_layout* l, const int64_t* grad_off,
                          const int64_t* sharded_off);
// n zeros at dst of a flat buffer.
int rt_copy_zeros(rt_copy_plan* p, int64_t dst, int64_t n);

// ---- host apply -------------------------------------------------------------------------

// One side of a copy: a flat buffer (params NULL), or one buffer per parameter of the
// layout; elements of dtype, or of dtypes[param] (per-parameter buffers only) when set.
typedef struct rt_copy_side {
    void* flat;
    void* const* params;
    rt_dtype dtype;
    const rt_dtype* dtypes;
} rt_copy_side;

static inline rt_copy_side rt_copy_flat(const void* buf, rt_dtype dt) {
    rt_copy_side s = {(void*)buf, 0, dt, 0};
    return s;
}
static inline rt_copy_side rt_copy_per_param(const void* const* bufs, rt_dtype dt,
                                             const rt_dtype* dts) {
    rt_copy_side s = {0, (void* const*)bufs, dt, dts};
    return s;
}

// Applies p run by run: dst = (dst dtype) src (rt_convert), or with accumulate dst += the
// value cast to dst's dtype first (as `grad += new_sharded_grad`, added in fp32 and rounded
// once); zero runs write zeros (accumulate: add 0). A plan whose runs of different
// parameters were merged takes flat sides only.
void rt_copy_apply(const rt_copy_plan* p, rt_copy_side dst, rt_copy_side src, int accumulate);

#ifdef __cplusplus
}
#endif
#endif
