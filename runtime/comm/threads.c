// Threads backend of rt_comm.h: ranks are threads of one process, a communicator is a
// shared `tgroup` with one descriptor slot per member. Every collective is
//   post descriptor -> barrier A -> check agreement -> own slice of the work -> barrier B
// where each rank reads its peers' buffers directly (one address space) and does its own
// share: all-gather pulls every block into its own output, reduce-scatter reduces its own
// block from all inputs, all-reduce reduces slice r and writes it to every output. So a
// large collective runs on all cores at once, and barrier B keeps every input alive until
// all readers are done.
//
// Barriers block on a futex (no spinning: 128 ranks share 2 cores). The futex word is
// bumped on every release, failure and rank exit, so a sleeper re-checks its conditions
// after any of them; a deadline turns a missing rank into a one-line error naming it.
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "comm_internal.h"
#include "reduce.h"

// ---- types ------------------------------------------------------------------------------

enum { OP_NONE, OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_ALL_REDUCE, OP_BROADCAST, OP_BARRIER, OP_SPLIT };

static const char* op_name(int op) {
    static const char* names[] = {"none",      "all_gather", "reduce_scatter", "all_reduce",
                                  "broadcast", "barrier",    "split"};
    return op >= 0 && op <= OP_SPLIT ? names[op] : "?";
}

struct tgroup;

// One member's descriptor of its current collective. Written by its owner before barrier
// A, read by everyone between A and B (the barriers order the accesses).
typedef struct slot {
    int op;
    int64_t count;
    rt_dtype dtype;
    rt_redop red;
    int root;
    const void* send;
    void* recv;
    int color, key;
    struct tgroup* split_group;  // the new group, published by its leader during split
    _Atomic uint64_t arrived;    // last barrier epoch this member reached (for diagnostics)
    char pad[64];                // keeps neighbouring slots off each other's cache line
} slot;

typedef struct tworld {
    int size;
    _Atomic int* exited;  // per world rank: its function returned (it will never join again)
    _Atomic int failed;   // some communicator of this world failed
    pthread_mutex_t lock; // guards the group list
    struct tgroup* groups;
} tworld;

typedef struct tgroup {
    tworld* world;
    int size;
    int* wranks;  // member index -> world rank
    slot* slots;
    _Atomic int count;       // arrivals at the current barrier
    _Atomic uint64_t epoch;  // barriers completed
    _Atomic uint32_t wake;   // futex word: bumped on release, failure and rank exit
    _Atomic int status;      // 0, or the sticky failure status
    pthread_mutex_t err_lock;
    char err[RT_COMM_ERRLEN];
    _Atomic int refs;        // member handles still alive
    struct tgroup* next;
} tgroup;

typedef struct thandle {
    rt_comm base;  // first, so rt_comm* and thandle* convert
    tgroup* g;
    int idx;            // member index == rank in this communicator
    uint64_t epoch;     // barriers this member has entered
    const void** srcs;  // scratch: one pointer per member
    void** dsts;
    int launcher_owned; // world handles: rt_comm_free ignores them, the launcher frees them
} thandle;

static const rt_comm_ops threads_ops;

// ---- futex ------------------------------------------------------------------------------

static void futex_wait(_Atomic uint32_t* word, uint32_t expected, int64_t timeout_ns) {
    struct timespec ts = {(time_t)(timeout_ns / 1000000000), (long)(timeout_ns % 1000000000)};
    syscall(SYS_futex, (uint32_t*)word, FUTEX_WAIT_PRIVATE, expected, &ts, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t* word) {
    syscall(SYS_futex, (uint32_t*)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void group_poke(tgroup* g) {
    atomic_fetch_add(&g->wake, 1);
    futex_wake_all(&g->wake);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// ---- groups -----------------------------------------------------------------------------

static tgroup* group_new(tworld* w, int size, const int* wranks) {
    tgroup* g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->wranks = malloc((size_t)size * sizeof *g->wranks);
    g->slots = calloc((size_t)size, sizeof *g->slots);
    if (!g->wranks || !g->slots) {
        free(g->wranks);
        free(g->slots);
        free(g);
        return NULL;
    }
    g->world = w;
    g->size = size;
    memcpy(g->wranks, wranks, (size_t)size * sizeof *wranks);
    pthread_mutex_init(&g->err_lock, NULL);
    atomic_store(&g->refs, size);
    pthread_mutex_lock(&w->lock);
    g->next = w->groups;
    w->groups = g;
    pthread_mutex_unlock(&w->lock);
    return g;
}

static void group_destroy(tgroup* g) {
    pthread_mutex_destroy(&g->err_lock);
    free(g->wranks);
    free(g->slots);
    free(g);
}

static void group_unref(tgroup* g) {
    if (atomic_fetch_sub(&g->refs, 1) != 1) return;
    tworld* w = g->world;
    pthread_mutex_lock(&w->lock);
    for (tgroup** p = &w->groups; *p; p = &(*p)->next) {
        if (*p == g) {
            *p = g->next;
            break;
        }
    }
    pthread_mutex_unlock(&w->lock);
    group_destroy(g);
}

static thandle* handle_new(tgroup* g, int idx, const char* name, int64_t timeout_ms) {
    thandle* h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->srcs = calloc((size_t)g->size, sizeof *h->srcs);
    h->dsts = calloc((size_t)g->size, sizeof *h->dsts);
    if (!h->srcs || !h->dsts) {
        free(h->srcs);
        free(h->dsts);
        free(h);
        return NULL;
    }
    rt_comm_init_base(&h->base, &threads_ops, idx, g->size, name, timeout_ms);
    h->g = g;
    h->idx = idx;
    // A handle made mid-life (split) starts at the group's current epoch: zero, since a
    // fresh group has had no barrier yet.
    h->epoch = atomic_load(&g->epoch);
    return h;
}

static void handle_free(thandle* h) {
    free(h->srcs);
    free(h->dsts);
    free(h);
}

// ---- failure ----------------------------------------------------------------------------

// Poisons the group. The first failure wins: its message is printed once and kept; later
// ones only learn it. Returns the group's status.
static int group_fail(thandle* h, int status, const char* msg) {
    tgroup* g = h->g;
    int first = 0;
    pthread_mutex_lock(&g->err_lock);
    if (atomic_load(&g->status) == 0) {
        snprintf(g->err, sizeof g->err, "%s", msg);
        atomic_store(&g->status, status);
        first = 1;
    }
    status = atomic_load(&g->status);
    snprintf(h->base.last_error, sizeof h->base.last_error, "%s", g->err);
    pthread_mutex_unlock(&g->err_lock);
    if (first) {
        atomic_store(&g->world->failed, 1);
        fflush(stdout);
        fprintf(stderr, "%s\n", msg);
        fflush(stderr);
        group_poke(g);
    }
    return status;
}

// The group already failed: copy its message and return its status.
static int group_failed(thandle* h) {
    tgroup* g = h->g;
    pthread_mutex_lock(&g->err_lock);
    int status = atomic_load(&g->status);
    snprintf(h->base.last_error, sizeof h->base.last_error, "%s", g->err);
    pthread_mutex_unlock(&g->err_lock);
    return status;
}

static int ops_fail(rt_comm* c, int status, const char* msg) {
    return group_fail((thandle*)c, status, msg);
}

// ---- barrier ----------------------------------------------------------------------------

// Members that have not reached `target`; with only_exited, just those whose function
// already returned. Returns how many, their ranks in out.
static int missing_members(tgroup* g, uint64_t target, int only_exited, int* out) {
    int n = 0;
    for (int i = 0; i < g->size; i++) {
        if (atomic_load(&g->slots[i].arrived) >= target) continue;
        if (only_exited && !atomic_load(&g->world->exited[g->wranks[i]])) continue;
        out[n++] = i;
    }
    return n;
}

static int fail_missing(thandle* h, const char* opname, uint64_t target, int exited, int64_t waited_ms) {
    tgroup* g = h->g;
    int* ranks = calloc((size_t)g->size, sizeof *ranks);
    char list[200] = "?", wlist[120], prefix[200], msg[RT_COMM_ERRLEN];
    if (ranks) {
        int n = missing_members(g, target, exited, ranks);
        rt_comm_rank_list(ranks, n, list, sizeof list);
        // In a sub-communicator also name the world ranks, which is what logs show.
        int identity = g->size == g->world->size;
        for (int i = 0; i < n; i++) {
            identity &= g->wranks[ranks[i]] == ranks[i];
            ranks[i] = g->wranks[ranks[i]];
        }
        if (!identity) {
            size_t len = strlen(list);
            snprintf(list + len, sizeof list - len, " (world ranks %s)",
                     rt_comm_rank_list(ranks, n, wlist, sizeof wlist));
        }
        free(ranks);
    }
    rt_comm_msg_prefix(&h->base, opname, prefix, sizeof prefix);
    if (exited)
        snprintf(msg, sizeof msg, "%s: ranks %s returned from their function without joining it",
                 prefix, list);
    else
        snprintf(msg, sizeof msg,
                 "%s: timed out after %lld ms waiting for ranks %s (they never joined it; "
                 "set RT_COMM_TIMEOUT_MS if they are only slow)",
                 prefix, (long long)waited_ms, list);
    return group_fail(h, RT_ERR_TIMEOUT, msg);
}

// Waits until every member reached this barrier. Returns 0, or the group's failure.
static int barrier_wait(thandle* h, const char* opname) {
    tgroup* g = h->g;
    uint64_t target = ++h->epoch;
    atomic_store(&g->slots[h->idx].arrived, target);
    if (atomic_load(&g->status)) return group_failed(h);
    if (atomic_fetch_add(&g->count, 1) + 1 == g->size) {
        // Last to arrive: nobody can arrive at the next barrier before epoch moves, so
        // resetting the counter first is safe.
        atomic_store(&g->count, 0);
        atomic_store(&g->epoch, target);
        group_poke(g);
        return 0;
    }
    int64_t start = now_ns();
    int64_t deadline = start + h->base.timeout_ms * 1000000;
    for (;;) {
        uint32_t w = atomic_load(&g->wake);
        if (atomic_load(&g->epoch) >= target) return 0;
        if (atomic_load(&g->status)) return group_failed(h);
        // A missing member whose function returned will never come: fail now.
        for (int i = 0; i < g->size; i++) {
            if (atomic_load(&g->slots[i].arrived) < target &&
                atomic_load(&g->world->exited[g->wranks[i]])) {
                return fail_missing(h, opname, target, 1, 0);
            }
        }
        int64_t now = now_ns();
        if (now >= deadline) return fail_missing(h, opname, target, 0, (now - start) / 1000000);
        futex_wait(&g->wake, w, deadline - now);
    }
}

// ---- agreement checks -------------------------------------------------------------------

// Compares every member's descriptor with member 0's (so all ranks find the same first
// disagreement and report the same line). Fields: op always; the rest as `what` asks.
enum { CHK_COUNT = 1, CHK_DTYPE = 2, CHK_RED = 4, CHK_ROOT = 8 };

static int check_agreement(thandle* h, const char* opname, int what) {
    tgroup* g = h->g;
    const slot* s0 = &g->slots[0];
    char prefix[200], msg[RT_COMM_ERRLEN], a[48], b[48];
    for (int i = 1; i < g->size; i++) {
        const slot* si = &g->slots[i];
        const char* field = NULL;
        if (si->op != s0->op) {
            field = "operation";
            snprintf(a, sizeof a, "%s", op_name(s0->op));
            snprintf(b, sizeof b, "%s", op_name(si->op));
        } else if ((what & CHK_COUNT) && si->count != s0->count) {
            field = "count";
            snprintf(a, sizeof a, "%lld elements", (long long)s0->count);
            snprintf(b, sizeof b, "%lld elements", (long long)si->count);
        } else if ((what & CHK_DTYPE) && si->dtype != s0->dtype) {
            field = "dtype";
            snprintf(a, sizeof a, "%s", rt_dtype_name(s0->dtype));
            snprintf(b, sizeof b, "%s", rt_dtype_name(si->dtype));
        } else if ((what & CHK_RED) &&
                   (si->red.kind != s0->red.kind ||
                    (s0->red.kind == RT_RED_PREMUL_SUM && si->red.factor != s0->red.factor))) {
            field = "reduction";
            rt_redop_str(s0->red, a, sizeof a);
            rt_redop_str(si->red, b, sizeof b);
        } else if ((what & CHK_ROOT) && si->root != s0->root) {
            field = "root";
            snprintf(a, sizeof a, "%d", s0->root);
            snprintf(b, sizeof b, "%d", si->root);
        }
        if (field) {
            snprintf(msg, sizeof msg, "%s: %s mismatch: rank 0 has %s, rank %d has %s",
                     rt_comm_msg_prefix(&h->base, opname, prefix, sizeof prefix), field, a, i, b);
            return group_fail(h, RT_ERR_MISMATCH, msg);
        }
    }
    return 0;
}

// Posts this member's descriptor, waits for everyone and checks agreement. A failed
// group refuses new work before touching the slot, so a slow peer still validating the
// previous collective never sees it change.
static int enter(thandle* h, const slot* desc, const char* opname, int what) {
    tgroup* g = h->g;
    if (atomic_load(&g->status)) return group_failed(h);
    slot* s = &g->slots[h->idx];
    s->op = desc->op;
    s->count = desc->count;
    s->dtype = desc->dtype;
    s->red = desc->red;
    s->root = desc->root;
    s->send = desc->send;
    s->recv = desc->recv;
    s->color = desc->color;
    s->key = desc->key;
    s->split_group = NULL;
    int st = barrier_wait(h, opname);
    if (st) return st;
    return check_agreement(h, opname, what);
}

// ---- collectives ------------------------------------------------------------------------

static int t_all_gather(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                        void* stream) {
    (void)stream;
    thandle* h = (thandle*)c;
    slot d = {.op = OP_ALL_GATHER, .count = count, .dtype = dt, .send = send, .recv = recv};
    int st = enter(h, &d, "all_gather", CHK_COUNT | CHK_DTYPE);
    if (st) return st;
    tgroup* g = h->g;
    size_t bytes = (size_t)count * rt_dtype_size(dt);
    // Start at our own block so the ranks' reads spread over different sources.
    for (int k = 0; k < g->size && bytes; k++) {
        int s = (h->idx + k) % g->size;
        char* dst = (char*)recv + (size_t)s * bytes;
        if (g->slots[s].send != dst) memcpy(dst, g->slots[s].send, bytes);
    }
    return barrier_wait(h, "all_gather");
}

static void red_scale(rt_redop op, int n, int* use_scale, float* scale) {
    *use_scale = op.kind != RT_RED_SUM;
    *scale = op.kind == RT_RED_AVG ? (float)(1.0 / n) : (float)op.factor;
}

static int t_reduce_scatter(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                            rt_redop op, void* stream) {
    (void)stream;
    thandle* h = (thandle*)c;
    slot d = {.op = OP_REDUCE_SCATTER, .count = count, .dtype = dt, .red = op, .send = send, .recv = recv};
    int st = enter(h, &d, "reduce_scatter", CHK_COUNT | CHK_DTYPE | CHK_RED);
    if (st) return st;
    tgroup* g = h->g;
    size_t off = (size_t)h->idx * (size_t)count * rt_dtype_size(dt);
    for (int s = 0; s < g->size; s++) h->srcs[s] = (const char*)g->slots[s].send + off;
    int use_scale;
    float scale;
    red_scale(op, g->size, &use_scale, &scale);
    if (count > 0) rt_reduce_sum(&recv, 1, h->srcs, g->size, (size_t)count, dt, use_scale, scale);
    return barrier_wait(h, "reduce_scatter");
}

static int t_all_reduce(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                        rt_redop op, void* stream) {
    (void)stream;
    thandle* h = (thandle*)c;
    slot d = {.op = OP_ALL_REDUCE, .count = count, .dtype = dt, .red = op, .send = send, .recv = recv};
    int st = enter(h, &d, "all_reduce", CHK_COUNT | CHK_DTYPE | CHK_RED);
    if (st) return st;
    tgroup* g = h->g;
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
    return barrier_wait(h, "all_reduce");
}

static int t_broadcast(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                       int root, void* stream) {
    (void)stream;
    thandle* h = (thandle*)c;
    slot d = {.op = OP_BROADCAST, .count = count, .dtype = dt, .root = root, .send = send, .recv = recv};
    int st = enter(h, &d, "broadcast", CHK_COUNT | CHK_DTYPE | CHK_ROOT);
    if (st) return st;
    const void* src = h->g->slots[root].send;
    size_t bytes = (size_t)count * rt_dtype_size(dt);
    if (bytes && src != recv) memcpy(recv, src, bytes);
    return barrier_wait(h, "broadcast");
}

static int t_barrier(rt_comm* c, void* stream) {
    (void)stream;
    thandle* h = (thandle*)c;
    slot d = {.op = OP_BARRIER};
    int st = enter(h, &d, "barrier", 0);
    if (st) return st;
    // Second barrier: nobody posts its next descriptor while a peer still reads this one.
    return barrier_wait(h, "barrier");
}

// ---- split ------------------------------------------------------------------------------

typedef struct member {
    int key, idx;
} member;

static int member_cmp(const void* a, const void* b) {
    const member *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static int t_split(rt_comm* c, int color, int key, rt_comm** out) {
    thandle* h = (thandle*)c;
    tgroup* g = h->g;
    slot d = {.op = OP_SPLIT, .color = color, .key = key};
    int st = enter(h, &d, "split", 0);
    if (st) return st;
    member* mem = NULL;
    int m = 0, my_pos = -1;
    if (color != RT_COMM_SPLIT_NONE) {
        mem = malloc((size_t)g->size * sizeof *mem);
        if (mem) {
            for (int i = 0; i < g->size; i++)
                if (g->slots[i].color == color) mem[m++] = (member){g->slots[i].key, i};
            qsort(mem, (size_t)m, sizeof *mem, member_cmp);
            for (int i = 0; i < m; i++)
                if (mem[i].idx == h->idx) my_pos = i;
        }
    }
    // The new group's first member (in key order) creates it and publishes it in its slot.
    if (mem && my_pos == 0) {
        int* wr = malloc((size_t)m * sizeof *wr);
        if (wr) {
            for (int i = 0; i < m; i++) wr[i] = g->wranks[mem[i].idx];
            g->slots[h->idx].split_group = group_new(g->world, m, wr);
            free(wr);
        }
    }
    st = barrier_wait(h, "split");
    if (st) {
        free(mem);
        return st;
    }
    thandle* nh = NULL;
    int local_err = 0;
    if (color != RT_COMM_SPLIT_NONE) {
        tgroup* ng = mem ? g->slots[mem[0].idx].split_group : NULL;
        if (ng) {
            char name[96];
            snprintf(name, sizeof name, "%.60s/split(color %d)", h->base.name, color);
            nh = handle_new(ng, my_pos, name, h->base.timeout_ms);
        }
        if (!nh) local_err = 1;
    }
    free(mem);
    // Third barrier: the leader's slot keeps the group pointer until everyone has read it.
    st = barrier_wait(h, "split");
    if (!st && local_err) {
        char prefix[200], msg[RT_COMM_ERRLEN];
        snprintf(msg, sizeof msg, "%s: out of memory creating the sub-communicator",
                 rt_comm_msg_prefix(&h->base, "split", prefix, sizeof prefix));
        st = group_fail(h, RT_ERR_NOMEM, msg);
    }
    if (st) {
        // Leave the (possibly half-made) group to the launcher's cleanup.
        if (nh) handle_free(nh);
        return st;
    }
    *out = nh ? &nh->base : NULL;
    return 0;
}

// ---- handles and buffers ----------------------------------------------------------------

static void handle_release(thandle* h) {
    tgroup* g = h->g;
    handle_free(h);
    group_unref(g);
}

static void t_free(rt_comm* c) {
    thandle* h = (thandle*)c;
    if (!h->launcher_owned) handle_release(h);
}

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
    .split = t_split,
    .fail = ops_fail,
    .free = t_free,
    .buf_alloc = t_buf_alloc,
    .buf_free = t_buf_free,
    .buf_write = t_buf_copy,
    .buf_read = t_buf_copy,
    .sync = t_sync,
};

// ---- launcher ---------------------------------------------------------------------------

typedef struct rank_ctx {
    tworld* world;
    thandle* handle;
    int wrank;
    rt_rank_fn fn;
    void* arg;
} rank_ctx;

// Marks a world rank as gone and wakes every group, so peers waiting for it fail at once.
static void mark_exited(tworld* w, int wrank) {
    atomic_store(&w->exited[wrank], 1);
    pthread_mutex_lock(&w->lock);
    for (tgroup* g = w->groups; g; g = g->next) group_poke(g);
    pthread_mutex_unlock(&w->lock);
}

static void* rank_main(void* p) {
    rank_ctx* ctx = p;
    ctx->fn(&ctx->handle->base, ctx->arg);
    mark_exited(ctx->world, ctx->wrank);
    return NULL;
}

int rt_threads_run(int world, rt_rank_fn fn, void* arg) {
    if (world < 1 || !fn) {
        fprintf(stderr, "rt_threads_run: %s (world size %d; need >= 1 and a rank function)\n",
                world < 1 ? "invalid world size" : "fn is NULL", world);
        return 2;
    }
    tworld w;
    memset(&w, 0, sizeof w);
    w.size = world;
    pthread_mutex_init(&w.lock, NULL);
    w.exited = calloc((size_t)world, sizeof *w.exited);
    int* ids = malloc((size_t)world * sizeof *ids);
    rank_ctx* ctx = calloc((size_t)world, sizeof *ctx);
    pthread_t* threads = calloc((size_t)world, sizeof *threads);
    tgroup* g = NULL;
    int result = 1, started = 0, setup_ok = 0;
    if (!w.exited || !ids || !ctx || !threads) goto out;
    for (int r = 0; r < world; r++) ids[r] = r;
    g = group_new(&w, world, ids);
    if (!g) goto out;
    int64_t timeout = rt_comm_default_timeout_ms();
    for (int r = 0; r < world; r++) {
        ctx[r] = (rank_ctx){&w, handle_new(g, r, "world", timeout), r, fn, arg};
        if (!ctx[r].handle) goto out;
        ctx[r].handle->launcher_owned = 1;
    }
    setup_ok = 1;
    // Small-ish stacks: 1024 ranks x the default 8 MiB would reserve 8 GiB of address space.
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)2 << 20);
    for (; started < world; started++) {
        int err = pthread_create(&threads[started], &attr, rank_main, &ctx[started]);
        if (err) {
            char msg[RT_COMM_ERRLEN];
            snprintf(msg, sizeof msg,
                     "rt_threads_run: cannot start the thread of rank %d of %d: %s (hint: "
                     "lower the world size or raise ulimit -u)", started, world, strerror(err));
            for (int r = started; r < world; r++) atomic_store(&w.exited[r], 1);
            group_fail(ctx[0].handle, RT_ERR_BACKEND, msg);
            break;
        }
    }
    pthread_attr_destroy(&attr);
    for (int r = 0; r < started; r++) pthread_join(threads[r], NULL);
    result = atomic_load(&w.failed) ? 1 : 0;
out:
    if (!setup_ok) fprintf(stderr, "rt_threads_run: out of memory setting up %d ranks\n", world);
    if (ctx)
        for (int r = 0; r < world; r++)
            if (ctx[r].handle) handle_release(ctx[r].handle);
    // Groups whose handles were never freed (sub-communicators leaked by rank code).
    while (w.groups) {
        tgroup* next = w.groups->next;
        group_destroy(w.groups);
        w.groups = next;
    }
    pthread_mutex_destroy(&w.lock);
    free(w.exited);
    free(ids);
    free(ctx);
    free(threads);
    return result;
}
