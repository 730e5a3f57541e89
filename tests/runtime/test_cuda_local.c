// The cuda_local backend of rt_comm (N ranks as threads sharing one GPU) against the
// threads backend, bit for bit: the same rank function runs on both (world 1, 2, 4, 8 on
// non-blocking streams, world 2 and 4 on the legacy default stream) and records every
// output: all-gather in and out of place, reduce-scatter in and out of place and
// all-reduce in and out of place with every reduction and dtype, broadcast, a chain of
// collectives with no host sync between them, split (reordered keys, a rank in no group).
// On the GPU every input lands late on its rank's stream, a rank whose turn it is also
// delays its stream (a sleeping host function) before each collective, and every rank
// overwrites its input right after each call, so a missing event wait shows up as wrong
// data. Then the failures: a late rank (timeout), a rank that
// returns, rt_comm_abort, a count mismatch, a capturing stream, bad launcher arguments.
// Without a GPU: "SKIP cuda_local: no GPU" and 0 passed, 0 failed.
#include <cuda_runtime.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "rt_comm.h"

// ---- recording --------------------------------------------------------------------------

#define MAXW 8
#define CNT 1029  // elements per block: odd, so slices and tails are uneven
#define REC_BYTES (4u << 20)
#define MAXCHUNK 256

typedef struct chunk {
    rt_dtype dt;
    size_t off, n;  // bytes offset into rec, elements
} chunk;

typedef struct run_ctx {
    int gpu;     // 1: cuda_local, 0: threads
    int legacy;  // cuda_local on the legacy default stream (else a non-blocking one)
    unsigned char* rec[MAXW];
    size_t len[MAXW];
    chunk chunks[MAXW][MAXCHUNK];
    int nchunks[MAXW];
    _Atomic int errors;
    char err[512];
} run_ctx;

static void error(run_ctx* c, const char* what, int st, const char* detail) {
    if (atomic_fetch_add(&c->errors, 1) == 0)
        snprintf(c->err, sizeof c->err, "%s: %d %s", what, st, detail ? detail : "");
}

#define CK_RT(c, comm, call)                                                   \
    do {                                                                       \
        int st_ = (call);                                                      \
        if (st_) error((c), #call, st_, rt_comm_last_error(comm));             \
    } while (0)

#define CK_CUDA(c, call)                                                       \
    do {                                                                       \
        cudaError_t e_ = (call);                                               \
        if (e_ != cudaSuccess) error((c), #call, (int)e_, cudaGetErrorString(e_)); \
    } while (0)

// ---- inputs -----------------------------------------------------------------------------

// Values with full 24-bit mantissas over a wide exponent range (fp16 subnormals included),
// and now and then 40000, so fp16 sums overflow to inf.
static float value(int rank, int call, int64_t i) {
    uint64_t h = (uint64_t)rank * 1000003u + (uint64_t)call * 7919u + (uint64_t)i * 2654435761u + 1;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    if (h % 97 == 0) return 40000.0f;
    int mant = (int)(h & 0xFFFFFF) - 0x800000;
    int ex = (int)((h >> 24) % 24) - 40;
    return ldexpf((float)mant, ex);
}

static void fill(void* host, rt_dtype dt, int64_t n, int rank, int call) {
    for (int64_t i = 0; i < n; i++) rt_store_f32(host, dt, (size_t)i, value(rank, call, i));
}

// ---- one rank ---------------------------------------------------------------------------

typedef struct rank_io {
    run_ctx* c;
    rt_comm* comm;
    int r, n, call;
    cudaStream_t st;
    void *send, *recv, *host, *stage;
} rank_io;

static void sleep_host_fn(void* p) {
    (void)p;
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
}

// Before a collective: on the GPU the rank whose turn it is holds its stream back 2 ms.
static void before(rank_io* io) {
    io->call++;
    if (io->c->gpu && io->call % io->n == io->r) CK_CUDA(io->c, cudaLaunchHostFunc(io->st, sleep_host_fn, NULL));
}

// After a collective: overwrite buf (an input) at once, on the stream.
static void clobber(rank_io* io, void* buf, size_t bytes) {
    if (io->c->gpu) CK_CUDA(io->c, cudaMemsetAsync(buf, 0x7F, bytes, io->st));
    else memset(buf, 0x7F, bytes);
}

// Writes a collective's input. On the GPU the data lands late, on the stream (a sleeping
// host function, then a copy from a staging buffer), so a peer that does not wait for
// this rank's READY event reads stale data.
static void put(rank_io* io, void* dev, rt_dtype dt, int64_t n, int call) {
    size_t bytes = (size_t)n * rt_dtype_size(dt);
    fill(io->host, dt, n, io->r, call);
    CK_RT(io->c, io->comm, rt_comm_sync(io->comm, io->st));
    if (!io->c->gpu) {
        CK_RT(io->c, io->comm, rt_comm_buffer_write(io->comm, dev, io->host, bytes));
        return;
    }
    CK_RT(io->c, io->comm, rt_comm_buffer_write(io->comm, io->stage, io->host, bytes));
    CK_CUDA(io->c, cudaLaunchHostFunc(io->st, sleep_host_fn, NULL));
    CK_CUDA(io->c, cudaMemcpyAsync(dev, io->stage, bytes, cudaMemcpyDeviceToDevice, io->st));
}

static void record(rank_io* io, rt_comm* comm, const void* dev, rt_dtype dt, int64_t n) {
    run_ctx* c = io->c;
    size_t bytes = (size_t)n * rt_dtype_size(dt);
    int k = c->nchunks[io->r];
    if (k >= MAXCHUNK || c->len[io->r] + bytes > REC_BYTES) {
        error(c, "record: out of room", 0, NULL);
        return;
    }
    CK_RT(c, comm, rt_comm_sync(comm, io->st));
    CK_RT(c, comm, rt_comm_buffer_read(comm, c->rec[io->r] + c->len[io->r], dev, bytes));
    c->chunks[io->r][k] = (chunk){dt, c->len[io->r], (size_t)n};
    c->nchunks[io->r] = k + 1;
    c->len[io->r] += bytes;
}

static void one_dtype(rank_io* io, rt_dtype dt) {
    rt_comm* comm = io->comm;
    run_ctx* c = io->c;
    int r = io->r, n = io->n;
    size_t es = rt_dtype_size(dt);
    char* recv = io->recv;
    rt_redop ops[3] = {rt_red_sum(), rt_red_avg(), rt_red_premul_sum(0.3)};
    // all-gather, out of place and in place
    put(io, io->send, dt, CNT, 1);
    before(io);
    CK_RT(c, comm, rt_comm_all_gather(comm, io->send, recv, CNT, dt, io->st));
    clobber(io, io->send, CNT * es);
    record(io, comm, recv, dt, (int64_t)n * CNT);
    put(io, recv + (size_t)r * CNT * es, dt, CNT, 2);
    before(io);
    CK_RT(c, comm, rt_comm_all_gather(comm, recv + (size_t)r * CNT * es, recv, CNT, dt, io->st));
    record(io, comm, recv, dt, (int64_t)n * CNT);
    for (int o = 0; o < 3; o++) {
        // reduce-scatter, out of place and in place (the whole buffer is recorded: the
        // other blocks must be untouched)
        put(io, io->send, dt, (int64_t)n * CNT, 10 + o);
        before(io);
        CK_RT(c, comm, rt_comm_reduce_scatter(comm, io->send, recv, CNT, dt, ops[o], io->st));
        clobber(io, io->send, (size_t)n * CNT * es);
        record(io, comm, recv, dt, CNT);
        put(io, recv, dt, (int64_t)n * CNT, 20 + o);
        before(io);
        CK_RT(c, comm, rt_comm_reduce_scatter(comm, recv, recv + (size_t)r * CNT * es, CNT, dt, ops[o], io->st));
        record(io, comm, recv, dt, (int64_t)n * CNT);
        // all-reduce, out of place and in place
        put(io, io->send, dt, CNT, 30 + o);
        before(io);
        CK_RT(c, comm, rt_comm_all_reduce(comm, io->send, recv, CNT, dt, ops[o], io->st));
        clobber(io, io->send, CNT * es);
        record(io, comm, recv, dt, CNT);
        put(io, recv, dt, CNT, 40 + o);
        before(io);
        CK_RT(c, comm, rt_comm_all_reduce(comm, recv, recv, CNT, dt, ops[o], io->st));
        record(io, comm, recv, dt, CNT);
    }
    // broadcast from the last rank, which passes one buffer for both
    put(io, recv, dt, CNT, 50);
    before(io);
    CK_RT(c, comm, rt_comm_broadcast(comm, recv, recv, CNT, dt, n - 1, io->st));
    record(io, comm, recv, dt, CNT);
    // a chain with no host sync: all-gather -> reduce-scatter of its output -> all-reduce
    put(io, io->send, dt, CNT, 60);
    before(io);
    CK_RT(c, comm, rt_comm_all_gather(comm, io->send, recv, CNT, dt, io->st));
    before(io);
    CK_RT(c, comm, rt_comm_reduce_scatter(comm, recv, io->send, CNT, dt, rt_red_avg(), io->st));
    before(io);
    CK_RT(c, comm, rt_comm_all_reduce(comm, io->send, io->send, CNT, dt, rt_red_premul_sum(0.7), io->st));
    record(io, comm, io->send, dt, CNT);
}

static void splits(rank_io* io) {
    rt_comm* comm = io->comm;
    run_ctx* c = io->c;
    int r = io->r;
    // Odd/even ranks, keys reversed: the sub-rank order is the reverse of the world's.
    rt_comm* sub = NULL;
    CK_RT(c, comm, rt_comm_split(comm, r % 2, -r, &sub));
    if (!sub) {
        error(c, "split gave no communicator", 0, NULL);
        return;
    }
    int m = rt_comm_size(sub);
    put(io, io->send, RT_F32, CNT, 70);
    before(io);
    CK_RT(c, sub, rt_comm_all_gather(sub, io->send, io->recv, CNT, RT_F32, io->st));
    record(io, sub, io->recv, RT_F32, (int64_t)m * CNT);
    put(io, io->send, RT_BF16, CNT, 71);
    before(io);
    CK_RT(c, sub, rt_comm_all_reduce(sub, io->send, io->recv, CNT, RT_BF16, rt_red_avg(), io->st));
    record(io, sub, io->recv, RT_BF16, CNT);
    rt_comm_free(sub);
    // Rank 0 joins no group; the rest all-gather.
    sub = NULL;
    CK_RT(c, comm, rt_comm_split(comm, r == 0 ? RT_COMM_SPLIT_NONE : 3, r, &sub));
    if ((r == 0) != (sub == NULL)) error(c, "RT_COMM_SPLIT_NONE", 0, "wrong handle");
    if (sub) {
        put(io, io->send, RT_F16, CNT, 80);
        CK_RT(c, sub, rt_comm_all_gather(sub, io->send, io->recv, CNT, RT_F16, io->st));
        record(io, sub, io->recv, RT_F16, (int64_t)rt_comm_size(sub) * CNT);
        rt_comm_free(sub);
    }
}

static void rank_fn(rt_comm* comm, void* arg) {
    run_ctx* c = arg;
    rank_io io = {.c = c, .comm = comm, .r = rt_comm_rank(comm), .n = rt_comm_size(comm)};
    if (c->gpu && !c->legacy) CK_CUDA(c, cudaStreamCreateWithFlags(&io.st, cudaStreamNonBlocking));
    size_t bytes = (size_t)io.n * CNT * sizeof(float);
    io.send = rt_comm_buffer_alloc(comm, bytes);
    io.recv = rt_comm_buffer_alloc(comm, bytes);
    io.stage = rt_comm_buffer_alloc(comm, bytes);
    io.host = malloc(bytes);
    if (!io.send || !io.recv || !io.stage || !io.host) {
        error(c, "allocation", 0, rt_comm_last_error(comm));
    } else {
        if (c->gpu && strcmp(rt_comm_backend(comm), "cuda_local") != 0)
            error(c, "rt_comm_backend", 0, rt_comm_backend(comm));
        // A zero-count call is a no-op that still meets the peers.
        CK_RT(c, comm, rt_comm_all_gather(comm, io.send, io.recv, 0, RT_F32, io.st));
        rt_dtype dts[3] = {RT_F32, RT_BF16, RT_F16};
        for (int d = 0; d < 3; d++) one_dtype(&io, dts[d]);
        splits(&io);
        // rt_comm_all_true on the rank's stream: flag i < n is 0 on rank i only, flag n is
        // non-zero everywhere
        int f[MAXW + 1];
        for (int i = 0; i <= io.n; i++) f[i] = i == io.r ? 0 : 2 + i;
        CK_RT(c, comm, rt_comm_all_true(comm, f, io.n + 1, io.st));
        for (int i = 0; i <= io.n; i++)
            if (f[i] != (i == io.n)) error(c, "rt_comm_all_true", f[i], "wrong flag");
        CK_RT(c, comm, rt_comm_barrier(comm, io.st));
    }
    rt_comm_buffer_free(comm, io.send);
    rt_comm_buffer_free(comm, io.recv);
    rt_comm_buffer_free(comm, io.stage);
    free(io.host);
    if (io.st) CK_CUDA(c, cudaStreamDestroy(io.st));
}

// ---- comparison -------------------------------------------------------------------------

static run_ctx* ctx_new(int gpu, int legacy) {
    run_ctx* c = calloc(1, sizeof *c);
    for (int r = 0; r < MAXW; r++) c->rec[r] = malloc(REC_BYTES);
    c->gpu = gpu;
    c->legacy = legacy;
    return c;
}

static void ctx_free(run_ctx* c) {
    for (int r = 0; r < MAXW; r++) free(c->rec[r]);
    free(c);
}

static void compare(int world, int legacy, int device) {
    run_ctx* ref = ctx_new(0, 0);
    run_ctx* got = ctx_new(1, legacy);
    int rc_ref = rt_threads_run(world, rank_fn, ref);
    int rc = rt_cuda_local_run(world, device, rank_fn, got);
    long elems = 0, diff = 0, chunks = 0;
    double maxd = 0;
    int shape_ok = 1;
    for (int r = 0; r < world; r++) {
        if (ref->nchunks[r] != got->nchunks[r] || ref->len[r] != got->len[r]) shape_ok = 0;
        int k = ref->nchunks[r] < got->nchunks[r] ? ref->nchunks[r] : got->nchunks[r];
        for (int j = 0; j < k; j++) {
            chunk a = ref->chunks[r][j], b = got->chunks[r][j];
            if (a.dt != b.dt || a.n != b.n) {
                shape_ok = 0;
                continue;
            }
            chunks++;
            size_t es = rt_dtype_size(a.dt);
            for (size_t i = 0; i < a.n; i++) {
                elems++;
                const unsigned char *pa = ref->rec[r] + a.off + i * es, *pb = got->rec[r] + b.off + i * es;
                if (memcmp(pa, pb, es) == 0) continue;
                diff++;
                double x = rt_load_f32(pa, a.dt, 0), y = rt_load_f32(pb, a.dt, 0);
                double d = isfinite(x) && isfinite(y) ? fabs(x - y) : INFINITY;
                if (d > maxd) maxd = d;
            }
        }
    }
    CHECK(rc_ref == 0 && rc == 0 && ref->errors == 0 && got->errors == 0 && shape_ok && diff == 0 && elems > 0,
          "world %d (%s stream): %ld elements in %ld outputs compared with the threads backend bit for bit: "
          "%ld differ (max |diff| %g); launchers %d/%d, errors %d/%d%s%s%s%s%s",
          world, legacy ? "legacy default" : "non-blocking", elems, chunks, diff, maxd, rc_ref, rc,
          (int)ref->errors, (int)got->errors, shape_ok ? "" : ", DIFFERENT SHAPES",
          ref->errors ? "; threads: " : "", ref->err, got->errors ? "; cuda_local: " : "", got->err);
    ctx_free(ref);
    ctx_free(got);
}

// ---- failures ---------------------------------------------------------------------------

enum { F_LATE, F_EXITS, F_ABORT, F_MISMATCH, F_CAPTURE };

typedef struct fail_ctx {
    int scenario;
    int status[MAXW], later[MAXW], sync_status;
    char msg[MAXW][512];
    double elapsed[MAXW];
} fail_ctx;

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fail_fn(rt_comm* comm, void* arg) {
    fail_ctx* f = arg;
    int r = rt_comm_rank(comm);
    rt_comm_set_timeout_ms(comm, f->scenario == F_EXITS ? 5000 : 300);
    void* buf = rt_comm_buffer_alloc(comm, 64 * MAXW * sizeof(float));
    cudaStream_t st = NULL;
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    double t0 = seconds();
    int s = 0;
    switch (f->scenario) {
        case F_LATE:  // rank 1 comes 1.5 s late
            if (r == 1) {
                struct timespec ts = {1, 500000000};
                nanosleep(&ts, NULL);
            }
            s = rt_comm_all_gather(comm, buf, buf, 4, RT_F32, st);
            break;
        case F_EXITS:
            if (r == 3) goto out;
            s = rt_comm_barrier(comm, st);
            break;
        case F_ABORT:
            if (r == 0) s = rt_comm_abort(comm, "rank 0 found a NaN loss");
            else s = rt_comm_all_reduce(comm, buf, buf, 16, RT_F32, rt_red_sum(), st);
            break;
        case F_MISMATCH:
            s = rt_comm_all_gather(comm, buf, buf, r == 1 ? 5 : 4, RT_F32, st);
            break;
        case F_CAPTURE: {
            cudaGraph_t graph = NULL;
            if (cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) break;
            s = rt_comm_all_gather(comm, buf, buf, 4, RT_F32, st);
            snprintf(f->msg[r], sizeof f->msg[r], "%s", rt_comm_last_error(comm));
            f->sync_status = rt_comm_sync(comm, st);
            if (cudaStreamEndCapture(st, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
            break;
        }
    }
    f->elapsed[r] = seconds() - t0;
    f->status[r] = s;
    if (!f->msg[r][0]) snprintf(f->msg[r], sizeof f->msg[r], "%s", rt_comm_last_error(comm));
    f->later[r] = rt_comm_barrier(comm, st);
out:
    rt_comm_buffer_free(comm, buf);
    if (st) cudaStreamDestroy(st);
}

static void expect(const char* what, int scenario, int world, int want, const char* needle1,
                   const char* needle2, int first, int last, double max_s) {
    static fail_ctx f;
    memset(&f, 0, sizeof f);
    f.scenario = scenario;
    int rc = rt_cuda_local_run(world, 0, fail_fn, &f);
    int ok = rc == 1;
    for (int r = first; r <= last; r++) {
        ok &= f.status[r] == want && f.later[r] == want && f.elapsed[r] < max_s;
        ok &= strstr(f.msg[r], needle1) && (!needle2 || strstr(f.msg[r], needle2));
    }
    CHECK(ok, "%s (world %d): launcher %d, rank %d status %s (want %s), later %s, %.2f s: \"%s\"", what,
          world, rc, first, rt_status_name(f.status[first]), rt_status_name(want),
          rt_status_name(f.later[first]), f.elapsed[first], f.msg[first]);
    if (scenario == F_CAPTURE)
        CHECK(f.sync_status == RT_ERR_ARG, "rt_comm_sync on a capturing stream: %s (want bad argument)",
              rt_status_name(f.sync_status));
}

static void never_called(rt_comm* comm, void* arg) {
    (void)comm;
    (void)arg;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("SKIP cuda_local: no GPU\n");
        return check_summary();
    }
    int worlds[4] = {1, 2, 4, 8};
    for (int i = 0; i < 4; i++) compare(worlds[i], 0, 0);
    compare(2, 1, 0);
    compare(4, 1, 0);

    expect("rank 1 joins 1.2 s after the 300 ms timeout", F_LATE, 2, RT_ERR_TIMEOUT, "cuda_local",
           "timed out after 3", 0, 0, 1.2);
    expect("a rank that returns without joining", F_EXITS, 4, RT_ERR_TIMEOUT,
           "ranks 3 returned from their function", NULL, 0, 2, 1.0);
    expect("rt_comm_abort by rank 0", F_ABORT, 4, RT_ERR_ABORTED, "rank 0 aborted: rank 0 found a NaN loss",
           NULL, 0, 3, 1.0);
    expect("mismatched count", F_MISMATCH, 2, RT_ERR_MISMATCH, "count mismatch: rank 0 has 4 elements, rank 1 has 5",
           NULL, 0, 1, 1.0);
    expect("all_gather on a capturing stream", F_CAPTURE, 1, RT_ERR_ARG, "CUDA graph", "all_gather", 0, 0, 1.0);

    CHECK(rt_cuda_local_run(0, 0, never_called, NULL) == 2, "world 0 is rejected (status 2)");
    CHECK(rt_cuda_local_run(129, 0, never_called, NULL) == 2, "world 129 is rejected (status 2)");
    CHECK(rt_cuda_local_run(2, -1, never_called, NULL) == 2, "device -1 is rejected (status 2)");
    CHECK(rt_cuda_local_run(2, ndev, never_called, NULL) == 1, "device %d of %d fails cleanly (status 1)", ndev, ndev);
    CHECK(rt_cuda_local_run(2, 0, NULL, NULL) == 2, "a NULL rank function is rejected (status 2)");
    return check_summary();
}
