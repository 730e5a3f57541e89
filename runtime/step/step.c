// The FSDP side of a generated step on one rank: the group state machine of FSDP2's
// FSDPParamGroup (sharded / post-forward / unsharded), its collectives through rt_fsdp,
// events and counts, the optimizer over the sharded parameters, and checked views of the
// rank's arena. See rt_step.h for the contract of each call.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rt_kernels.h"
#include "rt_optim.h"
#include "rt_step.h"
#include "rt_trace.h"

// ---- helpers ----------------------------------------------------------------------------

void rt_rank_die(rt_rank* R, const char* fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "fsdpgen: rank %d: %s\n", R ? R->rank : -1, msg);
    fflush(stderr);
    if (R && R->comm) rt_comm_abort(R->comm, msg);
    exit(1);
}

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

static const rt_model_group* G(rt_rank* R, int g) {
    if (g < 0 || g >= R->model->ngroups) rt_rank_die(R, "group index %d out of range", g);
    return &R->model->groups[g];
}

static void count(rt_rank* R, const char* op) {
    char what[48];
    snprintf(what, sizeof what, "%s %s", R->phase ? R->phase : "?", op);
    for (int i = 0; i < R->ncounts; i++)
        if (!strcmp(R->counts[i].what, what)) {
            R->counts[i].count++;
            return;
        }
    if (R->ncounts == RT_STEP_MAX_COUNTS) rt_rank_die(R, "too many kinds of collectives");
    snprintf(R->counts[R->ncounts].what, sizeof R->counts[0].what, "%s", what);
    R->counts[R->ncounts++].count = 1;
}

static void event(rt_rank* R, const char* state, const char* kind, int g) {
    if (R->nevents == R->cap_events) {
        int cap = R->cap_events ? 2 * R->cap_events : 64;
        rt_step_event* e = realloc(R->events, (size_t)cap * sizeof *e);
        if (!e) rt_rank_die(R, "out of memory recording events");
        R->events = e;
        R->cap_events = cap;
    }
    R->events[R->nevents++] = (rt_step_event){state, kind, g};
    if (R->trace) {
        char name[160];
        snprintf(name, sizeof name, "%s \"%s\"", kind, R->model->groups[g].name);
        rt_trace_instant(R->trace, R->rank, 0, name, "fsdp", rt_trace_now_us(R->trace), "state", state);
    }
}

static float* f32_at(rt_rank* R, size_t off, int64_t elem, int64_t n) {
    return (float*)rt_step_buffer(R, off + 4 * (size_t)elem, 4 * (size_t)n, __FILE__, __LINE__);
}

// Per-parameter pointers into an fp32 buffer at byte offset off: param i of group g at
// element unsharded_offset (unsharded buffers) or block_offset (sharded ones).
static void param_ptrs(rt_rank* R, int g, size_t off, int unsharded, void** out) {
    const rt_model_group* mg = G(R, g);
    for (int i = 0; i < mg->nparams; i++) {
        const rt_model_param* p = &R->model->params[mg->params[i]];
        rt_fsdp_param_layout* l = &R->groups[g].layout.params[i];
        if (unsharded) out[i] = f32_at(R, off, p->unsharded_offset, l->numel);
        else out[i] = f32_at(R, off, p->block_offset, l->padded_shard_numel);
    }
}


static const char* state_name(rt_group_state s) {
    return s == RT_UNSHARDED ? "unsharded" : s == RT_SHARDED ? "sharded" : "sharded_post_forward";
}

// ---- setup ------------------------------------------------------------------------------

static int layouts_init(rt_rank* R, int g) {
    const rt_model* m = R->model;
    const rt_model_group* mg = &m->groups[g];
    rt_rank_group* rg = &R->groups[g];
    rt_fsdp_param_desc* d = calloc((size_t)mg->nparams + 1, sizeof *d);
    if (!d) return -1;
    for (int i = 0; i < mg->nparams; i++) {
        const rt_model_param* p = &m->params[mg->params[i]];
        d[i].name = p->fqn;
        d[i].ndim = p->ndim;
        memcpy(d[i].shape, p->shape, sizeof d[i].shape);
        d[i].placement = mg->placement;
    }
    int srank = rt_comm_rank(R->mesh.shard);
    int st = rt_fsdp_layout_init(&rg->layout, mg->name, d, mg->nparams, m->shard, srank);
    if (!st) {
        rt_fsdp_plan plan = {m->shard, srank, mg->nparams, mg->block_numel, mg->padded_numel,
                             mg->plan + (size_t)srank * mg->nparams};
        st = rt_fsdp_layout_check(&rg->layout, &plan);
    }
    if (st) {
        fprintf(stderr, "fsdpgen: rank %d: %s\n", R->rank, rg->layout.error);
    } else if (mg->pf_world > 0) {
        st = rt_fsdp_post_forward_comm(R->mesh.shard, mg->pf_world, &rg->pf_comm);
        if (!st)
            st = rt_fsdp_layout_init_post_forward(&rg->pf_layout, mg->name, d, mg->nparams, m->shard,
                                                  mg->pf_world, rt_comm_rank(rg->pf_comm));
        if (st) fprintf(stderr, "fsdpgen: rank %d: post-forward group of '%s': %s\n", R->rank,
                        mg->name, rg->pf_layout.error[0] ? rg->pf_layout.error : rt_status_name(st));
    }
    free(d);
    for (int k = 0; k < 2 && !st; k++) {
        rg->ptrs[k] = calloc((size_t)mg->nparams + 1, sizeof *rg->ptrs[k]);
        if (!rg->ptrs[k]) {
            fprintf(stderr, "fsdpgen: rank %d: out of memory setting up group '%s'\n", R->rank, mg->name);
            st = RT_ERR_NOMEM;
        }
    }
    return st;
}

int rt_rank_init(rt_rank* R, const rt_model* model, rt_comm* comm) {
    memset(R, 0, sizeof *R);
    R->model = model;
    R->comm = comm;
    R->rank = rt_comm_rank(comm);
    R->world = rt_comm_size(comm);
    if (R->world != model->world) {
        fprintf(stderr, "fsdpgen: %s was generated for %d ranks, the communicator has %d\n",
                model->name, model->world, R->world);
        rt_comm_abort(comm, "world size mismatch");
        return 1;
    }
    int st = rt_fsdp_mesh_init(comm, model->replicate > 1 ? model->replicate : 0, model->shard, &R->mesh);
    if (st) {
        fprintf(stderr, "fsdpgen: rank %d: mesh %d x %d: %s\n", R->rank, model->replicate,
                model->shard, rt_status_name(st));
        return 1;
    }
    R->groups = calloc((size_t)model->ngroups + 1, sizeof *R->groups);
    R->losses = calloc((size_t)model->n_backward + 1, sizeof *R->losses);
    if (!R->groups || !R->losses) {
        rt_comm_abort(comm, "out of memory");
        return 1;
    }
    for (int g = 0; g < model->ngroups; g++)
        if (layouts_init(R, g)) {
            rt_comm_abort(comm, "layout check failed");
            return 1;
        }
    char name[48];
    snprintf(name, sizeof name, "rank %d", R->rank);
    if (rt_arena_init(&R->arena, model->arena_bytes, name)) {
        fprintf(stderr, "fsdpgen: rank %d: arena of %zu bytes: %s\n", R->rank, model->arena_bytes,
                R->arena.error);
        rt_comm_abort(comm, "arena allocation failed");
        return 1;
    }
    return 0;
}

void rt_rank_free(rt_rank* R) {
    if (!R->model) return;
    for (int g = 0; R->groups && g < R->model->ngroups; g++) {
        rt_fsdp_layout_free(&R->groups[g].layout);
        free(R->groups[g].ptrs[0]);
        free(R->groups[g].ptrs[1]);
        if (R->groups[g].pf_comm) {
            rt_fsdp_layout_free(&R->groups[g].pf_layout);
            rt_comm_free(R->groups[g].pf_comm);
        }
    }
    free(R->groups);
    free(R->losses);
    free(R->events);
    rt_fsdp_mesh_free(&R->mesh);
    rt_arena_free(&R->arena);
    memset(R, 0, sizeof *R);
}

// ---- arena views ------------------------------------------------------------------------

void* rt_step_buffer(rt_rank* R, size_t off, size_t bytes, const char* file, int line) {
    void* p = rt_arena_bytes(&R->arena, "planned buffer", off, bytes);
    if (!p) rt_rank_die(R, "%s:%d: %s", file, line, R->arena.error);
    return p;
}

// ---- step -------------------------------------------------------------------------------

void rt_step_begin(rt_rank* R) {
    const rt_model* m = R->model;
    R->nevents = 0;
    R->ncounts = 0;
    R->phase = NULL;
    for (int g = 0; g < m->ngroups; g++) {
        const rt_model_group* mg = &m->groups[g];
        rt_rank_group* rg = &R->groups[g];
        if (rg->state != RT_SHARDED || rg->pending)
            rt_rank_die(R, "step %lld begins with group '%s' %s", (long long)R->step + 1, mg->name,
                        state_name(rg->state));
        rg->reduced = 0;
        rt_zero(f32_at(R, mg->grads_off, 0, mg->block_numel), (size_t)mg->block_numel);
    }
    for (int k = 0; k < m->n_backward; k++) R->losses[k] = 0;
}

void rt_step_section(rt_rank* R, const char* phase) { R->phase = phase; }

void rt_step_end(rt_rank* R) {
    for (int g = 0; g < R->model->ngroups; g++) {
        rt_rank_group* rg = &R->groups[g];
        if (rg->state != RT_SHARDED || rg->pending)
            rt_rank_die(R, "step ends with group '%s' %s%s (the next step's plan assumes every "
                        "group sharded)", R->model->groups[g].name, state_name(rg->state),
                        rg->pending ? " and an all-gather in flight" : "");
    }
}

// ---- all-gather -------------------------------------------------------------------------

void rt_step_all_gather(rt_rank* R, int g, int sub, const char* state, size_t out_off, size_t pf_off) {
    const rt_model_group* mg = G(R, g);
    rt_rank_group* rg = &R->groups[g];
    if (rg->pending || rg->state == RT_UNSHARDED || sub != (rg->state == RT_SHARDED_POST_FORWARD))
        rt_rank_die(R, "all-gather of group '%s' (%s) while it is %s%s", mg->name,
                    sub ? "from post-forward shards" : "from shards", state_name(rg->state),
                    rg->pending ? " with an all-gather in flight" : "");
    double t0 = now_s();
    rt_fsdp_layout* L = sub ? &rg->pf_layout : &rg->layout;
    rt_comm* comm = sub ? rg->pf_comm : R->mesh.shard;
    void** shards = rg->ptrs[0];
    for (int i = 0; i < mg->nparams; i++) {
        rt_fsdp_param_layout* p = &L->params[i];
        size_t base = sub ? pf_off : mg->params_off;
        int64_t at = sub ? p->offset : R->model->params[mg->params[i]].block_offset;
        shards[i] = f32_at(R, base, at, p->in_numel);
    }
    void* out = RT_BUF(R, out_off, (size_t)L->total_numel * rt_dtype_size(mg->param_dtype));
    int st = rt_fsdp_all_gather_copy_in(L, (const void* const*)shards, RT_F32, out, mg->param_dtype);
    if (st) rt_rank_die(R, "%s", L->error);
    st = rt_fsdp_all_gather(L, comm, out, mg->param_dtype, NULL);
    if (st) rt_rank_die(R, "%s", L->error);
    rg->pending = 1;
    rg->pending_sub = sub;
    rg->pending_out = out_off;
    event(R, state, "unshard", g);
    count(R, "all_gather");
    span(R, t0, &R->t_comm, RT_TRACE_ALL_GATHER, mg->name, "all_gather");
}

void rt_step_all_gather_wait(rt_rank* R, int g, size_t unsharded_off) {
    const rt_model_group* mg = G(R, g);
    rt_rank_group* rg = &R->groups[g];
    if (!rg->pending) rt_rank_die(R, "wait for an all-gather of group '%s' that was not issued", mg->name);
    rt_fsdp_layout* L = rg->pending_sub ? &rg->pf_layout : &rg->layout;
    void* out = RT_BUF(R, rg->pending_out, (size_t)L->total_numel * rt_dtype_size(mg->param_dtype));
    RT_BUF(R, unsharded_off, 4 * (size_t)mg->padded_numel);
    void** un = rg->ptrs[0];
    param_ptrs(R, g, unsharded_off, 1, un);
    int st = rt_fsdp_all_gather_copy_out_as(L, out, mg->param_dtype, un, RT_F32);
    if (st) rt_rank_die(R, "%s", L->error);
    rg->pending = 0;
    rg->state = RT_UNSHARDED;
}

void rt_step_all_gather_drop(rt_rank* R, int g) {
    rt_rank_group* rg = &R->groups[g];
    if (!rg->pending) rt_rank_die(R, "drop of an all-gather of group '%s' that was not issued", G(R, g)->name);
    rg->pending = 0;
}

// ---- reshard ----------------------------------------------------------------------------

void rt_step_reshard(rt_rank* R, int g, const char* state) {
    rt_rank_group* rg = &R->groups[g];
    if (rg->state == RT_SHARDED) rt_rank_die(R, "reshard of group '%s', which is sharded", G(R, g)->name);
    if (rg->state == RT_UNSHARDED) event(R, state, "reshard", g);
    rg->state = RT_SHARDED;
}

void rt_step_reshard_post_forward(rt_rank* R, int g, const char* state, size_t unsharded_off,
                                  size_t pf_off) {
    const rt_model_group* mg = G(R, g);
    rt_rank_group* rg = &R->groups[g];
    if (rg->state != RT_UNSHARDED || !rg->pf_comm)
        rt_rank_die(R, "post-forward reshard of group '%s' while it is %s", mg->name, state_name(rg->state));
    void** un = rg->ptrs[0];
    void** shards = rg->ptrs[1];
    param_ptrs(R, g, unsharded_off, 1, un);
    for (int i = 0; i < mg->nparams; i++) {
        rt_fsdp_param_layout* p = &rg->pf_layout.params[i];
        shards[i] = f32_at(R, pf_off, p->offset, p->in_numel);
    }
    int st = rt_fsdp_post_forward_shards(&rg->pf_layout, (const void* const*)un, RT_F32, shards);
    if (st) rt_rank_die(R, "%s", rg->pf_layout.error);
    event(R, state, "reshard", g);
    rg->state = RT_SHARDED_POST_FORWARD;
}

// ---- gradients --------------------------------------------------------------------------

void rt_step_round(float* x, size_t n, rt_dtype dtype) {
    if (dtype == RT_BF16)
        for (size_t i = 0; i < n; i++) x[i] = rt_bf16_to_f32(rt_f32_to_bf16(x[i]));
    else if (dtype == RT_F16)
        for (size_t i = 0; i < n; i++) x[i] = rt_f16_to_f32(rt_f32_to_f16(x[i]));
}

void rt_step_accumulate_grads(rt_rank* R, int g, size_t ugrad_off, size_t acc_off) {
    const rt_model_group* mg = G(R, g);
    float* u = f32_at(R, ugrad_off, 0, mg->padded_numel);
    rt_step_round(u, (size_t)mg->padded_numel, mg->param_dtype);
    rt_accumulate(f32_at(R, acc_off, 0, mg->padded_numel), u, (size_t)mg->padded_numel);
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

void rt_step_reduce_scatter(rt_rank* R, int g, size_t grads_off, rt_dtype grads_dtype,
                            size_t rs_in_off, size_t rs_out_off) {
    const rt_model_group* mg = G(R, g);
    rt_rank_group* rg = &R->groups[g];
    double t0 = now_s();
    rt_fsdp_layout* L = &rg->layout;
    size_t es = rt_dtype_size(mg->reduce_dtype);
    rt_step_round(f32_at(R, grads_off, 0, mg->padded_numel), (size_t)mg->padded_numel, grads_dtype);
    void** grads = rg->ptrs[0];
    void** sharded = rg->ptrs[1];
    param_ptrs(R, g, grads_off, 1, grads);
    for (int i = 0; i < mg->nparams; i++) {
        const rt_model_param* p = &R->model->params[mg->params[i]];
        sharded[i] = f32_at(R, mg->grads_off, p->block_offset, L->params[i].shard_numel);
    }
    void* in = RT_BUF(R, rs_in_off, (size_t)L->total_numel * es);
    void* out = RT_BUF(R, rs_out_off, (size_t)L->block_numel * es);
    rt_fsdp_reduce_args a = {R->mesh.shard, mg->all_reduce ? R->mesh.replicate : NULL,
                             mg->reduce_dtype, mg->divide_factor, mg->force_sum, NULL};
    if (mg->all_reduce && !R->mesh.replicate)
        rt_rank_die(R, "group '%s' all-reduces across replicas, but the mesh has none", mg->name);
    int st = rt_fsdp_reduce_scatter_copy_in(L, (const void* const*)grads, RT_F32, in, mg->reduce_dtype);
    if (!st) st = R->model->reference ? reference_reduce(R, mg, L, in, out) : rt_fsdp_reduce_scatter(L, &a, in, out);
    if (!st) st = rt_fsdp_reduce_scatter_view_out(L, out, mg->reduce_dtype, sharded, RT_F32, rg->reduced > 0);
    if (st) rt_rank_die(R, "%s", L->error);
    rg->reduced++;
    count(R, "reduce_scatter");
    span(R, t0, &R->t_comm, RT_TRACE_REDUCE_SCATTER, mg->name, "reduce_scatter");
}

void rt_step_all_reduce(rt_rank* R, int g) {
    const rt_model_group* mg = G(R, g);
    if (!mg->all_reduce || !R->mesh.replicate || !R->groups[g].reduced)
        rt_rank_die(R, "all-reduce of group '%s' without an HSDP reduce-scatter before it", mg->name);
    count(R, "all_reduce");
}

void rt_step_post_backward(rt_rank* R, int g, const char* state) {
    G(R, g);
    event(R, state, "post_backward", g);
}

// ---- optimizer --------------------------------------------------------------------------

void rt_step_clip_grad_norm(rt_rank* R) {
    const rt_model* m = R->model;
    double t0 = now_s();
    double local = 0;
    for (int g = 0; g < m->ngroups; g++)
        local += rt_sumsq(f32_at(R, m->groups[g].grads_off, 0, m->groups[g].block_numel),
                          (size_t)m->groups[g].block_numel);
    // Replicas hold identical shards: the norm sums over one shard group.
    float sum = (float)local;
    if (rt_comm_size(R->mesh.shard) > 1) {
        int st = rt_comm_all_reduce(R->mesh.shard, &sum, &sum, 1, RT_F32, rt_red_sum(), NULL);
        if (st) rt_rank_die(R, "clip_grad_norm all-reduce: %s", rt_comm_last_error(R->mesh.shard));
    }
    double total = sqrt((double)sum);
    for (int g = 0; g < m->ngroups; g++)
        rt_clip_grad_norm(f32_at(R, m->groups[g].grads_off, 0, m->groups[g].block_numel),
                          (size_t)m->groups[g].block_numel, total, m->grad_clip);
    span(R, t0, &R->t_optim, 0, "clip_grad_norm", "optimizer");
}

void rt_step_optimizer(rt_rank* R, int g) {
    const rt_model_group* mg = G(R, g);
    const rt_model_optim* o = &R->model->optim;
    // A group that got no gradient this step has grad None: torch.optim skips it.
    if (!R->groups[g].reduced) return;
    double t0 = now_s();
    size_t n = (size_t)mg->block_numel;
    float* p = f32_at(R, mg->params_off, 0, mg->block_numel);
    float* gr = f32_at(R, mg->grads_off, 0, mg->block_numel);
    float* s = o->nstates ? f32_at(R, mg->state_off, 0, o->nstates * mg->block_numel) : NULL;
    int64_t step = R->step + 1;
    switch (o->kind) {
    case RT_OPTIM_SGD:
        rt_sgd_step(p, gr, o->momentum > 0 ? s : NULL, n, step, o->lr, o->momentum, o->dampening,
                    o->weight_decay, o->nesterov);
        break;
    case RT_OPTIM_ADAM:
        rt_adam_step(p, gr, s, s + n, n, step, o->lr, o->beta1, o->beta2, o->eps, o->weight_decay);
        break;
    case RT_OPTIM_ADAMW:
        rt_adamw_step(p, gr, s, s + n, n, step, o->lr, o->beta1, o->beta2, o->eps, o->weight_decay);
        break;
    }
    span(R, t0, &R->t_optim, 0, mg->name, "optimizer");
}

// ---- losses and RNG ---------------------------------------------------------------------

void rt_step_loss(rt_rank* R, int k, const float* loss) {
    if (k < 0 || k >= R->model->n_backward) rt_rank_die(R, "loss index %d out of range", k);
    R->losses[k] = loss[0];
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

uint64_t rt_step_rng_stream(const rt_rank* R, int site) {
    return splitmix64(splitmix64(splitmix64((uint64_t)R->step) ^ (uint64_t)R->rank) ^ (uint64_t)site);
}
