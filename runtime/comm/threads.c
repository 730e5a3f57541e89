// Threads backend of rt_comm.h: ranks are threads of one process and every collective
// goes through the shared rendezvous (rendezvous.c: post descriptor -> barrier A -> check
// agreement -> own slice of the work -> barrier B). Each rank reads its peers' buffers
// directly (one address space) and does its own share: all-gather pulls every block into
// its own output, reduce-scatter reduces its own block from all inputs, all-reduce reduces
// slice r and writes it to every output. So a large collective runs on all cores at once,
// and barrier B keeps every input alive until all readers are done.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reduce.h"
#include "rendezvous.h"

// ---- collectives ------------------------------------------------------------------------

static int t_all_gather(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                        void* stream) {
    (void)stream;
    rdv_handle* h = (rdv_handle*)c;
    rdv_slot d = {.op = OP_ALL_GATHER, .count = count, .dtype = dt, .send = send, .recv = recv};
    int st = rdv_enter(h, &d, "all_gather", CHK_COUNT | CHK_DTYPE);
    if (st) return st;
    rdv_group* g = h->g;
    size_t bytes = (size_t)count * rt_dtype_size(dt);
    // Start at our own block so the ranks' reads spread over different sources.
    for (int k = 0; k < g->size && bytes; k++) {
        int s = (h->idx + k) % g->size;
        char* dst = (char*)recv + (size_t)s * bytes;
        if (g->slots[s].send != dst) memcpy(dst, g->slots[s].send, bytes);
    }
    return rdv_barrier(h, "all_gather");
}

static void red_scale(rt_redop op, int n, int* use_scale, float* scale) {
    *use_scale = op.kind != RT_RED_SUM;
    *scale = op.kind == RT_RED_AVG ? (float)(1.0 / n) : (float)op.factor;
}

static int t_reduce_scatter(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                            rt_redop op, void* stream) {
    (void)stream;
    rdv_handle* h = (rdv_handle*)c;
    rdv_slot d = {.op = OP_REDUCE_SCATTER, .count = count, .dtype = dt, .red = op, .send = send, .recv = recv};
    int st = rdv_enter(h, &d, "reduce_scatter", CHK_COUNT | CHK_DTYPE | CHK_RED);
    if (st) return st;
    rdv_group* g = h->g;
    size_t off = (size_t)h->idx * (size_t)count * rt_dtype_size(dt);
    for (int s = 0; s < g->size; s++) h->srcs[s] = (const char*)g->slots[s].send + off;
    int use_scale;
    float scale;
    red_scale(op, g->size, &use_scale, &scale);
    if (count > 0) rt_reduce_sum(&recv, 1, h->srcs, g->size, (size_t)count, dt, use_scale, scale);
    return rdv_barrier(h, "reduce_scatter");
}

static int t_all_reduce(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                        rt_redop op, void* stream) {
    (void)stream;
    rdv_handle* h = (rdv_handle*)c;
    rdv_slot d = {.op = OP_ALL_REDUCE, .count = count, .dtype = dt, .red = op, .send = send, .recv = recv};
    int st = rdv_enter(h, &d, "all_reduce", CHK_COUNT | CHK_DTYPE | CHK_RED);
    if (st) return st;
    rdv_group* g = h->g;
    int n = g->size;
    // Member r owns elements [r*count/n, (r+1)*count/n): reduces them from every input and
    // writes them to every output.
    int64_t lo = count * h->idx / n, hi = count * (h->idx + 1) / n;
    size_t es = rt_dtype_size(dt);
    for (int s = 0; s < n; s++) {
        h->srcs[s] = (const char*)g->slots[s].send + (size_t)lo * es;
        h->dsts[s] = (char*)g->slots[s].recv + (size_t)lo * es;
    }
    int use_scale;
    float scale;
    red_scale(op, n, &use_scale, &scale);
    if (hi > lo) rt_reduce_sum(h->dsts, n, h->srcs, n, (size_t)(hi - lo), dt, use_scale, scale);
    return rdv_barrier(h, "all_reduce");
}

static int t_broadcast(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                       int root, void* stream) {
    (void)stream;
    rdv_handle* h = (rdv_handle*)c;
    rdv_slot d = {.op = OP_BROADCAST, .count = count, .dtype = dt, .root = root, .send = send, .recv = recv};
    int st = rdv_enter(h, &d, "broadcast", CHK_COUNT | CHK_DTYPE | CHK_ROOT);
    if (st) return st;
    const void* src = h->g->slots[root].send;
    size_t bytes = (size_t)count * rt_dtype_size(dt);
    if (bytes && src != recv) memcpy(recv, src, bytes);
    return rdv_barrier(h, "broadcast");
}

static int t_barrier(rt_comm* c, void* stream) {
    (void)stream;
    rdv_handle* h = (rdv_handle*)c;
    rdv_slot d = {.op = OP_BARRIER};
    int st = rdv_enter(h, &d, "barrier", 0);
    if (st) return st;
    // Second barrier: nobody posts its next descriptor while a peer still reads this one.
    return rdv_barrier(h, "barrier");
}

// ---- buffers ----------------------------------------------------------------------------

static void* t_buf_alloc(rt_comm* c, size_t bytes) {
    (void)c;
    return aligned_alloc(64, bytes ? (bytes + 63) / 64 * 64 : 64);
}

static void t_buf_free(rt_comm* c, void* buf) {
    (void)c;
    free(buf);
}

static int t_buf_copy(rt_comm* c, void* dst, const void* src, size_t bytes) {
    (void)c;
    if (bytes) memcpy(dst, src, bytes);
    return 0;
}

static int t_sync(rt_comm* c, void* stream) {
    (void)c;
    (void)stream;
    return 0;
}

static const rt_comm_ops threads_ops = {
    .name = "threads",
    .all_gather = t_all_gather,
    .reduce_scatter = t_reduce_scatter,
    .all_reduce = t_all_reduce,
    .broadcast = t_broadcast,
    .barrier = t_barrier,
    .split = rdv_ops_split,
    .fail = rdv_ops_fail,
    .free = rdv_ops_free,
    .buf_alloc = t_buf_alloc,
    .buf_free = t_buf_free,
    .buf_write = t_buf_copy,
    .buf_read = t_buf_copy,
    .sync = t_sync,
};

// ---- launcher ---------------------------------------------------------------------------

int rt_threads_run(int world, rt_rank_fn fn, void* arg) {
    if (world < 1 || !fn) {
        fprintf(stderr, "rt_threads_run: %s (world size %d; need >= 1 and a rank function)\n",
                world < 1 ? "invalid world size" : "fn is NULL", world);
        return 2;
    }
    static const rdv_backend be = {.ops = &threads_ops, .launcher = "rt_threads_run"};
    return rdv_run(&be, world, fn, arg);
}
