// Setup and teardown of one rank of the CUDA step backend: streams (FSDP2's all-gather
// copy-in, all-gather and reduce-scatter streams at the highest priority, so a ready
// collective is not queued behind compute; its all-reduce stream at compute's priority,
// as FSDP2's FSDPCommContext makes it; the optimizer's at the lowest, below compute),
// events, the device arena, the pinned staging of inputs, losses and the step count, the
// host mirror of the persistent buffers, and every group's copy plans uploaded once.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "rt_cuda.h"
#include "rt_cudnn.h"
#include "rt_units.h"
#include "rt_fsdp_copy.h"

// ---- copy plans -----------------------------------------------------------------------------

typedef int (*plan_fn)(rt_copy_plan*, const rt_fsdp_layout*, const int64_t*);

// Uploads the plan p of layout l, built with status st, and frees it.
static int upload_built(rt_rank* R, rtcs_plan* out, rt_copy_plan* p, int st, const rt_fsdp_layout* l) {
    int e = st ? 0 : rtcs_plan_upload(out, p);
    rt_copy_plan_free(p);
    if (st || e) {
        fprintf(stderr, "fsdpgen: rank %d: copy plan of group '%s': %s\n", R->rank, l->name,
                st ? "out of host memory" : cudaGetErrorString((cudaError_t)e));
        return 1;
    }
    return 0;
}

static int upload(rt_rank* R, rtcs_plan* out, plan_fn build, const rt_fsdp_layout* l, const int64_t* off) {
    rt_copy_plan p = {0};
    return upload_built(R, out, &p, build(&p, l, off), l);
}

// The plans of reduction r of group g: block[i] and unsharded[i] are the offsets of the
// group's parameter i in the sharded and the unsharded gradients (-1: frozen, none).
static int reduction_plans(rt_rank* R, int g, int r, const int64_t* block, const int64_t* unsharded) {
    const rt_model_group* mg = &R->model->groups[g];
    cuda_group* cg = &((cuda_rank*)R->backend)->groups[g];
    cuda_reduction* cr = r ? &cg->rs_some[r - 1] : &cg->rs;
    const rt_fsdp_layout* L = rt_step_reduction_layout(R, g, r);
    const size_t n = (size_t)L->nparams + 1;
    int64_t *sub_block = calloc(n, sizeof *sub_block), *sub_unsharded = calloc(n, sizeof *sub_unsharded);
    int rc = !sub_block || !sub_unsharded;
    if (rc) fprintf(stderr, "fsdpgen: rank %d: out of host memory\n", R->rank);
    rt_copy_plan zeros = {0};
    int zst = 0;
    for (int i = 0, k = 0; !rc && i < mg->nparams; i++) {
        if (!r || (k < L->nparams && mg->reductions[r - 1].params[k] == i)) {
            sub_block[k] = block[i], sub_unsharded[k] = unsharded[i];
            k++;
        } else if (!zst && block[i] >= 0) {
            zst = rt_copy_zeros(&zeros, block[i], R->groups[g].layout.params[i].shard_numel);
        }
    }
    if (!rc) rc = upload(R, &cr->rs_in, rt_copy_reduce_scatter_in, L, sub_unsharded);
    if (!rc) rc = upload(R, &cr->view_out, rt_copy_view_out, L, sub_block);
    if (!rc && L->world == 1) {
        rt_copy_plan p = {0};
        rc = upload_built(R, &cr->rs_direct, &p, rt_copy_reduce_direct(&p, L, sub_unsharded, sub_block), L);
    }
    if (!rc && r) rc = upload_built(R, &cr->zero_rest, &zeros, zst, L);
    else rt_copy_plan_free(&zeros);
    if (!rc && r && mg->reductions[r - 1].part &&
        cudaEventCreateWithFlags(&cr->reduced, cudaEventDisableTiming) != cudaSuccess) {
        fprintf(stderr, "fsdpgen: rank %d: cudaEventCreate failed\n", R->rank);
        rc = 1;
    }
    free(sub_block), free(sub_unsharded);
    return rc;
}

static int by_src(const void* a, const void* b) {
    const int64_t x = ((const rt_cuda_cast_run*)a)->src, y = ((const rt_cuda_cast_run*)b)->src;
    return (x > y) - (x < y);
}

// Kept across steps: the direct all-gather's runs of both storages (block: the shard
// offsets, un[k]: storage k's), by shard offset, for the optimizer to write (rt_cuda_cast).
static int cast_plan(rt_rank* R, int g, const int64_t* block, int64_t* const* un) {
    cuda_group* cg = &((cuda_rank*)R->backend)->groups[g];
    const rt_fsdp_layout* L = &R->groups[g].layout;
    rt_copy_plan p[UN_STORAGES] = {{0}};
    int st = 0, n = 0;
    for (int k = 0; k < UN_STORAGES && !st; k++) {
        st = rt_copy_all_gather_direct(&p[k], L, block, un[k]);
        n += p[k].nruns;
    }
    rt_cuda_cast_run* runs = st ? NULL : calloc((size_t)n + 1, sizeof *runs);
    int m = 0;
    for (int k = 0; k < UN_STORAGES && runs; k++)
        for (int i = 0; i < p[k].nruns; i++)
            if (p[k].runs[i].src >= 0 && p[k].runs[i].n > 0)
                runs[m++] = (rt_cuda_cast_run){p[k].runs[i].src, p[k].runs[i].n, p[k].runs[i].dst,
                                               k == UN_PACKED};
    for (int k = 0; k < UN_STORAGES; k++) rt_copy_plan_free(&p[k]);
    cudaError_t e = cudaSuccess;
    if (runs && m) {
        qsort(runs, (size_t)m, sizeof *runs, by_src);
        e = cudaMalloc((void**)&cg->cast_runs, (size_t)m * sizeof *runs);
        if (e == cudaSuccess)
            e = cudaMemcpy(cg->cast_runs, runs, (size_t)m * sizeof *runs, cudaMemcpyHostToDevice);
        if (e == cudaSuccess) cg->ncast_runs = m;
    }
    free(runs);
    if (!runs || e != cudaSuccess) {
        fprintf(stderr, "fsdpgen: rank %d: the optimizer's cast plan of group '%s': %s\n", R->rank,
                L->name, !runs ? "out of host memory" : cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

static int group_plans(rt_rank* R, int g) {
    cuda_rank* c = R->backend;
    const rt_model* m = R->model;
    const rt_model_group* mg = &m->groups[g];
    rt_rank_group* rg = &R->groups[g];
    cuda_group* cg = &c->groups[g];
    const size_t n = (size_t)mg->nparams + 1;
    int64_t *block = calloc(n, sizeof *block), *unsharded = calloc(n, sizeof *unsharded);
    int64_t *pf = calloc(n, sizeof *pf), *un[UN_STORAGES] = {calloc(n, sizeof(int64_t)), calloc(n, sizeof(int64_t))};
    int64_t* gblock = calloc(n, sizeof *gblock);
    int rc = !block || !unsharded || !pf || !un[UN_F32] || !un[UN_PACKED] || !gblock;
    if (rc) fprintf(stderr, "fsdpgen: rank %d: out of host memory\n", R->rank);
    for (int i = 0; !rc && i < mg->nparams; i++) {
        const rt_model_param* p = &m->params[mg->params[i]];
        block[i] = p->block_offset;
        gblock[i] = p->frozen ? -1 : rt_model_grad_offset(p);  // the sharded gradients'
        unsharded[i] = p->frozen ? -1 : p->unsharded_offset;  // the gradients' fp32 slots
        un[UN_F32][i] = p->packed || p->from_shard ? -1 : p->unsharded_word;
        un[UN_PACKED][i] = p->packed ? 2 * p->unsharded_word : -1;
        if (rg->pf_comm) pf[i] = rg->pf_layout.params[i].offset;
    }
    if (!rc) rc = upload(R, &cg->ag_in, rt_copy_all_gather_in, &rg->layout, block);
    if (!rc && mg->nreductions) {
        cg->rs_some = calloc((size_t)mg->nreductions, sizeof *cg->rs_some);
        if (!cg->rs_some) fprintf(stderr, "fsdpgen: rank %d: out of host memory\n", R->rank);
        rc = !cg->rs_some;
    }
    // none of the whole of a group with frozen parameters (rt_step_reduce_scatter refuses it)
    for (int r = mg->frozen_numel ? 1 : 0; !rc && r <= mg->nreductions; r++)
        rc = reduction_plans(R, g, r, gblock, unsharded);
    if (!rc && rg->pf_comm) rc = upload(R, &cg->pf_ag_in, rt_copy_all_gather_in, &rg->pf_layout, pf);
    for (int k = 0; k < UN_STORAGES && !rc; k++) {
        rc = upload(R, &cg->ag_out[k], rt_copy_all_gather_out, &rg->layout, un[k]);
        if (!rc && rg->layout.world == 1) {
            rt_copy_plan p = {0};
            rc = upload_built(R, &cg->ag_direct[k], &p,
                              rt_copy_all_gather_direct(&p, &rg->layout, block, un[k]), &rg->layout);
        }
        if (!rc && rg->pf_comm) rc = upload(R, &cg->pf_ag_out[k], rt_copy_all_gather_out, &rg->pf_layout, un[k]);
        if (!rc && rg->pf_comm) {
            rt_copy_plan p = {0};
            rc = upload_built(R, &cg->pf_shards[k], &p,
                              rt_copy_post_forward(&p, &rg->pf_layout, un[k], pf), &rg->pf_layout);
        }
    }
    if (!rc && mg->kept_across) rc = cast_plan(R, g, block, un);
    if (!rc && (cudaEventCreateWithFlags(&cg->ag_done, cudaEventDisableTiming) != cudaSuccess ||
                cudaEventCreateWithFlags(&cg->reduced, cudaEventDisableTiming) != cudaSuccess)) {
        fprintf(stderr, "fsdpgen: rank %d: cudaEventCreate failed\n", R->rank);
        rc = 1;
    }
    free(block), free(gblock), free(unsharded), free(pf), free(un[UN_F32]), free(un[UN_PACKED]);
    return rc;
}

// ---- allocation helpers ---------------------------------------------------------------------

// The first CUDA failure of the setup, printed once; later calls are skipped.
typedef struct setup {
    rt_rank* R;
    int failed;
} setup;

static void ok(setup* s, cudaError_t e, const char* what) {
    if (s->failed || e == cudaSuccess) return;
    fprintf(stderr, "fsdpgen: rank %d: %s failed: %s (hint: %s)\n", s->R->rank, what,
            cudaGetErrorString(e), rt_check_cuda_hint((int)e));
    s->failed = 1;
}

static void* device(setup* s, size_t bytes, const char* what) {
    void* p = NULL;
    if (!s->failed) ok(s, cudaMalloc(&p, bytes ? bytes : 1), what);
    return p;
}

static void* pinned(setup* s, size_t bytes, const char* what) {
    void* p = NULL;
    if (!s->failed) ok(s, cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault), what);
    if (p) memset(p, 0, bytes ? bytes : 1);
    return p;
}

// n arrays of `bytes`, pinned (host) or on the device.
static void** arrays(setup* s, int n, size_t bytes, int host, const char* what) {
    void** v = calloc((size_t)n + 1, sizeof *v);
    if (!v) {
        s->failed = 1;
        fprintf(stderr, "fsdpgen: rank %d: out of host memory\n", s->R->rank);
        return NULL;
    }
    for (int a = 0; a < n; a++) v[a] = host ? pinned(s, bytes, what) : device(s, bytes, what);
    return v;
}

static void free_arrays(void** v, int n, int host) {
    for (int a = 0; v && a < n; a++) {
        if (host) cudaFreeHost(v[a]);
        else cudaFree(v[a]);
    }
    free(v);
}

// ---- rank lifetime ----------------------------------------------------------------------

// RT_SM_MARGIN (rt_step_launch checked its form): the GEMMs and cuDNN's plans of this rank
// are planned for that many SMs fewer than the device has, so that the optimizer stream's
// AdamW and the FSDP copies run on the rest beside them, rather than only as a GEMM's
// blocks finish (a cuBLAS GEMM on Hopper fills every SM it is planned for).
static void sm_margin(setup* s, int device) {
    const int margin = cs_sm_margin();
    if (margin <= 0) return;
    int sms = 0;
    ok(s, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
       "cudaDeviceGetAttribute (SMs)");
    if (!s->failed && cs_sm_margin_refused(margin, sms)) s->failed = 1;
    if (s->failed) return;
    rt_cuda_set_gemm_sms(sms - margin);
    rt_cudnn_set_sm_count(sms - margin);
    if (s->R->rank == 0)
        printf("fsdpgen: RT_SM_MARGIN=%d: GEMMs and cuDNN's attention planned for %d of the GPU's "
               "%d SMs, the rest left to the optimizer and copy streams\n", margin, sms - margin,
               sms);
}

int rtb_rank_init(rt_rank* R) {
    const rt_model* m = R->model;
    cuda_rank* c = calloc(1, sizeof *c);
    if (!c || !(c->groups = calloc((size_t)m->ngroups + 1, sizeof *c->groups))) {
        free(c);
        fprintf(stderr, "fsdpgen: rank %d: out of host memory\n", R->rank);
        return 1;
    }
    R->backend = c;
    c->section = -1;
    setup s = {R, 0};
    ok(&s, cudaGetDevice(&c->device), "cudaGetDevice");
    c->opt_side = cs_optimizer_side() == 1;  // checked by rt_step_launch (cs_optimizer_check_env)
    c->copy_kept = cs_keep_unsharded() == 0;  // ... (cs_keep_unsharded_check_env)
    // RT_BIAS_GRAD=sums (checked by rt_step_launch: cs_bias_grad_check_env)
    if (cs_bias_grad_epilogue() == 0) rt_cuda_set_bias_grad_epilogue(0);
    int least = 0, greatest = 0;
    ok(&s, cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    // Compute one step above the lowest, which the optimizer stream keeps: its blocks take
    // the SMs compute's kernels leave free, not the other way round.
    const int compute_priority = greatest < least ? least - 1 : least;
    ok(&s, cudaStreamCreateWithPriority(&c->compute, cudaStreamNonBlocking, compute_priority),
       "cudaStreamCreate (compute)");
    cudaStream_t* side[CS_SIDE_STREAMS] = {&c->ag_copy, &c->ag, &c->rs, &c->ar, &c->opt};
    for (int k = 0; k < CS_SIDE_STREAMS && !s.failed; k++)
        ok(&s, cudaStreamCreateWithPriority(side[k], cudaStreamNonBlocking,
                                            side[k] == &c->ar ? compute_priority
                                            : side[k] == &c->opt ? least : greatest),
           "cudaStreamCreate (side streams)");
    cudaEvent_t* evs[6] = {&c->fork, &c->copied, &c->forked_ar, &c->rs_done, &c->post_done,
                           &c->tokens_in};
    for (int k = 0; k < 6 && !s.failed; k++) ok(&s, cudaEventCreateWithFlags(evs[k], cudaEventDisableTiming), "cudaEventCreate");
    for (int k = 0; k < CS_SIDE_STREAMS && !s.failed; k++)
        ok(&s, cudaEventCreateWithFlags(&c->join[k], cudaEventDisableTiming), "cudaEventCreate");
    if (!s.failed) rt_cuda_set_stream(c->compute);
    if (!s.failed) sm_margin(&s, c->device);
    // Attention sites: cuDNN's plans, timed under `auto` on tensors of their own, so first.
    if (!s.failed && cs_attention_init(R)) s.failed = 1;

    // The arena: the plan's offsets on the device; rt_step_buffer checks them as on the CPU.
    // The persistent buffers [0, P) have a pinned host copy, the mirror (the driver's view);
    // with offload_policy (every group's, or none: the planner checks) the mirror is where
    // they live (kernels read and write it over the bus, as FSDP2's CPU offload moves them)
    // and the device holds only [P, arena_bytes), so the arena's base lies P bytes before
    // that allocation: offsets below P never reach it (rt_step_buffer, R->offload_base).
    c->mirror_bytes = rt_step_persistent_end(m);
    c->mirror = pinned(&s, c->mirror_bytes, "cudaHostAlloc (parameter mirror)");
    const size_t on_host = m->ngroups > 0 && m->groups[0].offload ? c->mirror_bytes : 0;
    c->arena = device(&s, m->arena_bytes - on_host, "cudaMalloc (arena)");
    if (!s.failed) ok(&s, cudaMemset(c->arena, 0, m->arena_bytes - on_host), "cudaMemset (arena)");
    if (!s.failed && on_host) {
        R->offload_base = c->mirror;
        R->offload_end = on_host;
        if (R->rank == 0)
            printf("fsdpgen: offload_policy: %zu bytes (%s) of sharded parameters, gradients "
                   "and optimizer state per rank in pinned host memory\n", on_host,
                   rt_units_bytes(on_host).s);
    }
    char name[48];
    snprintf(name, sizeof name, "rank %d (GPU %d)", R->rank, c->device);
    if (!s.failed && rt_arena_init_at(&R->arena, (void*)((uintptr_t)c->arena - on_host),
                                      m->arena_bytes, name)) {
        fprintf(stderr, "fsdpgen: rank %d: %s\n", R->rank, R->arena.error);
        s.failed = 1;
    }

    // Inputs: the driver fills R->tokens / R->targets / R->inputs (pinned), the step
    // uploads them (a graph replays the upload, reading the pinned buffers anew).
    int n = m->n_forward;
    size_t numel = (size_t)m->batch * (size_t)m->seq_len;
    if (!m->tokens) {
        numel = 1;
        for (int d = 0; d < m->input_ndim; d++) numel *= (size_t)m->input_shape[d];
    }
    c->input_bytes = numel * 4;
    if (m->tokens) {
        R->tokens = (int32_t**)arrays(&s, n, c->input_bytes, 1, "cudaHostAlloc (tokens)");
        R->targets = (int32_t**)arrays(&s, n, c->input_bytes, 1, "cudaHostAlloc (targets)");
        c->d_tokens = (int32_t**)arrays(&s, n, c->input_bytes, 0, "cudaMalloc (tokens)");
        c->d_targets = (int32_t**)arrays(&s, n, c->input_bytes, 0, "cudaMalloc (targets)");
    } else {
        R->inputs = (float**)arrays(&s, n, c->input_bytes, 1, "cudaHostAlloc (inputs)");
        c->d_inputs = (float**)arrays(&s, n, c->input_bytes, 0, "cudaMalloc (inputs)");
    }
    c->h_losses = pinned(&s, (size_t)m->n_backward * sizeof(float), "cudaHostAlloc (losses)");
    // The step count, then each optimizer item's lr (at least one slot).
    const size_t lr_bytes = (size_t)(m->n_optimizer > 0 ? m->n_optimizer : 1) * sizeof(double);
    uint8_t* h_small = pinned(&s, 8 + lr_bytes, "cudaHostAlloc (step)");
    c->h_step = (int64_t*)h_small;
    c->h_lr = (double*)(h_small + 8);
    uint8_t* small = device(&s, 32 + lr_bytes, "cudaMalloc (step scalars)");
    c->d_step = (int64_t*)small;
    c->d_sumsq = (double*)(small + 8);
    c->d_total = (float*)(small + 16);
    c->d_one = (float*)(small + 20);
    c->d_lr = (double*)(small + 32);
    if (m->optimizer_rows) c->d_rows = device(&s, (size_t)m->vocab, "cudaMalloc (token rows)");
    const float one = 1.0f;
    if (!s.failed)
        ok(&s, cudaMemcpy(c->d_one, &one, sizeof one, cudaMemcpyHostToDevice), "cudaMemcpy (one)");
    for (int g = 0; g < m->ngroups && !s.failed; g++) s.failed = group_plans(R, g);
    return s.failed;
}

int rt_step_device(rt_rank* R, char* name, size_t cap) {
    const cuda_rank* c = R->backend;
    struct cudaDeviceProp p;
    if (cap) name[0] = 0;
    if (c && cap && cudaGetDeviceProperties(&p, c->device) == cudaSuccess)
        snprintf(name, cap, "%s", p.name);
    return cs_launch_devices();
}

void rtb_rank_free(rt_rank* R) {
    cuda_rank* c = R->backend;
    if (!c) return;
    const rt_model* m = R->model;
    if (c->compute) cudaStreamSynchronize(c->compute);
    // the graph first: its nodes hold cuDNN's kernels, which cs_attention_free releases
    if (c->exec) cudaGraphExecDestroy(c->exec);
    if (c->graph) cudaGraphDestroy(c->graph);
    cs_attention_free(R);
    for (int g = 0; g < m->ngroups; g++) {
        cuda_group* cg = &c->groups[g];
        rtcs_plan_free(&cg->ag_in);
        rtcs_plan_free(&cg->pf_ag_in);
        for (int r = 0; r <= m->groups[g].nreductions; r++) {
            if (r && !cg->rs_some) break;
            cuda_reduction* cr = r ? &cg->rs_some[r - 1] : &cg->rs;
            rtcs_plan* plans[] = {&cr->rs_in, &cr->view_out, &cr->rs_direct, &cr->zero_rest};
            for (int k = 0; k < 4; k++) rtcs_plan_free(plans[k]);
            if (cr->reduced) cudaEventDestroy(cr->reduced);
        }
        free(cg->rs_some);
        for (int k = 0; k < UN_STORAGES; k++) {
            rtcs_plan_free(&cg->ag_out[k]);
            rtcs_plan_free(&cg->ag_direct[k]);
            rtcs_plan_free(&cg->pf_ag_out[k]);
            rtcs_plan_free(&cg->pf_shards[k]);
        }
        if (cg->cast_runs) cudaFree(cg->cast_runs);
        if (cg->ag_done) cudaEventDestroy(cg->ag_done);
        if (cg->reduced) cudaEventDestroy(cg->reduced);
    }
    free(c->groups);
    // Every slot a step has used holds its events (made once, reused: cs_trace_open);
    // nspans only counts the current step's.
    for (int k = 0; c->spans && k < CS_MAX_SPANS && c->spans[k].start; k++) {
        cudaEventDestroy(c->spans[k].start);
        cudaEventDestroy(c->spans[k].end);
    }
    free(c->spans);
    if (c->t0) cudaEventDestroy(c->t0);
    if (c->t_end) cudaEventDestroy(c->t_end);
    int n = m->n_forward;
    free_arrays((void**)R->tokens, n, 1), free_arrays((void**)R->targets, n, 1);
    free_arrays((void**)R->inputs, n, 1);
    R->tokens = R->targets = NULL, R->inputs = NULL;
    free_arrays((void**)c->d_tokens, n, 0), free_arrays((void**)c->d_targets, n, 0);
    free_arrays((void**)c->d_inputs, n, 0);
    cudaFreeHost(c->h_losses), cudaFreeHost(c->h_step), cudaFreeHost(c->mirror);
    cudaFree(c->d_step);
    cudaFree(c->d_rows);
    cudaFree(c->arena);
    rt_arena_free(&R->arena);
    cudaEvent_t evs[6] = {c->fork, c->copied, c->forked_ar, c->rs_done, c->post_done, c->tokens_in};
    for (int k = 0; k < 6; k++)
        if (evs[k]) cudaEventDestroy(evs[k]);
    for (int k = 0; k < CS_SIDE_STREAMS; k++)
        if (c->join[k]) cudaEventDestroy(c->join[k]);
    cudaStream_t streams[6] = {c->compute, c->ag_copy, c->ag, c->rs, c->ar, c->opt};
    if (c->compute) rt_cuda_set_stream(NULL);
    for (int k = 0; k < 6; k++)
        if (streams[k]) cudaStreamDestroy(streams[k]);
    free(c);
    R->backend = NULL;
}
