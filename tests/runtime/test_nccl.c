// The NCCL backend of rt_comm: links against NCCL/cudart everywhere; without a GPU it
// checks that the launcher fails with a clear error instead of crashing; with GPUs it runs
// the collectives on one rank per visible GPU (up to 8) and compares with references, and
// checks the timeouts: a rank that never joins communicator creation (one GPU is enough)
// or a collective (two GPUs) is reported, the communicator aborted, nothing hangs; and
// CUDA graph capture: a collective captured on every rank replays correctly, while
// rt_comm_sync / rt_comm_barrier on a capturing stream return RT_ERR_ARG and leave the
// communicator usable.
#include <cuda_runtime.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "rt_comm.h"

// ---- on GPUs ----------------------------------------------------------------------------

typedef struct ctx {
    _Atomic long wrong, compared, errors;
} ctx;

static float value(int r, int64_t i) { return (float)((r * 5 + i * 3) % 13 - 6) * 0.25f; }

static void rank_fn(rt_comm* comm, void* arg) {
    ctx* c = arg;
    int r = rt_comm_rank(comm), n = rt_comm_size(comm);
    const int64_t cnt = 4099;
    float* host = malloc((size_t)(cnt * n) * sizeof(float));
    float* out = malloc((size_t)(cnt * n) * sizeof(float));
    void* dsend = rt_comm_buffer_alloc(comm, (size_t)(cnt * n) * sizeof(float));
    void* drecv = rt_comm_buffer_alloc(comm, (size_t)(cnt * n) * sizeof(float));
    if (!host || !out || !dsend || !drecv) {
        atomic_fetch_add(&c->errors, 1);
        return;
    }
    long bad = 0;
    // all-gather fp32
    for (int64_t i = 0; i < cnt; i++) host[i] = value(r, i);
    int st = rt_comm_buffer_write(comm, dsend, host, (size_t)cnt * sizeof(float));
    st |= rt_comm_all_gather(comm, dsend, drecv, cnt, RT_F32, NULL);
    st |= rt_comm_sync(comm, NULL);
    st |= rt_comm_buffer_read(comm, out, drecv, (size_t)(cnt * n) * sizeof(float));
    for (int s = 0; s < n; s++)
        for (int64_t i = 0; i < cnt; i++) bad += out[s * cnt + i] != value(s, i);
    // reduce-scatter fp32: sum, avg, premul 0.5
    rt_redop ops[3] = {rt_red_sum(), rt_red_avg(), rt_red_premul_sum(0.5)};
    for (int o = 0; o < 3; o++) {
        for (int64_t i = 0; i < cnt * n; i++) host[i] = value(r, i);
        st |= rt_comm_buffer_write(comm, dsend, host, (size_t)(cnt * n) * sizeof(float));
        st |= rt_comm_reduce_scatter(comm, dsend, drecv, cnt, RT_F32, ops[o], NULL);
        st |= rt_comm_sync(comm, NULL);
        st |= rt_comm_buffer_read(comm, out, drecv, (size_t)cnt * sizeof(float));
        for (int64_t i = 0; i < cnt; i++) {
            double want = 0;
            for (int s = 0; s < n; s++) want += value(s, r * cnt + i);
            if (o == 1) want /= n;
            if (o == 2) want *= 0.5;
            bad += fabs(out[i] - want) > 1e-5;
        }
    }
    // split into odd/even ranks and all-reduce there
    rt_comm* sub = NULL;
    st |= rt_comm_split(comm, r % 2, r, &sub);
    if (!sub) st |= 1;  // every rank has a color: each must get a communicator
    if (sub) {
        host[0] = 1.0f;
        st |= rt_comm_buffer_write(sub, dsend, host, sizeof(float));
        st |= rt_comm_all_reduce(sub, dsend, drecv, 1, RT_F32, rt_red_sum(), NULL);
        st |= rt_comm_buffer_read(sub, out, drecv, sizeof(float));
        bad += out[0] != (float)rt_comm_size(sub);
        rt_comm_free(sub);
    }
    st |= rt_comm_barrier(comm, NULL);
    if (st) atomic_fetch_add(&c->errors, 1);
    atomic_fetch_add(&c->wrong, bad);
    atomic_fetch_add(&c->compared, cnt * n + 3 * cnt + 1);
    rt_comm_buffer_free(comm, dsend);
    rt_comm_buffer_free(comm, drecv);
    free(host);
    free(out);
}

// ---- timeouts (on GPUs) -----------------------------------------------------------------

// World 2 where rank 1 skips the second all-gather: rank 0 must time out (after the
// first one, so the connections exist and the wait is on the GPU side), not hang.
typedef struct tctx {
    int st0;          // rank 0's status from the collective + sync
    char msg[512];    // rank 0's last error
    double waited_s;  // rank 0's time in the collective + sync
} tctx;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void skip_rank_fn(rt_comm* comm, void* arg) {
    tctx* t = arg;
    int r = rt_comm_rank(comm);
    rt_comm_set_timeout_ms(comm, 1500);
    void* buf = rt_comm_buffer_alloc(comm, 1 << 20);
    if (!buf) return;
    rt_comm_all_gather(comm, (char*)buf + r * (1 << 19), buf, (1 << 19) / 4, RT_F32, NULL);
    rt_comm_sync(comm, NULL);
    if (r == 0) {
        double t0 = now_s();
        int st = rt_comm_all_gather(comm, buf, buf, (1 << 19) / 4, RT_F32, NULL);
        if (!st) st = rt_comm_sync(comm, NULL);
        t->waited_s = now_s() - t0;
        t->st0 = st;
        snprintf(t->msg, sizeof t->msg, "%s", rt_comm_last_error(comm));
    }
    rt_comm_buffer_free(comm, buf);
}

// ---- CUDA graph capture (on GPUs) --------------------------------------------------------

typedef struct gctx {
    _Atomic long wrong, errors;
    int sync_st[8], barrier_st[8];
} gctx;

// Every rank captures an all-gather into a graph (thread-local mode: the ranks are threads
// of one process), checks that rt_comm_sync refuses the capturing stream, then replays the
// graph twice, clearing the output between the replays; then a barrier on a capturing
// stream is refused and one outside the capture works.
static void capture_fn(rt_comm* comm, void* arg) {
    gctx* g = arg;
    int r = rt_comm_rank(comm), n = rt_comm_size(comm);
    const int64_t cnt = 1031;
    float host[1031 * 8];
    cudaStream_t st = NULL;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    void* send = rt_comm_buffer_alloc(comm, (size_t)cnt * sizeof(float));
    void* recv = rt_comm_buffer_alloc(comm, (size_t)(cnt * n) * sizeof(float));
    long bad = 0, err = 0;
    err |= !send || !recv || cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess;
    for (int64_t i = 0; i < cnt && !err; i++) host[i] = value(r, i);
    if (!err) err |= rt_comm_buffer_write(comm, send, host, (size_t)cnt * sizeof(float)) != 0;
    if (!err) err |= cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) != cudaSuccess;
    if (!err) {
        err |= rt_comm_all_gather(comm, send, recv, cnt, RT_F32, st) != 0;
        g->sync_st[r] = rt_comm_sync(comm, st);
        err |= cudaStreamEndCapture(st, &graph) != cudaSuccess;
    }
    if (!err) err |= cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess;
    for (int rep = 0; rep < 2 && !err; rep++) {
        err |= cudaMemsetAsync(recv, 0, (size_t)(cnt * n) * sizeof(float), st) != cudaSuccess;
        err |= cudaGraphLaunch(exec, st) != cudaSuccess;
        err |= rt_comm_sync(comm, st) != 0;
        err |= rt_comm_buffer_read(comm, host, recv, (size_t)(cnt * n) * sizeof(float)) != 0;
        for (int s = 0; s < n && !err; s++)
            for (int64_t i = 0; i < cnt; i++) bad += host[s * cnt + i] != value(s, i);
    }
    // A barrier on a capturing stream is refused; the communicator stays usable.
    if (!err && cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
        cudaGraph_t g2 = NULL;
        g->barrier_st[r] = rt_comm_barrier(comm, st);
        if (cudaStreamEndCapture(st, &g2) == cudaSuccess && g2) cudaGraphDestroy(g2);
        err |= rt_comm_barrier(comm, st) != 0;
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (st) cudaStreamDestroy(st);
    rt_comm_buffer_free(comm, send);
    rt_comm_buffer_free(comm, recv);
    atomic_fetch_add(&g->wrong, bad);
    atomic_fetch_add(&g->errors, err);
}

static void never_called(rt_comm* comm, void* arg) {
    (void)comm;
    (void)arg;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    char id[128];
    CHECK(rt_nccl_get_unique_id(id, 8) == RT_ERR_ARG, "a too-small unique-id buffer is rejected");
    CHECK(rt_nccl_run(0, never_called, NULL) == 2, "rt_nccl_run with world 0 is rejected (status 2)");
    int ndev = rt_nccl_device_count();
    if (ndev <= 0) {
        int rc = rt_nccl_run(2, never_called, NULL);
        CHECK(rc == 1, "no usable GPU (device count %d): rt_nccl_run(2) fails cleanly with status %d", ndev, rc);
        return check_summary();
    }
    int world = ndev > 8 ? 8 : ndev;
    ctx c;
    memset(&c, 0, sizeof c);
    int rc = rt_nccl_run(world, rank_fn, &c);
    CHECK(rc == 0 && c.errors == 0 && c.wrong == 0,
          "NCCL world %d: all_gather, reduce_scatter sum/avg/premul, split + all_reduce, barrier: %ld elements "
          "compared, %ld wrong, %ld errors", world, (long)c.compared, (long)c.wrong, (long)c.errors);
    CHECK(rt_nccl_run(ndev + 1, never_called, NULL) == 1, "asking for %d ranks on %d GPUs fails cleanly", ndev + 1, ndev);

    static gctx g;
    rc = rt_nccl_run(world, capture_fn, &g);
    int sync_ok = 1, barrier_ok = 1;
    for (int r = 0; r < world; r++) {
        sync_ok &= g.sync_st[r] == RT_ERR_ARG;
        barrier_ok &= g.barrier_st[r] == RT_ERR_ARG;
    }
    CHECK(g.errors == 0 && g.wrong == 0 && sync_ok,
          "NCCL world %d: all_gather captured into a CUDA graph, replayed twice: %ld wrong, %ld errors; "
          "rt_comm_sync on the capturing stream: %s", world, (long)g.wrong, (long)g.errors,
          sync_ok ? "bad argument on every rank" : "WRONG");
    CHECK(barrier_ok && rc == 0, "rt_comm_barrier on a capturing stream: %s, then a barrier outside works; run status %d",
          barrier_ok ? "bad argument on every rank" : "WRONG", rc);

    // Communicator creation where rank 1 never comes (rank 0 alone, on device 0).
    setenv("RT_COMM_TIMEOUT_MS", "1500", 1);
    rt_comm* lonely = NULL;
    double t0 = now_s();
    int st = rt_nccl_get_unique_id(id, sizeof id);
    if (!st) st = rt_nccl_comm_init(2, id, sizeof id, 0, 0, &lonely);
    double waited = now_s() - t0;
    CHECK(st == RT_ERR_TIMEOUT && !lonely && waited >= 1.4 && waited < 30,
          "world 2 init without rank 1: %s after %.1f s (want timeout after RT_COMM_TIMEOUT_MS=1500)",
          rt_status_name(st), waited);
    unsetenv("RT_COMM_TIMEOUT_MS");
    if (lonely) rt_comm_free(lonely);

    if (ndev >= 2) {
        tctx t;
        memset(&t, 0, sizeof t);
        rc = rt_nccl_run(2, skip_rank_fn, &t);
        CHECK(rc == 1 && t.st0 == RT_ERR_TIMEOUT && strstr(t.msg, "all_gather") &&
                  strstr(t.msg, "'world'") && strstr(t.msg, "never joined") && t.waited_s >= 1.4 &&
                  t.waited_s < 30,
              "rank 1 skips an all_gather: rank 0 gets %s after %.1f s, run status %d: %s",
              rt_status_name(t.st0), t.waited_s, rc, t.msg);
    } else {
        printf("SKIP collective timeout: needs 2 GPUs, %d visible\n", ndev);
    }
    return check_summary();
}
