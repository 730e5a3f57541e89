// Tests of the threads backend of rt_comm: all-gather, reduce-scatter, all-reduce,
// broadcast, barrier and split at several world sizes up to 128, every dtype, in-place
// and out-of-place, against references computed the documented way (fp32 accumulation in
// rank order, one rounding). Ranks count mismatches into shared counters; the main thread
// CHECKs them after rt_threads_run returns (check.h is not thread-safe).
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "rt_comm.h"

// ---- shared state -----------------------------------------------------------------------

typedef struct ctx {
    int world;
    _Atomic long bad;       // mismatching elements / wrong facts, summed over ranks
    _Atomic long checked;   // elements compared
    _Atomic int errors;     // non-zero statuses returned
    _Atomic int counter;    // barrier test
    int64_t count;          // elements per rank block
} ctx;

// Exactly representable in bf16 and fp16: multiples of 0.25 in [-2, 2].
static float value(int rank, int64_t i) { return (float)((rank * 31 + i * 7) % 17 - 8) * 0.25f; }

static void fill(void* buf, rt_dtype dt, int rank, int64_t base, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (dt == RT_I64) ((int64_t*)buf)[i] = (int64_t)rank * 1000003 + base + i;
        else if (dt == RT_I32) ((int32_t*)buf)[i] = rank * 100003 + (int32_t)(base + i);
        else rt_store_f32(buf, dt, (size_t)i, value(rank, base + i));
    }
}

static int same_elem(const void* a, const void* b, rt_dtype dt, int64_t i) {
    size_t es = rt_dtype_size(dt);
    return memcmp((const char*)a + i * es, (const char*)b + i * es, es) == 0;
}

static void note(ctx* c, int st) {
    if (st) atomic_fetch_add(&c->errors, 1);
}

// ---- all-gather -------------------------------------------------------------------------

static void rank_all_gather(rt_comm* comm, void* arg) {
    ctx* c = arg;
    int r = rt_comm_rank(comm), n = rt_comm_size(comm);
    rt_dtype dts[] = {RT_F32, RT_BF16, RT_F16, RT_I32, RT_I64};
    for (int k = 0; k < 5; k++) {
        rt_dtype dt = dts[k];
        size_t es = rt_dtype_size(dt);
        int64_t cnt = c->count;
        char* send = malloc((size_t)cnt * es + 1);
        char* recv = malloc((size_t)(cnt * n) * es + 1);
        char* want = malloc((size_t)(cnt * n) * es + 1);
        fill(send, dt, r, 0, cnt);
        for (int s = 0; s < n; s++) fill(want + (size_t)(s * cnt) * es, dt, s, 0, cnt);
        for (int inplace = 0; inplace < 2; inplace++) {
            memset(recv, 0xAB, (size_t)(cnt * n) * es);
            const void* in = send;
            if (inplace) {
                memcpy(recv + (size_t)(r * cnt) * es, send, (size_t)cnt * es);
                in = recv + (size_t)(r * cnt) * es;
            }
            note(c, rt_comm_all_gather(comm, in, recv, cnt, dt, NULL));
            long bad = 0;
            for (int64_t i = 0; i < cnt * n; i++) bad += !same_elem(recv, want, dt, i);
            atomic_fetch_add(&c->bad, bad);
            atomic_fetch_add(&c->checked, cnt * n);
        }
        free(send);
        free(recv);
        free(want);
    }
}

// ---- reductions -------------------------------------------------------------------------

// Reference: fp32 sum in rank order of value(s, i) (times scale if used), rounded once.
static void reference(void* out, rt_dtype dt, int n, int64_t base, int64_t cnt, rt_redop op) {
    int use = op.kind != RT_RED_SUM;
    float scale = op.kind == RT_RED_AVG ? (float)(1.0 / n) : (float)op.factor;
    for (int64_t i = 0; i < cnt; i++) {
        float acc = 0;
        for (int s = 0; s < n; s++) {
            float v = rt_load_f32((float[]){value(s, base + i)}, RT_F32, 0);
            char tmp[4];
            rt_store_f32(tmp, dt, 0, v);  // the input as stored in dt (exact here)
            v = rt_load_f32(tmp, dt, 0);
            float term = use ? v * scale : v;
            acc = s == 0 ? term : acc + term;
        }
        rt_store_f32(out, dt, (size_t)i, acc);
    }
}

static void rank_reductions(rt_comm* comm, void* arg) {
    ctx* c = arg;
    int r = rt_comm_rank(comm), n = rt_comm_size(comm);
    rt_dtype dts[] = {RT_F32, RT_BF16, RT_F16};
    rt_redop ops[] = {rt_red_sum(), rt_red_avg(), rt_red_premul_sum(0.3)};
    for (int k = 0; k < 3; k++) {
        for (int o = 0; o < 3; o++) {
            rt_dtype dt = dts[k];
            size_t es = rt_dtype_size(dt);
            int64_t cnt = c->count;
            char* send = malloc((size_t)(cnt * n) * es + 1);
            char* recv = malloc((size_t)(cnt * n) * es + 1);
            char* want = malloc((size_t)(cnt * n) * es + 1);
            // reduce-scatter, out of place and in place
            for (int inplace = 0; inplace < 2; inplace++) {
                fill(send, dt, r, 0, cnt * n);
                void* out = inplace ? send + (size_t)(r * cnt) * es : recv;
                note(c, rt_comm_reduce_scatter(comm, send, out, cnt, dt, ops[o], NULL));
                reference(want, dt, n, r * cnt, cnt, ops[o]);
                long bad = 0;
                for (int64_t i = 0; i < cnt; i++) bad += !same_elem(out, want, dt, i);
                atomic_fetch_add(&c->bad, bad);
                atomic_fetch_add(&c->checked, cnt);
                // Nobody may still read `send` when we refill it: the collective's second
                // barrier guarantees that.
            }
            // all-reduce (ops sum/avg/premul), out of place and in place
            int64_t total = cnt * n + 3;  // not a multiple of n: uneven slices
            free(send);
            free(recv);
            free(want);
            send = malloc((size_t)total * es);
            recv = malloc((size_t)total * es);
            want = malloc((size_t)total * es);
            for (int inplace = 0; inplace < 2; inplace++) {
                fill(send, dt, r, 0, total);
                void* out = inplace ? send : recv;
                note(c, rt_comm_all_reduce(comm, send, out, total, dt, ops[o], NULL));
                reference(want, dt, n, 0, total, ops[o]);
                long bad = 0;
                for (int64_t i = 0; i < total; i++) bad += !same_elem(out, want, dt, i);
                atomic_fetch_add(&c->bad, bad);
                atomic_fetch_add(&c->checked, total);
            }
            free(send);
            free(recv);
            free(want);
        }
    }
}

// ---- broadcast, barrier, zero counts ----------------------------------------------------

static void rank_misc(rt_comm* comm, void* arg) {
    ctx* c = arg;
    int r = rt_comm_rank(comm), n = rt_comm_size(comm);
    int root = n > 2 ? 2 : n - 1;
    int64_t cnt = c->count + 5;
    float* buf = malloc((size_t)cnt * sizeof(float));
    float* want = malloc((size_t)cnt * sizeof(float));
    fill(buf, RT_F32, r, 0, cnt);
    fill(want, RT_F32, root, 0, cnt);
    note(c, rt_comm_broadcast(comm, r == root ? buf : NULL, buf, cnt, RT_F32, root, NULL));
    atomic_fetch_add(&c->bad, memcmp(buf, want, (size_t)cnt * sizeof(float)) != 0);
    // Barrier: everyone increments before it, so after it everyone sees all increments.
    for (int round = 1; round <= 3; round++) {
        atomic_fetch_add(&c->counter, 1);
        note(c, rt_comm_barrier(comm, NULL));
        if (atomic_load(&c->counter) < round * n) atomic_fetch_add(&c->bad, 1);
        note(c, rt_comm_barrier(comm, NULL));
    }
    // Zero-count collectives are legal no-ops (NULL buffers allowed).
    note(c, rt_comm_all_gather(comm, NULL, NULL, 0, RT_F32, NULL));
    note(c, rt_comm_reduce_scatter(comm, NULL, NULL, 0, RT_BF16, rt_red_avg(), NULL));
    note(c, rt_comm_all_reduce(comm, NULL, NULL, 0, RT_F16, rt_red_sum(), NULL));
    free(buf);
    free(want);
    rt_comm_free(comm);  // a world handle belongs to the launcher: this is a no-op
}

// ---- all_true ---------------------------------------------------------------------------

// Of size + 2 flags, flag i < size is 0 on rank i only, flag size non-zero on every rank
// (values other than 1 among them), flag size + 1 zero on every rank: only flag size comes
// out 1, on every rank.
static void rank_all_true(rt_comm* comm, void* arg) {
    ctx* c = arg;
    int r = rt_comm_rank(comm), n = rt_comm_size(comm);
    const int nf = n + 2;
    int* f = malloc((size_t)nf * sizeof *f);
    for (int i = 0; i < nf; i++) f[i] = i == n + 1 ? 0 : i % (n + 1) != r ? 1 + i : 0;
    note(c, rt_comm_all_true(comm, f, nf, NULL));
    for (int i = 0; i < nf; i++) {
        const int want = i == n;  // flag i < n is 0 on rank i; flag n on none
        atomic_fetch_add(&c->bad, f[i] != want);
        atomic_fetch_add(&c->checked, 1);
    }
    note(c, rt_comm_all_true(comm, NULL, 0, NULL));
    free(f);
}

// ---- split ------------------------------------------------------------------------------

static void rank_split(rt_comm* comm, void* arg) {
    ctx* c = arg;
    int r = rt_comm_rank(comm), n = rt_comm_size(comm);
    // Colors r % 3, keys descending: each sub-group is ordered by decreasing world rank.
    rt_comm* sub = NULL;
    note(c, rt_comm_split(comm, r % 3, -r, &sub));
    if (!sub) {
        atomic_fetch_add(&c->bad, 1);
        return;
    }
    int m = (n - r % 3 + 2) / 3;  // members with this color
    int want_rank = 0;
    for (int q = r + 3; q < n; q += 3) want_rank++;
    if (rt_comm_size(sub) != m || rt_comm_rank(sub) != want_rank) atomic_fetch_add(&c->bad, 1);
    // All-gather the world ranks over the sub-communicator: descending, same color.
    int* got = malloc((size_t)m * sizeof(int));
    note(c, rt_comm_all_gather(sub, &r, got, 1, RT_I32, NULL));
    for (int i = 0; i < m; i++) {
        int want = r % 3 + 3 * (m - 1 - i);
        if (got[i] != want) atomic_fetch_add(&c->bad, 1);
    }
    // Nested split of the sub-communicator, and a rank that joins no group.
    rt_comm* sub2 = NULL;
    int sr = rt_comm_rank(sub);
    note(c, rt_comm_split(sub, sr == 0 ? RT_COMM_SPLIT_NONE : 7, sr, &sub2));
    if (sr == 0 && sub2) atomic_fetch_add(&c->bad, 1);
    if (sr != 0) {
        if (!sub2 || rt_comm_size(sub2) != m - 1 || rt_comm_rank(sub2) != sr - 1) atomic_fetch_add(&c->bad, 1);
        float one = 1.0f, sum = 0.0f;
        note(c, rt_comm_all_reduce(sub2, &one, &sum, 1, RT_F32, rt_red_sum(), NULL));
        if (sum != (float)(m - 1)) atomic_fetch_add(&c->bad, 1);
    }
    rt_comm_free(sub2);
    free(got);
    // The world still works after the splits.
    note(c, rt_comm_barrier(comm, NULL));
    rt_comm_free(sub);
    atomic_fetch_add(&c->checked, 1);
}

// ---- many small collectives at 128 ranks ------------------------------------------------

static void rank_many(rt_comm* comm, void* arg) {
    ctx* c = arg;
    int n = rt_comm_size(comm);
    float x = 1.0f, y = 0.0f;
    for (int i = 0; i < 50; i++) {
        note(c, rt_comm_all_reduce(comm, &x, &y, 1, RT_F32, rt_red_sum(), NULL));
        if (y != (float)n) atomic_fetch_add(&c->bad, 1);
    }
}

// ---- exiting right after the last collective ------------------------------------------

// One barrier in pairs, then return: the last arriver of a pair completes the barrier and
// exits while its peer may still be scanning the group for members that exited without
// arriving. Repeated many times, this caught a peer that read the last arriver's slot
// before it arrived and its exit flag after it left, and failed a barrier that succeeded.
static void rank_exit_after_barrier(rt_comm* comm, void* arg) {
    ctx* c = arg;
    int r = rt_comm_rank(comm);
    rt_comm* pair = NULL;
    note(c, rt_comm_split(comm, r / 2, r, &pair));
    note(c, rt_comm_barrier(pair, NULL));
    rt_comm_free(pair);
}

// ---- driver -----------------------------------------------------------------------------

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void run(const char* what, int world, int64_t count, rt_rank_fn fn) {
    ctx c;
    memset(&c, 0, sizeof c);
    c.world = world;
    c.count = count;
    double t0 = seconds();
    int rc = rt_threads_run(world, fn, &c);
    double dt = seconds() - t0;
    CHECK(rc == 0 && c.errors == 0 && c.bad == 0,
          "%s, world %d, %lld elements/rank: %ld elements compared, %ld wrong, %d error returns, "
          "launcher %d (%.3f s)",
          what, world, (long long)count, (long)c.checked, (long)c.bad, (int)c.errors, rc, dt);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);  // keep PASS lines and stderr messages in order
    int worlds[] = {1, 2, 3, 4, 7};
    for (int w = 0; w < 5; w++) {
        run("all_gather fp32/bf16/fp16/int32/int64 (out-of-place + in-place)", worlds[w], 1003, rank_all_gather);
        run("reduce_scatter + all_reduce sum/avg/premul_sum(0.3) fp32/bf16/fp16", worlds[w], 517, rank_reductions);
        run("broadcast, barrier, zero counts", worlds[w], 100, rank_misc);
        run("split (color r%3, key -r), nested split, SPLIT_NONE", worlds[w], 0, rank_split);
        run("all_true: each flag 1 only where every rank's is non-zero", worlds[w], 0, rank_all_true);
    }
    run("all_gather fp32/bf16/fp16/int32/int64 (out-of-place + in-place)", 128, 33, rank_all_gather);
    run("reduce_scatter + all_reduce sum/avg/premul_sum(0.3) fp32/bf16/fp16", 128, 9, rank_reductions);
    run("broadcast, barrier, zero counts", 128, 10, rank_misc);
    run("split (color r%3, key -r), nested split, SPLIT_NONE", 128, 0, rank_split);
    run("50 all_reduce of one element", 128, 1, rank_many);
    run("50 all_reduce of one element", 1024, 1, rank_many);
    run("large all_gather + reductions (several tiles per rank)", 4, 300000, rank_all_gather);
    ctx c;
    memset(&c, 0, sizeof c);
    int runs = 300, failed_runs = 0;
    for (int i = 0; i < runs; i++) failed_runs += rt_threads_run(64, rank_exit_after_barrier, &c) != 0;
    CHECK(failed_runs == 0 && c.errors == 0,
          "%d runs of 64 ranks that split into pairs, barrier once and return: %d failed, %d error returns",
          runs, failed_runs, (int)c.errors);
    CHECK(rt_threads_run(0, rank_many, NULL) == 2, "rt_threads_run(0, ...) is rejected with status 2");
    CHECK(rt_threads_run(2, NULL, NULL) == 2, "rt_threads_run with a NULL function is rejected");
    return check_summary();
}
