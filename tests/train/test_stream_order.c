// test_stream_order.c — the CUDA step backend's stream and event ordering, checked on the
// CPU: runtime/cuda/step/backend.c is compiled as it is and linked against a recording
// stand-in for the CUDA runtime, its kernels and the communicators (defined below). Every
// kernel, copy and collective is an access to a byte range on a stream; streams and
// events carry vector clocks (an op follows everything earlier on its stream; a wait on
// an event follows everything before the event's record). Two accesses to overlapping
// bytes, one of them a write, on different streams, with neither ordered before the
// other, are a race: on a GPU they may run in either order.
//
// The scenarios replay what a generated backward does around FSDP2's reductions (compute
// writes the unsharded gradients, rtb_reduce_scatter per group, the optimizer), with
// arena offsets as generator/memory/memory.lua plans them: a reduce-scatter's input and output
// live until the next reduce-scatter step, after which a later buffer may sit on them.
// Checked: no race under that reuse, with HSDP and without; FSDP2's ordering (compute
// waits for the previous reduce-scatter collective before the next copy-in, and neither
// that copy-in nor the next reduce-scatter waits for the previous all-reduce, so they
// overlap); and, as a control that the checker sees the overlap, a write to the previous
// reduce-scatter output while it is still planned live is reported as a race. At one rank
// also the optimizer beside the backward (writing the unsharded params kept across steps),
// a root reduced in parts, gradients in place and
// an embedding's optimizer split by rows (each with a control the checker must catch), and
// an all-gather's copy beside the next groups' (waited for at its first reader).
//
// Lives in tests/train (built by its run.sh) because it needs no GPU, only the CUDA
// headers. usage: test_stream_order
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "rt_cuda.h"
#include "rt_kernels.h"

// ---- streams, events, accesses --------------------------------------------------------

#define NS 8        // streams (compute, five side streams, spares)
#define MAXACC 4096

struct CUstream_st {
    int id;
};
struct CUevent_st {
    unsigned vc[NS];
};

typedef struct access {
    int s;              // stream
    unsigned vc[NS];    // its clock when it ran
    uintptr_t lo, hi;   // bytes [lo, hi)
    int write;
    const char* what;
} access;

static struct CUstream_st streams[NS];
static unsigned clocks[NS][NS];
static int nstreams;
static access acc[MAXACC];
static int nacc;
static int races;
static char first_race[512];
static int races_with_all_reduce;  // races whose earlier access is an all-reduce
static void* cur_stream;  // rt_cuda_set_stream
static uintptr_t arena_base;  // for messages

static int sid(cudaStream_t s) {
    if (!s) {
        fprintf(stderr, "test_stream_order: an op on the legacy default stream\n");
        exit(1);
    }
    return s->id;
}

// Records an access of [p, p + n) on stream s (n 0: nothing).
static void touch(cudaStream_t st, const void* p, size_t n, int write, const char* what) {
    if (!n || !p) return;
    int s = sid(st);
    clocks[s][s]++;
    if (nacc == MAXACC) {
        fprintf(stderr, "test_stream_order: more than %d accesses\n", MAXACC);
        exit(1);
    }
    access* a = &acc[nacc++];
    a->s = s;
    memcpy(a->vc, clocks[s], sizeof a->vc);
    a->lo = (uintptr_t)p;
    a->hi = a->lo + n;
    a->write = write;
    a->what = what;
    for (int k = 0; k < nacc - 1; k++) {
        const access* b = &acc[k];
        if (b->s == s || b->hi <= a->lo || a->hi <= b->lo || !(a->write || b->write)) continue;
        if (b->vc[b->s] <= a->vc[b->s]) continue;  // b happens before a
        races_with_all_reduce += !strcmp(b->what, "all_reduce");
        if (!races++)
            snprintf(first_race, sizeof first_race, "%s on stream %d and %s on stream %d, bytes "
                     "[%zu, %zu) and [%zu, %zu) of the arena", b->what, b->s, a->what, s,
                     (size_t)(b->lo - arena_base), (size_t)(b->hi - arena_base),
                     (size_t)(a->lo - arena_base), (size_t)(a->hi - arena_base));
    }
}

// Whether access i happens before access j (i issued first).
static int before(int i, int j) { return acc[i].vc[acc[i].s] <= acc[j].vc[acc[i].s]; }

// The first access in [from, to) whose label is what, or -1.
static int find(int from, int to, const char* what) {
    for (int k = from; k < to; k++)
        if (!strcmp(acc[k].what, what)) return k;
    return -1;
}

static void reset_clocks(void) {
    memset(clocks, 0, sizeof clocks);
    nacc = races = races_with_all_reduce = 0;
    first_race[0] = 0;
}

// ---- the CUDA runtime, as backend.c uses it ---------------------------------------------

const char* cudaGetErrorString(cudaError_t e) { return e ? "mock error" : "no error"; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int f) {
    (void)f;
    streams[nstreams].id = nstreams;
    *s = &streams[nstreams++];
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int f, int p) {
    (void)p;
    return cudaStreamCreateWithFlags(s, f);
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int f) {
    (void)f;
    *e = calloc(1, sizeof **e);
    return *e ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) { return free(e), cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    memcpy(e->vc, clocks[sid(s)], sizeof e->vc);
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int f) {
    (void)f;
    unsigned* c = clocks[sid(s)];
    for (int k = 0; k < NS; k++)
        if (e->vc[k] > c[k]) c[k] = e->vc[k];
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, enum cudaMemcpyKind k, cudaStream_t st) {
    (void)k;
    touch(st, s, n, 0, "memcpy read");
    touch(st, d, n, 1, "memcpy write");
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t st) {
    touch(st, p, n, 1, "memset");
    memset(p, v, n);  // now: the row mask's stand-in kernels read it (rt_cuda_rows_mark)
    return cudaSuccess;
}
// Not reached by the scenarios (eager steps, no setup through rank.c).
cudaError_t cudaStreamSynchronize(cudaStream_t s) { return (void)s, cudaSuccess; }
// no device (rt_step_launch's RT_SM_MARGIN check asks for GPU 0's SMs)
cudaError_t cudaDeviceGetAttribute(int* v, enum cudaDeviceAttr a, int d) {
    return (void)v, (void)a, (void)d, cudaErrorNoDevice;
}
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, enum cudaMemcpyKind k) {
    return (void)d, (void)s, (void)n, (void)k, cudaErrorNotSupported;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode m) {
    return (void)s, (void)m, cudaErrorNotSupported;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
    return (void)s, (void)g, cudaErrorNotSupported;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* e, cudaGraph_t g, unsigned long long f) {
    return (void)e, (void)g, (void)f, cudaErrorNotSupported;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
    return (void)e, (void)s, cudaErrorNotSupported;
}

// ---- the backend's kernels, rt_cuda, kernels, trace ----------------------------------------

// Where a plan's elements start in its source and destination: a plan of some parameters (a
// part's) copies their ranges only, not from the buffers' starts. Elements; 0 unless listed.
static struct {
    const rtcs_plan* p;
    int64_t src, dst;
} plan_at[4];
static int nplan_at;

void rtcs_copy(const rtcs_plan* p, void* dst, rt_dtype dst_dt, const void* src, rt_dtype src_dt,
               int accumulate, void* stream) {
    for (int k = 0; k < nplan_at; k++)
        if (plan_at[k].p == p) {
            src = (const char*)src + plan_at[k].src * rt_dtype_size(src_dt);
            dst = (char*)dst + plan_at[k].dst * rt_dtype_size(dst_dt);
        }
    touch(stream, src, (size_t)p->total * rt_dtype_size(src_dt), 0, "copy read");
    if (accumulate) touch(stream, dst, (size_t)p->total * rt_dtype_size(dst_dt), 0, "copy read");
    touch(stream, dst, (size_t)p->total * rt_dtype_size(dst_dt), 1, "copy write");
}
void rtcs_copy_rounded(const rtcs_plan* p, void* dst, rt_dtype dst_dt, const float* src,
                       rt_dtype round_dt, int accumulate, void* stream) {
    (void)round_dt;
    rtcs_copy(p, dst, dst_dt, src, RT_F32, accumulate, stream);
}
void rtcs_divide(void* buf, int64_t n, rt_dtype dt, double factor, void* stream) {
    if (factor == 1.0) return;  // the kernel launches nothing
    touch(stream, buf, (size_t)n * rt_dtype_size(dt), 1, "divide");
}
void rtcs_round(float* x, size_t n, rt_dtype dt, void* stream) {
    if (dt != RT_F32) touch(stream, x, n * sizeof(float), 1, "round");
}
void rt_cuda_set_stream(void* stream) { cur_stream = stream; }
void* rt_cuda_get_stream(void) { return cur_stream; }
// The elements an optimizer step touches: every one without rows, else the runs of rows
// whose mask entry (the stand-in rt_cuda_rows_mark writes it) says they are stepped, as
// optim.cu's rtc_row_stepped; buffers bufs[0..n) of 4-byte elements, grads (of gsize-byte
// elements: packed, 2) read (NULL for the rows no token looks up: not read; the looked-up
// rows' also written: set to 0), the others written.
static void touch_stepped(const rt_cuda_rows* rows, size_t n, const void* grads, size_t gsize,
                          float* const* bufs, int nbufs) {
    size_t len = n;
    if (rows && rows->mask)
        touch(cur_stream, rows->mask, (size_t)rows->vocab, 0, "optimizer reads rows");
    for (size_t i = 0; i < n; i += len) {
        if (rows && rows->mask) {
            const size_t row = i / (size_t)rows->row_len;
            const int looked_up = (int64_t)row < rows->vocab && rows->mask[row] != 0;
            len = (size_t)rows->row_len;
            if (looked_up != (rows->looked_up != 0)) continue;
        }
        if (grads)
            touch(cur_stream, (const char*)grads + i * gsize, len * gsize,
                  rows && rows->mask && rows->looked_up, "optimizer reads grads");
        for (int b = 0; b < nbufs; b++)
            if (bufs[b]) touch(cur_stream, bufs[b] + i, len * 4, 1, "optimizer");
    }
}
// The unsharded params an optimizer step casts into (rt_cuda_cast: its runs are host
// memory here), written; the runs' elements past the step's n are not.
static void touch_cast(const rt_cuda_cast* cast, size_t n) {
    for (int r = 0; cast && r < cast->nruns; r++) {
        const rt_cuda_cast_run* q = &cast->runs[r];
        const int64_t lo = q->src > cast->base ? q->src : cast->base;
        const int64_t hi = q->src + q->n < cast->base + (int64_t)n ? q->src + q->n : cast->base + (int64_t)n;
        const size_t size = q->packed ? 2 : 4;
        if (lo < hi)
            touch(cur_stream, (char*)cast->un + (size_t)(q->dst + lo - q->src) * size,
                  (size_t)(hi - lo) * size, 1, "optimizer casts");
    }
}
void rt_cuda_adam_step_rows_dev(float* p, void* g, float* m, float* v, size_t n,
                                const int64_t* d_step, int k, int per, const double* d_lr,
                                double beta1, double beta2, double eps, double weight_decay,
                                int adamw, rt_dtype grad_dt, int packed_grads,
                                const rt_cuda_rows* rows, const rt_cuda_cast* cast) {
    (void)d_step, (void)k, (void)per, (void)d_lr, (void)beta1, (void)beta2, (void)eps, (void)weight_decay, (void)adamw;
    (void)grad_dt;
    float* bufs[3] = {p, m, v};
    touch_stepped(rows, n, g, packed_grads ? 2 : 4, bufs, 3);
    touch_cast(cast, n);
}
void rt_cuda_sgd_step_rows_dev(float* p, void* g, float* momentum_buf, size_t n,
                               const int64_t* d_step, int k, int per, const double* d_lr,
                               double momentum, double dampening, double weight_decay,
                               int nesterov, rt_dtype grad_dt, int packed_grads,
                               const rt_cuda_rows* rows, const rt_cuda_cast* cast) {
    (void)grad_dt;
    (void)d_step, (void)k, (void)per, (void)d_lr, (void)momentum, (void)dampening, (void)weight_decay, (void)nesterov;
    float* bufs[2] = {p, momentum_buf};
    touch_stepped(rows, n, g, packed_grads ? 2 : 4, bufs, 2);
    touch_cast(cast, n);
}
// Marks the rows as the kernel does (the mask is arena memory here), so that the steps
// above touch the rows they step.
void rt_cuda_rows_mark(uint8_t* mask, int64_t vocab, const int32_t* tokens, size_t n) {
    touch(cur_stream, tokens, n * 4, 0, "rows mark reads tokens");
    touch(cur_stream, mask, (size_t)vocab, 1, "rows mark");
    for (size_t i = 0; i < n; i++)
        if (tokens[i] >= 0 && tokens[i] < vocab) mask[tokens[i]] = 1;
}
void rt_cuda_sumsq_accumulate(double* d_acc, const float* x, size_t n) {
    touch(cur_stream, x, n * 4, 0, "clip reads grads");
    touch(cur_stream, d_acc, 8, 1, "clip sum");
}
void rt_cuda_sumsq_to_float(float* d_out, const double* d_acc) {
    touch(cur_stream, d_acc, 8, 0, "clip sum");
    touch(cur_stream, d_out, 4, 1, "clip sum");
}
void rt_cuda_clip_by_total(float* x, size_t n, const float* d_total, double max_norm) {
    (void)max_norm;
    touch(cur_stream, d_total, 4, 0, "clip sum");
    touch(cur_stream, x, n * 4, 1, "clip scales grads");
}
void rt_accumulate(float* dst, const float* src, size_t n) {
    touch(cur_stream, src, n * 4, 0, "accumulate");
    touch(cur_stream, dst, n * 4, 1, "accumulate");
}
const char* rt_check_cuda_hint(int code) { return (void)code, "mock"; }
void cs_trace_begin(rt_rank* R) { (void)R; }
int cs_trace_open(rt_rank* R, cudaStream_t s, int tid, const char* name, const char* cat) {
    return (void)R, (void)s, (void)tid, (void)name, (void)cat, -1;
}
void cs_trace_close(rt_rank* R, int span, cudaStream_t s) { (void)R, (void)span, (void)s; }
void cs_trace_section(rt_rank* R, const char* phase) { (void)R, (void)phase; }
void cs_trace_flush(rt_rank* R) { (void)R; }
int cs_attention_check_env(void) { return 0; }

// ---- communicators and the step state (runtime/step/state.c) ------------------------------

struct rt_comm {
    int size;
};

int rt_comm_size(const rt_comm* c) { return c ? c->size : -1; }
const char* rt_comm_backend(const rt_comm* c) { return (void)c, "nccl"; }
const char* rt_comm_last_error(const rt_comm* c) { return (void)c, "mock"; }
size_t rt_dtype_size(rt_dtype dt) { return dt == RT_F32 ? 4 : 2; }
int rt_comm_reduce_scatter(rt_comm* c, const void* send, void* recv, int64_t n, rt_dtype dt,
                           rt_redop op, void* stream) {
    (void)op;
    touch(stream, send, (size_t)(n * c->size) * rt_dtype_size(dt), 0, "reduce_scatter");
    touch(stream, recv, (size_t)n * rt_dtype_size(dt), 1, "reduce_scatter");
    return 0;
}
int rt_comm_all_reduce(rt_comm* c, const void* send, void* recv, int64_t n, rt_dtype dt,
                       rt_redop op, void* stream) {
    (void)c, (void)op;
    touch(stream, send, (size_t)n * rt_dtype_size(dt), 0, "all_reduce");
    touch(stream, recv, (size_t)n * rt_dtype_size(dt), 1, "all_reduce");
    return 0;
}
int rt_fsdp_all_gather(rt_fsdp_layout* l, rt_comm* c, void* out, rt_dtype dt, void* stream) {
    (void)c;
    touch(stream, out, (size_t)l->total_numel * rt_dtype_size(dt), 1, "all_gather");
    return 0;
}
rt_fsdp_divide rt_fsdp_gradient_divide_factors(int shard, int replicate, rt_dtype dt, double f,
                                               int force_sum) {
    (void)shard, (void)replicate, (void)dt, (void)f, (void)force_sum;
    // Pre- and post-divides that run, so their kernels are accesses too.
    return (rt_fsdp_divide){2.0, 2.0, rt_red_sum(), rt_red_sum()};
}
// Not reached: launching ranks.
int rt_mpi_launched(void) { return 0; }
int rt_mpi_run(int w, rt_rank_fn f, void* a) { return (void)w, (void)f, (void)a, 2; }
int rt_nccl_device_count(void) { return 0; }
int rt_nccl_run(int w, rt_rank_fn f, void* a) { return (void)w, (void)f, (void)a, 2; }
int rt_cuda_local_run(int w, int d, rt_rank_fn f, void* a) { return (void)w, (void)d, (void)f, (void)a, 2; }

static uint8_t* arena;
static size_t arena_bytes;

void* rt_step_buffer(rt_rank* R, size_t off, size_t bytes, const char* file, int line) {
    if (off + bytes > arena_bytes) rt_rank_die(R, "%s:%d: buffer outside the arena", file, line);
    return arena + off;
}
float* rt_step_f32(rt_rank* R, size_t off, int64_t elem, int64_t n) {
    return (float*)rt_step_buffer(R, off + 4 * (size_t)elem, 4 * (size_t)n, __FILE__, __LINE__);
}
rt_optim_span rt_step_optim_span(rt_rank* R, int g, int64_t lo, int64_t glo, int64_t n) {
    const rt_model_group* mg = &R->model->groups[g];
    int k = R->model->optim.nstates;
    return (rt_optim_span){
        rt_step_f32(R, mg->params_off, lo, n),
        mg->grads_packed ? NULL : rt_step_f32(R, mg->grads_off, glo, n),
        k > 0 ? rt_step_f32(R, mg->state_off, glo, n) : NULL,
        k > 1 ? rt_step_f32(R, mg->state_off, rt_model_grad_numel(mg) + glo, n) : NULL,
        mg->grads_packed ? rt_step_buffer(R, mg->grads_off + 2 * (size_t)glo, 2 * (size_t)n, __FILE__,
                                          __LINE__)
                         : NULL};
}
int64_t rt_step_ugrad_numel(rt_rank* R, int g) {
    return rt_model_grad_numel(&R->model->groups[g]) * R->groups[g].layout.world;
}
float* rt_step_sharded_grads(rt_rank* R, int g) {
    const rt_model_group* mg = &R->model->groups[g];
    return rt_step_f32(R, mg->grads_off, 0, rt_model_grad_numel(mg));
}
double rt_step_lr(const rt_rank* R, int item) { return (void)item, R->model->optim.lr; }
rt_step_fn rt_step_next(rt_rank* R) { return R->model->step; }  // no eval runs here
void rt_step_refresh_kept(rt_rank* R) { (void)R; }  // no group is kept across steps here
void rt_rank_die(rt_rank* R, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "test_stream_order: rank %d: ", R->rank);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

// ---- a rank with three groups -------------------------------------------------------------

// Three groups of one 256-float parameter each, shard world 2 (block 128), reduced in
// backward order C, B, A... named by index here: 0, 1, 2. Arena byte offsets, as the
// plan places them: persistent params / grads / Adam state, then per group its unsharded
// gradients and the reduce-scatter input and output.
enum { NG = 3, PADDED = 256, BLOCK = 128 };

typedef struct world {
    rt_model m;
    rt_model_group groups[NG];
    rt_rank R;
    rt_rank_group rg[NG];
    cuda_rank c;
    cuda_group cg[NG];
    rt_comm shard, replicate;
    size_t ugrad[NG];
    size_t rs_in[2], rs_out[2];  // reduce-scatter n uses region n % 2
    size_t kept[NG];             // unsharded params kept across steps (test_cast_kept)
    rt_cuda_cast_run cast_run;   // their one run (host memory: the stand-in's device)
} world;

static void world_init(world* w, int hsdp) {
    memset(w, 0, sizeof *w);
    nstreams = 0;
    reset_clocks();
    size_t off = 0;
    for (int g = 0; g < NG; g++) {
        rt_model_group* G = &w->groups[g];
        G->name = g == 0 ? "layers.0" : g == 1 ? "layers.1" : "layers.2";
        G->param_dtype = G->reduce_dtype = RT_F32;
        G->all_reduce = hsdp;
        G->block_numel = BLOCK;
        G->padded_numel = PADDED;
        G->params_off = off, off += 4 * BLOCK;
        G->grads_off = off, off += 4 * BLOCK;
        G->state_off = off, off += 8 * BLOCK;
        rt_fsdp_layout* L = &w->rg[g].layout;
        L->world = 2;
        L->block_numel = BLOCK;
        L->total_numel = PADDED;
        w->cg[g].rs.rs_in.total = PADDED;
        w->cg[g].rs.view_out.total = BLOCK;
    }
    // Transient buffers. The plan ends reduce-scatter n's input and output at
    // reduce-scatter n + 1's line, so reduce-scatter n + 2 may take the same bytes.
    for (int g = 0; g < NG; g++) w->ugrad[g] = off, off += 4 * PADDED;
    for (int k = 0; k < 2; k++) {
        w->rs_in[k] = off, off += 4 * PADDED;
        w->rs_out[k] = off, off += 4 * BLOCK;
    }
    for (int g = 0; g < NG; g++) w->kept[g] = off, off += 4 * BLOCK;
    arena_bytes = off + 64;
    free(arena);
    arena = calloc(1, arena_bytes);
    arena_base = (uintptr_t)arena;
    w->m.name = "stream_order";
    w->m.world = hsdp ? 4 : 2;
    w->m.shard = 2;
    w->m.replicate = hsdp ? 2 : 1;
    w->m.ngroups = NG;
    w->m.groups = w->groups;
    w->m.optim.kind = RT_OPTIM_ADAM;
    w->m.optim.nstates = 2;
    w->m.grad_clip = 1.0;
    w->shard.size = 2;
    w->replicate.size = 2;
    w->R.model = &w->m;
    w->R.world = w->m.world;
    w->R.groups = w->rg;
    w->R.mesh.shard = &w->shard;
    w->R.mesh.replicate = hsdp ? &w->replicate : NULL;
    w->R.backend = &w->c;
    w->rg[0].reduced = w->rg[1].reduced = w->rg[2].reduced = 1;
    cuda_rank* c = &w->c;
    c->groups = w->cg;
    c->opt_side = 1;  // RT_OPTIMIZER_STREAM unset
    cudaStreamCreateWithFlags(&c->compute, 0);
    cudaStream_t* side[CS_SIDE_STREAMS] = {&c->ag_copy, &c->ag, &c->rs, &c->ar, &c->opt};
    for (int k = 0; k < CS_SIDE_STREAMS; k++) cudaStreamCreateWithPriority(side[k], 0, -1);
    cudaEvent_t* evs[5] = {&c->fork, &c->copied, &c->forked_ar, &c->rs_done, &c->post_done};
    for (int k = 0; k < 5; k++) cudaEventCreateWithFlags(evs[k], 0);
    for (int k = 0; k < CS_SIDE_STREAMS; k++) cudaEventCreateWithFlags(&c->join[k], 0);
    for (int g = 0; g < NG; g++) cudaEventCreateWithFlags(&w->cg[g].reduced, 0);
    uint8_t* small = arena + off;  // the step scalars (clipping's sums)
    c->d_step = (int64_t*)small;
    c->d_sumsq = (double*)(small + 8);
    c->d_total = (float*)(small + 16);
    rt_cuda_set_stream(c->compute);
}

static void world_free(world* w) {
    cuda_rank* c = &w->c;
    cudaEvent_t evs[5] = {c->fork, c->copied, c->forked_ar, c->rs_done, c->post_done};
    for (int k = 0; k < 5; k++) cudaEventDestroy(evs[k]);
    for (int k = 0; k < CS_SIDE_STREAMS; k++) cudaEventDestroy(c->join[k]);
    for (int g = 0; g < NG; g++) cudaEventDestroy(w->cg[g].reduced);
    for (int g = 0; g < NG; g++)
        if (w->cg[g].ag_done) cudaEventDestroy(w->cg[g].ag_done);
}

// The world as one rank: direct reductions and all-gathers of every group (their copy
// plans and ag_done events).
static void one_rank(world* w) {
    w->m.world = w->R.world = 1;
    w->shard.size = 1;
    for (int g = 0; g < NG; g++) {
        w->rg[g].layout.world = 1;
        w->cg[g].rs.rs_direct.total = BLOCK;
        w->cg[g].ag_direct[UN_F32].total = PADDED;
        w->groups[g].unsharded_words = PADDED;
        cudaEventCreateWithFlags(&w->cg[g].ag_done, 0);
    }
}

// Compute writes [off, off + bytes) of the arena (a kernel of the generated step).
static void compute_writes(world* w, size_t off, size_t bytes, const char* what) {
    touch(w->c.compute, arena + off, bytes, 1, what);
}

// ---- scenarios ------------------------------------------------------------------------------

// `passes` backwards over groups 2, 1, 0 (the second accumulates into the sharded grads,
// as a second backward of the step does), reduce-scatter n in region n % 2; right after
// reduce-scatter n's line, where the plan ends reduce-scatter n - 1's buffers, compute
// writes a later buffer over both of them. Then clipping, the optimizer, the step end and
// the next step's first write.
static void test_plan_reuse(int hsdp, int passes) {
    const char* mode = hsdp ? "HSDP (replicate 2 x shard 2)" : "FSDP (shard 2)";
    world w;
    world_init(&w, hsdp);
    int start[8], n = 0;
    for (int pass = 0; pass < passes; pass++)
        for (int g = NG - 1; g >= 0; g--, n++) {
            compute_writes(&w, w.ugrad[g], 4 * PADDED, "backward writes unsharded grads");
            start[n] = nacc;
            rtb_reduce_scatter(&w.R, g, 0, w.ugrad[g], RT_F32, w.rs_in[n % 2], w.rs_out[n % 2], pass > 0);
            if (n > 0) {
                int k = (n - 1) % 2;
                compute_writes(&w, w.rs_out[k], 4 * BLOCK, "a later buffer on the previous output");
                compute_writes(&w, w.rs_in[k], 4 * PADDED, "a later buffer on the previous input");
            }
        }
    start[n] = nacc;
    rtb_clip_grad_norm(&w.R);
    for (int g = 0; g < NG; g++) rtb_optimizer(&w.R, g, 0, 0, 0, BLOCK, 1, 1, 0);
    rtb_step_end(&w.R);
    compute_writes(&w, w.rs_out[(n - 1) % 2], 4 * BLOCK, "the next step");
    CHECK(races == 0, "%s, %d backward%s: no race over %d accesses (%d reduce-scatters, each "
          "one's buffers reused after the next one's line, clipping, optimizer)%s%s", mode, passes,
          passes > 1 ? "s" : "", nacc, n, races ? "; first: " : "", first_race);

    // FSDP2's ordering around the second reduce-scatter (group 1 after group 2).
    int rs0 = find(start[0], start[1], "reduce_scatter");
    int copy1 = find(start[1], start[2], "copy write"), rs1 = find(start[1], start[2], "reduce_scatter");
    CHECK(rs0 >= 0 && copy1 >= 0 && rs1 >= 0 && before(rs0, copy1),
          "%s: group 1's copy-in (compute) follows group 2's reduce-scatter collective "
          "(reduce_scatter_state: one in flight)", mode);
    if (hsdp) {
        int ar0 = find(start[0], start[1], "all_reduce"), view0 = -1;
        for (int k = start[0]; k < start[1]; k++)
            if (!strcmp(acc[k].what, "copy write") && acc[k].s == w.c.ar->id) view0 = k;
        CHECK(ar0 >= 0 && view0 >= 0 && acc[ar0].s == w.c.ar->id && before(rs0, ar0),
              "HSDP: group 2's all-reduce and view-out run on the all-reduce stream, after its "
              "reduce-scatter");
        CHECK(!before(ar0, copy1) && !before(ar0, rs1),
              "HSDP: neither group 1's copy-in nor its reduce-scatter waits for group 2's "
              "all-reduce (they overlap it, as in FSDP2)");
        int later = find(start[1], start[2], "a later buffer on the previous output");
        CHECK(later >= 0 && before(view0, later),
              "HSDP: compute waited for group 2's all-reduce and view-out by the end of group 1's "
              "reduce-scatter line, where the plan frees group 2's output");
    }
    world_free(&w);
}

// Control: compute writes group 2's reduce-scatter output while the plan still holds it
// (before the next reduce-scatter line): reported as a race; with HSDP also against the
// all-reduce, which overlaps compute there.
static void test_control(int hsdp) {
    world w;
    world_init(&w, hsdp);
    compute_writes(&w, w.ugrad[2], 4 * PADDED, "backward writes unsharded grads");
    rtb_reduce_scatter(&w.R, 2, 0, w.ugrad[2], RT_F32, w.rs_in[0], w.rs_out[0], 0);
    compute_writes(&w, w.rs_out[0], 4 * BLOCK, "a write the plan does not allow");
    CHECK(races > 0 && (!hsdp || races_with_all_reduce > 0),
          "control (%s): writing a reduce-scatter output before its lifetime ends is reported "
          "as a race (%d, %d with the all-reduce; first: %s)", hsdp ? "HSDP" : "FSDP", races,
          races_with_all_reduce, first_race);
    world_free(&w);
}

// One rank, a plan that reduce-scatters group 2 (a reduction that rounds, on the
// reduce-scatter stream) and then reduces groups 1 and 0 directly (rtb_reduce_direct, on
// the reduce-scatter stream too): each reduction's line is where the plan ends the
// previous one's buffers (group 2's input and output, group 1's unsharded grads), so right
// after it compute may write a later buffer over them; meanwhile group 1's direct
// reduction overlaps compute writing group 0's grads. Control (reuse_early): compute
// writing group 1's unsharded grads right after its own direct line is reported as a race.
static void test_direct_after_reduce_scatter(int reuse_early) {
    world w;
    world_init(&w, 0);
    one_rank(&w);
    compute_writes(&w, w.ugrad[2], 4 * PADDED, "backward writes unsharded grads");
    rtb_reduce_scatter(&w.R, 2, 0, w.ugrad[2], RT_F32, w.rs_in[0], w.rs_out[0], 0);
    compute_writes(&w, w.ugrad[1], 4 * PADDED, "backward writes unsharded grads");
    rtb_reduce_direct(&w.R, 1, 0, w.ugrad[1], RT_F32, 0);
    compute_writes(&w, w.rs_out[0], 4 * BLOCK, "a later buffer on the previous output");
    compute_writes(&w, w.rs_in[0], 4 * PADDED, "a later buffer on the previous input");
    if (reuse_early) compute_writes(&w, w.ugrad[1], 4 * PADDED, "a write the plan does not allow");
    compute_writes(&w, w.ugrad[0], 4 * PADDED, "backward overlapping the direct reduction");
    rtb_reduce_direct(&w.R, 0, 0, w.ugrad[0], RT_F32, 0);
    compute_writes(&w, w.ugrad[1], 4 * PADDED, "a later buffer on group 1's unsharded grads");
    rtb_clip_grad_norm(&w.R);
    for (int g = 0; g < NG; g++) rtb_optimizer(&w.R, g, 0, 0, 0, BLOCK, 1, 1, 0);
    rtb_step_end(&w.R);
    // group 1's direct copy: the first copy after the second "backward writes" access
    int g1 = find(find(0, nacc, "backward writes unsharded grads") + 1, nacc,
                  "backward writes unsharded grads");
    int copy = find(g1 + 1, nacc, "copy write");
    int overlapped = find(0, nacc, "backward overlapping the direct reduction");
    if (!reuse_early)
        CHECK(races == 0 && copy >= 0 && overlapped >= 0 && !before(copy, overlapped),
              "one rank: a direct reduction runs on the reduce-scatter stream, overlapping the "
              "next group's backward, after waiting for the reduce-scatter before it, so each "
              "reduction's buffers may be reused after the next reduction's line (%d accesses)%s%s",
              nacc, races ? "; first: " : "", first_race);
    else
        CHECK(races > 0, "control: reusing a direct reduction's unsharded grads before the next "
              "reduction's line is reported as a race (%d; first: %s)", races, first_race);
    world_free(&w);
}

// One rank, a direct all-gather of group 1 (rtb_all_gather_direct: the copy-in writes the
// unsharded params on the copy-in stream) as FSDP2's implicit forward prefetch issues it:
// an earlier buffer of compute used its bytes and ended, then the all-gather streams synced
// with compute (rtb_all_gather_sync, at the previous group's copy-out), then compute ran
// the current group on other bytes, then the all-gather (issued after that compute, and
// overlapping it and the compute after it), then its wait (rt_step_all_gather_wait of a
// direct all-gather: rtb_all_gather_drop) and compute reading and writing the params.
// Controls: without the wait, or without the sync, a race is reported.
static void test_direct_all_gather(int wait, int sync) {
    world w;
    world_init(&w, 0);
    one_rank(&w);
    size_t un = w.ugrad[0];  // the unsharded params' bytes
    compute_writes(&w, un, 4 * PADDED, "an earlier buffer on the same bytes");
    if (sync) rtb_all_gather_sync(&w.R);
    compute_writes(&w, w.ugrad[1], 4 * PADDED, "compute issued before the all-gather");
    rtb_all_gather_direct(&w.R, 1, un, RT_AG_IN_ORDER);
    compute_writes(&w, w.ugrad[2], 4 * PADDED, "compute the prefetch overlaps");
    if (wait) rtb_all_gather_drop(&w.R, 1);
    touch(w.c.compute, arena + un, 4 * PADDED, 0, "a kernel reads the unsharded params");
    compute_writes(&w, un, 4 * PADDED, "a later buffer after the reshard");
    rtb_step_end(&w.R);
    int copy = find(0, nacc, "copy write");
    int earlier = find(0, nacc, "compute issued before the all-gather");
    int overlapped = find(0, nacc, "compute the prefetch overlaps");
    if (wait && sync)
        CHECK(races == 0 && copy >= 0 && !before(earlier, copy) && !before(copy, overlapped),
              "one rank: the direct all-gather writes the unsharded params on the copy-in stream "
              "after compute's earlier use of their bytes (ordered by the sync), overlapping the "
              "compute issued between the sync and it and after it, and its wait orders it before "
              "compute reads them (%d accesses)%s%s", nacc, races ? "; first: " : "", first_race);
    else
        CHECK(races > 0, "control: a direct all-gather %s is reported as a race (%d; first: %s)",
              wait ? "without a sync after the earlier use of its bytes"
                   : "whose params are read without its wait",
              races, first_race);
    world_free(&w);
}

// One rank, a direct all-gather beside (RT_AG_BESIDE: waited for at its first reader,
// generator/memory/late_waits.lua), as Llama's root at the forward's start: an earlier
// buffer on its bytes ended, the streams synced, the root's copy (group 0) on the
// all-gather stream, then group 1's copy-in on the copy-in stream, its wait and compute
// reading group 1's params, then the root's wait and compute reading the root's params.
// Checked: no race; the two copies run beside each other (neither ordered after the
// other) and compute reads group 1's params without waiting for the root's copy. Control:
// the root's params read without its wait are reported as a race.
static void test_beside_all_gather(int wait) {
    world w;
    world_init(&w, 0);
    one_rank(&w);
    size_t root = w.ugrad[0], un1 = w.ugrad[1];
    compute_writes(&w, root, 4 * PADDED, "an earlier buffer on the root's bytes");
    rtb_all_gather_sync(&w.R);
    const int a0 = nacc;
    rtb_all_gather_direct(&w.R, 0, root, RT_AG_BESIDE);
    const int a1 = nacc;
    rtb_all_gather_direct(&w.R, 1, un1, RT_AG_IN_ORDER);
    rtb_all_gather_drop(&w.R, 1);
    touch(w.c.compute, arena + un1, 4 * PADDED, 0, "a kernel reads group 1's params");
    const int read1 = nacc - 1;
    if (wait) rtb_all_gather_drop(&w.R, 0);
    touch(w.c.compute, arena + root, 4 * PADDED, 0, "the final norm reads the root's params");
    rtb_step_end(&w.R);
    const int copy0 = find(a0, a1, "copy write"), copy1 = find(a1, nacc, "copy write");
    if (wait)
        CHECK(races == 0 && copy0 >= 0 && copy1 >= 0 && acc[copy0].s != acc[copy1].s &&
                  !before(copy0, copy1) && !before(copy1, copy0) && !before(copy0, read1),
              "one rank: a direct all-gather beside copies on a stream of its own, beside the "
              "next group's copy-in, and compute reads that group's params without waiting for "
              "it; its own wait orders it before its reader (%d accesses)%s%s",
              nacc, races ? "; first: " : "", first_race);
    else
        CHECK(races > 0, "control: the params of a direct all-gather beside read without its "
              "wait are reported as a race (%d; first: %s)", races, first_race);
    world_free(&w);
}

// No clipping: a backward over groups 2, 1, 0 with their reductions (reduce-scatters at
// world 2, or direct at world 1), then the optimizer in the plan's order (as reduced) and
// the step's end. Each group's step runs on the optimizer stream after its own reduction
// only: group 2's overlaps group 0's backward and reduction, with no race. With
// RT_OPTIMIZER_STREAM=compute the steps follow the whole backward on compute. Then either
// the next step (compute writes the params: ordered by the step's end) or, in the same
// step, a second iteration (an all-gather sync, a direct all-gather of the params, the
// backward and a direct reduction into the sharded grads: ordered by the sync and the
// reduction's wait). Control: compute writing the params right after the optimizer
// lines, with no sync, is reported as a race.
enum { NEXT_STEP, SECOND_ITERATION, CONTROL };  // what follows the optimizer lines

static void test_optimizer_overlap(int direct, int on_compute, int then) {
    world w;
    world_init(&w, 0);
    w.m.grad_clip = 0.0;
    if (direct) one_rank(&w);
    w.c.opt_side = !on_compute;  // RT_OPTIMIZER_STREAM=compute, as rtb_rank_init reads it
    int bw[NG], n = 0;
    for (int g = NG - 1; g >= 0; g--, n++) {
        bw[g] = nacc;
        compute_writes(&w, w.ugrad[g], 4 * PADDED, "backward writes unsharded grads");
        if (direct) {
            rtb_reduce_direct(&w.R, g, 0, w.ugrad[g], RT_F32, 0);
        } else {
            rtb_reduce_scatter(&w.R, g, 0, w.ugrad[g], RT_F32, w.rs_in[n % 2], w.rs_out[n % 2], 0);
            if (n > 0) {
                compute_writes(&w, w.rs_out[(n - 1) % 2], 4 * BLOCK, "a later buffer on the previous output");
                compute_writes(&w, w.rs_in[(n - 1) % 2], 4 * PADDED, "a later buffer on the previous input");
            }
        }
    }
    int opt = nacc;
    for (int g = NG - 1; g >= 0; g--) rtb_optimizer(&w.R, g, 0, 0, 0, BLOCK, 1, 1, 0);
    opt = find(opt, nacc, "optimizer");  // group 2's step
    if (then == NEXT_STEP) {
        rtb_step_end(&w.R);
        compute_writes(&w, w.groups[2].params_off, 4 * BLOCK, "the next step writes the params");
    } else if (then == SECOND_ITERATION) {
        rtb_all_gather_sync(&w.R);
        rtb_all_gather_direct(&w.R, 1, w.ugrad[0], RT_AG_IN_ORDER);
        rtb_all_gather_drop(&w.R, 1);
        compute_writes(&w, w.ugrad[2], 4 * PADDED, "backward writes unsharded grads");
        rtb_reduce_direct(&w.R, 2, 0, w.ugrad[2], RT_F32, 0);
        rtb_step_end(&w.R);
    } else {
        compute_writes(&w, w.groups[2].params_off, 4 * BLOCK, "a write the optimizer overlaps");
    }
    const char* where = direct ? "one rank (direct reductions)" : "world 2 (reduce-scatters)";
    const int last_bw = bw[0];  // group 0's backward, the last
    if (then == CONTROL) {
        CHECK(races > 0, "control, %s: compute writing the params right after the optimizer "
              "lines, before any sync, is reported as a race (%d; first: %s)", where, races,
              first_race);
    } else if (on_compute) {
        CHECK(races == 0 && opt >= 0 && acc[opt].s == w.c.compute->id && before(last_bw, opt),
              "%s, RT_OPTIMIZER_STREAM=compute: every step runs on compute after the whole "
              "backward, no race (%d accesses)%s%s", where, nacc, races ? "; first: " : "",
              first_race);
    } else {
        CHECK(races == 0 && opt >= 0 && acc[opt].s == w.c.opt->id && !before(last_bw, opt),
              "%s, %s: group 2's optimizer step runs on the optimizer stream beside group 0's "
              "backward, after its own reduction, no race (%d accesses)%s%s", where,
              then == NEXT_STEP ? "then the next step" : "then a second iteration", nacc,
              races ? "; first: " : "", first_race);
    }
    world_free(&w);
}

// One rank, no clipping, every group's unsharded params kept across steps (rt_model_group
// kept_across): the backward over groups 2, 1, 0 reads each group's kept params, then its
// direct reduction; the optimizer steps (group 2's on the optimizer stream, beside group
// 0's backward) write the new values into them (rt_cuda_cast). No race: a group's step
// follows its reduction, which follows its backward's reads; the next step's forward reads
// them after the step's end. Control: compute reading group 2's kept params right after the
// optimizer lines, in the same step, is reported as a race.
static void test_cast_kept(int control) {
    world w;
    world_init(&w, 0);
    w.m.grad_clip = 0.0;
    one_rank(&w);
    w.cast_run = (rt_cuda_cast_run){0, BLOCK, 0, 0};
    for (int g = 0; g < NG; g++) {
        w.groups[g].kept_across = 1;
        w.groups[g].kept_off = w.kept[g];
        w.groups[g].unsharded_words = BLOCK;
        w.cg[g].cast_runs = &w.cast_run;
        w.cg[g].ncast_runs = 1;
    }
    for (int g = NG - 1; g >= 0; g--) {
        touch(w.c.compute, arena + w.kept[g], 4 * BLOCK, 0, "backward reads the kept params");
        compute_writes(&w, w.ugrad[g], 4 * PADDED, "backward writes unsharded grads");
        rtb_reduce_direct(&w.R, g, 0, w.ugrad[g], RT_F32, 0);
    }
    int opt = nacc;
    for (int g = NG - 1; g >= 0; g--) {
        rtb_optimizer(&w.R, g, 0, 0, 0, BLOCK, 1, 1, 0);
        rtb_optimizer_cast_kept(&w.R, g, w.kept[g]);
    }
    const int cast = find(opt, nacc, "optimizer casts");  // group 2's
    if (!control) rtb_step_end(&w.R);
    touch(w.c.compute, arena + w.kept[2], 4 * BLOCK, 0,
          control ? "a read the optimizer overlaps" : "the next step's forward reads the kept params");
    if (control)
        CHECK(races > 0, "control: compute reading the kept params right after the optimizer "
              "lines, before the step's end, is reported as a race (%d; first: %s)", races,
              first_race);
    else
        CHECK(races == 0 && cast >= 0 && acc[cast].s == w.c.opt->id,
              "one rank, kept across steps: group 2's optimizer step writes its kept params on "
              "the optimizer stream, beside the backward, no race (%d accesses)%s%s", nacc,
              races ? "; first: " : "", first_race);
    world_free(&w);
}

// One rank, no clipping, group 2 (a root holding an output head and an embedding) reduced
// in two parts (rt_model_reduction part; generator/plan/reductions.lua Sim:reduce_parts): the
// head's half of its gradients right after the head's backward, then groups 1 and 0, then
// the embedding's half; the optimizer in the plan's order (the head's part, groups 1 and
// 0, the embedding's part) and the step's end. The head's step waits for its own part's
// event, so it runs beside the backward of groups 1 and 0, with no race; with
// RT_OPTIMIZER_STREAM=compute every step follows the backward on compute. Control
// (group_event): the head's step waiting for the group's event, as a whole group's does,
// orders it after the last part, and so after group 0's backward.
static void test_optimizer_parts(int on_compute, int group_event) {
    world w;
    world_init(&w, 0);
    w.m.grad_clip = 0.0;
    one_rank(&w);
    w.c.opt_side = !on_compute;  // RT_OPTIMIZER_STREAM=compute, as rtb_rank_init reads it
    static const int head[] = {0}, embedding[] = {1};
    const rt_model_reduction parts[2] = {{1, head, BLOCK / 2, 1, 0}, {1, embedding, BLOCK / 2, 1, 0}};
    cuda_reduction some[2];
    memset(some, 0, sizeof some);
    w.groups[2].nreductions = 2;
    w.groups[2].reductions = parts;
    w.cg[2].rs_some = some;
    nplan_at = 0;
    for (int r = 0; r < 2; r++) {
        some[r].rs_direct.total = BLOCK / 2;
        if (group_event)
            some[r].reduced = w.cg[2].reduced;  // as if each part recorded the group's event
        else
            cudaEventCreateWithFlags(&some[r].reduced, 0);
        plan_at[nplan_at].p = &some[r].rs_direct;
        plan_at[nplan_at].src = r * PADDED / 2, plan_at[nplan_at++].dst = r * BLOCK / 2;
    }
    compute_writes(&w, w.ugrad[2], 4 * PADDED / 2, "backward writes the head's grads");
    rtb_reduce_direct(&w.R, 2, 1, w.ugrad[2], RT_F32, 0);
    int bw0 = 0;
    for (int g = 1; g >= 0; g--) {
        bw0 = nacc;
        compute_writes(&w, w.ugrad[g], 4 * PADDED, "backward writes unsharded grads");
        rtb_reduce_direct(&w.R, g, 0, w.ugrad[g], RT_F32, 0);
    }
    compute_writes(&w, w.ugrad[2] + 4 * PADDED / 2, 4 * PADDED / 2, "backward writes the embedding's grads");
    rtb_reduce_direct(&w.R, 2, 2, w.ugrad[2], RT_F32, 0);
    const int opt = nacc;
    rtb_optimizer(&w.R, 2, 1, 0, 0, BLOCK / 2, 1, 1, 0);
    for (int g = 1; g >= 0; g--) rtb_optimizer(&w.R, g, 0, 0, 0, BLOCK, 1, 1, 0);
    rtb_optimizer(&w.R, 2, 2, BLOCK / 2, BLOCK / 2, BLOCK / 2, 1, 1, 0);
    rtb_step_end(&w.R);
    compute_writes(&w, w.groups[2].params_off, 4 * BLOCK, "the next step writes the params");
    const int head_step = find(opt, nacc, "optimizer");
    if (group_event) {
        CHECK(head_step >= 0 && before(bw0, head_step),
              "control: the head's part waiting for its group's event steps after group 0's "
              "backward (%d races)", races);
    } else if (on_compute) {
        CHECK(races == 0 && head_step >= 0 && acc[head_step].s == w.c.compute->id &&
                  before(bw0, head_step),
              "one rank, a root in two parts, RT_OPTIMIZER_STREAM=compute: every step on "
              "compute after the backward, no race (%d accesses)%s%s", nacc,
              races ? "; first: " : "", first_race);
    } else {
        CHECK(races == 0 && head_step >= 0 && acc[head_step].s == w.c.opt->id &&
                  !before(bw0, head_step),
              "one rank, a root in two parts: the head's part steps on the optimizer stream "
              "beside group 0's backward, after its own part's reduction, the embedding's "
              "after its own, no race (%d accesses)%s%s", nacc, races ? "; first: " : "",
              first_race);
    }
    for (int r = 0; r < 2 && !group_event; r++) cudaEventDestroy(some[r].reduced);
    nplan_at = 0;
    world_free(&w);
}

// One rank, no clipping, gradients in place (generator/memory/memory.lua: the unsharded
// gradients are the sharded ones): the backward over groups 2, 1, 0 writes each group's
// sharded grads on compute, each in-place reduction only records events, the optimizer
// steps run on the optimizer stream, then the step's end and the next step's backward
// writes group 2's grads again. No race, and group 2's step overlaps group 0's backward.
// Control: compute writing group 2's grads right after the optimizer lines, before the
// step's end, is reported as a race.
static void test_in_place(int control) {
    world w;
    world_init(&w, 0);
    w.m.grad_clip = 0.0;
    one_rank(&w);
    int bw0 = 0;
    for (int g = NG - 1; g >= 0; g--) {
        bw0 = nacc;
        compute_writes(&w, w.groups[g].grads_off, 4 * BLOCK, "backward writes the sharded grads");
        rtb_reduce_direct(&w.R, g, 0, w.groups[g].grads_off, RT_BF16, 0);
    }
    const int opt = nacc;
    for (int g = NG - 1; g >= 0; g--) rtb_optimizer(&w.R, g, 0, 0, 0, BLOCK, 1, 1, 0);
    const int step2 = find(opt, nacc, "optimizer");
    const int copies = find(0, nacc, "copy write");
    if (control) {
        compute_writes(&w, w.groups[2].grads_off, 4 * BLOCK, "a write the optimizer overlaps");
        CHECK(races > 0, "control, gradients in place: compute writing the grads right after the "
              "optimizer lines is reported as a race (%d; first: %s)", races, first_race);
    } else {
        rtb_step_end(&w.R);
        compute_writes(&w, w.groups[2].grads_off, 4 * BLOCK, "the next backward writes the grads");
        CHECK(races == 0 && copies < 0 && step2 >= 0 && acc[step2].s == w.c.opt->id &&
                  !before(bw0, step2) && w.cg[2].grads_round == RT_BF16,
              "one rank, gradients in place: no copy, group 2's step on the optimizer stream "
              "beside group 0's backward, rounding its grads to bf16 as it reads them, no race "
              "(%d accesses)%s%s", nacc, races ? "; first: " : "", first_race);
    }
    world_free(&w);
}

// One rank, no clipping, group 2 an embedding of VOCAB rows of ROW_LEN (its optimizer split
// by rows, generator/plan/optimizer.lua Sim:split_token_rows): the step uploads its tokens,
// the rows no token looks up step on the optimizer stream from there (building the mask of
// the looked-up ones), the forward's lookup reads the looked-up rows on compute, the
// backward writes the sharded grads of groups 2, 1, 0, and the looked-up rows step after
// group 2's reduction; the step's end, and the next step's upload overwrites the tokens the
// mark read. No race; the unused rows' step runs beside the lookup and the backward. With
// RT_OPTIMIZER_STREAM=compute every step follows on compute. Control: the forward reading a
// row no token looks up is reported as a race (the checker sees the rows apart).
enum { VOCAB = 8, ROW_LEN = BLOCK / VOCAB, NTOK = 2 };

// The step's tokens (one forward of NTOK, ids 1 and 5 of VOCAB), their device copies and the
// row mask after the step scalars (world_init), as rtb_step_begin's upload and the rows'
// steps use them.
static const int32_t host_tokens[NTOK] = {1, 5};
static int32_t* host_inputs[1] = {(int32_t*)host_tokens};
static int32_t *d_tokens, *d_targets;
static void tokens_init(world* w) {
    w->m.tokens = 1, w->m.n_forward = 1, w->m.batch = 1, w->m.seq_len = NTOK, w->m.vocab = VOCAB;
    w->m.optimizer_rows = 1;
    w->R.tokens = w->R.targets = host_inputs;
    d_tokens = (int32_t*)((uint8_t*)w->c.d_step + 24);
    d_targets = d_tokens + NTOK;
    memcpy(d_tokens, host_tokens, sizeof host_tokens);  // what the upload copies
    w->c.d_tokens = &d_tokens, w->c.d_targets = &d_targets;
    w->c.d_rows = (uint8_t*)(d_targets + NTOK);
    w->c.input_bytes = sizeof host_tokens;
    cudaEventCreateWithFlags(&w->c.tokens_in, 0);
}

static void test_optimizer_rows(int on_compute, int control) {
    world w;
    world_init(&w, 0);
    w.m.grad_clip = 0.0;
    one_rank(&w);
    w.c.opt_side = !on_compute;
    tokens_init(&w);
    float* emb = (float*)(arena + w.groups[2].params_off);
    rtb_step_begin(&w.R);
    const int unused = nacc;
    rtb_optimizer_rows(&w.R, 2, 0, 0, 0, VOCAB, ROW_LEN, 1, 1, 0, RT_ROWS_UNUSED);
    const int unused_step = find(unused, nacc, "optimizer");
    const int lookup = nacc;
    for (int t = 0; t < NTOK; t++)
        touch(w.c.compute, emb + (size_t)host_tokens[t] * ROW_LEN, 4 * ROW_LEN, 0,
              "the lookup reads a row");
    if (control) touch(w.c.compute, emb + 2 * ROW_LEN, 4 * ROW_LEN, 0, "the lookup reads a row");
    int bw[NG];
    for (int g = NG - 1; g >= 0; g--) {
        bw[g] = nacc;
        compute_writes(&w, w.groups[g].grads_off, 4 * BLOCK, "backward writes the sharded grads");
        rtb_reduce_direct(&w.R, g, 0, w.groups[g].grads_off, RT_F32, 0);
    }
    const int opt = nacc;
    rtb_optimizer_rows(&w.R, 2, 0, 0, 0, VOCAB, ROW_LEN, 1, 1, 0, RT_ROWS_LOOKED_UP);
    const int rows_step = find(opt, nacc, "optimizer");
    for (int g = 1; g >= 0; g--) rtb_optimizer(&w.R, g, 0, 0, 0, BLOCK, 1, 1, 0);
    rtb_step_end(&w.R);
    rtb_step_begin(&w.R);  // the next step's upload, over the tokens the mark read
    compute_writes(&w, w.groups[2].params_off, 4 * BLOCK, "the next step writes the params");
    const int stepped = (w.c.d_rows[1] && w.c.d_rows[5] && !w.c.d_rows[0] && !w.c.d_rows[2]);
    if (control) {
        CHECK(races > 0, "control, the rows split: the lookup reading a row no token looks up is "
              "reported as a race (%d; first: %s)", races, first_race);
    } else if (on_compute) {
        CHECK(races == 0 && stepped && unused_step >= 0 && acc[unused_step].s == w.c.compute->id &&
                  rows_step >= 0 && before(bw[0], rows_step),
              "one rank, the embedding's rows split, RT_OPTIMIZER_STREAM=compute: both steps on "
              "compute, no race (%d accesses)%s%s", nacc, races ? "; first: " : "", first_race);
    } else {
        CHECK(races == 0 && stepped && unused_step >= 0 && acc[unused_step].s == w.c.opt->id &&
                  !before(unused_step, lookup) && rows_step >= 0 &&
                  acc[rows_step].s == w.c.opt->id && before(bw[2], rows_step) &&
                  !before(bw[0], rows_step),
              "one rank, the embedding's rows split: the unused rows step on the optimizer stream "
              "beside the lookup, the looked-up ones after group 2's reduction and beside group "
              "0's backward, the next upload after both, no race (%d accesses)%s%s", nacc,
              races ? "; first: " : "", first_race);
    }
    cudaEventDestroy(w.c.tokens_in);
    world_free(&w);
}

// One rank, no clipping, gradients in place, group 2 a tied embedding of VOCAB rows of
// ROW_LEN in two parts (generator/plan/reductions.lua Sim:reduce_parts): the output head's
// backward writes every row's gradient, part 1 (RT_ROWS_FINAL) is reduced, groups 1 and 0's
// backward follows, then the lookups add to the rows the step's tokens look up and part 2
// (RT_ROWS_LOOKED_UP) is reduced; the optimizer lines in the plan's order and the step's
// end. The unused rows' step waits for the tokens and its part only, so it runs beside
// group 0's backward and the lookups, reading rows they do not write: no race. With
// RT_OPTIMIZER_STREAM=compute every step follows on compute. Control: a lookup adding to a
// row no token looks up is reported as a race.
static void test_optimizer_rows_final(int on_compute, int control) {
    world w;
    world_init(&w, 0);
    w.m.grad_clip = 0.0;
    one_rank(&w);
    w.c.opt_side = !on_compute;
    tokens_init(&w);
    static const int all[] = {0};
    const rt_model_reduction parts[2] = {{1, all, BLOCK, 1, RT_ROWS_FINAL},
                                         {1, all, BLOCK, 1, RT_ROWS_LOOKED_UP}};
    cuda_reduction some[2];
    memset(some, 0, sizeof some);
    w.groups[2].nreductions = 2;
    w.groups[2].reductions = parts;
    w.cg[2].rs_some = some;
    for (int r = 0; r < 2; r++) cudaEventCreateWithFlags(&some[r].reduced, 0);
    char* grads = (char*)arena + w.groups[2].grads_off;
    rtb_step_begin(&w.R);
    compute_writes(&w, w.groups[2].grads_off, 4 * BLOCK, "the head's backward writes every row's grads");
    rtb_reduce_direct(&w.R, 2, 1, w.groups[2].grads_off, RT_F32, 0);
    int bw0 = 0;
    for (int g = 1; g >= 0; g--) {
        bw0 = nacc;
        compute_writes(&w, w.groups[g].grads_off, 4 * BLOCK, "backward writes the sharded grads");
        rtb_reduce_direct(&w.R, g, 0, w.groups[g].grads_off, RT_F32, 0);
    }
    const int lookup = nacc;
    for (int t = 0; t < NTOK; t++)
        touch(w.c.compute, grads + 4 * (size_t)host_tokens[t] * ROW_LEN, 4 * ROW_LEN, 1,
              "a lookup adds to a row's grads");
    if (control) touch(w.c.compute, grads + 4 * 2 * ROW_LEN, 4 * ROW_LEN, 1, "a lookup adds to a row's grads");
    rtb_reduce_direct(&w.R, 2, 2, w.groups[2].grads_off, RT_F32, 0);
    const int opt = nacc;
    rtb_optimizer_rows(&w.R, 2, 1, 0, 0, VOCAB, ROW_LEN, 1, 1, 0, RT_ROWS_FINAL);
    const int final_step = find(opt, nacc, "optimizer");
    for (int g = 1; g >= 0; g--) rtb_optimizer(&w.R, g, 0, 0, 0, BLOCK, 1, 1, 0);
    const int looked = nacc;
    rtb_optimizer_rows(&w.R, 2, 2, 0, 0, VOCAB, ROW_LEN, 1, 1, 0, RT_ROWS_LOOKED_UP);
    const int looked_step = find(looked, nacc, "optimizer");
    rtb_step_end(&w.R);
    compute_writes(&w, w.groups[2].params_off, 4 * BLOCK, "the next step writes the params");
    const int stepped = (w.c.d_rows[1] && w.c.d_rows[5] && !w.c.d_rows[0] && !w.c.d_rows[2]);
    if (control) {
        CHECK(races > 0, "control, a tied embedding's rows: a lookup adding to a row no token looks "
              "up is reported as a race (%d; first: %s)", races, first_race);
    } else if (on_compute) {
        CHECK(races == 0 && stepped && final_step >= 0 && acc[final_step].s == w.c.compute->id &&
                  before(lookup, final_step),
              "one rank, a tied embedding's rows, RT_OPTIMIZER_STREAM=compute: both steps on "
              "compute after the backward, no race (%d accesses)%s%s", nacc, races ? "; first: " : "",
              first_race);
    } else {
        CHECK(races == 0 && stepped && final_step >= 0 && acc[final_step].s == w.c.opt->id &&
                  !before(bw0, final_step) && !before(lookup, final_step) && looked_step >= 0 &&
                  acc[looked_step].s == w.c.opt->id && before(lookup, looked_step),
              "one rank, a tied embedding's rows: the unused rows step on the optimizer stream "
              "after their part, beside group 0's backward and the lookups, the looked-up ones "
              "after the lookups, no race (%d accesses)%s%s", nacc, races ? "; first: " : "",
              first_race);
    }
    for (int r = 0; r < 2; r++) cudaEventDestroy(some[r].reduced);
    cudaEventDestroy(w.c.tokens_in);
    world_free(&w);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_direct_all_gather(1, 1);
    test_direct_all_gather(0, 1);
    test_direct_all_gather(1, 0);
    test_beside_all_gather(1);
    test_beside_all_gather(0);
    test_direct_after_reduce_scatter(0);
    test_direct_after_reduce_scatter(1);
    test_plan_reuse(1, 1);
    test_plan_reuse(0, 1);
    test_plan_reuse(1, 2);
    test_plan_reuse(0, 2);
    test_control(1);
    test_control(0);
    for (int direct = 0; direct < 2; direct++) {
        test_optimizer_overlap(direct, 0, NEXT_STEP);
        test_optimizer_overlap(direct, 1, NEXT_STEP);
        test_optimizer_overlap(direct, 0, CONTROL);
    }
    test_optimizer_overlap(1, 0, SECOND_ITERATION);
    test_cast_kept(0);
    test_cast_kept(1);
    test_optimizer_parts(0, 0);
    test_optimizer_parts(1, 0);
    test_optimizer_parts(0, 1);
    test_in_place(0);
    test_in_place(1);
    test_optimizer_rows(0, 0);
    test_optimizer_rows(1, 0);
    test_optimizer_rows(0, 1);
    test_optimizer_rows_final(0, 0);
    test_optimizer_rows_final(1, 0);
    test_optimizer_rows_final(0, 1);
    free(arena);
    return check_summary();
}
