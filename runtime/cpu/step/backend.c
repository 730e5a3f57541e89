// The CPU step backend (step_backend.h): the arena is host memory, ranks are threads of one
// process (rt_threads_run), FSDP's copies are rt_fsdp's host functions (and, on one rank,
// its direct copy plans, rt_fsdp_copy.h), and collectives
// complete before they return, so a step needs no streams. Host time spent in collectives
// and the optimizer is accumulated in R->t_comm / R->t_optim and traced as spans.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../common/dtype_bits.h"
#include "rt_fsdp_copy.h"
#include "rt_kernels.h"
#include "rt_optim.h"
#include "rt_trace.h"
#include "../../step/step_backend.h"
#include "../kernels/kround.h"

// ---- helpers ----------------------------------------------------------------------------

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Adds the span [t0, now) to *acc and to the trace (stream tid) when one is attached.
static void span(rt_rank* R, double t0, double* acc, int tid, const char* name, const char* cat) {
    double t1 = now_s();
    *acc += t1 - t0;
    if (R->trace) {
        double end = rt_trace_now_us(R->trace), dur = (t1 - t0) * 1e6;
        rt_trace_complete(R->trace, R->rank, tid, name, cat, end - dur, dur, NULL, NULL);
    }
}

// ---- backend ----------------------------------------------------------------------------

const char* rt_step_backend(void) { return "cpu"; }

int rt_step_device(rt_rank* R, char* name, size_t cap) {
    (void)R;
    if (cap) name[0] = 0;
    return 0;
}

int rt_step_launch(int world, const rt_launch_opts* o, rt_rank_fn fn, void* arg) {
    if (o && (o->local || o->no_graph)) {
        fprintf(stderr, "fsdpgen: %s is for CUDA binaries (build with `fsdpgen build SPEC --cuda`); "
                        "this one runs on the CPU\n", o->local ? "--local" : "--no-graph");
        return 2;
    }
    rt_kernels_init();
    return rt_threads_run(world, fn, arg);
}

void rt_step_run(rt_rank* R) {
    rt_step_refresh_kept(R);
    rt_step_next(R)(R);
}

double rt_step_eval(rt_rank* R) {
    rt_step_refresh_kept(R);
    R->model->eval(R);
    R->after_eval = 1;
    return R->losses[0];
}

const int32_t* rt_step_tokens(rt_rank* R, int item) { return R->tokens[item]; }
const int32_t* rt_step_targets(rt_rank* R, int item) { return R->targets[item]; }
const float* rt_step_inputs(rt_rank* R, int item) { return R->inputs[item]; }

void* rt_rank_host(rt_rank* R, size_t off, size_t bytes) {
    if (off > R->arena.capacity || bytes > R->arena.capacity - off) {
        fprintf(stderr, "fsdpgen: rank %d: persistent buffer [%zu, +%zu bytes) lies outside the "
                        "arena of %zu bytes (generated plan is inconsistent)\n",
                R->rank, off, bytes, R->arena.capacity);
        return NULL;
    }
    R->kept_stale = 1;  // the caller may write the parameters
    return R->arena.base + off;
}

int rt_rank_pull(rt_rank* R) { return (void)R, 0; }
int rt_rank_push(rt_rank* R) { return (void)R, 0; }

// ---- rank lifetime ----------------------------------------------------------------------

// R->backend: with model->optimizer_rows, the mask of the vocab's rows the step's tokens
// look up (rtb_optimizer_rows), else NULL.
int rtb_rank_init(rt_rank* R) {
    const rt_model* m = R->model;
    char name[48];
    snprintf(name, sizeof name, "rank %d", R->rank);
    if (rt_arena_init(&R->arena, m->arena_bytes, name)) {
        fprintf(stderr, "fsdpgen: rank %d: arena of %zu bytes: %s\n", R->rank, m->arena_bytes,
                R->arena.error);
        return 1;
    }
    if (m->optimizer_rows && !(R->backend = calloc((size_t)m->vocab, 1))) {
        fprintf(stderr, "fsdpgen: rank %d: no memory for the mask of %lld token rows\n", R->rank,
                (long long)m->vocab);
        return 1;
    }
    return 0;
}

void rtb_rank_free(rt_rank* R) {
    rt_arena_free(&R->arena);
    free(R->backend);
    R->backend = NULL;
}

// ---- step -------------------------------------------------------------------------------

void rtb_step_begin(rt_rank* R) { (void)R; }

void rtb_section(rt_rank* R, const char* phase) { (void)R, (void)phase; }

void rtb_step_end(rt_rank* R) { (void)R; }

// ---- all-gather -------------------------------------------------------------------------

void rtb_all_gather_sync(rt_rank* R) { (void)R; }

void rtb_all_gather(rt_rank* R, int g, int sub, size_t out_off, size_t pf_off) {
    const rt_model_group* mg = &R->model->groups[g];
    rt_rank_group* rg = &R->groups[g];
    double t0 = now_s();
    rt_fsdp_layout* L = sub ? &rg->pf_layout : &rg->layout;
    void** shards = rg->ptrs[0];
    for (int i = 0; i < mg->nparams; i++) {
        rt_fsdp_param_layout* p = &L->params[i];
        size_t base = sub ? pf_off : mg->params_off;
        int64_t at = sub ? p->offset : R->model->params[mg->params[i]].block_offset;
        shards[i] = rt_step_f32(R, base, at, p->in_numel);
    }
    void* out = RT_BUF(R, out_off, (size_t)L->total_numel * rt_dtype_size(mg->param_dtype));
    int st = rt_fsdp_all_gather_copy_in(L, (const void* const*)shards, RT_F32, out, mg->param_dtype);
    RTB_FSDP_CHECK(R, st, L);
    st = rt_fsdp_all_gather(L, sub ? rg->pf_comm : R->mesh.shard, out, mg->param_dtype, NULL);
    RTB_FSDP_CHECK(R, st, L);
    span(R, t0, &R->t_comm, RT_TRACE_ALL_GATHER, mg->name, "all_gather");
}

// Applies a one-rank copy plan (rt_copy_*_direct, built with status st) and frees it.
static void apply_direct(rt_rank* R, const rt_fsdp_layout* L, rt_copy_plan* p, int st,
                         rt_copy_side dst, rt_copy_side src, int accumulate) {
    if (st)
        rt_rank_die(R, "direct copy plan of group '%s': %s", L->name,
                    st == RT_ERR_NOMEM ? "out of host memory" : "needs a layout of one rank");
    rt_copy_apply(p, dst, src, accumulate);
    rt_copy_plan_free(p);
}

// One rank's chunk of a parameter is all of it, in its order: the copy-in's cast, stored
// as the copy-out stores it (fp32 values of param_dtype, or param_dtype's bits).
static void direct_copy(rt_rank* R, int g, size_t unsharded_off) {
    const rt_model_group* mg = &R->model->groups[g];
    rt_rank_group* rg = &R->groups[g];
    RT_BUF(R, unsharded_off, 4 * (size_t)mg->unsharded_words);
    void** un = rg->ptrs[0];
    void** shards = rg->ptrs[1];
    rt_step_param_ptrs(R, g, unsharded_off, un);
    for (int i = 0; i < mg->nparams; i++) {
        int64_t at = R->model->params[mg->params[i]].block_offset;
        shards[i] = rt_step_f32(R, mg->params_off, at, rg->layout.params[i].in_numel);
    }
    rt_copy_plan p = {0};
    int st = rt_copy_all_gather_direct(&p, &rg->layout, NULL, rg->direct_copied);
    const void* const* unp = (const void* const*)un;
    apply_direct(R, &rg->layout, &p, st, rt_copy_per_param(unp, RT_F32, rg->unsharded_dtypes),
                 rt_copy_per_param((const void* const*)shards, RT_F32, NULL), 0);
    for (int i = 0; i < mg->nparams; i++)  // fp32 storage: the copy-in's rounding
        if (rg->unsharded_dtypes[i] == RT_F32 && rg->direct_copied[i] == 0)
            rt_step_round(un[i], (size_t)rg->layout.params[i].numel, mg->param_dtype);
}

void rtb_all_gather_direct(rt_rank* R, int g, size_t unsharded_off, int beside) {
    (void)beside;  // one stream: the copy is done when the call returns
    double t0 = now_s();
    direct_copy(R, g, unsharded_off);
    span(R, t0, &R->t_comm, RT_TRACE_ALL_GATHER, R->model->groups[g].name, "all_gather");
}

// The direct all-gather's copy, timed as the optimizer's.
void rtb_optimizer_cast_kept(rt_rank* R, int g, size_t unsharded_off) {
    double t0 = now_s();
    direct_copy(R, g, unsharded_off);
    span(R, t0, &R->t_optim, 0, R->model->groups[g].name, "optimizer");
}

void rtb_refresh_kept(rt_rank* R, int g, size_t unsharded_off) { direct_copy(R, g, unsharded_off); }

void rtb_all_gather_wait(rt_rank* R, int g, int sub, size_t out_off, size_t unsharded_off) {
    const rt_model_group* mg = &R->model->groups[g];
    rt_rank_group* rg = &R->groups[g];
    rt_fsdp_layout* L = sub ? &rg->pf_layout : &rg->layout;
    void* out = RT_BUF(R, out_off, (size_t)L->total_numel * rt_dtype_size(mg->param_dtype));
    RT_BUF(R, unsharded_off, 4 * (size_t)mg->unsharded_words);
    void** un = rg->ptrs[0];
    rt_step_param_ptrs(R, g, unsharded_off, un);
    int st = rt_fsdp_all_gather_copy_out_as(L, out, mg->param_dtype, un, rg->unsharded_dtypes);
    RTB_FSDP_CHECK(R, st, L);
}

void rtb_all_gather_drop(rt_rank* R, int g) { (void)R, (void)g; }

int rtb_all_gather_kept(rt_rank* R, int g, size_t unsharded_off) {
    (void)R, (void)g, (void)unsharded_off;
    return 0;
}

void rtb_reshard_post_forward(rt_rank* R, int g, size_t unsharded_off, size_t pf_off) {
    const rt_model_group* mg = &R->model->groups[g];
    rt_rank_group* rg = &R->groups[g];
    void** un = rg->ptrs[0];
    void** shards = rg->ptrs[1];
    rt_step_param_ptrs(R, g, unsharded_off, un);
    for (int i = 0; i < mg->nparams; i++) {
        rt_fsdp_param_layout* p = &rg->pf_layout.params[i];
        shards[i] = rt_step_f32(R, pf_off, p->offset, p->in_numel);
    }
    int st = rt_fsdp_post_forward_shards(&rg->pf_layout, (const void* const*)un, rg->unsharded_dtypes,
                                         shards, RT_F32);
    RTB_FSDP_CHECK(R, st, &rg->pf_layout);
}

const float* rt_step_one(const rt_rank* R) {
    static const float one = 1.0f;
    (void)R;
    return &one;
}

// fsdpgen's kernels at every attention site (runtime/step/attention.c)
int rtb_attention_forward(rt_rank* R, int site, void* out, float* stats, float* scratch,
                          const void* q, const void* k, const void* v) {
    (void)R, (void)site, (void)out, (void)stats, (void)scratch, (void)q, (void)k, (void)v;
    return 0;
}

int rtb_attention_backward(rt_rank* R, int site, void* dq, void* dk, void* dv, float* scratch,
                           const void* dout, const void* out, const void* q, const void* k,
                           const void* v, const float* stats) {
    (void)R, (void)site, (void)dq, (void)dk, (void)dv, (void)scratch, (void)dout, (void)out;
    (void)q, (void)k, (void)v, (void)stats;
    return 0;
}

// ---- gradients --------------------------------------------------------------------------

// The kernels' rounding pass (bf16's loop vectorises: runtime/step.ninja's -O3).
void rt_step_round(float* x, size_t n, rt_dtype dtype) { rt_kround_buf(x, n, dtype); }

void rtb_accumulate_grads(rt_rank* R, int g, size_t ugrad_off, size_t acc_off) {
    const rt_model_group* mg = &R->model->groups[g];
    const int64_t n = rt_step_ugrad_numel(R, g);
    float* u = rt_step_f32(R, ugrad_off, 0, n);
    rt_step_round(u, (size_t)n, mg->param_dtype);
    rt_accumulate(rt_step_f32(R, acc_off, 0, n), u, (size_t)n);
}

// The reference's reduction: what the sharded model computes (pre-divide, reduce with
// the same op, post-divide; factors over the whole world), as one all-reduce of full
// gradients. Going through rt_fsdp_reduce_scatter at shard size 1 would add FSDP2's
// single-rank custom-factor division, which the sharded model does not do.
static int reference_reduce(rt_rank* R, const rt_model_group* mg, rt_fsdp_layout* L, void* in, void* out) {
    rt_fsdp_divide d = rt_fsdp_gradient_divide_factors(R->world, 0, mg->reduce_dtype, mg->divide_factor,
                                                       mg->force_sum);
    rt_fsdp_divide_buffer(in, L->total_numel, mg->reduce_dtype, d.predivide);
    int st = rt_comm_all_reduce(R->comm, in, out, L->total_numel, mg->reduce_dtype, d.rs_op, NULL);
    if (st) {
        snprintf(L->error, sizeof L->error, "reference all-reduce of group '%s': %s", mg->name,
                 rt_comm_last_error(R->comm));
        return st;
    }
    rt_fsdp_divide_buffer(out, L->block_numel, mg->reduce_dtype, d.postdivide);
    return 0;
}

// Both reductions start here: the unsharded grads at grads_off rounded to grads_dtype, and
// per parameter of reduction r its unsharded grad (rg->ptrs[0]) and its sharded grad
// (rg->ptrs[1]; a frozen one has neither). Without accumulate, a reduction of some
// parameters zeroes the others' sharded grads (their gradient is None: zero in a norm, and
// what a later reduce-scatter of the step adds to), but for a part (the other parts assign
// theirs). Returns the reduction's layout.
static rt_fsdp_layout* reduction_ptrs(rt_rank* R, int g, int r, size_t grads_off, rt_dtype grads_dtype,
                                      int accumulate) {
    const rt_model_group* mg = &R->model->groups[g];
    rt_rank_group* rg = &R->groups[g];
    const rt_model_reduction* mr = r ? &mg->reductions[r - 1] : NULL;
    rt_step_grad_ptrs(R, g, grads_off, rg->ptrs[0]);
    if (!mr || !mr->part) {
        const int64_t n = rt_step_ugrad_numel(R, g);
        rt_step_round(rt_step_f32(R, grads_off, 0, n), (size_t)n, grads_dtype);
    } else if (mr->rows != RT_ROWS_FINAL) {
        // A part rounds only its own parameters' gradients: another's may still be added to
        // (a tied embedding's, by its lookups). A FINAL part's parameter is rounded whole by
        // its LOOKED_UP part, before any optimizer step reads it (this backend runs the
        // step's calls in order; the CUDA one rounds as the optimizer reads).
        for (int k = 0; k < mr->nparams; k++) {
            const int i = mr->params[k];
            rt_step_round(rg->ptrs[0][i], (size_t)rg->layout.params[i].numel, grads_dtype);
        }
    }
    for (int i = 0; i < mg->nparams; i++) {
        const rt_model_param* p = &R->model->params[mg->params[i]];
        rg->ptrs[1][i] = p->frozen ? NULL
                                   : rt_step_f32(R, mg->grads_off, rt_model_grad_offset(p),
                                                 rg->layout.params[i].shard_numel);
    }
    if (!r) return &rg->layout;
    for (int i = 0, k = 0; i < mg->nparams; i++) {
        if (k < mr->nparams && mr->params[k] == i) {
            // increasing indices: entry k is never one a later k reads
            rg->ptrs[0][k] = rg->ptrs[0][i], rg->ptrs[1][k] = rg->ptrs[1][i];
            k++;
        } else if (!accumulate && !mr->part && rg->ptrs[1][i]) {
            memset(rg->ptrs[1][i], 0, (size_t)rg->layout.params[i].shard_numel * sizeof(float));
        }
    }
    return &rg->reductions[r - 1];
}

void rtb_reduce_scatter(rt_rank* R, int g, int r, size_t grads_off, rt_dtype grads_dtype,
                        size_t rs_in_off, size_t rs_out_off, int accumulate) {
    const rt_model_group* mg = &R->model->groups[g];
    rt_rank_group* rg = &R->groups[g];
    double t0 = now_s();
    rt_fsdp_layout* L = reduction_ptrs(R, g, r, grads_off, grads_dtype, accumulate);
    size_t es = rt_dtype_size(mg->reduce_dtype);
    void** grads = rg->ptrs[0];
    void** sharded = rg->ptrs[1];
    void* in = RT_BUF(R, rs_in_off, (size_t)L->total_numel * es);
    void* out = RT_BUF(R, rs_out_off, (size_t)L->block_numel * es);
    rt_fsdp_reduce_args a = {R->mesh.shard, mg->all_reduce ? R->mesh.replicate : NULL,
                             mg->reduce_dtype, mg->divide_factor, mg->force_sum, NULL};
    int st = rt_fsdp_reduce_scatter_copy_in(L, (const void* const*)grads, RT_F32, in, mg->reduce_dtype);
    if (!st) st = R->model->reference ? reference_reduce(R, mg, L, in, out) : rt_fsdp_reduce_scatter(L, &a, in, out);
    if (!st) st = rt_fsdp_reduce_scatter_view_out(L, out, mg->reduce_dtype, sharded, RT_F32, accumulate);
    RTB_FSDP_CHECK(R, st, L);
    span(R, t0, &R->t_comm, RT_TRACE_REDUCE_SCATTER, mg->name, "reduce_scatter");
}

// One rank, values unchanged: what copy-in, the identity reduction and view-out leave in
// the sharded grads, in one pass per parameter. In place (the unsharded grads are the
// sharded ones: generator/memory/memory.lua), the rounding alone, which packed gradients had
// at their store.
void rtb_reduce_direct(rt_rank* R, int g, int r, size_t grads_off, rt_dtype grads_dtype, int accumulate) {
    const rt_model_group* mg = &R->model->groups[g];
    rt_rank_group* rg = &R->groups[g];
    double t0 = now_s();
    if (mg->grads_packed) {
        span(R, t0, &R->t_comm, RT_TRACE_REDUCE_SCATTER, mg->name, "reduce_scatter");
        return;
    }
    rt_fsdp_layout* L = reduction_ptrs(R, g, r, grads_off, grads_dtype, accumulate);
    if (grads_off != mg->grads_off) {  // in place, reduction_ptrs' rounding is all there is
        rt_copy_plan p = {0};
        int st = rt_copy_reduce_direct(&p, L, NULL, NULL);
        apply_direct(R, L, &p, st, rt_copy_per_param((const void* const*)rg->ptrs[1], RT_F32, NULL),
                     rt_copy_per_param((const void* const*)rg->ptrs[0], RT_F32, NULL), accumulate);
    }
    span(R, t0, &R->t_comm, RT_TRACE_REDUCE_SCATTER, mg->name, "reduce_scatter");
}

// ---- optimizer --------------------------------------------------------------------------

void rtb_clip_grad_norm(rt_rank* R) {
    const rt_model* m = R->model;
    double t0 = now_s();
    double local = 0;
    for (int g = 0; g < m->ngroups; g++)
        if (R->groups[g].reduced)  // the others have no gradient this step (rt_step_begin)
            local += rt_sumsq(rt_step_sharded_grads(R, g),
                              (size_t)rt_model_grad_numel(&m->groups[g]));
    // Replicas hold identical shards: the norm sums over one shard group.
    float sum = (float)local;
    if (rt_comm_size(R->mesh.shard) > 1) {
        int st = rt_comm_all_reduce(R->mesh.shard, &sum, &sum, 1, RT_F32, rt_red_sum(), NULL);
        if (st) rt_rank_die(R, "clip_grad_norm all-reduce: %s", rt_comm_last_error(R->mesh.shard));
    }
    double total = sqrt((double)sum);
    for (int g = 0; g < m->ngroups; g++)
        if (R->groups[g].reduced)
            rt_clip_grad_norm(rt_step_sharded_grads(R, g),
                              (size_t)rt_model_grad_numel(&m->groups[g]), total, m->grad_clip);
    span(R, t0, &R->t_optim, 0, "clip_grad_norm", "optimizer");
}

// Packed gradients are widened a chunk at a time: the step is element-wise, so its bits do
// not depend on the chunks.
enum { PACKED_GRADS_CHUNK = 4096 };

// The optimizer over elements [lo, lo + n) of group g's rank block, [glo, glo + n) of its
// gradients and state; without grads, a zero gradient.
static void optimizer(rt_rank* R, int g, int64_t lo, int64_t glo, int64_t n, int k, int per,
                      int item, int grads) {
    const rt_model_group* mg = &R->model->groups[g];
    if (grads && mg->grads_packed && n > PACKED_GRADS_CHUNK) {
        for (int64_t at = 0; at < n; at += PACKED_GRADS_CHUNK)
            optimizer(R, g, lo + at, glo + at,
                      n - at < PACKED_GRADS_CHUNK ? n - at : PACKED_GRADS_CHUNK, k, per, item,
                      grads);
        return;
    }
    const rt_model_optim* o = &R->model->optim;
    rt_optim_span sp = rt_step_optim_span(R, g, lo, glo, n);
    float wide[PACKED_GRADS_CHUNK];
    if (grads && mg->grads_packed) {
        for (int64_t i = 0; i < n; i++)
            wide[i] = rt_bits16_to_f32_inl(sp.grads16[i], mg->param_dtype);
        sp.grads = wide;
    }
    const float* gr = grads ? sp.grads : NULL;
    int64_t step = R->step * per + k;
    const double lr = rt_step_lr(R, item);
    switch (o->kind) {
    case RT_OPTIM_SGD:
        rt_sgd_step(sp.params, gr, o->momentum > 0 ? sp.state1 : NULL, (size_t)n, step, lr,
                    o->momentum, o->dampening, o->weight_decay, o->nesterov);
        break;
    case RT_OPTIM_ADAM:
        rt_adam_step(sp.params, gr, sp.state1, sp.state2, (size_t)n, step, lr, o->beta1,
                     o->beta2, o->eps, o->weight_decay);
        break;
    case RT_OPTIM_ADAMW:
        rt_adamw_step(sp.params, gr, sp.state1, sp.state2, (size_t)n, step, lr, o->beta1,
                      o->beta2, o->eps, o->weight_decay);
        break;
    }
}

void rtb_optimizer(rt_rank* R, int g, int r, int64_t lo, int64_t glo, int64_t n, int k, int per,
                   int item) {
    (void)r;
    double t0 = now_s();
    optimizer(R, g, lo, glo, n, k, per, item, 1);
    span(R, t0, &R->t_optim, 0, R->model->groups[g].name, "optimizer");
}

// The optimizer on the runs of rows whose mask entry (row < vocab and looked up by a token of
// the step) is set for RT_ROWS_LOOKED_UP, clear for the others; RT_ROWS_UNUSED's rows with no
// gradient (rt_optim.h: grad NULL), RT_ROWS_FINAL's with theirs, the looked-up rows'
// gradients set to 0 once read (rt_step.h). The unused rows' step builds the mask,
// which the looked-up rows' step reads (every unused-rows line precedes every looked-up
// one: generator/plan/optimizer.lua Sim:split_token_rows, reductions.lua Sim:reduce_parts).
void rtb_optimizer_rows(rt_rank* R, int g, int r, int64_t lo, int64_t glo, int64_t rows,
                        int64_t row_len, int k, int per, int item, int mode) {
    (void)r;
    double t0 = now_s();
    const rt_model* m = R->model;
    uint8_t* mask = R->backend;
    const int64_t n_tokens = m->batch * m->seq_len;
    const int looked_up = mode == RT_ROWS_LOOKED_UP;
    if (!looked_up) {
        memset(mask, 0, (size_t)m->vocab);
        for (int a = 0; a < m->n_forward; a++)
            for (int64_t i = 0; i < n_tokens; i++) {
                const int32_t t = R->tokens[a][i];
                if (t >= 0 && t < m->vocab) mask[t] = 1;
            }
    }
    for (int64_t i = 0; i < rows;) {
        const int in = i < m->vocab && mask[i];
        int64_t j = i + 1;
        while (j < rows && (j < m->vocab && mask[j]) == in) j++;
        if (in == looked_up) {
            const int64_t at = i * row_len, n = (j - i) * row_len;
            optimizer(R, g, lo + at, glo + at, n, k, per, item, mode != RT_ROWS_UNUSED);
            if (in)
                memset(rt_step_optim_span(R, g, lo + at, glo + at, n).grads, 0,
                       (size_t)n * sizeof(float));
        }
        i = j;
    }
    span(R, t0, &R->t_optim, 0, m->groups[g].name, "optimizer");
}

void rtb_loss(rt_rank* R, int k, const float* loss) { R->losses[k] = loss[0]; }
