// The rank rendezvous of the in-process backends (threads, cuda_local; see rendezvous.h):
// groups and handles, futex barriers with deadlines, agreement checks, failure, split and
// the launcher that runs one thread per rank. The backends add only their collectives'
// work between barrier A and barrier B, and their buffers.
#include "rendezvous.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

// ---- types ------------------------------------------------------------------------------

struct rdv_world {
    int size;
    const rdv_backend* be;
    _Atomic int* exited;  // per world rank: its function returned (it will never join again)
    _Atomic int failed;   // some communicator of this world failed
    pthread_mutex_t lock; // guards the group list
    rdv_group* groups;
};

const char* rdv_op_name(int op) {
    static const char* names[] = {"none",      "all_gather", "reduce_scatter", "all_reduce",
                                  "broadcast", "barrier",    "split"};
    return op >= 0 && op <= OP_SPLIT ? names[op] : "?";
}

// ---- futex ------------------------------------------------------------------------------

static void futex_wait(_Atomic uint32_t* word, uint32_t expected, int64_t timeout_ns) {
    struct timespec ts = {(time_t)(timeout_ns / 1000000000), (long)(timeout_ns % 1000000000)};
    syscall(SYS_futex, (uint32_t*)word, FUTEX_WAIT_PRIVATE, expected, &ts, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t* word) {
    syscall(SYS_futex, (uint32_t*)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void group_poke(rdv_group* g) {
    atomic_fetch_add(&g->wake, 1);
    futex_wake_all(&g->wake);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// ---- groups -----------------------------------------------------------------------------

static rdv_group* group_new(rdv_world* w, int size, const int* wranks) {
    rdv_group* g = calloc(1, sizeof *g);
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

static void group_destroy(rdv_group* g) {
    const rdv_backend* be = g->world->be;
    if (be->slot_release)
        for (int i = 0; i < g->size; i++) be->slot_release(&g->slots[i], be->ctx);
    pthread_mutex_destroy(&g->err_lock);
    free(g->wranks);
    free(g->slots);
    free(g);
}

static void group_unref(rdv_group* g) {
    if (atomic_fetch_sub(&g->refs, 1) != 1) return;
    rdv_world* w = g->world;
    pthread_mutex_lock(&w->lock);
    for (rdv_group** p = &w->groups; *p; p = &(*p)->next) {
        if (*p == g) {
            *p = g->next;
            break;
        }
    }
    pthread_mutex_unlock(&w->lock);
    group_destroy(g);
}

static rdv_handle* handle_new(rdv_group* g, int idx, const char* name, int64_t timeout_ms) {
    rdv_handle* h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->srcs = calloc((size_t)g->size, sizeof *h->srcs);
    h->dsts = calloc((size_t)g->size, sizeof *h->dsts);
    if (!h->srcs || !h->dsts) {
        free(h->srcs);
        free(h->dsts);
        free(h);
        return NULL;
    }
    rt_comm_init_base(&h->base, g->world->be->ops, idx, g->size, name, timeout_ms);
    h->g = g;
    h->idx = idx;
    // A handle made mid-life (split) starts at the group's current epoch: zero, since a
    // fresh group has had no barrier yet.
    h->epoch = atomic_load(&g->epoch);
    return h;
}

static void handle_free(rdv_handle* h) {
    free(h->srcs);
    free(h->dsts);
    free(h);
}

static void handle_release(rdv_handle* h) {
    rdv_group* g = h->g;
    handle_free(h);
    group_unref(g);
}

// ---- failure ----------------------------------------------------------------------------

int rdv_fail(rdv_handle* h, int status, const char* msg) {
    rdv_group* g = h->g;
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
static int group_failed(rdv_handle* h) {
    rdv_group* g = h->g;
    pthread_mutex_lock(&g->err_lock);
    int status = atomic_load(&g->status);
    snprintf(h->base.last_error, sizeof h->base.last_error, "%s", g->err);
    pthread_mutex_unlock(&g->err_lock);
    return status;
}

int rdv_ops_fail(rt_comm* c, int status, const char* msg) {
    return rdv_fail((rdv_handle*)c, status, msg);
}

// ---- barrier ----------------------------------------------------------------------------

// Member i's function returned without reaching `target`. Reading exited first matters:
// once a rank has exited its arrived is final, whereas arrived read first may be stale by
// the time exited is read (the member arrives, completes the barrier as its last arriver,
// finishes its function and exits in between), which would fail a barrier that succeeded.
static int member_gone(rdv_group* g, int i, uint64_t target) {
    return atomic_load(&g->world->exited[g->wranks[i]]) &&
           atomic_load(&g->slots[i].arrived) < target;
}

// Members that have not reached `target`; with only_exited, just those whose function
// already returned. Returns how many, their ranks in out.
static int missing_members(rdv_group* g, uint64_t target, int only_exited, int* out) {
    int n = 0;
    for (int i = 0; i < g->size; i++)
        if (only_exited ? member_gone(g, i, target) : atomic_load(&g->slots[i].arrived) < target)
            out[n++] = i;
    return n;
}

static int fail_missing(rdv_handle* h, const char* opname, uint64_t target, int exited,
                        int64_t waited_ms) {
    rdv_group* g = h->g;
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
    return rdv_fail(h, RT_ERR_TIMEOUT, msg);
}

int rdv_barrier(rdv_handle* h, const char* opname) {
    rdv_group* g = h->g;
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
        for (int i = 0; i < g->size; i++)
            if (member_gone(g, i, target)) return fail_missing(h, opname, target, 1, 0);
        int64_t now = now_ns();
        if (now >= deadline) return fail_missing(h, opname, target, 0, (now - start) / 1000000);
        futex_wait(&g->wake, w, deadline - now);
    }
}

// ---- agreement checks -------------------------------------------------------------------

// Compares every member's descriptor with member 0's (so all ranks find the same first
// disagreement and report the same line). Fields: op always; the rest as `what` asks.
static int check_agreement(rdv_handle* h, const char* opname, int what) {
    rdv_group* g = h->g;
    const rdv_slot* s0 = &g->slots[0];
    char prefix[200], msg[RT_COMM_ERRLEN], a[48], b[48];
    for (int i = 1; i < g->size; i++) {
        const rdv_slot* si = &g->slots[i];
        const char* field = NULL;
        if (si->op != s0->op) {
            field = "operation";
            snprintf(a, sizeof a, "%s", rdv_op_name(s0->op));
            snprintf(b, sizeof b, "%s", rdv_op_name(si->op));
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
            return rdv_fail(h, RT_ERR_MISMATCH, msg);
        }
    }
    return 0;
}

int rdv_enter(rdv_handle* h, const rdv_slot* desc, const char* opname, int what) {
    rdv_group* g = h->g;
    // A failed group refuses new work before touching the slot, so a slow peer still
    // validating the previous collective never sees it change.
    if (atomic_load(&g->status)) return group_failed(h);
    rdv_slot* s = &g->slots[h->idx];
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
    int st = rdv_barrier(h, opname);
    if (st) return st;
    return check_agreement(h, opname, what);
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

int rdv_ops_split(rt_comm* c, int color, int key, rt_comm** out) {
    rdv_handle* h = (rdv_handle*)c;
    rdv_group* g = h->g;
    const rdv_backend* be = g->world->be;
    rdv_slot d = {.op = OP_SPLIT, .color = color, .key = key};
    int st = rdv_enter(h, &d, "split", 0);
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
    st = rdv_barrier(h, "split");
    if (st) {
        free(mem);
        return st;
    }
    rdv_handle* nh = NULL;
    char why[256] = "out of memory";
    int local_err = 0;
    if (color != RT_COMM_SPLIT_NONE) {
        rdv_group* ng = mem ? g->slots[mem[0].idx].split_group : NULL;
        if (ng) {
            char name[96];
            snprintf(name, sizeof name, "%.60s/split(color %d)", h->base.name, color);
            nh = handle_new(ng, my_pos, name, h->base.timeout_ms);
        }
        if (!nh) local_err = RT_ERR_NOMEM;
        else if (be->member_init && be->member_init(nh, be->ctx, why, sizeof why))
            local_err = RT_ERR_BACKEND;
    }
    free(mem);
    // A member that could not set up its handle fails the parent before the third
    // barrier, so every member returns the failure.
    if (local_err) {
        char prefix[200], msg[RT_COMM_ERRLEN];
        snprintf(msg, sizeof msg, "%s: cannot set up the sub-communicator on rank %d: %s",
                 rt_comm_msg_prefix(&h->base, "split", prefix, sizeof prefix), h->idx, why);
        rdv_fail(h, local_err, msg);
    }
    // Third barrier: the leader's slot keeps the group pointer until everyone has read it.
    st = rdv_barrier(h, "split");
    if (st) {
        // Leave the (possibly half-made) group to the launcher's cleanup.
        if (nh) handle_free(nh);
        return st;
    }
    *out = nh ? &nh->base : NULL;
    return 0;
}

void rdv_ops_free(rt_comm* c) {
    rdv_handle* h = (rdv_handle*)c;
    if (!h->launcher_owned) handle_release(h);
}

// ---- launcher ---------------------------------------------------------------------------

typedef struct rank_ctx {
    rdv_world* world;
    rdv_handle* handle;
    int wrank;
    rt_rank_fn fn;
    void* arg;
} rank_ctx;

// Marks a world rank as gone and wakes every group, so peers waiting for it fail at once.
static void mark_exited(rdv_world* w, int wrank) {
    atomic_store(&w->exited[wrank], 1);
    pthread_mutex_lock(&w->lock);
    for (rdv_group* g = w->groups; g; g = g->next) group_poke(g);
    pthread_mutex_unlock(&w->lock);
}

// The backend's per-rank setup; a failure fails the world (fn is not run).
static int rank_setup(rank_ctx* ctx) {
    const rdv_backend* be = ctx->world->be;
    char why[256] = "", msg[RT_COMM_ERRLEN];
    int bad = be->rank_begin && be->rank_begin(ctx->wrank, be->ctx, why, sizeof why);
    if (!bad && be->member_init) bad = be->member_init(ctx->handle, be->ctx, why, sizeof why);
    if (!bad) return 0;
    snprintf(msg, sizeof msg, "%s: rank %d of %d cannot start: %s", be->launcher, ctx->wrank,
             ctx->world->size, why);
    rdv_fail(ctx->handle, RT_ERR_BACKEND, msg);
    return 1;
}

static void* rank_main(void* p) {
    rank_ctx* ctx = p;
    const rdv_backend* be = ctx->world->be;
    if (!rank_setup(ctx)) {
        ctx->fn(&ctx->handle->base, ctx->arg);
        if (be->rank_end) be->rank_end(ctx->handle, be->ctx);
    }
    mark_exited(ctx->world, ctx->wrank);
    return NULL;
}

int rdv_run(const rdv_backend* be, int world, rt_rank_fn fn, void* arg) {
    rdv_world w;
    memset(&w, 0, sizeof w);
    w.size = world;
    w.be = be;
    pthread_mutex_init(&w.lock, NULL);
    w.exited = calloc((size_t)world, sizeof *w.exited);
    int* ids = malloc((size_t)world * sizeof *ids);
    rank_ctx* ctx = calloc((size_t)world, sizeof *ctx);
    pthread_t* threads = calloc((size_t)world, sizeof *threads);
    rdv_group* g = NULL;
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
                     "%s: cannot start the thread of rank %d of %d: %s (hint: lower the world "
                     "size or raise ulimit -u)", be->launcher, started, world, strerror(err));
            for (int r = started; r < world; r++) atomic_store(&w.exited[r], 1);
            rdv_fail(ctx[0].handle, RT_ERR_BACKEND, msg);
            break;
        }
    }
    pthread_attr_destroy(&attr);
    for (int r = 0; r < started; r++) pthread_join(threads[r], NULL);
    result = atomic_load(&w.failed) ? 1 : 0;
out:
    if (!setup_ok) fprintf(stderr, "%s: out of memory setting up %d ranks\n", be->launcher, world);
    if (ctx)
        for (int r = 0; r < world; r++)
            if (ctx[r].handle) handle_release(ctx[r].handle);
    // Groups whose handles were never freed (sub-communicators leaked by rank code).
    while (w.groups) {
        rdv_group* next = w.groups->next;
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
