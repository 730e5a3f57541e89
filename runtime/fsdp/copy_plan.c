// Builds FSDP2's copy plans (rt_fsdp_copy.h) from rt_fsdp layouts and applies them on the
// host. Every host copy of rt_fsdp.h is one of these plans applied here, and the CUDA step
// backend's copy kernel runs the same plans, so the loops that turn torch.chunk's layout
// into element offsets (rank, parameter, outer index) exist once, here.
//
// A parameter side given as NULL offsets is one buffer per parameter: its runs keep their
// parameter and never merge with another's (the next parameter's offset 0 is another
// buffer). Given offsets, every side is one flat buffer and runs merge wherever they
// continue each other, across parameters too (an even dim-0 group's reduce-scatter copy-in
// is then one run per rank block, or one in all).
#include <stdlib.h>
#include <string.h>

#include "rt_fsdp_copy.h"

// ---- plan -------------------------------------------------------------------------------

void rt_copy_plan_free(rt_copy_plan* p) {
    free(p->runs);
    memset(p, 0, sizeof *p);
}

// A plan being built: whether its parameter sides are flat (runs of different parameters
// may merge).
typedef struct builder {
    rt_copy_plan* p;
    int flat;
} builder;

// Appends a run of parameter i, merging it into the previous one when both sides continue
// it (and both belong to i, or every side is flat).
static int add(builder* b, int64_t i, int64_t dst, int64_t src, int64_t n) {
    rt_copy_plan* p = b->p;
    if (n <= 0) return 0;
    if (p->nruns > 0) {
        rt_copy_run* last = &p->runs[p->nruns - 1];
        int same_buffers = b->flat || last->param == i;
        int dst_follows = last->dst + last->n == dst;
        int src_follows = src < 0 ? last->src < 0 : last->src >= 0 && last->src + last->n == src;
        if (same_buffers && dst_follows && src_follows) {
            last->n += n;
            p->total += n;
            return 0;
        }
    }
    if (p->nruns == p->cap) {
        int cap = p->cap ? 2 * p->cap : 16;
        rt_copy_run* r = realloc(p->runs, (size_t)cap * sizeof *r);
        if (!r) return RT_ERR_NOMEM;
        p->runs = r;
        p->cap = cap;
    }
    p->runs[p->nruns++] = (rt_copy_run){dst, src < 0 ? -1 : src, n, i};
    p->total += n;
    return 0;
}

// Parameter i's offset in a side given as offs (NULL: its own buffer, offset 0).
static int64_t off(const int64_t* offs, int i) { return offs ? offs[i] : 0; }

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

// Rank r's rows of parameter i (layout q) between its unsharded tensor (at full) and a
// padded chunk (at chunk): to_chunk copies full -> chunk and zero-fills the padding;
// otherwise chunk -> full, dropping the padding.
static int move_chunk(builder* b, int i, const rt_fsdp_param_layout* q, int r, int64_t full,
                      int64_t chunk, int to_chunk) {
    int64_t rows = rows_of(q, r);
    int64_t n = rows * q->inner, pad = (q->chunk - rows) * q->inner;
    int st = 0;
    for (int64_t o = 0; o < q->outer && !st; o++) {
        int64_t f = full + (o * q->dim_size + r * q->chunk) * q->inner;
        int64_t c = chunk + o * q->chunk * q->inner;
        if (to_chunk) {
            st = add(b, i, c, f, n);
            if (!st) st = add(b, i, c + n, -1, pad);
        } else {
            st = add(b, i, f, c, n);
        }
    }
    return st;
}

// ---- builders ---------------------------------------------------------------------------

int rt_copy_shard_params(rt_copy_plan* p, const rt_fsdp_layout* l, const int64_t* full_off,
                         const int64_t* shard_off) {
    builder b = {p, full_off && shard_off};
    int st = 0;
    for (int i = 0; i < l->nparams && !st; i++)
        st = move_chunk(&b, i, &l->params[i], l->rank, off(full_off, i), off(shard_off, i), 1);
    return st;
}

int rt_copy_all_gather_in(rt_copy_plan* p, const rt_fsdp_layout* l, const int64_t* shard_off) {
    builder b = {p, shard_off != NULL};
    int64_t block = l->block_numel * l->rank;
    int st = 0;
    for (int i = 0; i < l->nparams && !st; i++)
        st = add(&b, i, block + l->params[i].offset, off(shard_off, i), l->params[i].in_numel);
    return st;
}

int rt_copy_all_gather_out(rt_copy_plan* p, const rt_fsdp_layout* l, const int64_t* unsharded_off) {
    builder b = {p, unsharded_off != NULL};
    int st = 0;
    for (int r = 0; r < l->world && !st; r++)
        for (int i = 0; i < l->nparams && !st; i++) {
            const rt_fsdp_param_layout* q = &l->params[i];
            int64_t block = l->block_numel * r + q->offset, un = off(unsharded_off, i);
            if (un < 0) continue;
            if (l->post_forward) {
                // Blocks hold flat slices of the padded parameter: concatenate, drop padding.
                int64_t start, n = pf_slice(q, r, &start);
                st = add(&b, i, un + start, block, n);
            } else {
                st = move_chunk(&b, i, q, r, un, block, 0);
            }
        }
    return st;
}

int rt_copy_all_gather_direct(rt_copy_plan* p, const rt_fsdp_layout* l, const int64_t* shard_off,
                              const int64_t* unsharded_off) {
    if (l->world != 1 || l->post_forward) return RT_ERR_ARG;
    builder b = {p, shard_off && unsharded_off};
    int st = 0;  // the copy-out's runs, read from the shard that the copy-in would copy
    for (int i = 0; i < l->nparams && !st; i++)
        if (off(unsharded_off, i) >= 0)
            st = move_chunk(&b, i, &l->params[i], 0, off(unsharded_off, i), off(shard_off, i), 0);
    return st;
}

int rt_copy_post_forward(rt_copy_plan* p, const rt_fsdp_layout* pf, const int64_t* unsharded_off,
                         const int64_t* shard_off) {
    builder b = {p, unsharded_off && shard_off};
    int st = 0;
    for (int i = 0; i < pf->nparams && !st; i++) {
        const rt_fsdp_param_layout* q = &pf->params[i];
        int64_t un = off(unsharded_off, i), sh = off(shard_off, i);
        if (un < 0) continue;
        int64_t start, n = pf_slice(q, pf->rank, &start);
        st = add(&b, i, sh, un + start, n);
        if (!st) st = add(&b, i, sh + n, -1, q->in_numel - n);
    }
    return st;
}

int rt_copy_reduce_scatter_in(rt_copy_plan* p, const rt_fsdp_layout* l, const int64_t* grad_off) {
    builder b = {p, grad_off != NULL};
    int st = 0;
    for (int r = 0; r < l->world && !st; r++)
        for (int i = 0; i < l->nparams && !st; i++)
            st = move_chunk(&b, i, &l->params[i], r, off(grad_off, i),
                            l->block_numel * r + l->params[i].offset, 1);
    return st;
}

int rt_copy_view_out(rt_copy_plan* p, const rt_fsdp_layout* l, const int64_t* sharded_off) {
    builder b = {p, sharded_off != NULL};
    int st = 0;
    for (int i = 0; i < l->nparams && !st; i++)
        st = add(&b, i, off(sharded_off, i), l->params[i].offset, l->params[i].shard_numel);
    return st;
}

int rt_copy_reduce_direct(rt_copy_plan* p, const rt_fsdp_layout* l, const int64_t* grad_off,
                          const int64_t* sharded_off) {
    if (l->world != 1 || l->post_forward) return RT_ERR_ARG;
    builder b = {p, grad_off && sharded_off};
    int st = 0;  // one rank's chunk is the whole parameter, unpadded: its shard
    for (int i = 0; i < l->nparams && !st; i++)
        st = add(&b, i, off(sharded_off, i), off(grad_off, i), l->params[i].shard_numel);
    return st;
}

int rt_copy_zeros(rt_copy_plan* p, int64_t dst, int64_t n) {
    builder b = {p, 1};
    return add(&b, -1, dst, -1, n);
}

// ---- host apply -------------------------------------------------------------------------

// Run r's buffer and dtype on side s.
static char* side_at(const rt_copy_side* s, const rt_copy_run* r, int64_t elem, rt_dtype* dt) {
    *dt = s->params && s->dtypes ? s->dtypes[r->param] : s->dtype;
    char* base = s->params ? (char*)s->params[r->param] : (char*)s->flat;
    return base + (size_t)elem * rt_dtype_size(*dt);
}

// d[0 .. n) += (ddt) s[0 .. n): the new values cast to ddt first (through tmp, a chunk at a
// time), then added in fp32 and rounded once to ddt.
static void accumulate_run(char* d, rt_dtype ddt, const char* s, rt_dtype sdt, int64_t n) {
    enum { CHUNK = 256 };
    float tmp[CHUNK];  // room for CHUNK elements of any float dtype
    size_t ds = rt_dtype_size(ddt), ss = rt_dtype_size(sdt);
    for (int64_t k0 = 0; k0 < n; k0 += CHUNK) {
        size_t m = (size_t)(n - k0 < CHUNK ? n - k0 : CHUNK);
        char* dk = d + (size_t)k0 * ds;
        if (s) rt_convert(tmp, ddt, s + (size_t)k0 * ss, sdt, m);
        else memset(tmp, 0, m * ds);
        if (ddt == RT_F32) {
            float* df = (float*)dk;
            for (size_t k = 0; k < m; k++) df[k] += tmp[k];
            continue;
        }
        for (size_t k = 0; k < m; k++)
            rt_store_f32(dk, ddt, k, rt_load_f32(dk, ddt, k) + rt_load_f32(tmp, ddt, k));
    }
}

void rt_copy_apply(const rt_copy_plan* p, rt_copy_side dst, rt_copy_side src, int accumulate) {
    for (int k = 0; k < p->nruns; k++) {
        const rt_copy_run* r = &p->runs[k];
        rt_dtype ddt, sdt = RT_F32;
        char* d = side_at(&dst, r, r->dst, &ddt);
        const char* s = r->src < 0 ? NULL : side_at(&src, r, r->src, &sdt);
        if (accumulate) accumulate_run(d, ddt, s, sdt, r->n);
        else if (s) rt_convert(d, ddt, s, sdt, (size_t)r->n);
        else memset(d, 0, (size_t)r->n * rt_dtype_size(ddt));
    }
}
