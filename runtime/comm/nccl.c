// NCCL backend of rt_comm.h (librt_nccl.a): one thread per GPU in one process, every
// communicator an ncclComm_t; collectives are enqueued on the caller's stream (an opaque
// cudaStream_t, NULL = the legacy default stream). Agreement between ranks is NCCL's
// business: a mismatch there is undefined behaviour or a hang, so the generated code
// must (and the conformance tests do) keep ranks in step.
//
// Timeouts. A rank that never joins a collective makes NCCL wait forever: on the host
// (communicator creation, split, and the enqueue that sets up connections) and on the
// device (the kernel waits for the peer). So communicators are non-blocking
// (ncclCommInitRankConfig with config.blocking = 0, NCCL >= 2.14): a call that returns
// ncclInProgress is polled with ncclCommGetAsyncError until it is done or the handle's
// timeout (rt_comm_timeout_ms) passes. Each enqueued collective records a CUDA event on its
// stream and joins this handle's in-flight queue, so collectives stay asynchronous (FSDP
// overlaps them with compute); the queue is checked (cudaEventQuery + the async error) on
// every later call, and waited for, still against each collective's deadline, by
// rt_comm_sync, rt_comm_barrier, the buffer copies and at the end of the rank's function.
// A collective still unfinished past its deadline (measured from its enqueue) aborts the
// communicator (ncclCommAbort, which also stops the kernels) and fails it with
// RT_ERR_TIMEOUT and a line naming the operation, the communicator and its call number.
// NCCL cannot tell which peers are missing, so the line cannot name them (the threads
// backend does).
//
// CUDA graphs. A collective enqueued on a stream that is being captured (checked with
// cudaStreamIsCapturing on every call) is captured with NCCL's own graph support; it is
// not put in the in-flight queue (no event recorded on the capturing stream, and no
// cudaEventQuery on that path, which capture forbids), so the timeout is not enforced
// when the graph is replayed. rt_comm_sync and rt_comm_barrier, which would have to
// wait, return RT_ERR_ARG on a capturing stream and leave the communicator usable.
//
// Other differences from the threads backend, by NCCL's design: reductions accumulate in
// the buffer type (bf16/fp16 round at every step); a failure is only seen by the rank that
// detects it (peers time out in turn); rt_comm_abort calls ncclCommAbort.
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_internal.h"

// ---- NCCL versions ----------------------------------------------------------------------

#if !defined(NCCL_VERSION_CODE) || !defined(NCCL_VERSION)
#error "rt_comm nccl backend: nccl.h without NCCL_VERSION_CODE (NCCL >= 2.11 needed)"
#endif
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 11, 0)
#error "rt_comm nccl backend needs NCCL >= 2.11 (ncclAvg, ncclBfloat16, ncclRedOpCreatePreMulSum)"
#endif
// ncclGetLastError: 2.13. Non-blocking communicators (ncclConfig_t, ncclInProgress): 2.14.
// ncclCommSplit: 2.18. Older versions build with blocking communicators: a missing rank is
// still timed out once its collective was enqueued, but creation can hang.
#define RT_NCCL_HAS_LAST_ERROR (NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0))
#define RT_NCCL_NONBLOCKING (NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0))
#define RT_NCCL_HAS_SPLIT (NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0))

static int in_progress(ncclResult_t r) {
#if RT_NCCL_NONBLOCKING
    return r == ncclInProgress;
#else
    (void)r;
    return 0;
#endif
}

static const char* last_error(ncclComm_t nc) {
#if RT_NCCL_HAS_LAST_ERROR
    return nc ? ncclGetLastError(nc) : "";
#else
    (void)nc;
    return "";
#endif
}

// ---- types ------------------------------------------------------------------------------

// A collective in flight: an event recorded after it on its stream.
typedef struct inflight {
    cudaEvent_t ev;
    const char* opname;
    uint64_t call;     // base.calls when it was issued (for the message)
    int64_t start_ns;  // when it was enqueued; its deadline is start + timeout
} inflight;

#define RT_NCCL_INFLIGHT 128  // more in flight: the next enqueue waits for the oldest

typedef struct nhandle {
    rt_comm base;  // first, so rt_comm* and nhandle* convert
    ncclComm_t nc;
    int device;
    int failed;     // sticky status
    int* scratch;   // one device int for barriers
    int owns_nc;
    int launcher_owned;  // rt_nccl_run's world handles: rt_comm_free ignores them
    inflight q[RT_NCCL_INFLIGHT];  // ring, every slot's event created with the handle
    int qhead, qlen;
    // ncclCommSplit's result cell. In non-blocking mode NCCL writes it from its own thread
    // when the split job gets there, which can be after ncclCommSplit returned (even with
    // ncclSuccess) and after the parent looks ready; so it lives as long as the parent
    // (which NCCL finishes with before the parent is destroyed) and starts as a sentinel.
    ncclComm_t split_out;
} nhandle;

static const rt_comm_ops nccl_ops;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// Polling back-off: yield for the first rounds (a collective usually ends within
// microseconds of the poll), then sleep 10 us, growing to 1 ms.
static void backoff(int* round) {
    if (*round < 64) {
        (*round)++;
        sched_yield();
        return;
    }
    long us = 10L << (*round - 64 < 7 ? *round - 64 : 7);
    if (us > 1000) us = 1000;
    if (*round < 64 + 7) (*round)++;
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

// ---- errors -----------------------------------------------------------------------------

static int n_fail(rt_comm* c, int status, const char* msg) {
    nhandle* h = (nhandle*)c;
    if (!h->failed) {
        h->failed = status;
        snprintf(c->last_error, sizeof c->last_error, "%s", msg);
        fflush(stdout);
        fprintf(stderr, "%s\n", msg);
        fflush(stderr);
        // Peers may be blocked inside NCCL waiting for this rank, and this rank's kernels
        // for them: abort the communicator so NCCL stops both instead of hanging.
        if (h->nc) {
            ncclCommAbort(h->nc);
            h->nc = NULL;
        }
    }
    return h->failed;
}

static int nccl_err(nhandle* h, const char* opname, ncclResult_t r) {
    char prefix[200], msg[RT_COMM_ERRLEN];
    const char* last = last_error(h->nc);
    snprintf(msg, sizeof msg, "%s: NCCL error %d: %s%s%s (hint: rerun with NCCL_DEBUG=INFO)",
             rt_comm_msg_prefix(&h->base, opname, prefix, sizeof prefix), (int)r,
             ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
    return n_fail(&h->base, RT_ERR_BACKEND, msg);
}

static int cuda_err(nhandle* h, const char* opname, cudaError_t e) {
    char prefix[200], msg[RT_COMM_ERRLEN];
    snprintf(msg, sizeof msg, "%s: CUDA error %d: %s",
             rt_comm_msg_prefix(&h->base, opname, prefix, sizeof prefix), (int)e,
             cudaGetErrorString(e));
    return n_fail(&h->base, RT_ERR_BACKEND, msg);
}

// The timeout line. `call` is the call number of the operation that did not finish.
static int timeout_err(nhandle* h, const char* opname, uint64_t call, int64_t waited_ns,
                       const char* what) {
    char msg[RT_COMM_ERRLEN];
    snprintf(msg, sizeof msg,
             "rt_comm %s on '%s' (nccl, size %d, rank %d, call #%llu): timed out after %lld ms: "
             "%s, so some of the other %d ranks never joined it (NCCL cannot tell which; set "
             "RT_COMM_TIMEOUT_MS if they are only slow); communicator aborted",
             opname, h->base.name, h->base.size, h->base.rank, (unsigned long long)call,
             (long long)(waited_ns / 1000000), what, h->base.size - 1);
    return n_fail(&h->base, RT_ERR_TIMEOUT, msg);
}

static int refuse_if_failed(nhandle* h) {
    return h->failed;  // last_error already holds the message
}

// ---- CUDA graph capture -----------------------------------------------------------------

// *cap = 1 when stream is being captured into a CUDA graph. Returns 0 or fails the handle
// (e.g. the legacy stream queried while another thread captures in global mode).
static int capture_state(nhandle* h, const char* opname, void* stream, int* cap) {
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing((cudaStream_t)stream, &cs);
    *cap = e == cudaSuccess && cs != cudaStreamCaptureStatusNone;
    return e == cudaSuccess ? 0 : cuda_err(h, opname, e);
}

// rt_comm_sync / rt_comm_barrier on a capturing stream: they would have to wait for the
// GPU. Prints the line, keeps it in last_error and returns RT_ERR_ARG; the communicator
// stays usable (aborting it would call into CUDA from inside the capture).
static int refuse_capture(nhandle* h, const char* opname) {
    char prefix[200];
    rt_comm_set_error(&h->base, "%s: bad argument on rank %d: the stream is being captured into "
                      "a CUDA graph, and %s has to wait for the GPU (hint: call it outside the "
                      "capture, after launching the graph)",
                      rt_comm_msg_prefix(&h->base, opname, prefix, sizeof prefix), h->base.rank, opname);
    fflush(stdout);
    fprintf(stderr, "%s\n", h->base.last_error);
    return RT_ERR_ARG;
}

// Waits until `nc` (h->nc, or a communicator being made from it) leaves ncclInProgress
// (non-blocking mode), at most until start + the handle's timeout; `what` says what did
// not finish in the timeout line. Returns 0, or fails the handle (and aborts `nc`).
static int wait_ready(nhandle* h, ncclComm_t nc, const char* opname, int64_t start,
                      const char* what) {
#if RT_NCCL_NONBLOCKING
    int64_t limit = h->base.timeout_ms * 1000000;
    for (int round = 0;; backoff(&round)) {
        ncclResult_t st = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(nc, &st);
        if (r == ncclSuccess && st == ncclSuccess) return 0;
        ncclResult_t bad = r != ncclSuccess ? r : st != ncclInProgress ? st : ncclSuccess;
        int64_t waited = now_ns() - start;
        if (bad == ncclSuccess && waited < limit) continue;
        if (nc != h->nc) ncclCommAbort(nc);
        if (bad != ncclSuccess) return nccl_err(h, opname, bad);
        return timeout_err(h, opname, h->base.calls, waited, what);
    }
#else
    (void)h, (void)nc, (void)opname, (void)start, (void)what;
    return 0;
#endif
}

static const char* const SETUP_WHAT = "NCCL did not finish setting the call up (that needs every rank)";

// The result of an NCCL call on h->nc started at `start`: ncclInProgress waits (bounded).
static int nccl_done(nhandle* h, const char* opname, ncclResult_t r, int64_t start) {
    if (r == ncclSuccess) return 0;
    if (in_progress(r)) return wait_ready(h, h->nc, opname, start, SETUP_WHAT);
    return nccl_err(h, opname, r);
}

// ---- collectives in flight --------------------------------------------------------------

// Retires finished collectives, oldest first. With wait, polls until none is left.
// Fails the communicator when one is unfinished past its deadline, when NCCL reports an
// asynchronous error, or on a CUDA error. Returns 0 or the failure.
static int progress(nhandle* h, int wait) {
    for (int round = 0;; backoff(&round)) {
        if (h->failed) return h->failed;
        while (h->qlen) {
            inflight* f = &h->q[h->qhead];
            cudaError_t e = cudaEventQuery(f->ev);
            if (e == cudaErrorNotReady) break;
            if (e != cudaSuccess) return cuda_err(h, f->opname, e);
            h->qhead = (h->qhead + 1) % RT_NCCL_INFLIGHT;
            h->qlen--;
        }
        if (!h->qlen) return 0;
        inflight* f = &h->q[h->qhead];
        ncclResult_t st = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(h->nc, &st);
        if (r != ncclSuccess) return nccl_err(h, f->opname, r);
        if (st != ncclSuccess && !in_progress(st)) return nccl_err(h, f->opname, st);
        int64_t waited = now_ns() - f->start_ns;
        if (waited >= h->base.timeout_ms * 1000000)
            return timeout_err(h, f->opname, f->call, waited,
                               "the collective did not complete on the GPU");
        if (!wait) return 0;
    }
}

// Bookkeeping after an enqueue on `stream` that started at `start`: waits out an
// ncclInProgress result, then records the collective's event, unless the stream is being
// captured (cap): a captured collective is not tracked (its timeout is not enforced).
static int enqueued(nhandle* h, const char* opname, ncclResult_t r, void* stream, int64_t start,
                    int cap) {
    int st = nccl_done(h, opname, r, start);
    if (st || cap) return st;
    // Queue full: wait for the oldest (bounded by its deadline).
    for (int round = 64; h->qlen == RT_NCCL_INFLIGHT; backoff(&round)) {
        st = progress(h, 0);
        if (st) return st;
    }
    inflight* f = &h->q[(h->qhead + h->qlen) % RT_NCCL_INFLIGHT];
    cudaError_t e = cudaEventRecord(f->ev, (cudaStream_t)stream);
    if (e != cudaSuccess) return cuda_err(h, opname, e);
    f->opname = opname;
    f->call = h->base.calls;
    f->start_ns = start;
    h->qlen++;
    return 0;
}

// Entry check of every call: refuses on a failed communicator and retires (or times out)
// what finished so far. A collective on a capturing stream (*cap = 1) skips the retiring:
// no cudaEventQuery while capturing.
static int enter(nhandle* h, const char* opname, void* stream, int* cap) {
    *cap = 0;
    if (refuse_if_failed(h)) return h->failed;
    int st = capture_state(h, opname, stream, cap);
    if (st) return st;
    return *cap ? 0 : progress(h, 0);
}

// Entry check of calls without a stream (split).
static int enter_host(nhandle* h) {
    if (refuse_if_failed(h)) return h->failed;
    return progress(h, 0);
}

// ---- mapping ----------------------------------------------------------------------------

static ncclDataType_t nccl_type(rt_dtype dt) {
    switch (dt) {
        case RT_F32: return ncclFloat32;
        case RT_BF16: return ncclBfloat16;
        case RT_F16: return ncclFloat16;
        case RT_I32: return ncclInt32;
        default: return ncclInt64;
    }
}

// Builds the NCCL reduction; *custom says it must be destroyed after the call (NCCL
// allows that as soon as the enqueuing call returned).
static ncclResult_t nccl_red(nhandle* h, rt_redop op, rt_dtype dt, ncclRedOp_t* out, int* custom) {
    *custom = 0;
    if (op.kind == RT_RED_SUM) {
        *out = ncclSum;
        return ncclSuccess;
    }
    if (op.kind == RT_RED_AVG) {
        *out = ncclAvg;
        return ncclSuccess;
    }
    // The scalar has the buffer's type, so round the factor the same way the data is.
    float f32 = (float)op.factor;
    uint16_t f16 = dt == RT_BF16 ? rt_f32_to_bf16(f32) : rt_f32_to_f16(f32);
    void* scalar = dt == RT_F32 ? (void*)&f32 : (void*)&f16;
    *custom = 1;
    return ncclRedOpCreatePreMulSum(out, scalar, nccl_type(dt), ncclScalarHostImmediate, h->nc);
}

// ---- collectives ------------------------------------------------------------------------

static int n_all_gather(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                        void* stream) {
    nhandle* h = (nhandle*)c;
    int cap;
    int st = enter(h, "all_gather", stream, &cap);
    if (st) return st;
    int64_t t0 = now_ns();
    ncclResult_t r = ncclAllGather(send, recv, (size_t)count, nccl_type(dt), h->nc,
                                   (cudaStream_t)stream);
    return enqueued(h, "all_gather", r, stream, t0, cap);
}

static int n_reduce(nhandle* h, const char* opname, int all, const void* send, void* recv,
                    int64_t count, rt_dtype dt, rt_redop op, void* stream) {
    int cap;
    int st = enter(h, opname, stream, &cap);
    if (st) return st;
    int64_t t0 = now_ns();
    ncclRedOp_t red;
    int custom;
    st = nccl_done(h, opname, nccl_red(h, op, dt, &red, &custom), t0);
    if (st) return st;
    ncclResult_t r;
    if (all)
        r = ncclAllReduce(send, recv, (size_t)count, nccl_type(dt), red, h->nc, (cudaStream_t)stream);
    else
        r = ncclReduceScatter(send, recv, (size_t)count, nccl_type(dt), red, h->nc,
                              (cudaStream_t)stream);
    // The custom op may go once the enqueue finished (after an ncclInProgress too).
    st = enqueued(h, opname, r, stream, t0, cap);
    if (custom && !st) ncclRedOpDestroy(red, h->nc);
    return st;
}

static int n_reduce_scatter(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                            rt_redop op, void* stream) {
    return n_reduce((nhandle*)c, "reduce_scatter", 0, send, recv, count, dt, op, stream);
}

static int n_all_reduce(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                        rt_redop op, void* stream) {
    return n_reduce((nhandle*)c, "all_reduce", 1, send, recv, count, dt, op, stream);
}

static int n_broadcast(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                       int root, void* stream) {
    nhandle* h = (nhandle*)c;
    int cap;
    int st = enter(h, "broadcast", stream, &cap);
    if (st) return st;
    int64_t t0 = now_ns();
    ncclResult_t r = ncclBroadcast(send, recv, (size_t)count, nccl_type(dt), root, h->nc,
                                   (cudaStream_t)stream);
    return enqueued(h, "broadcast", r, stream, t0, cap);
}

// A barrier waits for the GPU, which a capturing stream cannot: RT_ERR_ARG (nothing is
// enqueued; a peer that did enqueue its barrier times out).
static int n_barrier(rt_comm* c, void* stream) {
    nhandle* h = (nhandle*)c;
    int cap;
    int st = enter(h, "barrier", stream, &cap);
    if (st) return st;
    if (cap) return refuse_capture(h, "barrier");
    int64_t t0 = now_ns();
    ncclResult_t r = ncclAllReduce(h->scratch, h->scratch, 1, ncclInt32, ncclSum, h->nc,
                                   (cudaStream_t)stream);
    st = enqueued(h, "barrier", r, stream, t0, 0);
    return st ? st : progress(h, 1);
}

// ---- handles ----------------------------------------------------------------------------

static void destroy_events(nhandle* h, int n) {
    for (int i = 0; i < n; i++) cudaEventDestroy(h->q[i].ev);
}

// A handle for the ready communicator nc (on the current device). NULL on failure.
static nhandle* handle_new(ncclComm_t nc, int device, const char* name, int64_t timeout_ms) {
    int rank = 0, size = 0;
    if (ncclCommUserRank(nc, &rank) != ncclSuccess || ncclCommCount(nc, &size) != ncclSuccess)
        return NULL;
    nhandle* h = calloc(1, sizeof *h);
    if (!h) return NULL;
    rt_comm_init_base(&h->base, &nccl_ops, rank, size, name, timeout_ms);
    h->nc = nc;
    h->device = device;
    h->owns_nc = 1;
    int ev = 0;
    for (; ev < RT_NCCL_INFLIGHT; ev++)
        if (cudaEventCreateWithFlags(&h->q[ev].ev, cudaEventDisableTiming) != cudaSuccess) break;
    if (ev < RT_NCCL_INFLIGHT || cudaMalloc((void**)&h->scratch, sizeof(int)) != cudaSuccess ||
        cudaMemset(h->scratch, 0, sizeof(int)) != cudaSuccess) {
        destroy_events(h, ev);
        cudaFree(h->scratch);
        free(h);
        return NULL;
    }
    return h;
}

// What split_out holds until NCCL stores the new communicator (or NULL) there.
#define SPLIT_PENDING ((ncclComm_t)(uintptr_t)1)

// Waits (bounded by start + the handle's timeout) until NCCL stored the split's result in
// h->split_out; returns it through *nc. Fails (and aborts h) on a timeout.
static int wait_split_out(nhandle* h, int64_t start, ncclComm_t* nc) {
    int64_t limit = h->base.timeout_ms * 1000000;
    for (int round = 0;; backoff(&round)) {
        ncclComm_t v = __atomic_load_n(&h->split_out, __ATOMIC_ACQUIRE);
        if (v != SPLIT_PENDING) {
            *nc = v;
            return 0;
        }
        int64_t waited = now_ns() - start;
        if (waited >= limit)
            return timeout_err(h, "split", h->base.calls, waited,
                               "NCCL did not hand out the new communicator (that needs every rank)");
    }
}

static int n_split(rt_comm* c, int color, int key, rt_comm** out) {
    nhandle* h = (nhandle*)c;
    int st = enter_host(h);
    if (st) return st;
#if RT_NCCL_HAS_SPLIT
    int64_t t0 = now_ns();
    int nocolor = color == RT_COMM_SPLIT_NONE;
    __atomic_store_n(&h->split_out, SPLIT_PENDING, __ATOMIC_RELEASE);
    ncclResult_t r = ncclCommSplit(h->nc, nocolor ? NCCL_SPLIT_NOCOLOR : color, key, &h->split_out, NULL);
    if (r != ncclSuccess && !in_progress(r)) return nccl_err(h, "split", r);
    // The parent is busy until every rank joined the split (non-blocking mode); a timeout
    // aborts it, which stops the split job.
    st = wait_ready(h, h->nc, "split", t0, SETUP_WHAT);
    if (st || nocolor) return st;
    ncclComm_t nc = NULL;
    st = wait_split_out(h, t0, &nc);
    if (st) return st;
    if (!nc) {
        char prefix[200], msg[RT_COMM_ERRLEN];
        snprintf(msg, sizeof msg, "%s: NCCL returned no communicator for color %d",
                 rt_comm_msg_prefix(c, "split", prefix, sizeof prefix), color);
        return n_fail(c, RT_ERR_BACKEND, msg);
    }
    // The new communicator (inheriting the parent's non-blocking config) may still be
    // connecting.
    st = wait_ready(h, nc, "split", t0, "NCCL did not finish making the new communicator "
                                        "(that needs every rank)");
    if (st) return st;
    char name[96];
    snprintf(name, sizeof name, "%.60s/split(color %d)", c->name, color);
    nhandle* nh = handle_new(nc, h->device, name, c->timeout_ms);
    if (!nh) {
        ncclCommAbort(nc);
        char prefix[200], msg[RT_COMM_ERRLEN];
        snprintf(msg, sizeof msg, "%s: cannot set up the new communicator",
                 rt_comm_msg_prefix(c, "split", prefix, sizeof prefix));
        return n_fail(c, RT_ERR_NOMEM, msg);
    }
    *out = &nh->base;
    return 0;
#else
    (void)color, (void)key, (void)out;
    char prefix[200], msg[RT_COMM_ERRLEN];
    snprintf(msg, sizeof msg, "%s: needs ncclCommSplit (NCCL >= 2.18; built against %d)",
             rt_comm_msg_prefix(c, "split", prefix, sizeof prefix), NCCL_VERSION_CODE);
    return n_fail(c, RT_ERR_BACKEND, msg);
#endif
}

// Waits (bounded) for what is in flight, then destroys the communicator; a timeout or an
// error on the way aborts it instead (and prints the line).
static void n_release(nhandle* h) {
    if (h->nc && h->owns_nc && !progress(h, 1) && h->nc) {
#if RT_NCCL_NONBLOCKING
        int64_t t0 = now_ns();
        ncclResult_t r = ncclCommFinalize(h->nc);
        int st = r == ncclSuccess || in_progress(r)
                     ? wait_ready(h, h->nc, "free", t0, "NCCL did not finish finalizing the communicator")
                     : nccl_err(h, "free", r);
        if (!st) ncclCommDestroy(h->nc);
#else
        ncclCommDestroy(h->nc);
#endif
    }
    h->nc = NULL;
    destroy_events(h, RT_NCCL_INFLIGHT);
    cudaFree(h->scratch);
    free(h);
}

static void n_free(rt_comm* c) {
    nhandle* h = (nhandle*)c;
    if (!h->launcher_owned) n_release(h);
}

// ---- buffers ----------------------------------------------------------------------------

static void* n_buf_alloc(rt_comm* c, size_t bytes) {
    (void)c;
    void* p = NULL;
    return cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
}

static void n_buf_free(rt_comm* c, void* buf) {
    (void)c;
    cudaFree(buf);
}

// cudaMemcpy waits for the legacy default stream (and so for every blocking stream): wait
// for this handle's collectives first, against their deadlines, so a missing peer is
// reported instead of hanging the copy. After a failure the copy still works.
static int n_buf_write(rt_comm* c, void* dst, const void* src, size_t bytes) {
    nhandle* h = (nhandle*)c;
    if (!h->failed) {
        int st = progress(h, 1);
        if (st) return st;
    }
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    // from pageable memory it may return before the DMA lands (cuda_local.c's cl_buf_copy)
    if (e == cudaSuccess) e = cudaStreamSynchronize(cudaStreamLegacy);
    return e == cudaSuccess ? 0 : cuda_err(h, "buffer_write", e);
}

static int n_buf_read(rt_comm* c, void* dst, const void* src, size_t bytes) {
    nhandle* h = (nhandle*)c;
    if (!h->failed) {
        int st = progress(h, 1);
        if (st) return st;
    }
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? 0 : cuda_err(h, "buffer_read", e);
}

// Waits for this handle's collectives (bounded), then for the rest of the stream. A
// capturing stream cannot be waited for: RT_ERR_ARG (refuse_capture).
static int n_sync(rt_comm* c, void* stream) {
    nhandle* h = (nhandle*)c;
    int cap;
    int st = capture_state(h, "sync", stream, &cap);
    if (st) return st;
    if (cap) return refuse_capture(h, "sync");
    st = progress(h, 1);  // after a failure the communicator is aborted: no hang below
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
    if (st) return st;
    return e == cudaSuccess ? 0 : cuda_err(h, "sync", e);
}

static const rt_comm_ops nccl_ops = {
    .name = "nccl",
    .all_gather = n_all_gather,
    .reduce_scatter = n_reduce_scatter,
    .all_reduce = n_all_reduce,
    .broadcast = n_broadcast,
    .barrier = n_barrier,
    .split = n_split,
    .fail = n_fail,
    .free = n_free,
    .buf_alloc = n_buf_alloc,
    .buf_free = n_buf_free,
    .buf_write = n_buf_write,
    .buf_read = n_buf_read,
    .sync = n_sync,
};

// ---- bootstrap --------------------------------------------------------------------------

int rt_nccl_device_count(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        fprintf(stderr, "rt_nccl: cudaGetDeviceCount failed: %s (hint: no usable GPU or driver; "
                        "check nvidia-smi)\n", cudaGetErrorString(e));
        return RT_ERR_BACKEND;
    }
    return n;
}

int rt_nccl_get_unique_id(void* id_out, size_t id_bytes) {
    if (!id_out || id_bytes < sizeof(ncclUniqueId)) return RT_ERR_ARG;
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
        fprintf(stderr, "rt_nccl: ncclGetUniqueId failed: %s\n", ncclGetErrorString(r));
        return RT_ERR_BACKEND;
    }
    memcpy(id_out, &id, sizeof id);
    return 0;
}

int rt_nccl_comm_init(int world, const void* id, size_t id_bytes, int rank, int device,
                      rt_comm** out) {
    if (!out || !id || id_bytes < sizeof(ncclUniqueId) || world < 1 || rank < 0 || rank >= world) {
        fprintf(stderr, "rt_nccl_comm_init: bad argument (world %d, rank %d)\n", world, rank);
        return RT_ERR_ARG;
    }
    *out = NULL;
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        fprintf(stderr, "rt_nccl_comm_init: rank %d: cudaSetDevice(%d) failed: %s\n", rank, device,
                cudaGetErrorString(e));
        return RT_ERR_BACKEND;
    }
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    ncclComm_t nc = NULL;
#if RT_NCCL_NONBLOCKING
    // Non-blocking, so a rank that never comes is a timeout instead of a hang; the config
    // is inherited by split communicators.
    int64_t timeout_ms = rt_comm_default_timeout_ms();
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    int64_t t0 = now_ns();
    ncclResult_t r = ncclCommInitRankConfig(&nc, world, uid, rank, &config);
    for (int round = 0; in_progress(r) && nc; backoff(&round)) {
        ncclResult_t st = ncclInProgress;
        ncclResult_t q = ncclCommGetAsyncError(nc, &st);
        r = q != ncclSuccess ? q : st;
        int64_t waited = now_ns() - t0;
        if (in_progress(r) && waited >= timeout_ms * 1000000) {
            ncclCommAbort(nc);
            fflush(stdout);
            fprintf(stderr, "rt_comm init on 'world' (nccl, size %d, rank %d): timed out after %lld ms: "
                            "NCCL did not finish creating the communicator, so some of the other %d "
                            "ranks never joined it (NCCL cannot tell which; set RT_COMM_TIMEOUT_MS if "
                            "they are only slow); communicator aborted\n",
                    world, rank, (long long)(waited / 1000000), world - 1);
            return RT_ERR_TIMEOUT;
        }
    }
    const char* fn = "ncclCommInitRankConfig";
#else
    ncclResult_t r = ncclCommInitRank(&nc, world, uid, rank);
    const char* fn = "ncclCommInitRank";
#endif
    if (r != ncclSuccess) {
        if (nc) ncclCommAbort(nc);
        fprintf(stderr, "rt_nccl_comm_init: rank %d: %s failed: %s (hint: rerun with "
                        "NCCL_DEBUG=INFO)\n", rank, fn, ncclGetErrorString(r));
        return RT_ERR_BACKEND;
    }
    nhandle* h = handle_new(nc, device, "world", 0);
    if (!h) {
        ncclCommAbort(nc);
        return RT_ERR_NOMEM;
    }
    *out = &h->base;
    return 0;
}

typedef struct nrank_ctx {
    int world, rank;
    const ncclUniqueId* id;
    rt_rank_fn fn;
    void* arg;
    int status;
} nrank_ctx;

void rt_nccl_world_own(rt_comm* c) {
    if (c) ((nhandle*)c)->launcher_owned = 1;
}

int rt_nccl_world_finish(rt_comm* c) {
    nhandle* h = (nhandle*)c;
    progress(h, 1);  // what the function left in flight (bounded by the timeout)
    int status = h->failed;
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess && !status) {
        fprintf(stderr, "rt_comm: rank %d: cudaDeviceSynchronize after the rank function failed: "
                        "%s\n", c->rank, cudaGetErrorString(e));
        status = RT_ERR_BACKEND;
    }
    n_release(h);
    return status;
}

static void* nrank_main(void* p) {
    nrank_ctx* ctx = p;
    rt_comm* comm = NULL;
    ctx->status = rt_nccl_comm_init(ctx->world, ctx->id, sizeof *ctx->id, ctx->rank, ctx->rank, &comm);
    if (ctx->status) return NULL;
    rt_nccl_world_own(comm);
    ctx->fn(comm, ctx->arg);
    ctx->status = rt_nccl_world_finish(comm);
    return NULL;
}

int rt_nccl_run(int world, rt_rank_fn fn, void* arg) {
    if (world < 1 || !fn) {
        fprintf(stderr, "rt_nccl_run: invalid world size %d or NULL fn\n", world);
        return 2;
    }
    int ndev = rt_nccl_device_count();
    if (ndev < 0) return 1;
    if (ndev < world) {
        fprintf(stderr, "rt_nccl_run: %d ranks need %d GPUs but %d are visible (hint: lower "
                        "--world or check CUDA_VISIBLE_DEVICES)\n", world, world, ndev);
        return 1;
    }
    ncclUniqueId id;
    if (rt_nccl_get_unique_id(&id, sizeof id)) return 1;
    nrank_ctx* ctx = calloc((size_t)world, sizeof *ctx);
    pthread_t* threads = calloc((size_t)world, sizeof *threads);
    if (!ctx || !threads) {
        free(ctx);
        free(threads);
        return 1;
    }
    int started = 0;
    for (; started < world; started++) {
        ctx[started] = (nrank_ctx){world, started, &id, fn, arg, 0};
        if (pthread_create(&threads[started], NULL, nrank_main, &ctx[started]) != 0) {
            fprintf(stderr, "rt_nccl_run: cannot start the thread of rank %d\n", started);
            break;
        }
    }
    // A partial start would leave ncclCommInitRank waiting for the missing ranks forever.
    if (started < world) abort();
    int failed = 0;
    for (int r = 0; r < started; r++) {
        pthread_join(threads[r], NULL);
        if (ctx[r].status) failed = 1;
    }
    free(ctx);
    free(threads);
    return failed;
}
