// FSDP2's foreach collectives on the host: sharding, all-gather copy-in / copy-out and
// reduce-scatter copy-in / divide / view-out around rt_comm, for one parameter group laid
// out by rt_fsdp_layout (see rt_fsdp.h for the layouts they follow). Each copy checks its
// arguments, then builds its copy plan (rt_fsdp_copy.h: the same plans the CUDA step
// backend runs on the GPU) with the per-parameter buffers as its parameter sides, and
// applies it with rt_copy_apply.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_fsdp.h"
#include "rt_fsdp_copy.h"

// ---- helpers ----------------------------------------------------------------------------

static int fsdp_error(rt_fsdp_layout* l, int status, const char* op, const char* fmt, ...) {
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    snprintf(l->error, sizeof l->error, "rt_fsdp %s of group '%s' (world %d, rank %d): %s", op,
             l->name, l->world, l->rank, why);
    return status;
}

static char* at(const void* base, int64_t elems, rt_dtype dt) {
    return (char*)base + (size_t)elems * rt_dtype_size(dt);
}

// Checks the pointer arrays and dtypes every entry point takes.
static int check_bufs(rt_fsdp_layout* l, const char* op, const void* const* per_param,
                      const char* what, const void* flat, rt_dtype a, rt_dtype b) {
    if (!l->params && l->nparams) return fsdp_error(l, RT_ERR_ARG, op, "layout is not initialised");
    if (!rt_dtype_valid(a) || !rt_dtype_valid(b))
        return fsdp_error(l, RT_ERR_ARG, op, "invalid dtype");
    if (l->nparams > 0 && !per_param) return fsdp_error(l, RT_ERR_ARG, op, "%s is NULL", what);
    for (int i = 0; i < l->nparams; i++)
        if (!per_param[i] && l->params[i].numel > 0)
            return fsdp_error(l, RT_ERR_ARG, op, "%s[%d] ('%s') is NULL", what, i, l->params[i].name);
    if (!flat && l->total_numel > 0) return fsdp_error(l, RT_ERR_ARG, op, "flat buffer is NULL");
    return 0;
}

// Checks a per-parameter dtype array.
static int check_dtypes(rt_fsdp_layout* l, const char* op, const rt_dtype* dts) {
    if (l->nparams > 0 && !dts) return fsdp_error(l, RT_ERR_ARG, op, "the dtype array is NULL");
    for (int i = 0; i < l->nparams; i++)
        if (!rt_dtype_valid(dts[i]))
            return fsdp_error(l, RT_ERR_ARG, op, "invalid dtype %d for '%s'", (int)dts[i], l->params[i].name);
    return 0;
}

// Fails when the communicator is not the one the layout was made for. The peers are
// released through rt_comm_abort instead of waiting for the timeout.
static int check_comm(rt_fsdp_layout* l, const char* op, rt_comm* comm) {
    if (!comm) return fsdp_error(l, RT_ERR_ARG, op, "communicator is NULL");
    if (rt_comm_size(comm) == l->world && rt_comm_rank(comm) == l->rank) return 0;
    fsdp_error(l, RT_ERR_ARG, op, "the layout is for world %d rank %d but communicator '%s' has "
               "size %d rank %d", l->world, l->rank, rt_comm_name(comm), rt_comm_size(comm),
               rt_comm_rank(comm));
    rt_comm_abort(comm, l->error);
    return RT_ERR_ARG;
}

static int comm_error(rt_fsdp_layout* l, const char* op, rt_comm* comm, int st) {
    return fsdp_error(l, st, op, "%s", rt_comm_last_error(comm));
}

// Applies plan p (built with status st) from src to dst and frees it.
static int apply_plan(rt_fsdp_layout* l, const char* op, rt_copy_plan* p, int st, rt_copy_side dst,
                      rt_copy_side src, int accumulate) {
    if (!st) rt_copy_apply(p, dst, src, accumulate);
    rt_copy_plan_free(p);
    return st ? fsdp_error(l, st, op, "out of memory for its copy plan") : 0;
}

// ---- sharding ---------------------------------------------------------------------------

int rt_fsdp_shard_params(rt_fsdp_layout* l, const void* const* full, rt_dtype dtype,
                         void* const* shards) {
    const char* op = "shard_params";
    if (!l) return RT_ERR_ARG;
    if (l->post_forward) return fsdp_error(l, RT_ERR_ARG, op, "needs a sharded (not post-forward) layout");
    int st = check_bufs(l, op, full, "full", "", dtype, dtype);
    if (!st) st = check_bufs(l, op, (const void* const*)shards, "shards", "", dtype, dtype);
    if (st) return st;
    rt_copy_plan p = {0};
    st = rt_copy_shard_params(&p, l, NULL, NULL);
    return apply_plan(l, op, &p, st, rt_copy_per_param((const void* const*)shards, dtype, NULL),
                      rt_copy_per_param(full, dtype, NULL), 0);
}

int rt_fsdp_post_forward_shards(rt_fsdp_layout* pf, const void* const* unsharded,
                                const rt_dtype* unsharded_dtypes, void* const* shards,
                                rt_dtype shard_dtype) {
    const char* op = "post_forward_shards";
    if (!pf) return RT_ERR_ARG;
    if (!pf->post_forward) return fsdp_error(pf, RT_ERR_ARG, op, "needs a post-forward layout");
    int st = check_dtypes(pf, op, unsharded_dtypes);
    if (!st) st = check_bufs(pf, op, unsharded, "unsharded", "", shard_dtype, shard_dtype);
    if (!st) st = check_bufs(pf, op, (const void* const*)shards, "shards", "", shard_dtype, shard_dtype);
    if (st) return st;
    rt_copy_plan p = {0};
    st = rt_copy_post_forward(&p, pf, NULL, NULL);
    return apply_plan(pf, op, &p, st,
                      rt_copy_per_param((const void* const*)shards, shard_dtype, NULL),
                      rt_copy_per_param(unsharded, shard_dtype, unsharded_dtypes), 0);
}

// ---- all-gather -------------------------------------------------------------------------

int rt_fsdp_all_gather_copy_in(rt_fsdp_layout* l, const void* const* shards, rt_dtype shard_dtype,
                               void* ag_output, rt_dtype param_dtype) {
    const char* op = "all_gather_copy_in";
    if (!l) return RT_ERR_ARG;
    int st = check_bufs(l, op, shards, "shards", ag_output, shard_dtype, param_dtype);
    if (st) return st;
    rt_copy_plan p = {0};
    st = rt_copy_all_gather_in(&p, l, NULL);
    return apply_plan(l, op, &p, st, rt_copy_flat(ag_output, param_dtype),
                      rt_copy_per_param(shards, shard_dtype, NULL), 0);
}

int rt_fsdp_all_gather(rt_fsdp_layout* l, rt_comm* comm, void* ag_output, rt_dtype param_dtype,
                       void* stream) {
    const char* op = "all_gather";
    if (!l) return RT_ERR_ARG;
    int st = check_comm(l, op, comm);
    if (st) return st;
    // In place: this rank's block already holds its input (copy-in wrote it there).
    const void* input = at(ag_output, l->block_numel * l->rank, param_dtype);
    st = rt_comm_all_gather(comm, input, ag_output, l->block_numel, param_dtype, stream);
    return st ? comm_error(l, op, comm, st) : 0;
}

// Copy-out into unsharded[i] of unsharded_dtypes[i], or of param_dtype for every parameter
// when unsharded_dtypes is NULL.
static int copy_out(rt_fsdp_layout* l, const void* ag_output, rt_dtype param_dtype,
                    void* const* unsharded, const rt_dtype* unsharded_dtypes) {
    const char* op = "all_gather_copy_out";
    if (!l) return RT_ERR_ARG;
    int st = check_bufs(l, op, (const void* const*)unsharded, "unsharded", ag_output, param_dtype,
                        param_dtype);
    if (st) return st;
    rt_copy_plan p = {0};
    st = rt_copy_all_gather_out(&p, l, NULL);
    const void* const* un = (const void* const*)unsharded;
    return apply_plan(l, op, &p, st, rt_copy_per_param(un, param_dtype, unsharded_dtypes),
                      rt_copy_flat(ag_output, param_dtype), 0);
}

int rt_fsdp_all_gather_copy_out(rt_fsdp_layout* l, const void* ag_output, rt_dtype param_dtype,
                                void* const* unsharded) {
    return copy_out(l, ag_output, param_dtype, unsharded, NULL);
}

int rt_fsdp_all_gather_copy_out_as(rt_fsdp_layout* l, const void* ag_output, rt_dtype param_dtype,
                                   void* const* unsharded, const rt_dtype* unsharded_dtypes) {
    if (!l) return RT_ERR_ARG;
    int st = check_dtypes(l, "all_gather_copy_out", unsharded_dtypes);
    return st ? st : copy_out(l, ag_output, param_dtype, unsharded, unsharded_dtypes);
}

int rt_fsdp_foreach_all_gather(rt_fsdp_layout* l, rt_comm* comm, const void* const* shards,
                               rt_dtype shard_dtype, void* ag_output, rt_dtype param_dtype,
                               void* const* unsharded, void* stream) {
    int st = rt_fsdp_all_gather_copy_in(l, shards, shard_dtype, ag_output, param_dtype);
    if (st && comm) rt_comm_abort(comm, l->error);  // peers must not wait for this rank
    if (!st) st = rt_fsdp_all_gather(l, comm, ag_output, param_dtype, stream);
    if (!st) st = rt_fsdp_all_gather_copy_out(l, ag_output, param_dtype, unsharded);
    return st;
}

// ---- reduce-scatter ---------------------------------------------------------------------

int rt_fsdp_reduce_scatter_copy_in(rt_fsdp_layout* l, const void* const* grads, rt_dtype grad_dtype,
                                   void* rs_input, rt_dtype reduce_dtype) {
    const char* op = "reduce_scatter_copy_in";
    if (!l) return RT_ERR_ARG;
    if (l->post_forward) return fsdp_error(l, RT_ERR_ARG, op, "needs a sharded (not post-forward) layout");
    int st = check_bufs(l, op, grads, "grads", rs_input, grad_dtype, reduce_dtype);
    if (st) return st;
    rt_copy_plan p = {0};
    st = rt_copy_reduce_scatter_in(&p, l, NULL);
    return apply_plan(l, op, &p, st, rt_copy_flat(rs_input, reduce_dtype),
                      rt_copy_per_param(grads, grad_dtype, NULL), 0);
}

// x /= factor element-wise, in fp32, rounding once to dt (_div_if_needed).
void rt_fsdp_divide_buffer(void* buf, int64_t n, rt_dtype dt, double factor) {
    if (factor == 1.0) return;
    float f = (float)factor;
    if (dt == RT_F32) {
        float* x = buf;
        for (int64_t i = 0; i < n; i++) x[i] /= f;
        return;
    }
    for (int64_t i = 0; i < n; i++) rt_store_f32(buf, dt, (size_t)i, rt_load_f32(buf, dt, (size_t)i) / f);
}

int rt_fsdp_reduce_scatter(rt_fsdp_layout* l, const rt_fsdp_reduce_args* a, void* rs_input,
                           void* rs_output) {
    const char* op = "reduce_scatter";
    if (!l) return RT_ERR_ARG;
    if (!a) return fsdp_error(l, RT_ERR_ARG, op, "args is NULL");
    rt_dtype rdt = a->reduce_dtype;
    int st = 0;
    if (l->post_forward) st = fsdp_error(l, RT_ERR_ARG, op, "needs a sharded (not post-forward) layout");
    else if (!rt_dtype_is_float(rdt)) st = fsdp_error(l, RT_ERR_ARG, op, "reduce dtype must be fp32, bf16 or fp16");
    else if ((!rs_input || !rs_output) && l->total_numel > 0)
        st = fsdp_error(l, RT_ERR_ARG, op, "%s is NULL", rs_input ? "rs_output" : "rs_input");
    if (st) {
        if (a->shard_comm) rt_comm_abort(a->shard_comm, l->error);
        return st;
    }
    if (l->world > 1 || a->shard_comm) {
        st = check_comm(l, op, a->shard_comm);
        if (st) return st;
    }
    int replicate = a->replicate_comm ? rt_comm_size(a->replicate_comm) : 0;
    rt_fsdp_divide d = rt_fsdp_gradient_divide_factors(l->world, replicate, rdt, a->divide_factor,
                                                       a->force_sum);
    rt_fsdp_divide_buffer(rs_input, l->total_numel, rdt, d.predivide);
    if (l->world > 1) {
        st = rt_comm_reduce_scatter(a->shard_comm, rs_input, rs_output, l->block_numel, rdt,
                                    d.rs_op, a->stream);
        if (st) return comm_error(l, op, a->shard_comm, st);
    } else {
        // FSDP2 skips the collective for one rank but still applies a custom factor.
        if (rs_output != rs_input && l->block_numel)
            memcpy(rs_output, rs_input, (size_t)l->block_numel * rt_dtype_size(rdt));
        if (a->divide_factor > 0) rt_fsdp_divide_buffer(rs_output, l->block_numel, rdt, a->divide_factor);
    }
    if (a->replicate_comm) {
        st = rt_comm_all_reduce(a->replicate_comm, rs_output, rs_output, l->block_numel, rdt,
                                d.ar_op, a->stream);
        if (st) return comm_error(l, op, a->replicate_comm, st);
    }
    rt_fsdp_divide_buffer(rs_output, l->block_numel, rdt, d.postdivide);
    return 0;
}

int rt_fsdp_reduce_scatter_view_out(rt_fsdp_layout* l, const void* rs_output, rt_dtype reduce_dtype,
                                    void* const* sharded_grads, rt_dtype grad_dtype, int accumulate) {
    const char* op = "reduce_scatter_view_out";
    if (!l) return RT_ERR_ARG;
    if (l->post_forward) return fsdp_error(l, RT_ERR_ARG, op, "needs a sharded (not post-forward) layout");
    int st = check_bufs(l, op, (const void* const*)sharded_grads, "sharded_grads", rs_output,
                        reduce_dtype, grad_dtype);
    if (st) return st;
    rt_copy_plan p = {0};
    st = rt_copy_view_out(&p, l, NULL);
    return apply_plan(l, op, &p, st,
                      rt_copy_per_param((const void* const*)sharded_grads, grad_dtype, NULL),
                      rt_copy_flat(rs_output, reduce_dtype), accumulate);
}

int rt_fsdp_foreach_reduce(rt_fsdp_layout* l, const rt_fsdp_reduce_args* a, const void* const* grads,
                           rt_dtype grad_dtype, void* rs_input, void* rs_output,
                           void* const* sharded_grads, rt_dtype sharded_dtype, int accumulate) {
    if (!l || !a) return RT_ERR_ARG;
    int st = rt_fsdp_reduce_scatter_copy_in(l, grads, grad_dtype, rs_input, a->reduce_dtype);
    if (st && a->shard_comm) rt_comm_abort(a->shard_comm, l->error);
    if (!st) st = rt_fsdp_reduce_scatter(l, a, rs_input, rs_output);
    if (!st) st = rt_fsdp_reduce_scatter_view_out(l, rs_output, a->reduce_dtype, sharded_grads,
                                                  sharded_dtype, accumulate);
    return st;
}
