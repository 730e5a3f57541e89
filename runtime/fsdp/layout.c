// FSDP sharding layout: torch.chunk sizes, padding and per-rank block offsets of a
// parameter group, and the check of the generator's planned numbers against them; and the
// check of its placement of the group's unsharded parameters.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_fsdp.h"

// ---- messages ---------------------------------------------------------------------------

static int layout_error(rt_fsdp_layout* l, int status, const char* fmt, ...) {
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    snprintf(l->error, sizeof l->error, "rt_fsdp group '%s' (world %d, rank %d): %s", l->name,
             l->world, l->rank, why);
    return status;
}

// ---- per parameter ----------------------------------------------------------------------

// The dim a placement shards: 0, or the first dim of maximal size (as the largest-dim
// shard_placement_fn in PyTorch's tests picks it).
static int placement_dim(const rt_fsdp_param_desc* d) {
    if (d->placement != RT_SHARD_LARGEST_DIM) return 0;
    int best = 0;
    for (int k = 1; k < d->ndim; k++)
        if (d->shape[k] > d->shape[best]) best = k;
    return best;
}

static int param_layout(rt_fsdp_layout* l, int i, const rt_fsdp_param_desc* d, int world, int rank) {
    rt_fsdp_param_layout* p = &l->params[i];
    const char* name = d->name ? d->name : "?";
    char shape[96];
    snprintf(p->name, sizeof p->name, "%s", name);
    if (d->ndim < 1 || d->ndim > RT_MAX_DIMS || rt_shape_numel(d->ndim, d->shape, &p->numel) != 0)
        return layout_error(l, RT_ERR_ARG, "param %d '%s': invalid shape (ndim %d)", i, name, d->ndim);
    if (d->placement != RT_SHARD_DIM0 && d->placement != RT_SHARD_LARGEST_DIM)
        return layout_error(l, RT_ERR_ARG, "param %d '%s': unknown shard placement %d", i, name,
                            (int)d->placement);
    int sd = placement_dim(d);
    p->shard_dim = sd;
    p->dim_size = d->shape[sd];
    p->outer = 1;
    p->inner = 1;
    for (int k = 0; k < sd; k++) p->outer *= d->shape[k];
    for (int k = sd + 1; k < d->ndim; k++) p->inner *= d->shape[k];
    if (sd > 0 && p->dim_size % world != 0)
        return layout_error(l, RT_ERR_ARG,
                            "param %d '%s' %s: Shard(%d) needs dim %d (%lld) divisible by the "
                            "world size %d (FSDP2 allows uneven sharding on dim 0 only)",
                            i, name, rt_shape_str(d->ndim, d->shape, shape, sizeof shape), sd, sd,
                            (long long)p->dim_size, world);
    // torch.chunk: chunks of ceil(n / world); rank r gets what is left of its range.
    p->chunk = (p->dim_size + world - 1) / world;
    int64_t start = p->chunk * rank;
    p->shard_rows = p->dim_size > start ? p->dim_size - start : 0;
    if (p->shard_rows > p->chunk) p->shard_rows = p->chunk;
    memset(p->shard_shape, 0, sizeof p->shard_shape);
    for (int k = 0; k < d->ndim; k++) p->shard_shape[k] = d->shape[k];
    p->shard_shape[sd] = p->shard_rows;
    p->shard_numel = p->outer * p->shard_rows * p->inner;
    p->padded_shard_numel = p->outer * p->chunk * p->inner;
    p->padded_numel = p->padded_shard_numel * world;
    p->in_numel = p->padded_shard_numel;
    return 0;
}

// ---- groups -----------------------------------------------------------------------------

static int layout_begin(rt_fsdp_layout* out, const char* group, const rt_fsdp_param_desc* params,
                        int nparams, int world, int rank) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", group ? group : "?");
    out->world = world;
    out->rank = rank;
    out->shard_world = world;
    if (world < 1) return layout_error(out, RT_ERR_ARG, "world size must be >= 1");
    if (rank < 0 || rank >= world)
        return layout_error(out, RT_ERR_ARG, "rank is outside [0, %d)", world);
    if (nparams < 0 || (nparams > 0 && !params))
        return layout_error(out, RT_ERR_ARG, "bad parameter list (%d params)", nparams);
    out->params = calloc(nparams > 0 ? (size_t)nparams : 1, sizeof *out->params);
    if (!out->params) return layout_error(out, RT_ERR_NOMEM, "out of memory");
    out->nparams = nparams;
    return 0;
}

static void layout_offsets(rt_fsdp_layout* l) {
    int64_t off = 0;
    for (int i = 0; i < l->nparams; i++) {
        l->params[i].offset = off;
        off += l->params[i].in_numel;
    }
    l->block_numel = off;
    l->total_numel = off * l->world;
}

int rt_fsdp_layout_init(rt_fsdp_layout* out, const char* group, const rt_fsdp_param_desc* params,
                        int nparams, int world, int rank) {
    if (!out) return RT_ERR_ARG;
    int st = layout_begin(out, group, params, nparams, world, rank);
    for (int i = 0; !st && i < nparams; i++) st = param_layout(out, i, &params[i], world, rank);
    if (st) return st;
    layout_offsets(out);
    return 0;
}

int rt_fsdp_layout_init_post_forward(rt_fsdp_layout* out, const char* group,
                                     const rt_fsdp_param_desc* params, int nparams,
                                     int shard_world, int pf_world, int pf_rank) {
    if (!out) return RT_ERR_ARG;
    int st = layout_begin(out, group, params, nparams, pf_world, pf_rank);
    if (st) return st;
    out->post_forward = 1;
    out->shard_world = shard_world;
    if (shard_world < 1 || shard_world % pf_world != 0)
        return layout_error(out, RT_ERR_ARG,
                            "reshard_after_forward=%d must divide the shard group size %d",
                            pf_world, shard_world);
    for (int i = 0; i < nparams; i++) {
        // Sizes follow the shard group's padding; the post-forward shard is a flat slice.
        st = param_layout(out, i, &params[i], shard_world, 0);
        if (st) return st;
        rt_fsdp_param_layout* p = &out->params[i];
        if (p->shard_dim != 0)
            return layout_error(out, RT_ERR_ARG,
                                "param %d '%s': reshard_after_forward=%d needs Shard(0), not "
                                "Shard(%d) (FSDP2 reshards to a smaller group along dim 0 only)",
                                i, params[i].name ? params[i].name : "?", pf_world, p->shard_dim);
        p->in_numel = p->padded_numel / pf_world;
        // The rank's view of the shard-group sharding is meaningless here; keep the slice.
        p->shard_rows = 0;
        p->shard_numel = p->in_numel;
    }
    layout_offsets(out);
    return 0;
}

void rt_fsdp_layout_free(rt_fsdp_layout* l) {
    if (!l) return;
    free(l->params);
    l->params = NULL;
    l->nparams = 0;
}

// ---- unsharded parameters ---------------------------------------------------------------

typedef struct extent {
    int64_t at, size;  // first word, words rounded up to 4
    int i;             // the parameter
} extent;

// The planned order: by first word; at one word, a parameter without words first (the one
// with words starts there too), then the group's order.
static int extent_cmp(const void* a, const void* b) {
    const extent *x = a, *y = b;
    if (x->at != y->at) return x->at < y->at ? -1 : 1;
    if ((x->size > 0) != (y->size > 0)) return x->size > 0 ? 1 : -1;
    return (x->i > y->i) - (x->i < y->i);
}

int rt_fsdp_unsharded_check(const char* group, const rt_fsdp_unsharded_param* params,
                            int nparams, int64_t total, char* err, size_t cap) {
    extent* e = malloc(((size_t)(nparams > 0 ? nparams : 0) + 1) * sizeof *e);
    if (!e) {
        snprintf(err, cap, "out of memory checking the unsharded parameters of group '%s'", group);
        return RT_ERR_NOMEM;
    }
    for (int i = 0; i < nparams; i++)
        e[i] = (extent){params[i].word, (params[i].words + 3) / 4 * 4, i};
    if (nparams > 0) qsort(e, (size_t)nparams, sizeof *e, extent_cmp);
    int64_t w = 0;  // where the packing puts the next one
    int st = 0, prev = -1;  // the last one with words
    for (int k = 0; k < nparams && !st; k++) {
        const rt_fsdp_unsharded_param* p = &params[e[k].i];
        if (e[k].at != w) {
            char why[160];
            if (e[k].at < 0) snprintf(why, sizeof why, "a negative word");
            else if (e[k].at % 4) snprintf(why, sizeof why, "not a multiple of 4 words");
            else if (e[k].at < w) snprintf(why, sizeof why, "overlapping '%s'", params[prev].name);
            else snprintf(why, sizeof why, "words %lld to %lld unused", (long long)w, (long long)e[k].at);
            snprintf(err, cap, "parameter '%s' of group '%s' is planned at word %lld of the unsharded "
                     "parameters, the layout has it at %lld (%s: a generator bug)", p->name, group,
                     (long long)e[k].at, (long long)w, why);
            st = RT_ERR_MISMATCH;
        }
        w += e[k].size;
        if (e[k].size > 0) prev = e[k].i;
    }
    if (!st && total != w) {
        snprintf(err, cap, "group '%s' plans %lld words of unsharded parameters, the layout has %lld "
                 "(a generator bug)", group, (long long)total, (long long)w);
        st = RT_ERR_MISMATCH;
    }
    free(e);
    return st;
}

// ---- plan check -------------------------------------------------------------------------

#define PLAN_HINT "the generated code and this runtime disagree on the sharding layout: regenerate it"

static int plan_field(rt_fsdp_layout* l, int i, const char* field, int64_t planned, int64_t computed) {
    if (planned == computed) return 0;
    if (i < 0)
        return layout_error(l, RT_ERR_MISMATCH, "%s: generated code says %lld, runtime computes %lld (%s)",
                            field, (long long)planned, (long long)computed, PLAN_HINT);
    return layout_error(l, RT_ERR_MISMATCH,
                        "param %d '%s' %s: generated code says %lld, runtime computes %lld (%s)",
                        i, l->params[i].name, field, (long long)planned, (long long)computed,
                        PLAN_HINT);
}

int rt_fsdp_layout_check(rt_fsdp_layout* l, const rt_fsdp_plan* plan) {
    if (!l) return RT_ERR_ARG;
    if (!plan) return layout_error(l, RT_ERR_ARG, "plan is NULL");
    int st = plan_field(l, -1, "world size", plan->world, l->world);
    if (!st) st = plan_field(l, -1, "rank", plan->rank, l->rank);
    if (!st) st = plan_field(l, -1, "parameter count", plan->nparams, l->nparams);
    if (!st) st = plan_field(l, -1, "block numel", plan->block_numel, l->block_numel);
    if (!st) st = plan_field(l, -1, "total numel", plan->total_numel, l->total_numel);
    if (!st && l->nparams > 0 && !plan->params)
        return layout_error(l, RT_ERR_ARG, "plan has no parameter entries");
    for (int i = 0; !st && i < l->nparams; i++) {
        const rt_fsdp_param_plan* pp = &plan->params[i];
        const rt_fsdp_param_layout* p = &l->params[i];
        st = plan_field(l, i, "shard dim", pp->shard_dim, p->shard_dim);
        if (!st) st = plan_field(l, i, "block elements", pp->in_numel, p->in_numel);
        if (!st) st = plan_field(l, i, "offset", pp->offset, p->offset);
        if (!st) st = plan_field(l, i, "shard numel", pp->shard_numel, p->shard_numel);
    }
    return st;
}
