// The FSDP side of a generated step on one rank, common to every backend: the group state
// machine of FSDP2's FSDPParamGroup (sharded / post-forward / unsharded), events and
// counts, the checks that every call fits the group's state, setup of the mesh and the
// layouts, and checked views of the rank's arena. The data movement behind each call is
// the backend's (step_backend.h). See rt_step.h for the contract of each call.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rt_trace.h"
#include "step_backend.h"

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

float* rt_step_f32(rt_rank* R, size_t off, int64_t elem, int64_t n) {
    return (float*)rt_step_buffer(R, off + 4 * (size_t)elem, 4 * (size_t)n, __FILE__, __LINE__);
}

rt_optim_span rt_step_optim_span(rt_rank* R, int g, int64_t lo, int64_t glo, int64_t n) {
    const rt_model_group* mg = G(R, g);
    int nstates = R->model->optim.nstates;
    rt_optim_span sp = {rt_step_f32(R, mg->params_off, lo, n), NULL, NULL, NULL, NULL};
    if (mg->grads_packed)
        sp.grads16 = rt_step_buffer(R, mg->grads_off + 2 * (size_t)glo, 2 * (size_t)n, __FILE__,
                                    __LINE__);
    else
        sp.grads = rt_step_f32(R, mg->grads_off, glo, n);
    if (nstates > 0) sp.state1 = rt_step_f32(R, mg->state_off, glo, n);
    if (nstates > 1) sp.state2 = rt_step_f32(R, mg->state_off, rt_model_grad_numel(mg) + glo, n);
    return sp;
}

int64_t rt_step_ugrad_numel(rt_rank* R, int g) {
    return rt_model_grad_numel(G(R, g)) * R->groups[g].layout.world;
}

float* rt_step_sharded_grads(rt_rank* R, int g) {
    return rt_step_f32(R, G(R, g)->grads_off, 0, rt_model_grad_numel(G(R, g)));
}

void rt_step_param_ptrs(rt_rank* R, int g, size_t off, void** out) {
    const rt_model_group* mg = G(R, g);
    const rt_rank_group* rg = &R->groups[g];
    for (int i = 0; i < mg->nparams; i++) {
        const rt_model_param* p = &R->model->params[mg->params[i]];
        size_t bytes = (size_t)rg->layout.params[i].numel * rt_dtype_size(rg->unsharded_dtypes[i]);
        out[i] = p->from_shard ? NULL
                               : rt_step_buffer(R, off + 4 * (size_t)p->unsharded_word, bytes,
                                                __FILE__, __LINE__);
    }
}

void rt_step_grad_ptrs(rt_rank* R, int g, size_t off, void** out) {
    const rt_model_group* mg = G(R, g);
    for (int i = 0; i < mg->nparams; i++) {
        const rt_model_param* p = &R->model->params[mg->params[i]];
        const int64_t n = R->groups[g].layout.params[i].numel;
        out[i] = p->frozen ? NULL : rt_step_f32(R, off, p->unsharded_offset, n);
    }
}


static const char* state_name(rt_group_state s) {
    return s == RT_UNSHARDED ? "unsharded" : s == RT_SHARDED ? "sharded" : "sharded_post_forward";
}

// ---- setup ------------------------------------------------------------------------------

// The generator's packing of an unsharded parameter (rt_model.h `packed`) checked again.
static int packed_param_ok(const rt_model_param* p, const rt_model_group* mg) {
    return (mg->param_dtype == RT_BF16 || mg->param_dtype == RT_F16) &&
           ((p->ndim == 2 && p->shape[0] % 8 == 0 && p->shape[1] % 8 == 0) ||
            (p->ndim == 1 && p->shape[0] % 8 == 0));
}

// The unsharded parameters' layout (rt_model_param unsharded_word; generator/memory/
// packing.lua place_unsharded_params) checked against the generator's size of the buffers it
// planned for them (rt_model_group unsharded_words): the parameters packed tight in an order
// of the generator's (rt_fsdp_unsharded_check), which need not be the group's (stacked
// linears' weights one after another).
static int unsharded_layout(rt_rank* R, int g) {
    const rt_model_group* mg = &R->model->groups[g];
    const rt_rank_group* rg = &R->groups[g];
    rt_fsdp_unsharded_param* u = calloc((size_t)mg->nparams + 1, sizeof *u);
    if (!u) {
        fprintf(stderr, "fsdpgen: rank %d: out of memory setting up group '%s'\n", R->rank, mg->name);
        return RT_ERR_NOMEM;
    }
    for (int i = 0; i < mg->nparams; i++) {
        const rt_model_param* p = &R->model->params[mg->params[i]];
        int64_t numel = rg->layout.params[i].numel;
        u[i] = (rt_fsdp_unsharded_param){p->fqn, p->unsharded_word,
                                         p->from_shard ? 0 : p->packed ? numel / 2 : numel};
    }
    char err[768];
    int st = rt_fsdp_unsharded_check(mg->name, u, mg->nparams, mg->unsharded_words, err, sizeof err);
    if (st) fprintf(stderr, "fsdpgen: rank %d: %s\n", R->rank, err);
    free(u);
    return st;
}

// The room for gradients and optimizer state (rt_model_param frozen, frozen_before;
// rt_model_group frozen_numel) checked against the layout: the padded shards of the
// parameters with requires_grad one after another, in group order; a frozen one has no
// gradient.
static int grads_layout(rt_rank* R, int g) {
    const rt_model_group* mg = &R->model->groups[g];
    const rt_fsdp_layout* L = &R->groups[g].layout;
    int64_t frozen = 0;
    for (int i = 0; i < mg->nparams; i++) {
        const rt_model_param* p = &R->model->params[mg->params[i]];
        if (p->frozen && (mg->frozen || !p->grad_none)) {
            fprintf(stderr, "fsdpgen: rank %d: parameter '%s' of group '%s' is planned frozen, which "
                    "needs trainable parameters beside it and no gradient (a generator bug)\n",
                    R->rank, p->fqn, mg->name);
            return RT_ERR_MISMATCH;
        }
        if (!p->frozen && p->frozen_before != frozen) {
            fprintf(stderr, "fsdpgen: rank %d: parameter '%s' of group '%s': planned %lld elements "
                    "of frozen shards before its gradient, the layout has %lld\n", R->rank, p->fqn,
                    mg->name, (long long)p->frozen_before, (long long)frozen);
            return RT_ERR_MISMATCH;
        }
        if (p->frozen) frozen += L->params[i].in_numel;
    }
    if (mg->frozen_numel != frozen) {
        fprintf(stderr, "fsdpgen: rank %d: group '%s': planned %lld elements of frozen shards in a "
                "block, the layout has %lld\n", R->rank, mg->name, (long long)mg->frozen_numel,
                (long long)frozen);
        return RT_ERR_MISMATCH;
    }
    return 0;
}

// The layouts of the group's reductions of some parameters, from the group's parameter
// descriptions d, checked against the generator's indices and block sizes.
static int reductions_init(rt_rank* R, int g, const rt_fsdp_param_desc* d, int srank) {
    const rt_model_group* mg = &R->model->groups[g];
    rt_rank_group* rg = &R->groups[g];
    if (!mg->nreductions) return 0;
    rg->reductions = calloc((size_t)mg->nreductions, sizeof *rg->reductions);
    rt_fsdp_param_desc* sub = calloc((size_t)mg->nparams, sizeof *sub);
    int st = !rg->reductions || !sub ? RT_ERR_NOMEM : 0;
    if (st) fprintf(stderr, "fsdpgen: rank %d: out of memory setting up group '%s'\n", R->rank, mg->name);
    for (int k = 0; k < mg->nreductions && !st; k++) {
        const rt_model_reduction* mr = &mg->reductions[k];
        int ok = mr->nparams >= 1 && mr->nparams < mg->nparams;
        for (int i = 0; i < mr->nparams && ok; i++) {
            ok = mr->params[i] >= (i ? mr->params[i - 1] + 1 : 0) && mr->params[i] < mg->nparams;
            if (ok) sub[i] = d[mr->params[i]];
        }
        if (!ok) {
            fprintf(stderr, "fsdpgen: rank %d: reduction %d of group '%s' must list 1 to %d of its "
                    "parameter indices, increasing, below %d (a generator bug)\n",
                    R->rank, k + 1, mg->name, mg->nparams - 1, mg->nparams);
            st = RT_ERR_MISMATCH;
        } else if ((st = rt_fsdp_layout_init(&rg->reductions[k], mg->name, sub, mr->nparams, R->model->shard,
                                             srank))) {
            fprintf(stderr, "fsdpgen: rank %d: reduction %d of group '%s': %s\n", R->rank, k + 1, mg->name,
                    rg->reductions[k].error);
        } else if (rg->reductions[k].block_numel != mr->block_numel) {
            fprintf(stderr, "fsdpgen: rank %d: reduction %d of group '%s': planned block of %lld elements, "
                    "the layout has %lld\n", R->rank, k + 1, mg->name, (long long)mr->block_numel,
                    (long long)rg->reductions[k].block_numel);
            st = RT_ERR_MISMATCH;
        }
    }
    free(sub);
    return st;
}

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
                             mg->plan[srank]};
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
    if (!st) st = reductions_init(R, g, d, srank);
    free(d);
    for (int k = 0; k < 2 && !st; k++) rg->ptrs[k] = calloc((size_t)mg->nparams + 1, sizeof *rg->ptrs[k]);
    if (!st) rg->unsharded_dtypes = calloc((size_t)mg->nparams + 1, sizeof *rg->unsharded_dtypes);
    if (!st) rg->direct_copied = calloc((size_t)mg->nparams + 1, sizeof *rg->direct_copied);
    if (!st && (!rg->ptrs[0] || !rg->ptrs[1] || !rg->unsharded_dtypes || !rg->direct_copied)) {
        fprintf(stderr, "fsdpgen: rank %d: out of memory setting up group '%s'\n", R->rank, mg->name);
        st = RT_ERR_NOMEM;
    }
    if (!st && mg->grads_packed &&
        (m->shard != 1 || (mg->param_dtype != RT_BF16 && mg->param_dtype != RT_F16))) {
        fprintf(stderr, "fsdpgen: rank %d: group '%s' is planned with packed gradients, which "
                "need one shard rank and a bf16/fp16 param_dtype (a generator bug)\n", R->rank,
                mg->name);
        st = RT_ERR_MISMATCH;
    }
    for (int i = 0; i < mg->nparams && !st; i++) {
        const rt_model_param* p = &m->params[mg->params[i]];
        if (p->packed && !packed_param_ok(p, mg)) {
            fprintf(stderr, "fsdpgen: rank %d: parameter '%s' of group '%s' is planned packed, but "
                    "packed parameters are weights of 2-D with both dims multiples of 8 or biases of "
                    "a multiple of 8 values, in a bf16/fp16 group (a generator bug)\n",
                    R->rank, p->fqn, mg->name);
            st = RT_ERR_MISMATCH;
        }
        if (p->from_shard && (p->packed || m->shard != 1)) {
            fprintf(stderr, "fsdpgen: rank %d: parameter '%s' of group '%s' is planned to be read "
                    "from the sharded parameters, which needs one shard rank and no packed storage "
                    "(a generator bug)\n", R->rank, p->fqn, mg->name);
            st = RT_ERR_MISMATCH;
        }
        rg->unsharded_dtypes[i] = p->packed ? mg->param_dtype : RT_F32;
        rg->direct_copied[i] = p->from_shard ? -1 : 0;
    }
    if (!st) st = grads_layout(R, g);
    return st ? st : unsharded_layout(R, g);
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
    if (rtb_rank_init(R)) {
        rt_comm_abort(comm, "backend setup failed");
        return 1;
    }
    // Kept across steps: kept from the start, cast before the first step reads them.
    for (int g = 0; g < model->ngroups; g++)
        if (model->groups[g].kept_across) {
            if (R->groups[g].layout.world != 1) {
                fprintf(stderr, "fsdpgen: rank %d: group '%s' keeps its unsharded params across "
                                "steps over %d ranks (generated plan is inconsistent: it needs one)\n",
                        R->rank, model->groups[g].name, R->groups[g].layout.world);
                rt_comm_abort(comm, "layout check failed");
                return 1;
            }
            R->groups[g].kept = 1;
            R->groups[g].kept_at = model->groups[g].kept_off;
        }
    R->kept_stale = 1;
    return 0;
}

void rt_step_refresh_kept(rt_rank* R) {
    if (!R->kept_stale) return;
    for (int g = 0; g < R->model->ngroups; g++)
        if (R->model->groups[g].kept_across) rtb_refresh_kept(R, g, R->model->groups[g].kept_off);
    R->kept_stale = 0;
}

void rt_rank_free(rt_rank* R) {
    if (!R->model) return;
    rtb_rank_free(R);  // first: it waits for the rank's work, which uses the communicators
    for (int g = 0; R->groups && g < R->model->ngroups; g++) {
        rt_fsdp_layout_free(&R->groups[g].layout);
        for (int k = 0; R->groups[g].reductions && k < R->model->groups[g].nreductions; k++)
            rt_fsdp_layout_free(&R->groups[g].reductions[k]);
        free(R->groups[g].reductions);
        free(R->groups[g].ptrs[0]);
        free(R->groups[g].ptrs[1]);
        free(R->groups[g].unsharded_dtypes);
        free(R->groups[g].direct_copied);
        if (R->groups[g].pf_comm) {
            rt_fsdp_layout_free(&R->groups[g].pf_layout);
            rt_comm_free(R->groups[g].pf_comm);
        }
    }
    free(R->groups);
    free(R->losses);
    free(R->events);
    rt_fsdp_mesh_free(&R->mesh);
    memset(R, 0, sizeof *R);
}

// ---- arena views ------------------------------------------------------------------------

void* rt_step_buffer(rt_rank* R, size_t off, size_t bytes, const char* file, int line) {
    void* p = rt_arena_bytes(&R->arena, "planned buffer", off, bytes);
    if (!p) rt_rank_die(R, "%s:%d: %s", file, line, R->arena.error);
    if (off < R->offload_end) {
        if (bytes > R->offload_end - off)
            rt_rank_die(R, "%s:%d: buffer [%zu, %zu) crosses the end %zu of the offloaded state",
                        file, line, off, off + bytes, R->offload_end);
        p = R->offload_base + off;
    }
    return p;
}

size_t rt_step_persistent_end(const rt_model* m) {
    size_t end = 0, states = (size_t)m->optim.nstates;
    for (int g = 0; g < m->ngroups; g++) {
        const rt_model_group* mg = &m->groups[g];
        // the gradients and state hold the trainable parameters' alone (rt_model_grad_numel)
        size_t pb = 4 * (size_t)mg->block_numel, b = 4 * (size_t)rt_model_grad_numel(mg);
        size_t gb = mg->grads_packed ? b / 2 : b;
        size_t e[3] = {mg->params_off + pb, mg->frozen ? 0 : mg->grads_off + gb,
                       states && !mg->frozen ? mg->state_off + states * b : 0};
        for (int k = 0; k < 3; k++)
            if (e[k] > end) end = e[k];
    }
    return end;
}

// ---- step -------------------------------------------------------------------------------

void rt_step_begin(rt_rank* R) {
    const rt_model* m = R->model;
    R->nevents = 0;
    R->ncounts = 0;
    R->phase = NULL;
    R->ag_synced = 0;
    for (int g = 0; g < m->ngroups; g++) {
        rt_rank_group* rg = &R->groups[g];
        if (rg->state != RT_SHARDED || rg->pending)
            rt_rank_die(R, "step %lld begins with group '%s' %s", (long long)R->step + 1,
                        m->groups[g].name, state_name(rg->state));
        rg->reduced = rg->parts = 0;
    }
    for (int k = 0; k < m->n_backward; k++) R->losses[k] = 0;
    rtb_step_begin(R);
}

void rt_step_section(rt_rank* R, const char* phase) {
    R->phase = phase;
    rtb_section(R, phase);
}

void rt_step_end(rt_rank* R) {
    for (int g = 0; g < R->model->ngroups; g++) {
        const rt_model_group* mg = &R->model->groups[g];
        rt_rank_group* rg = &R->groups[g];
        // kept across steps: still kept where they always are; else not kept
        const int kept_wrong = mg->kept_across ? !rg->kept || rg->kept_at != mg->kept_off : rg->kept;
        if (rg->state != RT_SHARDED || rg->pending || kept_wrong)
            rt_rank_die(R, "step ends with group '%s' %s%s (the next step's plan assumes every "
                        "group sharded%s)", mg->name, state_name(rg->state),
                        rg->pending ? " and an all-gather in flight"
                        : !kept_wrong ? ""
                        : rg->kept ? " and its unsharded params kept" : " and its unsharded params not kept",
                        mg->kept_across ? ", its unsharded params kept across steps" : "");
    }
    rtb_step_end(R);
}

// ---- all-gather -------------------------------------------------------------------------

void rt_step_all_gather_sync(rt_rank* R) {
    rtb_all_gather_sync(R);
    R->ag_synced = 1;
}

// Every all-gather of a step follows a sync: the shards hold the last optimizer step, and
// under graph capture its streams join the step's graph.
static void check_synced(rt_rank* R, const rt_model_group* mg) {
    if (!R->ag_synced)
        rt_rank_die(R, "all-gather of group '%s' before the all-gather streams waited for compute in "
                       "this step (no all_gather_sync before it: generated plan is inconsistent)",
                    mg->name);
}

void rt_step_all_gather(rt_rank* R, int g, int sub, const char* state, size_t out_off, size_t pf_off) {
    const rt_model_group* mg = G(R, g);
    rt_rank_group* rg = &R->groups[g];
    check_synced(R, mg);
    if (rg->pending || rg->state == RT_UNSHARDED || sub != (rg->state == RT_SHARDED_POST_FORWARD))
        rt_rank_die(R, "all-gather of group '%s' (%s) while it is %s%s", mg->name,
                    sub ? "from post-forward shards" : "from shards", state_name(rg->state),
                    rg->pending ? " with an all-gather in flight" : "");
    rtb_all_gather(R, g, sub, out_off, pf_off);
    rg->pending = 1;
    rg->pending_direct = 0;
    rg->pending_sub = sub;
    rg->pending_out = out_off;
    event(R, state, "unshard", g);
    // FSDP2 issues no all-gather over one rank (a post-forward sub-group has two or more).
    if (sub || rg->layout.world > 1) count(R, "all_gather");
}

// Before a one-rank all-gather (what: "direct" or "kept"): the group sharded, none in flight.
static void one_rank_check(rt_rank* R, int g, const char* what) {
    const rt_rank_group* rg = &R->groups[g];
    if (rg->pending || rg->state != RT_SHARDED)
        rt_rank_die(R, "%s all-gather of group '%s' while it is %s%s", what, G(R, g)->name,
                    state_name(rg->state), rg->pending ? " with an all-gather in flight" : "");
}

// After it: in flight into the unsharded params at off (kept: nothing copied), and its event.
static void one_rank_issued(rt_rank* R, int g, const char* state, size_t off, int kept) {
    rt_rank_group* rg = &R->groups[g];
    rg->pending = rg->pending_direct = 1;
    rg->pending_kept = kept;
    rg->pending_sub = 0;
    rg->pending_out = off;
    event(R, state, "unshard", g);
}

// One rank's all-gather: no collective, so none counted (as FSDP2's world_size == 1 path).
void rt_step_all_gather_direct(rt_rank* R, int g, const char* state, size_t unsharded_off,
                               int beside) {
    const rt_model_group* mg = G(R, g);
    const rt_rank_group* rg = &R->groups[g];
    one_rank_check(R, g, "direct");
    if (rg->layout.world != 1)
        rt_rank_die(R, "group '%s': direct all-gather planned, but its shard group has %d ranks "
                       "(it needs one)", mg->name, rg->layout.world);
    check_synced(R, mg);
    rtb_all_gather_direct(R, g, unsharded_off, beside);
    one_rank_issued(R, g, state, unsharded_off, 0);
}

void rt_step_all_gather_kept(rt_rank* R, int g, const char* state, size_t unsharded_off) {
    const rt_model_group* mg = G(R, g);
    rt_rank_group* rg = &R->groups[g];
    one_rank_check(R, g, "kept");
    if (!rg->kept || rg->kept_at != unsharded_off)
        rt_rank_die(R, "kept all-gather of group '%s' at %zu, but no reshard kept its unsharded "
                       "params there (generated plan is inconsistent)", mg->name, unsharded_off);
    check_synced(R, mg);
    rg->kept = mg->kept_across;  // across steps: they stay the shards' values
    one_rank_issued(R, g, state, unsharded_off, !rtb_all_gather_kept(R, g, unsharded_off));
}

void rt_step_all_gather_wait(rt_rank* R, int g, size_t unsharded_off) {
    const rt_model_group* mg = G(R, g);
    rt_rank_group* rg = &R->groups[g];
    if (!rg->pending) rt_rank_die(R, "wait for an all-gather of group '%s' that was not issued", mg->name);
    if (rg->pending_direct && unsharded_off != rg->pending_out)
        rt_rank_die(R, "wait for the direct all-gather of group '%s' into the unsharded params at "
                       "%zu, but it wrote them at %zu (generated plan is inconsistent)", mg->name,
                    unsharded_off, rg->pending_out);
    if (!rg->pending_direct)
        rtb_all_gather_wait(R, g, rg->pending_sub, rg->pending_out, unsharded_off);
    else if (!rg->pending_kept)  // a kept one copied nothing: nothing to wait for
        rtb_all_gather_drop(R, g);
    rg->pending = rg->pending_direct = rg->pending_kept = 0;
    rg->state = RT_UNSHARDED;
    rt_step_all_gather_sync(R);
}

void rt_step_all_gather_drop(rt_rank* R, int g) {
    rt_rank_group* rg = &R->groups[g];
    if (!rg->pending) rt_rank_die(R, "drop of an all-gather of group '%s' that was not issued", G(R, g)->name);
    if (!rg->pending_kept) rtb_all_gather_drop(R, g);
    rg->pending = rg->pending_direct = rg->pending_kept = 0;
}

// ---- reshard ----------------------------------------------------------------------------

void rt_step_reshard(rt_rank* R, int g, const char* state) {
    rt_rank_group* rg = &R->groups[g];
    if (rg->state == RT_SHARDED) rt_rank_die(R, "reshard of group '%s', which is sharded", G(R, g)->name);
    // From sharded post-forward too (a manual reshard, or a post-backward from the final
    // callback): FSDP2's _to_sharded changes the state, so the group's next all-gather is
    // the full shard group's, and its recording lists the call.
    event(R, state, "reshard", g);
    rg->state = RT_SHARDED;
}

void rt_step_reshard_keep(rt_rank* R, int g, const char* state, size_t unsharded_off) {
    rt_rank_group* rg = &R->groups[g];
    if (rg->state != RT_UNSHARDED || rg->layout.world != 1)
        rt_rank_die(R, "keeping reshard of group '%s', which is %s over %d ranks (it needs one rank, "
                       "unsharded)", G(R, g)->name, state_name(rg->state), rg->layout.world);
    rt_step_reshard(R, g, state);
    rg->kept = 1;
    rg->kept_at = unsharded_off;
}

void rt_step_reshard_post_forward(rt_rank* R, int g, const char* state, size_t unsharded_off,
                                  size_t pf_off) {
    const rt_model_group* mg = G(R, g);
    rt_rank_group* rg = &R->groups[g];
    if (rg->state != RT_UNSHARDED || !rg->pf_comm)
        rt_rank_die(R, "post-forward reshard of group '%s' while it is %s", mg->name, state_name(rg->state));
    rtb_reshard_post_forward(R, g, unsharded_off, pf_off);
    event(R, state, "reshard", g);
    rg->state = RT_SHARDED_POST_FORWARD;
    rt_step_all_gather_sync(R);  // the post-forward shards are written
}

// ---- gradients --------------------------------------------------------------------------

void rt_step_accumulate_grads(rt_rank* R, int g, size_t ugrad_off, size_t acc_off) {
    G(R, g);
    rtb_accumulate_grads(R, g, ugrad_off, acc_off);
}

static const rt_model_group* reduction(rt_rank* R, int g, int r) {
    const rt_model_group* mg = G(R, g);
    if (r < 0 || r > mg->nreductions)
        rt_rank_die(R, "reduction %d of group '%s' out of range (0 for the whole group, or 1..%d)", r,
                    mg->name, mg->nreductions);
    return mg;
}

static int is_part(const rt_model_group* mg, int r) { return r > 0 && mg->reductions[r - 1].part; }

// FSDP2 reduces the parameters with a gradient alone, so never all of a group with frozen ones.
static void check_not_frozen(rt_rank* R, const rt_model_group* mg, int r) {
    if (mg->frozen || (!r && mg->frozen_numel))
        rt_rank_die(R, "reduction %d of group '%s', which has frozen parameters (the plan reduces "
                       "the others alone)", r, mg->name);
}

void rt_step_reduce_scatter(rt_rank* R, int g, int r, size_t grads_off, rt_dtype grads_dtype,
                            size_t rs_in_off, size_t rs_out_off) {
    const rt_model_group* mg = reduction(R, g, r);
    rt_rank_group* rg = &R->groups[g];
    if (mg->all_reduce && !R->mesh.replicate)
        rt_rank_die(R, "group '%s' all-reduces across replicas, but the mesh has none", mg->name);
    if (is_part(mg, r))
        rt_rank_die(R, "reduction %d of group '%s' is a part, which only a direct reduction makes", r,
                    mg->name);
    check_not_frozen(R, mg, r);
    if (mg->grads_packed)
        rt_rank_die(R, "group '%s': packed gradients are reduced in place only", mg->name);
    rtb_reduce_scatter(R, g, r, grads_off, grads_dtype, rs_in_off, rs_out_off, rg->reduced > 0);
    rg->reduced++;
    // Over one rank FSDP2's foreach_reduce copies (no reduce-scatter); HSDP's all-reduce runs.
    if (rg->layout.world > 1) count(R, "reduce_scatter");
}

void rt_step_reduce_direct(rt_rank* R, int g, int r, size_t grads_off, rt_dtype grads_dtype) {
    const rt_model_group* mg = reduction(R, g, r);
    rt_rank_group* rg = &R->groups[g];
    if (R->world != 1 || rg->layout.world != 1 || mg->all_reduce || mg->divide_factor > 0 ||
        (mg->reduce_dtype != RT_F32 && mg->reduce_dtype != grads_dtype))
        rt_rank_die(R, "group '%s': direct reduction planned, but it needs one rank, no divide factor and a "
                       "reduce dtype of fp32 or %s (have %d ranks, factor %g, reduce dtype %s)",
                    mg->name, rt_dtype_name(grads_dtype), R->world, mg->divide_factor,
                    rt_dtype_name(mg->reduce_dtype));
    check_not_frozen(R, mg, r);
    // A part assigns its parameters' sharded grads, whichever part came before it.
    const int part = is_part(mg, r), accumulate = !part && rg->reduced > 0;
    if (grads_off == mg->grads_off && accumulate)  // in place: generator/memory/memory.lua
        rt_rank_die(R, "group '%s': in-place gradients that add to others", mg->name);
    if (mg->grads_packed && (grads_off != mg->grads_off || grads_dtype != mg->param_dtype))
        rt_rank_die(R, "group '%s': packed gradients are reduced in place, in param_dtype", mg->name);
    // the lookups add to a part by rows after it: only in place (rt_model_reduction rows)
    if (r && mg->reductions[r - 1].rows && (grads_off != mg->grads_off || grads_dtype != mg->param_dtype))
        rt_rank_die(R, "group '%s': a part by rows is reduced in place, in param_dtype", mg->name);
    rtb_reduce_direct(R, g, r, grads_off, grads_dtype, accumulate);
    rg->reduced++;  // one rank: no collective to count
    rg->parts += part;
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
    for (int g = 0; g < R->model->ngroups; g++)
        if (R->model->groups[g].grads_packed)
            rt_rank_die(R, "group '%s': packed gradients with clipping (the plan makes none)",
                        R->model->groups[g].name);
    rtb_clip_grad_norm(R);
}

// Whether optimizer step r of group mg steps its parameter i: one with a gradient (grad
// None: torch.optim skips it), of reduction r's parameters if r > 0 (*at: the next of them).
static int steps_param(const rt_rank* R, const rt_model_group* mg, int r, int i, int* at) {
    if (r) {
        const rt_model_reduction* mr = &mg->reductions[r - 1];
        if (*at >= mr->nparams || mr->params[*at] != i) return 0;
        ++*at;
    }
    return !R->model->params[mg->params[i]].grad_none;
}

// The checks of an optimizer step of group g (reduction r) that the plan gives gradients.
static const rt_model_group* optimizer_checks(rt_rank* R, int g, int r, int k, int per, int item) {
    const rt_model_group* mg = reduction(R, g, r);
    const rt_rank_group* rg = &R->groups[g];
    const int part = is_part(mg, r);
    if (k < 1 || k > per) rt_rank_die(R, "optimizer step %d of %d for group '%s'", k, per, mg->name);
    if (item < 0 || item >= R->model->n_optimizer)
        rt_rank_die(R, "optimizer item %d of group '%s' out of range (the model has %d per step)",
                    item, mg->name, R->model->n_optimizer);
    if (!rg->reduced)
        rt_rank_die(R, "optimizer step of group '%s' without a reduce-scatter since the last one "
                       "(the plan gives it gradients)", mg->name);
    if (rg->kept && !mg->kept_across)
        rt_rank_die(R, "optimizer step of group '%s' while a reshard keeps its unsharded params for "
                       "the next all-gather, which would then miss the step (generated plan is "
                       "inconsistent)", mg->name);
    if (mg->kept_across && (rg->state != RT_SHARDED || rg->pending))
        rt_rank_die(R, "optimizer step of group '%s', whose unsharded params are kept across steps, "
                       "while it is %s%s (generated plan is inconsistent: the step casts into them, "
                       "which compute reads until the reshard)", mg->name, state_name(rg->state),
                    rg->pending ? " with an all-gather in flight" : "");
    if (r && !part)
        rt_rank_die(R, "optimizer step of reduction %d of group '%s', which is not a part", r, mg->name);
    if (part != (rg->parts > 0))
        rt_rank_die(R, "optimizer step of %s of group '%s' with %d parts reduced and not stepped",
                    part ? "a part" : "the whole", mg->name, rg->parts);
    return mg;
}

// zero_grad after the step of group g (its last part's, if in parts).
static void zero_grad(rt_rank* R, int g, int r) {
    rt_rank_group* rg = &R->groups[g];
    if (!is_part(reduction(R, g, r), r) || --rg->parts == 0) rg->reduced = 0;
}

void rt_step_optimizer(rt_rank* R, int g, int r, int k, int per, int item) {
    const rt_model_group* mg = optimizer_checks(R, g, r, k, per, item);
    const rt_fsdp_layout* L = &R->groups[g].layout;
    // The parameters it steps go in runs of adjacent ones, in the parameters and in the
    // gradients (no frozen shard between them: frozen_before).
    for (int i = 0, at = 0; i < mg->nparams;) {
        if (!steps_param(R, mg, r, i, &at)) {
            i++;
            continue;
        }
        const int64_t shift = R->model->params[mg->params[i]].frozen_before;
        int64_t lo = L->params[i].offset, hi = L->params[i].offset + L->params[i].in_numel;
        for (i++; i < mg->nparams && R->model->params[mg->params[i]].frozen_before == shift &&
                  steps_param(R, mg, r, i, &at);
             i++)
            hi = L->params[i].offset + L->params[i].in_numel;
        rtb_optimizer(R, g, r, lo, lo - shift, hi - lo, k, per, item);
    }
    if (mg->kept_across) rtb_optimizer_cast_kept(R, g, mg->kept_off);
    zero_grad(R, g, r);
}

void rt_step_optimizer_rows(rt_rank* R, int g, int r, int k, int per, int item, int rows) {
    const rt_model* m = R->model;
    const rt_model_group* mg = optimizer_checks(R, g, r, k, per, item);
    const rt_fsdp_layout* L = &R->groups[g].layout;
    if (rows != RT_ROWS_UNUSED && rows != RT_ROWS_LOOKED_UP && rows != RT_ROWS_FINAL)
        rt_rank_die(R, "optimizer rows %d of group '%s' (allowed: RT_ROWS_UNUSED, RT_ROWS_LOOKED_UP, "
                       "RT_ROWS_FINAL)", rows, mg->name);
    // a part by rows (a tied embedding's) is stepped by the rows it names, and only it is FINAL
    const int part_rows = r ? mg->reductions[r - 1].rows : 0;
    if ((part_rows && rows != part_rows) || (rows == RT_ROWS_FINAL && !part_rows))
        rt_rank_die(R, "optimizer rows %d of reduction %d of group '%s', whose rows are %d (the plan "
                       "steps a part by rows by its own)", rows, r, mg->name, part_rows);
    if (!m->tokens || !m->optimizer_rows || R->world != 1 || mg->grads_packed)
        rt_rank_die(R, "optimizer step by rows of group '%s' without token inputs, the model's "
                       "optimizer_rows, at %d ranks or with packed gradients (the plan splits one "
                       "only at one rank, an embedding's fp32 gradients)",
                    mg->name, R->world);
    for (int i = 0, at = 0; i < mg->nparams; i++) {
        if (!steps_param(R, mg, r, i, &at)) continue;
        const rt_model_param* p = &m->params[mg->params[i]];
        if (p->ndim != 2 || p->shape[0] * p->shape[1] != L->params[i].in_numel)
            rt_rank_die(R, "optimizer step by rows of '%s', which is not a whole 2-D parameter", p->fqn);
        // the unused rows step from the step's start: nothing kept may hold them
        if (mg->kept_across && R->groups[g].direct_copied[i] != -1)
            rt_rank_die(R, "optimizer step by rows of '%s', whose unsharded copy is kept across "
                           "steps (generated plan is inconsistent: only a parameter read from the "
                           "shards is stepped by rows there)", p->fqn);
        rtb_optimizer_rows(R, g, r, L->params[i].offset, L->params[i].offset - p->frozen_before,
                           p->shape[0], p->shape[1], k, per, item, rows);
    }
    if (rows != RT_ROWS_UNUSED) zero_grad(R, g, r);
}

double rt_step_lr(const rt_rank* R, int item) {
    const rt_lr_schedule* s = &R->model->lr_schedule;
    const double lr = R->model->optim.lr;
    const int64_t i = R->step * R->model->n_optimizer + item;
    if (i < s->warmup_steps) return lr * (double)(i + 1) / (double)s->warmup_steps;
    if (s->decay == RT_LR_CONSTANT) return lr;
    double p = (double)(i - s->warmup_steps) / (double)(s->total_steps - s->warmup_steps);
    if (p > 1.0) p = 1.0;
    const double f = s->decay == RT_LR_LINEAR ? 1.0 - p : 0.5 * (1.0 + cos(M_PI * p));
    return s->min_lr + (lr - s->min_lr) * f;
}

// ---- losses and RNG ---------------------------------------------------------------------

void rt_step_loss(rt_rank* R, int k, const float* loss) {
    if (k < 0 || k >= R->model->n_backward) rt_rank_die(R, "loss index %d out of range", k);
    rtb_loss(R, k, loss);
}

void rt_step_eval_loss(rt_rank* R, const float* loss) { rtb_loss(R, 0, loss); }

void rt_step_eval_logits(rt_rank* R, const float* logits, int64_t n) {
    const rt_model* m = R->model;
    // The driver asks for them on the CPU backend only (a host arena; cli.c refuses --logits
    // on CUDA binaries), and only fp32 logits of the whole batch are copied: otherwise
    // logits_out stays set and the driver reports it.
    if (!R->logits_out || strcmp(rt_step_backend(), "cpu") != 0) return;
    if (n != m->batch * m->seq_len * m->vocab) return;
    memcpy(R->logits_out, logits, (size_t)n * sizeof(float));
    R->logits_out = NULL;
}

rt_step_fn rt_step_next(rt_rank* R) {
    const int after = R->after_eval;
    R->after_eval = 0;
    return after && R->model->step_after_eval ? R->model->step_after_eval : R->model->step;
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
