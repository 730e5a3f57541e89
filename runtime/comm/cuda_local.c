// cuda_local backend of rt_comm.h (librt_cuda_local.a): N ranks as threads of one process
// sharing ONE GPU, so the multi-rank schedule runs on a single-GPU machine (NCCL refuses
// two ranks on one device). Buffers are device memory; `stream` is a cudaStream_t.
//
// The host meets its peers only when it enqueues: the rank threads rendezvous (the threads
// backend's machinery, rendezvous.c: agreement checks, timeouts, abort) to exchange buffer
// pointers and events, and the data moves later, stream-ordered, on the GPU. Per member
// and communicator there are three events (slot res): READY, DONE, END. A collective is
//   record READY on my stream                      (my inputs/outputs are ready)
//   barrier A, agreement check
//   my stream waits on every peer's READY
//   my part: all-gather copies every block into my output; reduce-scatter reduces my
//     block from every input; all-reduce reduces my slice [r*n/size, (r+1)*n/size) from
//     every input and writes it to every output (as the threads backend); broadcast
//     copies the root's input into my output
//   record DONE on my stream
//   barrier B                                      (every peer has enqueued its waits)
//   my stream waits on every peer's DONE, records END
// so nobody's stream passes the collective before every part that reads its inputs or
// writes its outputs has run: a rank may reuse its input right after the call. In-place
// calls are safe: in-place all-gather skips my own block, which peers only read;
// in-place reduce-scatter writes my block, which only I read (element by element, read
// before write); all-reduce writes slice r of every output, read only by rank r's kernel.
// Barrier B also guarantees a peer has used my READY/DONE before I record them again.
// Events live as long as their group (released with it), so a peer never waits on a
// destroyed one. GPU work cannot deadlock: every event wait refers to a record enqueued
// before it. So the only waits with a deadline are the host rendezvous.
//
// Not CUDA-graph capturable (the ranks wait on each other's events across threads): a
// collective on a capturing stream fails with RT_ERR_ARG. Reductions are bit-identical
// to the threads backend (cuda_reduce.cu). At most RT_CUDA_REDUCE_MAX (128) ranks.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_reduce.h"
#include "rendezvous.h"
#include "rt_check.h"

// ---- types ------------------------------------------------------------------------------

enum { EV_READY, EV_DONE, EV_END };  // indices into rdv_slot.res

typedef struct cl_ctx {
    int device;
} cl_ctx;

static cudaEvent_t ev(const rdv_handle* h, int member, int which) {
    return (cudaEvent_t)h->g->slots[member].res[which];
}

// ---- errors -----------------------------------------------------------------------------

// The one-line message of a failed CUDA call: fails the communicator (every rank's
// pending and later calls return RT_ERR_BACKEND).
static int cl_fail(rdv_handle* h, const char* opname, const char* call, cudaError_t e, int line) {
    char prefix[200], msg[RT_COMM_ERRLEN];
    snprintf(msg, sizeof msg, "%s: %s failed: %s (runtime/comm/cuda_local.c:%d; hint: %s)",
             rt_comm_msg_prefix(&h->base, opname, prefix, sizeof prefix), call,
             cudaGetErrorString(e), line, rt_check_cuda_hint((int)e));
    return rdv_fail(h, RT_ERR_BACKEND, msg);
}

#define CL_CHECK(h, opname, call)                                                      \
    do {                                                                               \
        cudaError_t cl_e_ = (cudaError_t)(call);                                       \
        if (cl_e_ != cudaSuccess) return cl_fail((h), (opname), #call, cl_e_, __LINE__); \
    } while (0)

// 1 when st is being captured into a CUDA graph (which cannot take these cross-thread
// event waits); *e is the status of the query.
static int capturing(cudaStream_t st, cudaError_t* e) {
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    *e = cudaStreamIsCapturing(st, &cs);
    return *e == cudaSuccess && cs != cudaStreamCaptureStatusNone;
}

static const char* const CAPTURE_WHY =
    "the stream is being captured into a CUDA graph, and the cuda_local backend cannot be "
    "captured (its ranks wait on each other's events across threads); turn CUDA graphs off "
    "in local mode";

// Collectives: a capturing stream fails the communicator (the peers must not wait).
static int refuse_capture(rdv_handle* h, const char* opname, cudaStream_t st) {
    cudaError_t e;
    int cap = capturing(st, &e);
    if (e != cudaSuccess) return cl_fail(h, opname, "cudaStreamIsCapturing(stream)", e, __LINE__);
    if (!cap) return 0;
    char prefix[200], msg[RT_COMM_ERRLEN];
    snprintf(msg, sizeof msg, "%s: bad argument on rank %d: %s",
             rt_comm_msg_prefix(&h->base, opname, prefix, sizeof prefix), h->idx, CAPTURE_WHY);
    return rdv_fail(h, RT_ERR_ARG, msg);
}

// ---- the protocol -----------------------------------------------------------------------

// Up to my part: READY, barrier A + agreement, my stream waits on every peer's READY.
static int cl_begin(rdv_handle* h, const rdv_slot* d, const char* opname, int what, cudaStream_t st) {
    int rc = refuse_capture(h, opname, st);
    if (rc) return rc;
    if (atomic_load(&h->g->status)) return rdv_enter(h, d, opname, what);  // refuses at once
    CL_CHECK(h, opname, cudaEventRecord(ev(h, h->idx, EV_READY), st));
    rc = rdv_enter(h, d, opname, what);
    if (rc) return rc;
    for (int s = 0; s < h->g->size; s++)
        if (s != h->idx) CL_CHECK(h, opname, cudaStreamWaitEvent(st, ev(h, s, EV_READY), 0));
    return 0;
}

// After my part: DONE, barrier B, my stream waits on every peer's DONE, then END.
static int cl_end(rdv_handle* h, const char* opname, cudaStream_t st) {
    CL_CHECK(h, opname, cudaEventRecord(ev(h, h->idx, EV_DONE), st));
    int rc = rdv_barrier(h, opname);
    if (rc) return rc;
    for (int s = 0; s < h->g->size; s++)
        if (s != h->idx) CL_CHECK(h, opname, cudaStreamWaitEvent(st, ev(h, s, EV_DONE), 0));
    CL_CHECK(h, opname, cudaEventRecord(ev(h, h->idx, EV_END), st));
    return 0;
}

// ---- collectives ------------------------------------------------------------------------

static int cl_all_gather(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                         void* stream) {
    rdv_handle* h = (rdv_handle*)c;
    cudaStream_t st = (cudaStream_t)stream;
    const char* op = "all_gather";
    rdv_slot d = {.op = OP_ALL_GATHER, .count = count, .dtype = dt, .send = send, .recv = recv};
    int rc = cl_begin(h, &d, op, CHK_COUNT | CHK_DTYPE, st);
    if (rc) return rc;
    size_t bytes = (size_t)count * rt_dtype_size(dt);
    for (int s = 0; s < h->g->size && bytes; s++) {
        char* dst = (char*)recv + (size_t)s * bytes;
        const void* src = h->g->slots[s].send;
        if (src != dst) CL_CHECK(h, op, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st));
    }
    return cl_end(h, op, st);
}

static void red_scale(rt_redop op, int n, int* use_scale, float* scale) {
    *use_scale = op.kind != RT_RED_SUM;
    *scale = op.kind == RT_RED_AVG ? (float)(1.0 / n) : (float)op.factor;
}

static int cl_reduce_scatter(rt_comm* c, const void* send, void* recv, int64_t count,
                             rt_dtype dt, rt_redop red, void* stream) {
    rdv_handle* h = (rdv_handle*)c;
    cudaStream_t st = (cudaStream_t)stream;
    const char* op = "reduce_scatter";
    rdv_slot d = {.op = OP_REDUCE_SCATTER, .count = count, .dtype = dt, .red = red, .send = send, .recv = recv};
    int rc = cl_begin(h, &d, op, CHK_COUNT | CHK_DTYPE | CHK_RED, st);
    if (rc) return rc;
    int n = h->g->size;
    size_t off = (size_t)h->idx * (size_t)count * rt_dtype_size(dt);
    for (int s = 0; s < n; s++) h->srcs[s] = (const char*)h->g->slots[s].send + off;
    int use_scale;
    float scale;
    red_scale(red, n, &use_scale, &scale);
    if (count > 0)
        CL_CHECK(h, op, rt_cuda_reduce_sum(&recv, 1, h->srcs, n, (size_t)count, dt, use_scale, scale, st));
    return cl_end(h, op, st);
}

static int cl_all_reduce(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                         rt_redop red, void* stream) {
    rdv_handle* h = (rdv_handle*)c;
    cudaStream_t st = (cudaStream_t)stream;
    const char* op = "all_reduce";
    rdv_slot d = {.op = OP_ALL_REDUCE, .count = count, .dtype = dt, .red = red, .send = send, .recv = recv};
    int rc = cl_begin(h, &d, op, CHK_COUNT | CHK_DTYPE | CHK_RED, st);
    if (rc) return rc;
    int n = h->g->size;
    int64_t lo = count * h->idx / n, hi = count * (h->idx + 1) / n;
    size_t es = rt_dtype_size(dt);
    for (int s = 0; s < n; s++) {
        h->srcs[s] = (const char*)h->g->slots[s].send + (size_t)lo * es;
        h->dsts[s] = (char*)h->g->slots[s].recv + (size_t)lo * es;
    }
    int use_scale;
    float scale;
    red_scale(red, n, &use_scale, &scale);
    if (hi > lo)
        CL_CHECK(h, op, rt_cuda_reduce_sum(h->dsts, n, h->srcs, n, (size_t)(hi - lo), dt, use_scale, scale, st));
    return cl_end(h, op, st);
}

static int cl_broadcast(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                        int root, void* stream) {
    rdv_handle* h = (rdv_handle*)c;
    cudaStream_t st = (cudaStream_t)stream;
    const char* op = "broadcast";
    rdv_slot d = {.op = OP_BROADCAST, .count = count, .dtype = dt, .root = root, .send = send, .recv = recv};
    int rc = cl_begin(h, &d, op, CHK_COUNT | CHK_DTYPE | CHK_ROOT, st);
    if (rc) return rc;
    const void* src = h->g->slots[root].send;
    size_t bytes = (size_t)count * rt_dtype_size(dt);
    if (bytes && src != recv) CL_CHECK(h, op, cudaMemcpyAsync(recv, src, bytes, cudaMemcpyDeviceToDevice, st));
    return cl_end(h, op, st);
}

// Every rank entered, and (as the nccl backend) returns once this rank's stream has
// passed the barrier, i.e. every rank's work enqueued before it on the GPU is done.
static int cl_barrier(rt_comm* c, void* stream) {
    rdv_handle* h = (rdv_handle*)c;
    cudaStream_t st = (cudaStream_t)stream;
    rdv_slot d = {.op = OP_BARRIER};
    int rc = cl_begin(h, &d, "barrier", 0, st);
    if (!rc) rc = cl_end(h, "barrier", st);
    if (rc) return rc;
    CL_CHECK(h, "barrier", cudaEventSynchronize(ev(h, h->idx, EV_END)));
    return 0;
}

// ---- buffers ----------------------------------------------------------------------------

static void* cl_buf_alloc(rt_comm* c, size_t bytes) {
    void* p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaSuccess) return p;
    rt_comm_set_error(c, "rt_comm buffer_alloc on '%s' (cuda_local, rank %d): cudaMalloc(%zu bytes) "
                         "failed: %s (hint: %s)", c->name, c->rank, bytes, cudaGetErrorString(e),
                      rt_check_cuda_hint((int)e));
    fflush(stdout);
    fprintf(stderr, "%s\n", c->last_error);
    return NULL;
}

static void cl_buf_free(rt_comm* c, void* buf) {
    cudaError_t e = cudaFree(buf);
    if (e == cudaSuccess) return;
    rt_comm_set_error(c, "rt_comm buffer_free on '%s' (cuda_local, rank %d): cudaFree failed: %s",
                      c->name, c->rank, cudaGetErrorString(e));
    fflush(stdout);
    fprintf(stderr, "%s\n", c->last_error);
}

// Copies wait for this rank's collectives on this communicator first (END), as the nccl
// backend does, so a buffer read after a collective on any stream sees its result. They
// work after a failure too.
static int cl_buf_copy(rt_comm* c, void* dst, const void* src, size_t bytes, enum cudaMemcpyKind kind) {
    rdv_handle* h = (rdv_handle*)c;
    const char* op = kind == cudaMemcpyHostToDevice ? "buffer_write" : "buffer_read";
    CL_CHECK(h, op, cudaEventSynchronize(ev(h, h->idx, EV_END)));
    if (bytes) CL_CHECK(h, op, cudaMemcpy(dst, src, bytes, kind));
    // From pageable memory cudaMemcpy may return before its DMA lands, and the ranks'
    // non-blocking streams do not wait for the legacy stream: wait for it. The likely cause
    // of test_cuda_local's failure at world 8 in 2 of 4 runs on an H100 (stale inputs).
    if (bytes && kind == cudaMemcpyHostToDevice)
        CL_CHECK(h, op, cudaStreamSynchronize(cudaStreamLegacy));
    return 0;
}

static int cl_buf_write(rt_comm* c, void* dst, const void* src, size_t bytes) {
    return cl_buf_copy(c, dst, src, bytes, cudaMemcpyHostToDevice);
}

static int cl_buf_read(rt_comm* c, void* dst, const void* src, size_t bytes) {
    return cl_buf_copy(c, dst, src, bytes, cudaMemcpyDeviceToHost);
}

// Waits for this rank's collectives on this communicator, then for the rest of the stream.
// A capturing stream cannot be waited for: RT_ERR_ARG (the communicator stays usable).
static int cl_sync(rt_comm* c, void* stream) {
    rdv_handle* h = (rdv_handle*)c;
    cudaStream_t st = (cudaStream_t)stream;
    cudaError_t e;
    if (capturing(st, &e)) {
        rt_comm_set_error(c, "rt_comm sync on '%s' (cuda_local, size %d, rank %d): bad argument: %s",
                          c->name, c->size, c->rank, CAPTURE_WHY);
        fflush(stdout);
        fprintf(stderr, "%s\n", c->last_error);
        return RT_ERR_ARG;
    }
    if (e != cudaSuccess) return cl_fail(h, "sync", "cudaStreamIsCapturing(stream)", e, __LINE__);
    CL_CHECK(h, "sync", cudaEventSynchronize(ev(h, h->idx, EV_END)));
    CL_CHECK(h, "sync", cudaStreamSynchronize(st));
    int failed = atomic_load(&h->g->status);
    if (failed) snprintf(c->last_error, sizeof c->last_error, "%s", h->g->err);
    return failed;
}

static const rt_comm_ops cuda_local_ops = {
    .name = "cuda_local",
    .all_gather = cl_all_gather,
    .reduce_scatter = cl_reduce_scatter,
    .all_reduce = cl_all_reduce,
    .broadcast = cl_broadcast,
    .barrier = cl_barrier,
    .split = rdv_ops_split,
    .fail = rdv_ops_fail,
    .free = rdv_ops_free,
    .buf_alloc = cl_buf_alloc,
    .buf_free = cl_buf_free,
    .buf_write = cl_buf_write,
    .buf_read = cl_buf_read,
    .sync = cl_sync,
};

// ---- rendezvous hooks -------------------------------------------------------------------

static int cl_rank_begin(int wrank, void* ctx, char* why, size_t cap) {
    (void)wrank;
    int dev = ((cl_ctx*)ctx)->device;
    cudaError_t e = cudaSetDevice(dev);
    if (e == cudaSuccess) return 0;
    snprintf(why, cap, "cudaSetDevice(%d) failed: %s (hint: %s)", dev, cudaGetErrorString(e),
             rt_check_cuda_hint((int)e));
    return 1;
}

static int cl_member_init(rdv_handle* h, void* ctx, char* why, size_t cap) {
    (void)ctx;
    rdv_slot* s = &h->g->slots[h->idx];
    for (int i = 0; i < RDV_SLOT_RES; i++) {
        cudaEvent_t e = NULL;
        cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
        if (err != cudaSuccess) {
            snprintf(why, cap, "cudaEventCreateWithFlags failed: %s (hint: %s)",
                     cudaGetErrorString(err), rt_check_cuda_hint((int)err));
            return 1;  // the events made so far go with the group (slot_release)
        }
        s->res[i] = e;
    }
    return 0;
}

// After the rank's function: wait for everything it left on the GPU (all ranks share the
// device, so this also waits for the peers' work, which always completes).
static void cl_rank_end(rdv_handle* h, void* ctx) {
    (void)ctx;
    cudaError_t e = cudaEventSynchronize(ev(h, h->idx, EV_END));
    const char* call = "cudaEventSynchronize(END)";
    if (e == cudaSuccess) {
        e = cudaDeviceSynchronize();
        call = "cudaDeviceSynchronize()";
    }
    if (e != cudaSuccess) cl_fail(h, "end of the rank function", call, e, __LINE__);
}

static void cl_slot_release(rdv_slot* s, void* ctx) {
    (void)ctx;
    for (int i = 0; i < RDV_SLOT_RES; i++) {
        if (!s->res[i]) continue;
        cudaError_t e = cudaEventDestroy((cudaEvent_t)s->res[i]);
        if (e != cudaSuccess)
            fprintf(stderr, "rt_cuda_local_run: cudaEventDestroy failed: %s\n", cudaGetErrorString(e));
        s->res[i] = NULL;
    }
}

// ---- launcher ---------------------------------------------------------------------------

int rt_cuda_local_run(int world, int device, rt_rank_fn fn, void* arg) {
    if (world < 1 || world > RT_CUDA_REDUCE_MAX || !fn || device < 0) {
        fprintf(stderr, "rt_cuda_local_run: %s (world size %d, device %d; need 1 <= world <= %d, "
                        "device >= 0 and a rank function)\n",
                !fn ? "fn is NULL" : device < 0 ? "invalid device" : "invalid world size", world,
                device, RT_CUDA_REDUCE_MAX);
        return 2;
    }
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev < 1) {
        fprintf(stderr, "rt_cuda_local_run: no usable GPU (cudaGetDeviceCount: %s; hint: %s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices",
                rt_check_cuda_hint(e != cudaSuccess ? (int)e : 100));
        return 1;
    }
    if (device >= ndev) {
        fprintf(stderr, "rt_cuda_local_run: device %d asked for but %d GPUs are visible (hint: "
                        "check CUDA_VISIBLE_DEVICES)\n", device, ndev);
        return 1;
    }
    // The events are destroyed on this thread when the run ends: on the ranks' device, and
    // the caller's current device is restored afterwards.
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;  // none current: nothing to restore
    e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        fprintf(stderr, "rt_cuda_local_run: cudaSetDevice(%d) failed: %s (hint: %s)\n", device,
                cudaGetErrorString(e), rt_check_cuda_hint((int)e));
        return 1;
    }
    cl_ctx ctx = {device};
    const rdv_backend be = {
        .ops = &cuda_local_ops,
        .launcher = "rt_cuda_local_run",
        .member_init = cl_member_init,
        .rank_begin = cl_rank_begin,
        .rank_end = cl_rank_end,
        .slot_release = cl_slot_release,
        .ctx = &ctx,
    };
    int rc = rdv_run(&be, world, fn, arg);
    if (prev >= 0 && prev != device && (e = cudaSetDevice(prev)) != cudaSuccess) {
        fprintf(stderr, "rt_cuda_local_run: restoring the caller's device: cudaSetDevice(%d) failed: %s\n",
                prev, cudaGetErrorString(e));
        rc = 1;
    }
    return rc;
}
