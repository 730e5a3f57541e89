// Builds the copy plans of segments.h from rt_fsdp layouts, following runtime/fsdp's host
// copies loop for loop (rank, parameter, outer index), and applies them on the host.
#include <stdlib.h>
#include <string.h>

#include "segments.h"

// ---- plan -------------------------------------------------------------------------------

void rt_seg_plan_free(rt_seg_plan* p) {
    free(p->segs);
    memset(p, 0, sizeof *p);
}

// Appends a run, merging it into the previous one when both sides continue it.
static int add(rt_seg_plan* p, int64_t dst, int64_t src, int64_t n) {
    if (n <= 0) return 0;
    if (p->nsegs > 0) {
        rt_seg* last = &p->segs[p->nsegs - 1];
        int contiguous_dst = last->dst + last->n == dst;
        int contiguous_src = src < 0 ? last->src < 0 : last->src >= 0 && last->src + last->n == src;
        if (contiguous_dst && contiguous_src) {
            last->n += n;
            p->total += n;
            return 0;
        }
    }
    if (p->nsegs == p->cap) {
        int cap = p->cap ? 2 * p->cap : 16;
        rt_seg* s = realloc(p->segs, (size_t)cap * sizeof *s);
        if (!s) return RT_ERR_NOMEM;
        p->segs = s;
        p->cap = cap;
    }
    p->segs[p->nsegs++] = (rt_seg){dst, src < 0 ? -1 : src, n};
    p->total += n;
    return 0;
}

// Rows of rank r along the shard dim (torch.chunk).
static int64_t rows_of(const rt_fsdp_param_layout* q, int r) {
    int64_t start = q->chunk * r;
    int64_t rows = q->dim_size > start ? q->dim_size - start : 0;
    return rows < q->chunk ? rows : q->chunk;
}

// Rank r's flat slice of a post-forward parameter: [start, start + n) of its numel.
static int64_t pf_slice(const rt_fsdp_param_layout* q, int r, int64_t* start) {
    *start = q->in_numel * r;
    int64_t n = q->numel > *start ? q->numel - *start : 0;
    return n < q->in_numel ? n : q->in_numel;
}

// Rank r's rows of parameter q between its unsharded tensor (at full) and a padded chunk
// (at chunk): to_chunk copies full -> chunk and zero-fills the padding.
static int move_chunk(rt_seg_plan* p, const rt_fsdp_param_layout* q, int r, int64_t full,
                      int64_t chunk, int to_chunk) {
    int64_t rows = rows_of(q, r);
    int64_t n = rows * q->inner, pad = (q->chunk - rows) * q->inner;
    int st = 0;
    for (int64_t o = 0; o < q->outer && !st; o++) {
        int64_t f = full + (o * q->dim_size + r * q->chunk) * q->inner;
        int64_t c = chunk + o * q->chunk * q->inner;
        if (to_chunk) {
            st = add(p, c, f, n);
            if (!st) st = add(p, c + n, -1, pad);
        } else {
            st = add(p, f, c, n);
        }
    }
    return st;
}

// ---- builders ---------------------------------------------------------------------------

int rt_seg_all_gather_in(rt_seg_plan* p, const rt_fsdp_layout* l, const int64_t* shard_off) {
    int64_t block = l->block_numel * l->rank;
    int st = 0;
    for (int i = 0; i < l->nparams && !st; i++)
        st = add(p, block + l->params[i].offset, shard_off[i], l->params[i].in_numel);
    return st;
}

int rt_seg_all_gather_out(rt_seg_plan* p, const rt_fsdp_layout* l, const int64_t* unsharded_off) {
    int st = 0;
    for (int r = 0; r < l->world && !st; r++)
        for (int i = 0; i < l->nparams && !st; i++) {
            const rt_fsdp_param_layout* q = &l->params[i];
            int64_t block = l->block_numel * r + q->offset;
            if (unsharded_off[i] < 0) continue;
            if (l->post_forward) {
                // Blocks hold flat slices of the padded parameter: concatenate, drop padding.
                int64_t start, n = pf_slice(q, r, &start);
                st = add(p, unsharded_off[i] + start, block, n);
            } else {
                st = move_chunk(p, q, r, unsharded_off[i], block, 0);
            }
        }
    return st;
}

int rt_seg_post_forward(rt_seg_plan* p, const rt_fsdp_layout* pf, const int64_t* unsharded_off) {
    int st = 0;
    for (int i = 0; i < pf->nparams && !st; i++) {
        const rt_fsdp_param_layout* q = &pf->params[i];
        if (unsharded_off[i] < 0) continue;
        int64_t start, n = pf_slice(q, pf->rank, &start);
        st = add(p, q->offset, unsharded_off[i] + start, n);
        if (!st) st = add(p, q->offset + n, -1, q->in_numel - n);
    }
    return st;
}

int rt_seg_reduce_scatter_in(rt_seg_plan* p, const rt_fsdp_layout* l, const int64_t* grad_off) {
    int st = 0;
    for (int r = 0; r < l->world && !st; r++)
        for (int i = 0; i < l->nparams && !st; i++)
            st = move_chunk(p, &l->params[i], r, grad_off[i], l->block_numel * r + l->params[i].offset, 1);
    return st;
}

int rt_seg_view_out(rt_seg_plan* p, const rt_fsdp_layout* l, const int64_t* sharded_off) {
    int st = 0;
    for (int i = 0; i < l->nparams && !st; i++)
        st = add(p, sharded_off[i], l->params[i].offset, l->params[i].shard_numel);
    return st;
}

int rt_seg_reduce_direct(rt_seg_plan* p, const rt_fsdp_layout* l, const int64_t* grad_off,
                         const int64_t* sharded_off) {
    if (l->world != 1 || l->post_forward) return RT_ERR_ARG;
    int st = 0;  // one rank's chunk is the whole parameter, unpadded: its shard
    for (int i = 0; i < l->nparams && !st; i++)
        st = add(p, sharded_off[i], grad_off[i], l->params[i].shard_numel);
    return st;
}

int rt_seg_zeros(rt_seg_plan* p, int64_t dst, int64_t n) { return add(p, dst, -1, n); }

int rt_seg_all_gather_direct(rt_seg_plan* p, const rt_fsdp_layout* l, const int64_t* shard_off,
                             const int64_t* unsharded_off) {
    if (l->world != 1 || l->post_forward) return RT_ERR_ARG;
    int st = 0;  // the copy-out's runs, read from the shard that the copy-in would copy
    for (int i = 0; i < l->nparams && !st; i++)
        if (unsharded_off[i] >= 0)
            st = move_chunk(p, &l->params[i], 0, unsharded_off[i], shard_off[i], 0);
    return st;
}

// ---- host reference ---------------------------------------------------------------------

void rt_seg_apply(const rt_seg_plan* p, void* dst, rt_dtype dst_dt, const void* src,
                  rt_dtype src_dt, int accumulate) {
    for (int k = 0; k < p->nsegs; k++) {
        const rt_seg* s = &p->segs[k];
        for (int64_t e = 0; e < s->n; e++) {
            float v = s->src < 0 ? 0.0f : rt_load_f32(src, src_dt, (size_t)(s->src + e));
            if (accumulate) {
                char tmp[8];
                rt_store_f32(tmp, dst_dt, 0, v);  // cast to the destination dtype first
                v = rt_load_f32(dst, dst_dt, (size_t)(s->dst + e)) + rt_load_f32(tmp, dst_dt, 0);
            }
            rt_store_f32(dst, dst_dt, (size_t)(s->dst + e), v);
        }
    }
}
