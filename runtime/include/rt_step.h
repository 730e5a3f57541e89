// rt_step.h — one rank's state while it runs a generated step, and the calls the
// generated step makes for its FSDP lines (all-gather, wait and copy-out, reshard,
// reduce-scatter, optimizer, ...). Kernels are called directly (rt_kernels.h) on views of
// the arena at planned offsets (RT_BUF).
//
// Each FSDP call moves the group's state machine (sharded -> unsharded -> sharded, or the
// post-forward state for reshard_after_forward = int) exactly as FSDP2's FSDPParamGroup
// does, records an event only on a real transition (an all-gather issued, unsharded
// parameters freed, every post-backward) and counts the collectives it issues. A call
// that does not fit the group's state (all-gather of an unsharded group, copy-out without
// an all-gather) is a generator bug: it aborts the communicator and exits with status 1.
//
// Any failure prints one line "fsdpgen: rank R: ..." and exits with status 1 (after
// aborting the communicator so that no peer waits forever).
#ifndef FSDPGEN_RT_STEP_H
#define FSDPGEN_RT_STEP_H

#include <stddef.h>
#include <stdint.h>

#include "rt_arena.h"
#include "rt_comm.h"
#include "rt_fsdp.h"
#include "rt_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rt_group_state { RT_SHARDED, RT_SHARDED_POST_FORWARD, RT_UNSHARDED } rt_group_state;

#define RT_STEP_MAX_COUNTS 16
typedef struct rt_step_count {
    char what[48];               // "forward all_gather", "backward reduce_scatter", ...
    int count;
} rt_step_count;

typedef struct rt_step_event {
    const char* state;
    const char* kind;
    int group;
} rt_step_event;

// Per-group runtime state.
typedef struct rt_rank_group {
    rt_fsdp_layout layout;       // sharded layout (shard world, this rank)
    rt_fsdp_layout pf_layout;    // post-forward layout (pf_world > 0 only)
    rt_comm* pf_comm;            // post-forward sub-group (pf_world > 0 only)
    rt_group_state state;
    int pending;                 // an all-gather was issued and not yet waited for
    int pending_sub;             // ... from the post-forward shards
    int pending_direct;          // ... straight into the unsharded params (one rank)
    int pending_kept;            // ... or none: a reshard kept them (rt_step_all_gather_kept)
    size_t pending_out;          // its output's arena offset
    int kept;                    // a reshard kept the unsharded params (one rank) ...
    size_t kept_at;              // ... at this arena offset, for the next all_gather_kept
    rt_fsdp_layout* reductions;  // the model group's nreductions: their layouts (shard world)
    int reduced;                 // reduce-scatters so far this step (first assigns, next add)
    int parts;                   // ... of them parts (rt_model_reduction part) not yet stepped
    void** ptrs[2];              // nparams per-parameter pointers for the collective calls
                                 // (allocated once, so no step allocates)
    rt_dtype* unsharded_dtypes;  // per parameter: the storage of its unsharded values on the
                                 // CPU (param_dtype when packed, else RT_F32)
    int64_t* direct_copied;      // per parameter: 0, or -1 where one rank's all-gather copies
                                 // nothing (from_shard), as rt_copy_all_gather_direct takes it
} rt_rank_group;

typedef struct rt_rank {
    const rt_model* model;
    int rank, world;
    rt_comm* comm;               // all ranks
    rt_fsdp_mesh mesh;           // shard group, replicate group (HSDP)
    rt_arena arena;
    // offload_policy: arena bytes [0, offload_end) (the persistent buffers) are served from
    // offload_base (pinned host memory) instead; 0 when nothing is offloaded.
    uint8_t* offload_base;
    size_t offload_end;
    rt_rank_group* groups;       // model->ngroups
    int64_t step;                // 0-based index of the step being run
    uint64_t seed;               // run seed (dropout masks); the driver sets it
    // Inputs of this step, one per forward item (set by the driver before each step).
    int32_t** tokens;            // [n_forward][batch * seq_len] (token models)
    int32_t** targets;           // [n_forward][batch * seq_len] (cross-entropy)
    float** inputs;              // [n_forward][numel(input_shape)] (float models)
    double* losses;              // [n_backward]: each backward's loss on this rank
    // What happened (reset by rt_step_begin).
    rt_step_event* events;
    int nevents, cap_events;
    const char* phase;           // the step item running: "forward", "backward", ...
    int ag_synced;               // the all-gather streams waited for compute in this step
    rt_step_count counts[RT_STEP_MAX_COUNTS];  // collectives issued, by "phase op"
    int ncounts;
    struct rt_trace* trace;      // Chrome trace (NULL: none); collectives and optimizer spans
    // Time spent, seconds (accumulated over steps; the driver resets them). The CUDA
    // backend measures none of t_comm and t_optim (its collectives overlap compute on
    // their own streams; --trace shows them).
    double t_comm, t_optim, t_total;
    int after_eval;              // an eval ran since the last step (rt_step_next)
    int kept_stale;              // the parameters may have changed outside a step (setup,
                                 // rt_rank_host, rt_rank_push): the unsharded params kept
                                 // across steps are cast again first (rt_step_refresh_kept)
    float* logits_out;           // where rt_step_eval_logits copies the eval's logits, or NULL
    void* backend;               // the backend's own state of this rank
} rt_rank;

// ---- backend ----------------------------------------------------------------------------
// Implemented by the step library a binary links: build/step/librt_step.a ("cpu": ranks
// are threads, buffers host memory) or build/cuda_step/librt_step_cuda.a ("cuda").

typedef struct rt_launch_opts {
    int local;        // cuda: every rank on one GPU (cuda_local communicators), for tests
    int no_graph;     // cuda: run every step eagerly instead of replaying a CUDA graph
} rt_launch_opts;

// "cpu" or "cuda".
const char* rt_step_backend(void);
// Runs fn on every rank of a world of `world` ranks, each with its world communicator:
// cpu: threads (rt_threads_run); cuda: one process per rank under mpirun (rt_mpi_run),
// else one thread per GPU (rt_nccl_run) when there are enough GPUs and not o->local,
// else every rank on GPU 0 (rt_cuda_local_run). Returns 0, or non-zero when a rank failed
// (2: it could not start, after a one-line message).
int rt_step_launch(int world, const rt_launch_opts* o, rt_rank_fn fn, void* arg);
// The device rank R runs on, for MFU: writes its name to name (cuda: the GPU's, as
// cudaGetDeviceProperties gives it; cpu: "") and returns how many devices the run's ranks
// share (cuda: its GPUs, 1 when every rank runs on GPU 0; cpu: 0). Call inside fn.
int rt_step_device(rt_rank* R, char* name, size_t cap);
// Runs one step (rt_step_next's; cuda: eagerly, or R->model->step captured once as a CUDA
// graph and then replayed) and waits for it: R->losses hold its losses afterwards.
void rt_step_run(rt_rank* R);
typedef void (*rt_step_fn)(struct rt_rank* R);
// The step rt_step_run runs now: model->step_after_eval when an eval ran since the last
// step and the model has one, else model->step. Clears the eval's mark.
rt_step_fn rt_step_next(rt_rank* R);
// Runs the eval program (R->model->eval, which must exist; cuda: eagerly) on forward item
// 0's input and waits for it: returns this rank's loss. The parameters, gradients and
// optimizer state are left as they were, and every group sharded; the next step is
// rt_step_next's.
double rt_step_eval(rt_rank* R);
// What the generated step reads as forward item `item`'s input. The driver fills
// R->tokens / R->targets / R->inputs (host memory) before rt_step_run; cuda returns device
// copies that the step itself uploads.
const int32_t* rt_step_tokens(rt_rank* R, int item);
const int32_t* rt_step_targets(rt_rank* R, int item);
const float* rt_step_inputs(rt_rank* R, int item);
// The driver's access to the persistent buffers (sharded parameters, gradients, optimizer
// state): a host view of arena bytes [off, off + bytes) (NULL with a message when outside
// them). cpu: the arena itself; cuda: a host mirror that rt_rank_pull fills from the device
// and rt_rank_push copies back. Both are collective-free and return 0 or 1 (printed).
void* rt_rank_host(rt_rank* R, size_t off, size_t bytes);
int rt_rank_pull(rt_rank* R);
int rt_rank_push(rt_rank* R);
// Where R->kept_stale: casts the shards into every group's unsharded params kept across
// steps (rt_model_group kept_across), as the group's all-gathers would, and clears it. The
// backends' rt_step_run and rt_step_eval call it first (outside any captured graph).
void rt_step_refresh_kept(rt_rank* R);

// ---- setup ------------------------------------------------------------------------------

// Sets up one rank of model over comm (size model->world): mesh, post-forward groups,
// layouts (checked against the plan), arena (arena_bytes). Collective. Returns 0, or
// prints the error and returns 1.
int rt_rank_init(rt_rank* R, const rt_model* model, rt_comm* comm);
void rt_rank_free(rt_rank* R);

// Prints "fsdpgen: rank R: <message>", aborts the communicator, exits with status 1.
void rt_rank_die(rt_rank* R, const char* fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

// ---- arena views ------------------------------------------------------------------------

// The planned buffer [off, off + bytes) of this rank's arena (checked, raises the
// measured peak). Generated code writes RT_BUF(R, off, bytes).
void* rt_step_buffer(rt_rank* R, size_t off, size_t bytes, const char* file, int line);
#define RT_BUF(R, off, bytes) rt_step_buffer((R), (off), (bytes), __FILE__, __LINE__)
#define RT_F32(R, off, bytes) ((float*)RT_BUF(R, off, bytes))
#define RT_I32(R, off, bytes) ((int32_t*)RT_BUF(R, off, bytes))

// ---- the step ---------------------------------------------------------------------------

// Start of a step: reset events, counts and the reduce-scatter counters. That is also
// optimizer.zero_grad() (set_to_none): a group's sharded gradients hold this step's values
// once its first reduction of the step has assigned them (later ones add), and nothing
// reads those of a group with no reduction yet (the optimizer skips it, clipping leaves it
// out), so they are never zeroed: a memset of every gradient per step saved (6 GB on Llama
// 1B). Their padding is zero from the arena's initialisation and no copy writes it.
void rt_step_begin(rt_rank* R);
// Start of a step item (section of the schedule): "forward", "backward", "optimizer", ...
void rt_step_section(rt_rank* R, const char* phase);
// End of a step: every group must be sharded again (what the next step's plan assumes).
void rt_step_end(rt_rank* R);

// "ag all_gather_sync": the all-gather streams wait for what compute issued so far (FSDP2's
// root pre-forward wait, and at each backward's start; all_gather_wait after its copy-out
// and reshard_post_forward do the same), and not for what it issues later: an all-gather issued after a group's compute
// overlaps it. generator/memory/memory.lua keeps each all-gather's output off every buffer live
// since the last such point. An all-gather before any in the step dies.
void rt_step_all_gather_sync(rt_rank* R);
// "ag all_gather": copy-in (from the sharded fp32 params, or the post-forward shards at
// pf_off when sub) cast to param_dtype into this rank's block of the all-gather output at
// out_off, then the all-gather (shard group, or post-forward group when sub).
void rt_step_all_gather(rt_rank* R, int g, int sub, const char* state, size_t out_off, size_t pf_off);
// "all_gather" that the generator planned direct (generator/plan/planner.lua direct_all_gather:
// one rank, from the shards): the copy-in writes the shards, cast to param_dtype, straight
// into the unsharded parameters at unsharded_off (as the copy-out would store them), and
// no collective runs (one rank's all-gather leaves its buffer as the copy-in wrote it).
// The all_gather_wait that follows only waits. Dies if the shard group has more ranks.
// beside: RT_AG_IN_ORDER, or RT_AG_BESIDE where compute waits for it at its first reader
// (generator/memory/late_waits.lua), after other groups' all-gathers: the CUDA backend
// copies on a stream of its own then, so that theirs do not queue behind it.
enum { RT_AG_IN_ORDER = 0, RT_AG_BESIDE = 1 };
void rt_step_all_gather_direct(rt_rank* R, int g, const char* state, size_t unsharded_off,
                               int beside);
// "all_gather" kept (generator/plan/keep.lua): one rank, after rt_step_reshard_keep with no
// optimizer step between, the unsharded parameters at unsharded_off already hold the
// shards' values; the unshard event only, nothing copied (the CUDA backend's
// RT_KEEP_UNSHARDED=copy copies them again, to measure the copies). Dies unless a reshard
// kept them there.
void rt_step_all_gather_kept(rt_rank* R, int g, const char* state, size_t unsharded_off);
// "all_gather_wait": copy-out into the unsharded parameters at unsharded_off, values in
// param_dtype: fp32 storage, or param_dtype's bits for a packed parameter (rt_model.h);
// then an all_gather_sync.
void rt_step_all_gather_wait(rt_rank* R, int g, size_t unsharded_off);
// "all_gather_drop": a prefetch nobody waited for; its result is dropped.
void rt_step_all_gather_drop(rt_rank* R, int g);
// "reshard": back to the sharded state from unsharded (the unsharded parameters are free)
// or from sharded post-forward (the post-forward shards are free; the next all-gather runs
// over the full shard group). Always an event; dies if the group is already sharded (the
// planner emits no step for such a no-op reshard).
void rt_step_reshard(rt_rank* R, int g, const char* state);
// "reshard" keep (one rank): as rt_step_reshard, but the unsharded parameters at
// unsharded_off stay for the group's next all-gather, an rt_step_all_gather_kept.
void rt_step_reshard_keep(rt_rank* R, int g, const char* state, size_t unsharded_off);
// "reshard_post_forward": keep this rank's slice of the unsharded parameters in the
// post-forward shards at pf_off (fp32 storage), free the unsharded ones.
void rt_step_reshard_post_forward(rt_rank* R, int g, const char* state, size_t unsharded_off,
                                  size_t pf_off);
// Rounds n fp32 values to dtype in place (mixed precision: compute stores fp32 values that
// carry param_dtype's precision). No-op for fp32. cuda: on the calling thread's stream.
void rt_step_round(float* x, size_t n, rt_dtype dtype);
// "accumulate_unsharded_grads" (gradient sync off), and before a reduce-scatter of
// accumulated grads: acc (fp32, zeroed by the caller when new) += this backward's
// unsharded grads (rounded to param_dtype first).
void rt_step_accumulate_grads(rt_rank* R, int g, size_t ugrad_off, size_t acc_off);
// "reduce_scatter": copy-in of the unsharded grads at grads_off (fp32 storage), each
// value rounded to grads_dtype (param_dtype for this backward's grads, reduce_dtype for
// accumulated ones), into the reduce-scatter input (reduce_dtype; the unsharded grads are
// dead after it, and a backend may leave them unrounded), pre-divide,
// reduce-scatter over the shard group, then (HSDP) the all-reduce over replicas,
// post-divide and view-out into the sharded fp32 grads (assign on the group's first
// reduce-scatter of the step, accumulate after). r: the parameters it reduces, 0 for all of
// the group, k for rt_model_group.reductions[k - 1] (the first reduce-scatter of the step
// then zeroes the others' sharded grads, which later ones add to).
void rt_step_reduce_scatter(rt_rank* R, int g, int r, size_t grads_off, rt_dtype grads_dtype,
                            size_t rs_in_off, size_t rs_out_off);
// "reduce_scatter" that the generator planned direct (generator/plan/reductions.lua
// direct_reduction: one rank, no division, a reduce dtype that holds grads_dtype values):
// the unsharded grads rounded to grads_dtype, assigned or added to the sharded grads in one
// pass, with the same bits as copy-in, reduction and view-out. Dies if the group's reduction
// would change a value. r as for rt_step_reduce_scatter.
void rt_step_reduce_direct(rt_rank* R, int g, int r, size_t grads_off, rt_dtype grads_dtype);
// "all_reduce" (HSDP): done by rt_step_reduce_scatter, which must apply the post-divide
// after it; this call checks that it happened and counts it.
void rt_step_all_reduce(rt_rank* R, int g);
// "post_backward": the event.
void rt_step_post_backward(rt_rank* R, int g, const char* state);
// "clip_grad_norm": global norm over every group's sharded grads (all-reduce over the shard
// group: replicas hold identical shards), then scale every grad by clip_coef.
void rt_step_clip_grad_norm(rt_rank* R);
// "optimizer": the model's optimizer on group g's sharded params, the k-th of the `per`
// optimizer steps that a training step gives the group (1-based; PyTorch's state["step"]
// is then R->step * per + k), then zero_grad: the group's next reduce-scatter assigns.
// r: 0 for the group, k for the parameters of rt_model_group.reductions[k - 1], a part
// (the group's zero_grad then comes with its last part's step).
// item: the step's optimizer item it belongs to (0-based, < model->n_optimizer), which
// picks its learning rate (rt_step_lr). The generator emits it only after a
// reduce-scatter of the group (a group without one has grad None, which torch.optim
// skips); parameters that no backward reaches are skipped (rt_model_param grad_none).
void rt_step_optimizer(rt_rank* R, int g, int r, int k, int per, int item);
// The same optimizer step in two lines, by rows (generator/plan/optimizer.lua
// Sim:split_token_rows): one rank, and each parameter it steps is 2-D with a gradient only
// in the rows the step's tokens look up (token ids < model->vocab over every forward of the
// step). RT_ROWS_UNUSED steps the other rows with a zero gradient (the grads are not read),
// first in the optimizer section: it needs nothing of the backward, and the CUDA backend's
// optimizer stream runs it from the step's start; RT_ROWS_LOOKED_UP steps the rest in the
// step's place, as rt_step_optimizer (zero_grad included), and sets their gradients to 0 as
// it reads them: every row's gradient is then 0 for the next backward, which adds to the
// in-place ones without zeroing the table first (generator/emit/emit_step.lua consumed_grads).
// RT_ROWS_FINAL, for a parameter that the step's lookups are not alone to add to (a tied
// embedding, generator/plan/reductions.lua Sim:reduce_parts), steps the rows no token looks
// up with their gradient (the output head's, final), after its part r of the group's
// reduction and before the lookups' backward; the parameter's RT_ROWS_LOOKED_UP part steps
// the rest. Either steps its part (zero_grad once every part is stepped).
enum { RT_ROWS_UNUSED = 1, RT_ROWS_LOOKED_UP = 2, RT_ROWS_FINAL = 3 };
void rt_step_optimizer_rows(rt_rank* R, int g, int r, int k, int per, int item, int rows);
// The learning rate of this step's optimizer item `item`: model->lr_schedule at
// optimizer step R->step * model->n_optimizer + item of the run (every group gets it, as
// an LR scheduler sets every param group's lr, whether or not the group has gradients).
double rt_step_lr(const rt_rank* R, int item);
// Records backward k's loss (the scalar at loss).
void rt_step_loss(rt_rank* R, int k, const float* loss);
// Records the eval program's loss (rt_step_eval returns it).
void rt_step_eval_loss(rt_rank* R, const float* loss);
// The eval program's logits (n floats) before its loss: where the driver set R->logits_out
// (--logits; CPU backend) and n is batch x seq_len x vocab, copied there, and logits_out
// reset to NULL (the driver's sign that they came); else nothing.
void rt_step_eval_logits(rt_rank* R, const float* logits, int64_t n);
// Attention at site `site` (rt_model_attention): rt_attention_lowmem_packed_forward /
// _backward with q, k, v, out, dout and the gradients packed in the site's dtype and dq, dk,
// dv assigned; or cuDNN's fused attention where the CUDA backend chose it for the site at
// start (stats then hold cuDNN's logsumexp rows, which only the site's backward reads).
// scratch: the site's scratch_bytes.
void rt_step_attention_forward(rt_rank* R, int site, void* out, float* stats, float* scratch,
                               const void* q, const void* k, const void* v);
void rt_step_attention_backward(rt_rank* R, int site, void* dq, void* dk, void* dv,
                                float* scratch, const void* dout, const void* out,
                                const void* q, const void* k, const void* v,
                                const float* stats);
// A float 1.0 in the backend's memory (device memory on the GPU): d loss / d loss, the
// incoming gradient of the loss's own backward (rt_kernels.h dloss, or the output
// gradient of the op whose output is the loss).
const float* rt_step_one(const rt_rank* R);
// The dropout RNG stream of op `site` in this rank's step: (step, rank, site) mixed, so
// sharded and unsharded runs (same rank, same data) draw identical masks and a
// checkpointed region's recompute draws the forward's.
uint64_t rt_step_rng_stream(const rt_rank* R, int site);

#ifdef __cplusplus
}
#endif
#endif
