// segments.h — FSDP2's copies (all-gather copy-in / copy-out, post-forward shards,
// reduce-scatter copy-in / view-out) as flat tables of contiguous runs, so one GPU kernel
// per copy moves a whole group whatever its shapes, padding and placement.
//
// A plan is computed once per group and rank from the same rt_fsdp_layout that the host
// copies in runtime/fsdp use, and means exactly what they do: run k copies n elements from
// src[src .. src + n) to dst[dst .. dst + n) (element offsets, each side in its own dtype),
// or writes n zeros when src < 0. Adjacent runs that continue each other are merged. rt_seg_apply is the host reference of the GPU kernel
// (tests/cuda_step compares it with runtime/fsdp on many layouts).
#ifndef FSDPGEN_CUDA_STEP_SEGMENTS_H
#define FSDPGEN_CUDA_STEP_SEGMENTS_H

#include <stdint.h>

#include "rt_dtype.h"
#include "rt_fsdp.h"

typedef struct rt_seg {
    int64_t dst, src, n;  // src < 0: zero-fill
} rt_seg;

typedef struct rt_seg_plan {
    rt_seg* segs;
    int nsegs, cap;
    int64_t total;        // elements written (sum of n)
} rt_seg_plan;

void rt_seg_plan_free(rt_seg_plan* p);

// ---- builders (return 0, or RT_ERR_NOMEM) -------------------------------------------------
// Offsets arrays have one entry per parameter of the layout, in elements.

// All-gather copy-in: shard i (in_numel elements at shard_off[i] of the source) into this
// rank's block of the all-gather output.
int rt_seg_all_gather_in(rt_seg_plan* p, const rt_fsdp_layout* l, const int64_t* shard_off);
// All-gather copy-out: every block's rows of parameter i into the unsharded buffer at
// unsharded_off[i] (padding dropped); post-forward layouts concatenate flat slices. A
// negative offset leaves the parameter out (one plan per storage of the unsharded buffer).
int rt_seg_all_gather_out(rt_seg_plan* p, const rt_fsdp_layout* l, const int64_t* unsharded_off);
// A layout of one rank: the all-gather copy-in and copy-out as one plan, parameter i's
// shard (at shard_off[i]) straight into the unsharded buffer (at unsharded_off[i]; negative:
// left out), for a one-rank all-gather, which leaves its buffer as the copy-in wrote it.
// Applied with the copy-in's cast to param_dtype (see rtcs_copy_rounded for fp32 storage).
// RT_ERR_ARG for more ranks or a post-forward layout.
int rt_seg_all_gather_direct(rt_seg_plan* p, const rt_fsdp_layout* l, const int64_t* shard_off,
                             const int64_t* unsharded_off);
// Post-forward reshard (pf layout): the rank's flat slice of unsharded parameter i (at
// unsharded_off[i]; negative: left out) into its pf shard at the layout offset, zero-padded.
int rt_seg_post_forward(rt_seg_plan* p, const rt_fsdp_layout* pf, const int64_t* unsharded_off);
// Reduce-scatter copy-in: every rank block's rows of gradient i (at grad_off[i] of the
// unsharded grads) into the reduce-scatter input, zero-padded to chunk rows.
int rt_seg_reduce_scatter_in(rt_seg_plan* p, const rt_fsdp_layout* l, const int64_t* grad_off);
// Reduce-scatter view-out: parameter i's unpadded shard of the output into the sharded
// gradients at sharded_off[i].
int rt_seg_view_out(rt_seg_plan* p, const rt_fsdp_layout* l, const int64_t* sharded_off);
// A layout of one rank: the reduce-scatter copy-in and the view-out as one plan, gradient i
// (at grad_off[i]) straight into its sharded gradient (at sharded_off[i]), for a reduction
// that leaves the values alone (no collective, no division). RT_ERR_ARG for more ranks.
int rt_seg_reduce_direct(rt_seg_plan* p, const rt_fsdp_layout* l, const int64_t* grad_off,
                         const int64_t* sharded_off);
// n zeros at dst (the sharded gradients of parameters that a reduction leaves out).
int rt_seg_zeros(rt_seg_plan* p, int64_t dst, int64_t n);

// ---- host reference -----------------------------------------------------------------------

// Applies p: dst[run] = (dst_dt) src[run], or with accumulate dst[run] += the value cast to
// dst_dt first (as `grad += new_sharded_grad`); zero runs write zeros (accumulate: add 0).
void rt_seg_apply(const rt_seg_plan* p, void* dst, rt_dtype dst_dt, const void* src,
                  rt_dtype src_dt, int accumulate);

#endif
