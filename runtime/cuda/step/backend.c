// The CUDA step backend (step_backend.h): the arena lives on the rank's GPU, the generated
// kernels run on the rank's compute stream, and FSDP2's collectives run on their own
// streams, ordered by events exactly as FSDP2 orders them:
//
//   all-gather       the copy-in stream waits for compute only at the plan's syncs (FSDP2's
//                    root pre-forward wait, each backward's start, and after each copy-out
//                    and post-forward reshard: rtb_all_gather_sync), not at each all-gather,
//                    so the shards are current and an all-gather issued after a group's
//                    compute (FSDP2's implicit forward prefetch) overlaps that compute; it
//                    copies in; the all-gather stream waits for the copy-in and gathers;
//                    compute waits for the group's all-gather only at all_gather_wait
//                    (copy-out). (FSDP2 defers a forward copy-out's wait to the next
//                    group's; waiting right after it still lets the next all-gather
//                    overlap the group's compute.)
//                    A prefetch therefore overlaps whatever compute comes before its wait.
//   reduce-scatter   FSDP2's foreach_reduce: copy-in on compute (the unsharded gradients are
//                    freed right after it); the reduce-scatter stream waits for compute,
//                    pre-divides and reduce-scatters, then records rs_done (FSDP2's
//                    reduce_scatter_event). Without HSDP the post-divide and view-out into
//                    the sharded gradients follow on the same stream; with HSDP the
//                    all-reduce stream waits for the reduce-scatter stream and runs the
//                    all-reduce, post-divide and view-out. post_done (FSDP2's
//                    post_reduce_event) follows the view-out. On one rank a reduction that
//                    changes no value (the generator plans it direct) is one copy on the
//                    reduce-scatter stream instead (rtb_reduce_direct), recording rs_done.
//   waits            compute waits for rs_done at the next reduce-scatter, before its
//                    copy-in (FSDP2's reduce_scatter_state: one reduce-scatter in flight),
//                    so that reduce-scatter's collective may overlap the previous group's
//                    all-reduce. Compute waits for post_done at the end of that next
//                    reduce-scatter, where FSDP2 would not (it holds the all-reduce buffer
//                    until the end of backward, _all_reduce_state): our static plan
//                    (generator/memory/memory.lua) ends the reduce-scatter output's lifetime at the
//                    next reduce-scatter step, and the all-reduce reads and writes that
//                    output in place, so a buffer planned after that step may sit on it.
//                    Each reduction's end also records its group's `reduced` event.
//   optimizer        each group's step runs on the optimizer stream (the lowest priority,
//                    below compute: its blocks fill the SMs compute leaves free) after
//                    waiting for its group's `reduced` only, so in the one graph a group's
//                    AdamW runs beside the backward of the groups after it (the
//                    last-reduced group, the root, steps after the backward). A group
//                    reduced in parts (one rank: the root's output head before the blocks'
//                    backward, its embedding after it) steps each part after that part's
//                    own event. The update of each parameter is the same as after the
//                    whole backward.
//                    Compute waits for the optimizer stream at the next all-gather sync or
//                    reduction (a step with a second iteration) and at the step's end.
//                    After clipping (FSDP2's finalize_backward: it waits for every
//                    reduction), and with RT_OPTIMIZER_STREAM=compute, the steps run on
//                    compute after the backward instead, each waiting for its own group's
//                    reduction only where that is the one in flight (the plan steps the
//                    last-reduced group last, so the others overlap the last reduction).
//   step end         compute joins every side stream, so nothing leaks into the next step.
//
// The host never waits inside a step. rt_step_run waits once per step (for the losses),
// and replays the step as a CUDA graph after one eager warm-up step unless graphs are off
// (--no-graph, --trace, the cuda_local communicators of --local, or dropout masks that
// change every step).
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "kernels.h"
#include "rt_cuda.h"
#include "rt_kernels.h"

// ---- errors -------------------------------------------------------------------------------

void cs_check(rt_rank* R, int err, const char* call, const char* file, int line) {
    if (err == 0) return;
    rt_rank_die(R, "%s:%d: %s failed: %s (hint: %s)", file, line, call,
                cudaGetErrorString((cudaError_t)err), rt_check_cuda_hint(err));
}

// ---- launch -------------------------------------------------------------------------------

static rt_launch_opts launch_opts;
static int launch_devices;  // GPUs the ranks of the running launch share

int cs_launch_devices(void) { return launch_devices; }

const char* rt_step_backend(void) { return "cuda"; }

int rt_step_launch(int world, const rt_launch_opts* o, rt_rank_fn fn, void* arg) {
    launch_opts = o ? *o : (rt_launch_opts){0};
    if (cs_attention_check_env() || cs_optimizer_check_env() || cs_sm_margin_check_env() ||
        cs_bias_grad_check_env() || cs_keep_unsharded_check_env())
        return 2;
    if (rt_mpi_launched()) {
        if (launch_opts.local) {
            fprintf(stderr, "fsdpgen: --local runs every rank in this process; it cannot be "
                            "combined with mpirun (run the binary without mpirun)\n");
            return 2;
        }
        launch_devices = world;
        return rt_mpi_run(world, fn, arg);
    }
    int gpus = rt_nccl_device_count();
    if (gpus < 1) {
        fprintf(stderr, "fsdpgen: no usable GPU (%s); this binary was built with --cuda (build the "
                        "spec without --cuda to train on the CPU)\n",
                gpus < 0 ? "CUDA could not be initialised: check nvidia-smi" : "none is visible");
        return 1;
    }
    if (launch_opts.local || gpus < world) {
        if (!launch_opts.local)
            printf("fsdpgen: %d ranks but %d GPU%s: every rank runs on GPU 0 (--local)\n", world,
                   gpus, gpus == 1 ? "" : "s");
        launch_devices = 1;
        return rt_cuda_local_run(world, 0, fn, arg);
    }
    launch_devices = world;
    return rt_nccl_run(world, fn, arg);
}

// ---- host access ----------------------------------------------------------------------------

void* rt_rank_host(rt_rank* R, size_t off, size_t bytes) {
    cuda_rank* c = R->backend;
    if (off > c->mirror_bytes || bytes > c->mirror_bytes - off) {
        fprintf(stderr, "fsdpgen: rank %d: persistent buffer [%zu, +%zu bytes) lies outside the "
                        "persistent region of %zu bytes (generated plan is inconsistent)\n",
                R->rank, off, bytes, c->mirror_bytes);
        return NULL;
    }
    return c->mirror + off;
}

static int copy_persistent(rt_rank* R, int to_device) {
    cuda_rank* c = R->backend;
    cudaError_t e = cudaStreamSynchronize(c->compute);
    if (e == cudaSuccess && R->offload_end)  // offloaded: the mirror is the only copy
        return 0;
    if (e == cudaSuccess)
        e = to_device ? cudaMemcpy(c->arena, c->mirror, c->mirror_bytes, cudaMemcpyHostToDevice)
                      : cudaMemcpy(c->mirror, c->arena, c->mirror_bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        fprintf(stderr, "fsdpgen: rank %d: copying %zu bytes of parameters and optimizer state %s "
                        "the GPU failed: %s\n", R->rank, c->mirror_bytes, to_device ? "to" : "from",
                cudaGetErrorString(e));
        return 1;
    }
    return 0;
}

int rt_rank_pull(rt_rank* R) { return copy_persistent(R, 0); }
int rt_rank_push(rt_rank* R) {
    R->kept_stale = 1;  // the parameters on the device may have changed
    return copy_persistent(R, 1);
}

const int32_t* rt_step_tokens(rt_rank* R, int item) { return ((cuda_rank*)R->backend)->d_tokens[item]; }
const int32_t* rt_step_targets(rt_rank* R, int item) { return ((cuda_rank*)R->backend)->d_targets[item]; }
const float* rt_step_inputs(rt_rank* R, int item) { return ((cuda_rank*)R->backend)->d_inputs[item]; }

// ---- the step ---------------------------------------------------------------------------

// Why this rank replays no graph (NULL: it does).
static const char* graph_off_reason(const rt_rank* R) {
    if (launch_opts.no_graph) return NULL;  // asked for: nothing to explain
    if (R->trace) return "--trace times every collective of every step";
    if (strcmp(rt_comm_backend(R->comm), "nccl") != 0)
        return "the local mode's communicators synchronize ranks across threads";
    if (R->model->draws_rng) return "dropout draws new masks every step";
    // NCCL: capturing the collectives of several GPUs in one process may deadlock; one GPU
    // a process (mpirun) is what it supports
    if (!rt_mpi_launched() && launch_devices > 1)
        return "the ranks are threads of one process on several GPUs (run under mpirun for graphs)";
    return NULL;
}

static void capture(rt_rank* R) {
    cuda_rank* c = R->backend;
    CS(R, cudaStreamBeginCapture(c->compute, cudaStreamCaptureModeThreadLocal));
    R->model->step(R);
    cudaError_t e = cudaStreamEndCapture(c->compute, &c->graph);
    if (e != cudaSuccess)
        rt_rank_die(R, "capturing the step as a CUDA graph failed: %s (hint: rerun with --no-graph, "
                       "and report the spec)", cudaGetErrorString(e));
    // the nodes keep their streams' priorities (the optimizer's lowest, beside the backward;
    // the all-gather copies' highest): without the flag a graph runs every node at the
    // priority of the stream it is launched into
    CS(R, cudaGraphInstantiate(&c->exec, c->graph, cudaGraphInstantiateFlagUseNodePriority));
}

void rt_step_run(rt_rank* R) {
    cuda_rank* c = R->backend;
    if (!c->decided) {
        const char* why = graph_off_reason(R);
        c->use_graph = !launch_opts.no_graph && !why;
        if (why && R->rank == 0) printf("fsdpgen: CUDA graphs off: %s\n", why);
        c->decided = 1;
    }
    rt_step_refresh_kept(R);  // eagerly: a graph replays every step
    c->h_step[0] = R->step + 1;
    for (int j = 0; j < R->model->n_optimizer; j++) c->h_lr[j] = rt_step_lr(R, j);
    const rt_step_fn fn = rt_step_next(R);
    if (fn != R->model->step) {
        fn(R);  // the step after an eval: eagerly, the graph holds the usual one
    } else if (!c->use_graph || !c->warm) {
        // Eager; the first step also creates what capture must not (NCCL connections,
        // cuBLAS state).
        R->model->step(R);
        c->warm = 1;
    } else {
        if (!c->exec) capture(R);
        CS(R, cudaGraphLaunch(c->exec, c->compute));
    }
    cudaError_t e = cudaStreamSynchronize(c->compute);
    if (e != cudaSuccess)
        rt_rank_die(R, "step %lld failed on the GPU: %s (hint: %s; rerun with --no-graph and "
                       "CUDA_LAUNCH_BLOCKING=1, or under compute-sanitizer, to find the kernel)",
                    (long long)R->step + 1, cudaGetErrorString(e), rt_check_cuda_hint((int)e));
    if (R->trace) cs_trace_flush(R);
    for (int k = 0; k < R->model->n_backward; k++) R->losses[k] = c->h_losses[k];
}

// Eagerly (as the step after it where that differs): a captured graph would hold its own
// copy of the arena's scratch layout, and an eval runs seldom. The losses' pinned slot 0
// carries its loss.
double rt_step_eval(rt_rank* R) {
    cuda_rank* c = R->backend;
    rt_step_refresh_kept(R);
    R->model->eval(R);
    R->after_eval = 1;
    cudaError_t e = cudaStreamSynchronize(c->compute);
    if (e != cudaSuccess)
        rt_rank_die(R, "the eval after step %lld failed on the GPU: %s (hint: %s)", (long long)R->step + 1,
                    cudaGetErrorString(e), rt_check_cuda_hint((int)e));
    if (R->trace) cs_trace_flush(R);
    return c->h_losses[0];
}

void rtb_step_begin(rt_rank* R) {
    cuda_rank* c = R->backend;
    const rt_model* m = R->model;
    if (R->trace) cs_trace_begin(R);
    CS(R, cudaMemcpyAsync(c->d_step, c->h_step, sizeof(int64_t), cudaMemcpyHostToDevice, c->compute));
    if (m->n_optimizer > 0)
        CS(R, cudaMemcpyAsync(c->d_lr, c->h_lr, (size_t)m->n_optimizer * sizeof(double),
                              cudaMemcpyHostToDevice, c->compute));
    for (int a = 0; a < m->n_forward; a++) {
        if (m->tokens) {
            CS(R, cudaMemcpyAsync(c->d_tokens[a], R->tokens[a], c->input_bytes, cudaMemcpyHostToDevice, c->compute));
            CS(R, cudaMemcpyAsync(c->d_targets[a], R->targets[a], c->input_bytes, cudaMemcpyHostToDevice, c->compute));
        } else {
            CS(R, cudaMemcpyAsync(c->d_inputs[a], R->inputs[a], c->input_bytes, cudaMemcpyHostToDevice, c->compute));
        }
    }
    if (m->optimizer_rows) CS(R, cudaEventRecord(c->tokens_in, c->compute));
}

void rtb_section(rt_rank* R, const char* phase) {
    if (R->trace) cs_trace_section(R, phase);
}

void rtb_step_end(rt_rank* R) {
    cuda_rank* c = R->backend;
    cudaStream_t side[CS_SIDE_STREAMS] = {c->ag_copy, c->ag, c->rs, c->ar, c->opt};
    // Only the streams this step used: under capture they joined it (every use starts with
    // a wait on a captured event), while waiting on an event recorded outside the capture
    // would break it.
    for (int s = 0; s < CS_SIDE_STREAMS; s++)
        if (c->used & (1u << s)) {
            CS(R, cudaEventRecord(c->join[s], side[s]));
            CS(R, cudaStreamWaitEvent(c->compute, c->join[s], 0));
        }
    c->used = 0;
    c->rs_pending = c->post_pending = 0;
    c->clipped = c->opt_pending = 0;
    if (R->trace) cs_trace_section(R, NULL);
}

// Side stream `waiter` (index `side` of rtb_step_end's list) waits for everything issued
// so far on `on`.
static void after(rt_rank* R, int side, cudaStream_t waiter, cudaStream_t on, cudaEvent_t ev) {
    cuda_rank* c = R->backend;
    CS(R, cudaEventRecord(ev, on));
    CS(R, cudaStreamWaitEvent(waiter, ev, 0));
    c->used |= 1u << side;
}

// Compute waits for ev, which a collective of `group` records when it is done. Under
// --trace the wait is a span on the compute stream (category `cat`), from when compute
// reaches it to when the collective is done: about zero where the collective overlapped
// the compute issued before the wait, the collective's exposed time otherwise
// (tests/gpu/trace_waits.py sums them per step).
static void compute_waits(rt_rank* R, cudaEvent_t ev, const char* group, const char* cat) {
    cuda_rank* c = R->backend;
    int t = cs_trace_open(R, c->compute, RT_TRACE_COMPUTE, group, cat);
    CS(R, cudaStreamWaitEvent(c->compute, ev, 0));
    cs_trace_close(R, t, c->compute);
}

// Compute waits for the reduce-scatter collective in flight, if any (FSDP2's
// reduce_scatter_state.event): its input buffer is free afterwards.
static void wait_reduce_scatter(rt_rank* R) {
    cuda_rank* c = R->backend;
    if (!c->rs_pending) return;
    compute_waits(R, c->rs_done, R->model->groups[c->rs_g].name, "reduce_scatter_wait");
    c->rs_pending = 0;
}

// Compute waits for the previous reduction's all-reduce, post-divide and view-out, if any
// (FSDP2's post_reduce_event and all-reduce event): its output buffer is free and the
// sharded gradients are complete afterwards.
static void wait_post_reduce(rt_rank* R) {
    cuda_rank* c = R->backend;
    if (!c->post_pending) return;
    compute_waits(R, c->post_done, R->model->groups[c->post_g].name, c->post_wait);
    c->post_pending = 0;
}

// Compute waits for the optimizer steps issued so far, if any: what follows in this step
// (a second iteration's all-gathers and reductions) reads or writes their shards.
static void wait_optimizer(rt_rank* R) {
    cuda_rank* c = R->backend;
    if (!c->opt_pending) return;
    CS(R, cudaEventRecord(c->join[4], c->opt));
    CS(R, cudaStreamWaitEvent(c->compute, c->join[4], 0));
    c->opt_pending = 0;
}

// ---- all-gather -------------------------------------------------------------------------

void rtb_all_gather_sync(rt_rank* R) {
    cuda_rank* c = R->backend;
    wait_optimizer(R);
    after(R, 0, c->ag_copy, c->compute, c->fork);
}

void rtb_all_gather(rt_rank* R, int g, int sub, size_t out_off, size_t pf_off) {
    cuda_rank* c = R->backend;
    const rt_model_group* mg = &R->model->groups[g];
    rt_rank_group* rg = &R->groups[g];
    cuda_group* cg = &c->groups[g];
    rt_fsdp_layout* L = sub ? &rg->pf_layout : &rg->layout;
    void* out = RT_BUF(R, out_off, (size_t)L->total_numel * rt_dtype_size(mg->param_dtype));
    const float* shards = sub ? rt_step_f32(R, pf_off, 0, L->block_numel)
                              : rt_step_f32(R, mg->params_off, 0, mg->block_numel);
    int t = cs_trace_open(R, c->ag_copy, RT_TRACE_ALL_GATHER_COPY, mg->name, "all_gather_copy_in");
    rtcs_copy(sub ? &cg->pf_ag_in : &cg->ag_in, out, mg->param_dtype, shards, RT_F32, 0, c->ag_copy);
    cs_trace_close(R, t, c->ag_copy);
    after(R, 1, c->ag, c->ag_copy, c->copied);
    t = cs_trace_open(R, c->ag, RT_TRACE_ALL_GATHER, mg->name, "all_gather");
    int st = rt_fsdp_all_gather(L, sub ? rg->pf_comm : R->mesh.shard, out, mg->param_dtype, c->ag);
    RTB_FSDP_CHECK(R, st, L);
    cs_trace_close(R, t, c->ag);
    CS(R, cudaEventRecord(cg->ag_done, c->ag));
}

// One rank: the shards cast into the unsharded params at unsharded_off, on stream s.
static void direct_copy(rt_rank* R, int g, size_t unsharded_off, cudaStream_t s) {
    const rt_model_group* mg = &R->model->groups[g];
    const cuda_group* cg = &((cuda_rank*)R->backend)->groups[g];
    const float* shards = rt_step_f32(R, mg->params_off, 0, mg->block_numel);
    float* un = rt_step_f32(R, unsharded_off, 0, mg->unsharded_words);
    rtcs_copy_rounded(&cg->ag_direct[UN_F32], un, RT_F32, shards, mg->param_dtype, 0, s);
    rtcs_copy(&cg->ag_direct[UN_PACKED], un, mg->param_dtype, shards, RT_F32, 0, s);
}

// On the copy-in stream, as the copy-in it replaces: the prefetch still overlaps compute.
// Beside (RT_AG_BESIDE): on the all-gather stream, which no collective uses over one shard
// rank (a spec's groups share one mesh), after what the copy-in stream waits for (the
// shards are current), so the copy-ins issued after it run beside it.
void rtb_all_gather_direct(rt_rank* R, int g, size_t unsharded_off, int beside) {
    cuda_rank* c = R->backend;
    const rt_model_group* mg = &R->model->groups[g];
    cuda_group* cg = &c->groups[g];
    cudaStream_t s = c->ag_copy;
    if (beside) {
        after(R, 1, c->ag, c->ag_copy, c->copied);
        s = c->ag;
    }
    int t = cs_trace_open(R, s, beside ? RT_TRACE_ALL_GATHER : RT_TRACE_ALL_GATHER_COPY, mg->name,
                          "all_gather_copy_in");  // the trace's lane is the stream's
    direct_copy(R, g, unsharded_off, s);
    cs_trace_close(R, t, s);
    CS(R, cudaEventRecord(cg->ag_done, s));
}

// Before a step or an eval: on compute, which they follow.
void rtb_refresh_kept(rt_rank* R, int g, size_t unsharded_off) {
    direct_copy(R, g, unsharded_off, ((cuda_rank*)R->backend)->compute);
}

void rtb_all_gather_wait(rt_rank* R, int g, int sub, size_t out_off, size_t unsharded_off) {
    cuda_rank* c = R->backend;
    const rt_model_group* mg = &R->model->groups[g];
    rt_fsdp_layout* L = sub ? &R->groups[g].pf_layout : &R->groups[g].layout;
    cuda_group* cg = &c->groups[g];
    const void* out = RT_BUF(R, out_off, (size_t)L->total_numel * rt_dtype_size(mg->param_dtype));
    float* un = rt_step_f32(R, unsharded_off, 0, mg->unsharded_words);
    compute_waits(R, cg->ag_done, mg->name, "all_gather_wait");
    for (int k = 0; k < UN_STORAGES; k++)
        rtcs_copy(sub ? &cg->pf_ag_out[k] : &cg->ag_out[k], un, k == UN_PACKED ? mg->param_dtype : RT_F32,
                  out, mg->param_dtype, 0, c->compute);
}

// RT_KEEP_UNSHARDED=copy copies the kept parameters again, as FSDP2 would, into the
// buffer the plan kept: what the copies beside compute cost, measured in one binary.
int rtb_all_gather_kept(rt_rank* R, int g, size_t unsharded_off) {
    const cuda_rank* c = R->backend;
    if (!c->copy_kept) return 0;
    rtb_all_gather_direct(R, g, unsharded_off, RT_AG_IN_ORDER);
    return 1;
}

// Nobody copies the result out, but the plan reuses its buffer after this line.
void rtb_all_gather_drop(rt_rank* R, int g) {
    const cuda_rank* c = R->backend;
    compute_waits(R, c->groups[g].ag_done, R->model->groups[g].name, "all_gather_wait");
}

void rtb_reshard_post_forward(rt_rank* R, int g, size_t unsharded_off, size_t pf_off) {
    cuda_rank* c = R->backend;
    const rt_model_group* mg = &R->model->groups[g];
    const rt_fsdp_layout* pf = &R->groups[g].pf_layout;
    for (int k = 0; k < UN_STORAGES; k++)
        rtcs_copy(&c->groups[g].pf_shards[k], rt_step_f32(R, pf_off, 0, pf->block_numel), RT_F32,
                  rt_step_f32(R, unsharded_off, 0, mg->unsharded_words),
                  k == UN_PACKED ? mg->param_dtype : RT_F32, 0, c->compute);
}

const float* rt_step_one(const rt_rank* R) { return ((const cuda_rank*)R->backend)->d_one; }

// ---- gradients --------------------------------------------------------------------------

void rt_step_round(float* x, size_t n, rt_dtype dtype) { rtcs_round(x, n, dtype, rt_cuda_get_stream()); }

void rtb_accumulate_grads(rt_rank* R, int g, size_t ugrad_off, size_t acc_off) {
    const rt_model_group* mg = &R->model->groups[g];
    const int64_t n = rt_step_ugrad_numel(R, g);
    float* u = rt_step_f32(R, ugrad_off, 0, n);
    rt_step_round(u, (size_t)n, mg->param_dtype);
    rt_accumulate(rt_step_f32(R, acc_off, 0, n), u, (size_t)n);
}

// The reduction as rt_fsdp_reduce_scatter does it on the host (pre-divide, reduce-scatter
// or the single-rank copy with its custom factor, HSDP all-reduce, post-divide); the
// reference model all-reduces full gradients instead (see runtime/cpu/step/backend.c). Issues the
// pre-divide and the collective on the reduce-scatter stream, records rs_done after it,
// then (HSDP) the all-reduce on the all-reduce stream, and the post-divide on the stream
// the result is complete on, which it returns. *span is the open reduce-scatter trace
// span; an all-reduce closes it and opens its own.
static cudaStream_t reduce(rt_rank* R, int g, const rt_fsdp_layout* L, void* in, void* out, int* span) {
    cuda_rank* c = R->backend;
    const rt_model_group* mg = &R->model->groups[g];
    rt_dtype rdt = mg->reduce_dtype;
    int replicate = mg->all_reduce ? rt_comm_size(R->mesh.replicate) : 0;
    rt_fsdp_divide d = R->model->reference
        ? rt_fsdp_gradient_divide_factors(R->world, 0, rdt, mg->divide_factor, mg->force_sum)
        : rt_fsdp_gradient_divide_factors(L->world, replicate, rdt, mg->divide_factor, mg->force_sum);
    rtcs_divide(in, L->total_numel, rdt, d.predivide, c->rs);
    int st;
    if (R->model->reference) {
        st = rt_comm_all_reduce(R->comm, in, out, L->total_numel, rdt, d.rs_op, c->rs);
        if (st) rt_rank_die(R, "reference all-reduce of group '%s': %s", mg->name, rt_comm_last_error(R->comm));
    } else if (L->world > 1) {
        st = rt_comm_reduce_scatter(R->mesh.shard, in, out, L->block_numel, rdt, d.rs_op, c->rs);
        if (st) rt_rank_die(R, "reduce-scatter of group '%s': %s", mg->name, rt_comm_last_error(R->mesh.shard));
    } else {
        if (out != in)
            CS(R, cudaMemcpyAsync(out, in, (size_t)L->block_numel * rt_dtype_size(rdt),
                                  cudaMemcpyDeviceToDevice, c->rs));
        if (mg->divide_factor > 0) rtcs_divide(out, L->block_numel, rdt, mg->divide_factor, c->rs);
    }
    CS(R, cudaEventRecord(c->rs_done, c->rs));
    c->rs_pending = 1;
    c->rs_g = g;
    c->rs_part = 0;
    cudaStream_t done = c->rs;
    if (replicate && !R->model->reference) {
        cs_trace_close(R, *span, c->rs);
        after(R, 3, c->ar, c->rs, c->forked_ar);
        *span = cs_trace_open(R, c->ar, RT_TRACE_ALL_REDUCE, mg->name, "all_reduce");
        st = rt_comm_all_reduce(R->mesh.replicate, out, out, L->block_numel, rdt, d.ar_op, c->ar);
        if (st) rt_rank_die(R, "HSDP all-reduce of group '%s': %s", mg->name, rt_comm_last_error(R->mesh.replicate));
        done = c->ar;
    }
    rtcs_divide(out, L->block_numel, rdt, d.postdivide, done);
    return done;
}

// The end of reduction cr of group g, on stream s: the group's `reduced` event, and the
// reduction's own if it is a part (what the optimizer stream waits for).
static void record_reduced(rt_rank* R, int g, const cuda_reduction* cr, cudaStream_t s) {
    CS(R, cudaEventRecord(((cuda_rank*)R->backend)->groups[g].reduced, s));
    if (cr->reduced) CS(R, cudaEventRecord(cr->reduced, s));
}

// Starts reduction r: returns its plans; without accumulate (the group's first reduction of
// the step), zeroes the sharded grads of the parameters it leaves out, on stream, unless it
// is a part (the other parts assign theirs).
static const cuda_reduction* begin_reduction(rt_rank* R, int g, int r, int accumulate, cudaStream_t stream) {
    cuda_group* cg = &((cuda_rank*)R->backend)->groups[g];
    const cuda_reduction* cr = r ? &cg->rs_some[r - 1] : &cg->rs;
    const rt_model_group* mg = &R->model->groups[g];
    if (r && !accumulate && !mg->reductions[r - 1].part) {
        float* sharded = rt_step_sharded_grads(R, g);
        rtcs_copy(&cr->zero_rest, sharded, RT_F32, sharded, RT_F32, 0, stream);
    }
    return cr;
}

void rtb_reduce_scatter(rt_rank* R, int g, int r, size_t grads_off, rt_dtype grads_dtype,
                        size_t rs_in_off, size_t rs_out_off, int accumulate) {
    cuda_rank* c = R->backend;
    const rt_model_group* mg = &R->model->groups[g];
    const rt_fsdp_layout* L = rt_step_reduction_layout(R, g, r);
    size_t es = rt_dtype_size(mg->reduce_dtype);
    wait_optimizer(R);
    wait_reduce_scatter(R);
    float* grads = rt_step_f32(R, grads_off, 0, rt_step_ugrad_numel(R, g));
    void* in = RT_BUF(R, rs_in_off, (size_t)L->total_numel * es);
    void* out = RT_BUF(R, rs_out_off, (size_t)L->block_numel * es);
    c->groups[g].grads_round = RT_F32;
    const cuda_reduction* cr = begin_reduction(R, g, r, accumulate, c->compute);
    // the rounding to grads_dtype in the copy-in: no pass over the unsharded grads, which
    // nothing reads after it (Llama 1B: 12 GB of traffic, about 4 ms on an H100)
    rtcs_copy_rounded(&cr->rs_in, in, mg->reduce_dtype, grads, grads_dtype, 0, c->compute);
    // The fork precedes compute's wait for the previous all-reduce (below), so this
    // reduce-scatter does not queue behind it.
    after(R, 2, c->rs, c->compute, c->fork);
    int t = cs_trace_open(R, c->rs, RT_TRACE_REDUCE_SCATTER, mg->name, "reduce_scatter");
    cudaStream_t done = reduce(R, g, L, in, out, &t);
    rtcs_copy(&cr->view_out, rt_step_sharded_grads(R, g), RT_F32, out, mg->reduce_dtype,
              accumulate, done);
    cs_trace_close(R, t, done);
    // The plan frees the previous reduction's output at this step (see the top of the file);
    // waited before post_done is recorded again.
    wait_post_reduce(R);
    CS(R, cudaEventRecord(c->post_done, done));
    record_reduced(R, g, cr, done);
    c->post_pending = 1;
    c->post_g = g;
    c->post_wait = done == c->ar ? "all_reduce_wait" : "reduce_scatter_wait";
}

// One pass (rs_direct): the unsharded gradients rounded to grads_dtype and assigned or added
// to the sharded ones, the bits of copy-in, copy and view-out with a third of their traffic
// (Llama 1B on one GPU: 24 GB a step less). On the reduce-scatter stream, where FSDP2 runs
// all of a reduction after its copy-in, so it overlaps the next group's backward; the plan
// keeps the unsharded gradients until the next reduction, where compute waits for this one
// (rs_done) as for a reduce-scatter.
void rtb_reduce_direct(rt_rank* R, int g, int r, size_t grads_off, rt_dtype grads_dtype, int accumulate) {
    cuda_rank* c = R->backend;
    const rt_model_group* mg = &R->model->groups[g];
    cuda_group* cg = &c->groups[g];
    // The plan frees the previous reduction's buffers at this step, as at a reduce-scatter.
    wait_optimizer(R);
    wait_reduce_scatter(R);
    wait_post_reduce(R);
    if (grads_off == mg->grads_off) {
        // In place (generator/memory/memory.lua): the backward accumulated the sharded grads
        // themselves on compute; the optimizer rounds them to grads_dtype as it reads them,
        // the bits of this copy's rounding (packed, rt_model_group grads_packed: the backward
        // stored them rounded), so nothing runs here but the events.
        // In place, a reduction of fewer parameters leaves out frozen ones only (memory.lua),
        // which have no gradients: nothing to zero (accumulate = 1; packed gradients could not
        // be zeroed as fp32 rows either).
        cg->grads_round = grads_dtype;
        record_reduced(R, g, begin_reduction(R, g, r, 1, c->compute), c->compute);
        return;
    }
    cg->grads_round = RT_F32;
    after(R, 2, c->rs, c->compute, c->fork);
    int t = cs_trace_open(R, c->rs, RT_TRACE_REDUCE_SCATTER, mg->name, "reduce_scatter");
    const cuda_reduction* cr = begin_reduction(R, g, r, accumulate, c->rs);
    rtcs_copy_rounded(&cr->rs_direct, rt_step_sharded_grads(R, g), RT_F32,
                      rt_step_f32(R, grads_off, 0, rt_step_ugrad_numel(R, g)), grads_dtype,
                      accumulate, c->rs);
    cs_trace_close(R, t, c->rs);
    CS(R, cudaEventRecord(c->rs_done, c->rs));
    record_reduced(R, g, cr, c->rs);
    c->rs_pending = 1;
    c->rs_g = g;
    c->rs_part = cr->reduced ? r : 0;
}

// ---- optimizer --------------------------------------------------------------------------

void rtb_clip_grad_norm(rt_rank* R) {
    cuda_rank* c = R->backend;
    const rt_model* m = R->model;
    wait_reduce_scatter(R);
    wait_post_reduce(R);
    for (int g = 0; g < m->ngroups; g++)
        if (c->groups[g].grads_round != RT_F32)
            rt_rank_die(R, "group '%s': in-place gradients with clipping (the plan makes none)",
                        m->groups[g].name);
    c->clipped = 1;
    int t = cs_trace_open(R, c->compute, RT_TRACE_COMPUTE, "clip_grad_norm", "optimizer");
    CS(R, cudaMemsetAsync(c->d_sumsq, 0, sizeof(double), c->compute));
    for (int g = 0; g < m->ngroups; g++)
        if (R->groups[g].reduced)  // the others have no gradient this step (rt_step_begin)
            rt_cuda_sumsq_accumulate(c->d_sumsq, rt_step_sharded_grads(R, g),
                                     (size_t)rt_model_grad_numel(&m->groups[g]));
    rt_cuda_sumsq_to_float(c->d_total, c->d_sumsq);
    // Replicas hold identical shards: the norm sums over one shard group.
    if (rt_comm_size(R->mesh.shard) > 1) {
        int st = rt_comm_all_reduce(R->mesh.shard, c->d_total, c->d_total, 1, RT_F32, rt_red_sum(), c->compute);
        if (st) rt_rank_die(R, "clip_grad_norm all-reduce: %s", rt_comm_last_error(R->mesh.shard));
    }
    for (int g = 0; g < m->ngroups; g++)
        if (R->groups[g].reduced)
            rt_cuda_clip_by_total(rt_step_sharded_grads(R, g),
                                  (size_t)rt_model_grad_numel(&m->groups[g]), c->d_total,
                                  m->grad_clip);
    cs_trace_close(R, t, c->compute);
}

int cs_env_choice(const char* var, const char* yes, const char* no) {
    const char* v = getenv(var);
    if (!v || !*v || strcmp(v, yes) == 0) return 1;
    return strcmp(v, no) == 0 ? 0 : -1;
}

// RT_OPTIMIZER_STREAM: where the optimizer steps run when the step does not clip (1: on
// the optimizer stream, 0: on compute, -1: neither).
int cs_optimizer_side(void) { return cs_env_choice("RT_OPTIMIZER_STREAM", "side", "compute"); }

int cs_env_check(const char* var, const char* yes, const char* no, const char* allowed) {
    if (cs_env_choice(var, yes, no) >= 0) return 0;
    fprintf(stderr, "fsdpgen: %s=%s: must be %s\n", var, getenv(var), allowed);
    return 2;
}

int cs_optimizer_check_env(void) {
    return cs_env_check("RT_OPTIMIZER_STREAM", "side", "compute", "side (each group's step beside "
                        "the backward, after its reduction) or compute (after the backward)");
}

// RT_BIAS_GRAD: how the linear backward computes the bias gradients it assigns
// (rt_cuda_set_bias_grad_epilogue).
int cs_bias_grad_epilogue(void) { return cs_env_choice("RT_BIAS_GRAD", "epilogue", "sums"); }

int cs_bias_grad_check_env(void) {
    return cs_env_check("RT_BIAS_GRAD", "epilogue", "sums", "epilogue (a linear's assigned bias "
                        "gradient in its weight gradient's product) or sums (column sums)");
}

// RT_KEEP_UNSHARDED: what an all-gather of parameters a reshard kept does (1 keep: nothing;
// 0 copy: the shards again).
int cs_keep_unsharded(void) { return cs_env_choice("RT_KEEP_UNSHARDED", "keep", "copy"); }

int cs_keep_unsharded_check_env(void) {
    return cs_env_check("RT_KEEP_UNSHARDED", "keep", "copy", "keep (an all-gather of parameters "
                        "a reshard kept copies nothing) or copy (it copies the shards again)");
}

int cs_sm_margin(void) {
    const char* v = getenv("RT_SM_MARGIN");
    if (!v || !*v) return 0;
    int n = 0;
    for (const char* p = v; *p; p++) {
        if (*p < '0' || *p > '9' || n > 102) return -1;  // n > 102: past 1023 with this digit
        n = n * 10 + (*p - '0');
    }
    return n <= 1023 ? n : -1;
}

int cs_sm_margin_check_env(void) {
    const int margin = cs_sm_margin();
    if (margin < 0) {
        fprintf(stderr, "fsdpgen: RT_SM_MARGIN=%s: must be a whole number of SMs from 0 to 1023 "
                        "(the SMs the GEMMs and cuDNN's attention leave to the optimizer and copy "
                        "streams)\n", getenv("RT_SM_MARGIN"));
        return 2;
    }
    // GPU 0's SMs, where one is visible (rank start checks each rank's own GPU again)
    int sms = 0;
    if (margin == 0 || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0)) return 0;
    return cs_sm_margin_refused(margin, sms) ? 2 : 0;
}

int cs_sm_margin_refused(int margin, int sms) {
    if (margin < sms) return 0;
    fprintf(stderr, "fsdpgen: RT_SM_MARGIN=%d: must leave the GEMMs at least one of the GPU's %d "
                    "SMs (0 to %d)\n", margin, sms, sms - 1);
    return 1;
}

// Whether optimizer steps run on the optimizer stream (no clipping, RT_OPTIMIZER_STREAM=side).
static int opt_beside(const cuda_rank* c) { return !c->clipped && c->opt_side; }

// The optimizer stream, after it waited for `ready`; compute waits for it at the step's end.
static cudaStream_t opt_after(rt_rank* R, cudaEvent_t ready) {
    cuda_rank* c = R->backend;
    CS(R, cudaStreamWaitEvent(c->opt, ready, 0));
    c->used |= 1u << 4;
    c->opt_pending = 1;
    return c->opt;
}

// The stream group g's optimizer step r runs on, after the waits it needs (top of the file).
static cudaStream_t optimizer_stream(rt_rank* R, int g, int r) {
    cuda_rank* c = R->backend;
    if (opt_beside(c)) {
        const cuda_group* cg = &c->groups[g];
        return opt_after(R, r ? cg->rs_some[r - 1].reduced : cg->reduced);
    }
    // Only this group's reduction (part), if it is the one in flight: the others step while
    // it finishes (the plan steps the last-reduced group last; generator/plan/optimizer.lua).
    if (c->rs_pending && c->rs_g == g && (!c->rs_part || c->rs_part == r)) wait_reduce_scatter(R);
    if (c->post_pending && c->post_g == g) wait_post_reduce(R);
    return c->compute;
}

// The step count and lr come from the device (c->d_step, k and per; c->d_lr[item]) so
// that the captured graph serves every step. On stream s; glo: the gradients' and state's
// offset (rt_step_optim_span); rows: the rows it steps (NULL: every element); no_grads: a
// zero gradient (RT_ROWS_UNUSED).
static void optimizer_on(rt_rank* R, cudaStream_t s, int g, int64_t lo, int64_t glo, int64_t n,
                         int k, int per, int item, const rt_cuda_rows* rows, int no_grads) {
    cuda_rank* c = R->backend;
    const rt_model_group* mg = &R->model->groups[g];
    const rt_model_optim* o = &R->model->optim;
    rt_optim_span sp = rt_step_optim_span(R, g, lo, glo, n);
    void* grads = no_grads ? NULL : mg->grads_packed ? (void*)sp.grads16 : (void*)sp.grads;
    // kept across steps: the step writes them too (rtb_optimizer_cast_kept), unless
    // RT_KEEP_UNSHARDED=copy copies them at every all-gather instead; a step by rows steps
    // a parameter read from the shards, which has no copy (rt_step_optimizer_rows)
    const cuda_group* cg = &c->groups[g];
    rt_cuda_cast cast = {cg->cast_runs, cg->ncast_runs, NULL, mg->param_dtype, lo};
    const int casts = mg->kept_across && !c->copy_kept && !rows && cg->ncast_runs > 0;
    if (casts) cast.un = rt_step_f32(R, mg->kept_off, 0, mg->unsharded_words);
    int t = cs_trace_open(R, s, s == c->opt ? RT_TRACE_OPTIMIZER : RT_TRACE_COMPUTE, mg->name,
                          "optimizer");
    rt_cuda_set_stream(s);
    if (o->kind == RT_OPTIM_SGD)
        rt_cuda_sgd_step_rows_dev(sp.params, grads, o->momentum > 0 ? sp.state1 : NULL, (size_t)n,
                                  c->d_step, k, per, c->d_lr + item, o->momentum, o->dampening,
                                  o->weight_decay, o->nesterov, cg->grads_round,
                                  mg->grads_packed, rows, casts ? &cast : NULL);
    else
        rt_cuda_adam_step_rows_dev(sp.params, grads, sp.state1, sp.state2, (size_t)n, c->d_step, k,
                                   per, c->d_lr + item, o->beta1, o->beta2, o->eps,
                                   o->weight_decay, o->kind == RT_OPTIM_ADAMW,
                                   cg->grads_round, mg->grads_packed, rows, casts ? &cast : NULL);
    rt_cuda_set_stream(c->compute);
    cs_trace_close(R, t, s);
}

void rtb_optimizer(rt_rank* R, int g, int r, int64_t lo, int64_t glo, int64_t n, int k, int per,
                   int item) {
    optimizer_on(R, optimizer_stream(R, g, r), g, lo, glo, n, k, per, item, NULL, 0);
}

// Done: the optimizer's kernels wrote them as they stepped (optimizer_on). Under
// RT_KEEP_UNSHARDED=copy every kept all-gather copies them instead, as FSDP2 would.
void rtb_optimizer_cast_kept(rt_rank* R, int g, size_t unsharded_off) {
    (void)R, (void)g, (void)unsharded_off;
}

// The rows no token looks up need only the step's tokens: on the optimizer stream they step
// from the step's start (after rtb_step_begin's upload), or with RT_ROWS_FINAL after their
// part's reduction too, and build the mask the looked-up rows' step reads later on the same
// stream (every unused-rows line precedes every looked-up one: generator/plan/optimizer.lua
// Sim:split_token_rows, reductions.lua Sim:reduce_parts).
void rtb_optimizer_rows(rt_rank* R, int g, int r, int64_t lo, int64_t glo, int64_t rows,
                        int64_t row_len, int k, int per, int item, int mode) {
    cuda_rank* c = R->backend;
    const rt_model* m = R->model;
    const int looked_up = mode == RT_ROWS_LOOKED_UP;
    cudaStream_t s;
    if (looked_up) {
        s = optimizer_stream(R, g, r);
    } else {
        s = opt_beside(c) ? opt_after(R, c->tokens_in) : c->compute;
        if (mode == RT_ROWS_FINAL) s = optimizer_stream(R, g, r);  // and after its part
        CS(R, cudaMemsetAsync(c->d_rows, 0, (size_t)m->vocab, s));
        rt_cuda_set_stream(s);
        for (int a = 0; a < m->n_forward; a++)
            rt_cuda_rows_mark(c->d_rows, m->vocab, c->d_tokens[a], (size_t)(m->batch * m->seq_len));
        rt_cuda_set_stream(c->compute);
    }
    const rt_cuda_rows sel = {c->d_rows, m->vocab, row_len, looked_up};
    optimizer_on(R, s, g, lo, glo, rows * row_len, k, per, item, &sel, mode == RT_ROWS_UNUSED);
}

void rtb_loss(rt_rank* R, int k, const float* loss) {
    cuda_rank* c = R->backend;
    CS(R, cudaMemcpyAsync(&c->h_losses[k], loss, sizeof(float), cudaMemcpyDeviceToHost, c->compute));
}
