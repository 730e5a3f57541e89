// Chrome trace writer (see rt_trace.h). Recording must be cheap and never allocate:
// each rank owns a preallocated event array and a string pool with an intern table,
// so a step that repeats the same names costs no memory beyond its events; when either
// is full the event is counted as dropped instead of growing.
#include "rt_trace.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "io_atomic.h"
#include "io_err.h"
#include "io_json.h"

#define NO_STR UINT32_MAX

// ---- state --------------------------------------------------------------------------

typedef struct {
    double ts, dur;
    uint32_t name, cat, arg_key, arg_val;  // string pool offsets, NO_STR for none
    int16_t tid;
    char ph;  // 'X' complete, 'i' instant
} tr_event;

typedef struct {
    pthread_mutex_t mu;
    tr_event *ev;
    size_t n, cap;
    uint64_t dropped;
    char *pool;  // NUL-terminated strings back to back
    size_t pool_used, pool_cap;
    uint32_t *slots;  // open-addressing intern table: pool offset + 1, 0 = empty
    size_t n_slots, slots_used;
    uint32_t tid_name[RT_TRACE_MAX_TIDS];
} tr_rank;

struct rt_trace {
    int n_ranks;
    tr_rank *ranks;
    struct timespec t0;
};

static const char *default_tid_names[] = {
    [RT_TRACE_COMPUTE] = "compute",
    [RT_TRACE_ALL_GATHER_COPY] = "all_gather_copy_in",
    [RT_TRACE_ALL_GATHER] = "all_gather",
    [RT_TRACE_REDUCE_SCATTER] = "reduce_scatter",
    [RT_TRACE_ALL_REDUCE] = "all_reduce",
    [RT_TRACE_OPTIMIZER] = "optimizer",
};

// ---- string interning (caller holds the rank mutex) ---------------------------------

static uint32_t fnv1a(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

// Pool offset of `s`, adding it if new; NO_STR when the pool or table is full.
static uint32_t intern(tr_rank *r, const char *s) {
    size_t n = strlen(s);
    size_t mask = r->n_slots - 1;
    for (size_t i = fnv1a(s, n) & mask;; i = (i + 1) & mask) {
        uint32_t v = r->slots[i];
        if (v == 0) {
            // Keep the table at most 3/4 full so probes stay short.
            if (r->pool_used + n + 1 > r->pool_cap || (r->slots_used + 1) * 4 > r->n_slots * 3)
                return NO_STR;
            uint32_t off = (uint32_t)r->pool_used;
            memcpy(r->pool + off, s, n + 1);
            r->pool_used += n + 1;
            r->slots[i] = off + 1;
            r->slots_used++;
            return off;
        }
        if (strcmp(r->pool + v - 1, s) == 0) return v - 1;
    }
}

// ---- create / destroy ---------------------------------------------------------------

int rt_trace_create(int n_ranks, size_t max_events, size_t string_bytes, rt_trace **out,
                    char *err, size_t errlen) {
    *out = NULL;
    if (n_ranks <= 0) return io_errf(err, errlen, "trace: rank count %d must be > 0", n_ranks);
    if (max_events == 0) max_events = 65536;
    if (string_bytes == 0) string_bytes = 64 * 1024;
    if (string_bytes < 256) string_bytes = 256;  // room for the stream names
    if (string_bytes > UINT32_MAX / 2)
        return io_errf(err, errlen, "trace: string pool of %zu bytes per rank is too large "
                       "(at most %u)", string_bytes, UINT32_MAX / 2);
    rt_trace *t = calloc(1, sizeof *t);
    if (!t) return io_errf(err, errlen, "trace: out of memory");
    t->ranks = calloc((size_t)n_ranks, sizeof *t->ranks);
    if (!t->ranks) {
        free(t);
        return io_errf(err, errlen, "trace: out of memory");
    }
    t->n_ranks = n_ranks;
    clock_gettime(CLOCK_MONOTONIC, &t->t0);
    // Distinct strings are at least 2 bytes each with their NUL, usually ~16: size the
    // table for string_bytes / 8 of them, a power of two.
    size_t n_slots = 64;
    while (n_slots < string_bytes / 8 * 4 / 3 + 1) n_slots *= 2;
    for (int i = 0; i < n_ranks; i++) {
        tr_rank *r = &t->ranks[i];
        pthread_mutex_init(&r->mu, NULL);
        r->cap = max_events;
        r->pool_cap = string_bytes;
        r->n_slots = n_slots;
        r->ev = malloc(max_events * sizeof *r->ev);
        r->pool = malloc(string_bytes);
        r->slots = calloc(n_slots, sizeof *r->slots);
        if (!r->ev || !r->pool || !r->slots) {
            t->n_ranks = i + 1;
            rt_trace_destroy(t);
            return io_errf(err, errlen, "trace: out of memory for %d ranks x %zu events", n_ranks,
                           max_events);
        }
        for (int k = 0; k < RT_TRACE_MAX_TIDS; k++) r->tid_name[k] = NO_STR;
        for (size_t k = 0; k < sizeof default_tid_names / sizeof *default_tid_names; k++)
            r->tid_name[k] = intern(r, default_tid_names[k]);
    }
    *out = t;
    return 0;
}

void rt_trace_destroy(rt_trace *t) {
    if (!t) return;
    for (int i = 0; i < t->n_ranks; i++) {
        tr_rank *r = &t->ranks[i];
        pthread_mutex_destroy(&r->mu);
        free(r->ev);
        free(r->pool);
        free(r->slots);
    }
    free(t->ranks);
    free(t);
}

double rt_trace_now_us(const rt_trace *t) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t->t0.tv_sec) * 1e6 + (double)(now.tv_nsec - t->t0.tv_nsec) / 1e3;
}

// ---- recording ----------------------------------------------------------------------

int rt_trace_thread_name(rt_trace *t, int rank, int tid, const char *name) {
    if (!t || rank < 0 || rank >= t->n_ranks || tid < 0 || tid >= RT_TRACE_MAX_TIDS || !name)
        return -1;
    tr_rank *r = &t->ranks[rank];
    pthread_mutex_lock(&r->mu);
    uint32_t off = intern(r, name);
    if (off != NO_STR) r->tid_name[tid] = off;
    pthread_mutex_unlock(&r->mu);
    return off == NO_STR ? -1 : 0;
}

static void record(rt_trace *t, int rank, int tid, char ph, const char *name, const char *cat,
                   double ts, double dur, const char *key, const char *val) {
    if (!t) return;
    if (rank < 0 || rank >= t->n_ranks) return;  // nowhere to even count it
    tr_rank *r = &t->ranks[rank];
    pthread_mutex_lock(&r->mu);
    int ok = tid >= 0 && tid < RT_TRACE_MAX_TIDS && name && r->n < r->cap;
    tr_event e;
    if (ok) {
        // NaN / inf would print as invalid JSON; a negative duration is a clock glitch.
        e.ts = isfinite(ts) ? ts : 0;
        e.dur = isfinite(dur) && dur > 0 ? dur : 0;
        e.tid = (int16_t)tid;
        e.ph = ph;
        e.name = intern(r, name);
        e.cat = intern(r, cat ? cat : "");
        e.arg_key = e.arg_val = NO_STR;
        if (key && val) {
            e.arg_key = intern(r, key);
            e.arg_val = intern(r, val);
            ok = e.arg_key != NO_STR && e.arg_val != NO_STR;
        }
        ok = ok && e.name != NO_STR && e.cat != NO_STR;
    }
    if (ok)
        r->ev[r->n++] = e;
    else
        r->dropped++;
    pthread_mutex_unlock(&r->mu);
}

void rt_trace_complete(rt_trace *t, int rank, int tid, const char *name, const char *cat,
                       double ts_us, double dur_us, const char *arg_key,
                       const char *arg_value) {
    // Spans are named by group, and FSDP2 names the root group "": a viewer shows it as
    // "root" (the events, instants named `unshard ""`, keep FSDP2's name).
    if (name && !name[0]) name = "root";
    record(t, rank, tid, 'X', name, cat, ts_us, dur_us, arg_key, arg_value);
}

void rt_trace_instant(rt_trace *t, int rank, int tid, const char *name, const char *cat,
                      double ts_us, const char *arg_key, const char *arg_value) {
    record(t, rank, tid, 'i', name, cat, ts_us, 0, arg_key, arg_value);
}

uint64_t rt_trace_recorded(rt_trace *t) {
    uint64_t n = 0;
    for (int i = 0; i < t->n_ranks; i++) {
        pthread_mutex_lock(&t->ranks[i].mu);
        n += t->ranks[i].n;
        pthread_mutex_unlock(&t->ranks[i].mu);
    }
    return n;
}

uint64_t rt_trace_dropped(rt_trace *t) {
    uint64_t n = 0;
    for (int i = 0; i < t->n_ranks; i++) {
        pthread_mutex_lock(&t->ranks[i].mu);
        n += t->ranks[i].dropped;
        pthread_mutex_unlock(&t->ranks[i].mu);
    }
    return n;
}

// ---- JSON output --------------------------------------------------------------------

typedef struct {
    io_atomic a;
    char buf[1 << 14];
    size_t n;
    int rc;
    char *err;
    size_t errlen;
} out_t;

static void out_flush(out_t *o) {
    if (o->rc == 0 && o->n) o->rc = io_atomic_write(&o->a, o->buf, o->n, o->err, o->errlen);
    o->n = 0;
}

static void out_put(out_t *o, const char *s, size_t n) {
    if (o->n + n > sizeof o->buf) out_flush(o);
    if (n > sizeof o->buf) {
        if (o->rc == 0) o->rc = io_atomic_write(&o->a, s, n, o->err, o->errlen);
        return;
    }
    memcpy(o->buf + o->n, s, n);
    o->n += n;
}

__attribute__((format(printf, 2, 3))) static void out_fmt(out_t *o, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) out_put(o, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

// A JSON string literal; invalid UTF-8 becomes U+FFFD so the file always parses.
static void out_str(out_t *o, const char *s) {
    out_put(o, "\"", 1);
    const unsigned char *p = (const unsigned char *)s;
    size_t len = strlen(s);
    for (size_t i = 0; i < len;) {
        unsigned char c = p[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            out_put(o, e, 2);
            i++;
        } else if (c < 0x20) {
            out_fmt(o, "\\u%04x", c);
            i++;
        } else if (c < 0x80) {
            out_put(o, (const char *)p + i, 1);
            i++;
        } else {
            size_t k = io_json_utf8_len(p + i, len - i);
            if (k == 0) {
                out_put(o, "\\ufffd", 6);
                i++;
            } else {
                out_put(o, (const char *)p + i, k);
                i += k;
            }
        }
    }
    out_put(o, "\"", 1);
}

int rt_trace_write(rt_trace *t, const char *path, char *err, size_t errlen) {
    out_t *o = malloc(sizeof *o);
    if (!o) return io_errf(err, errlen, "trace: out of memory writing '%s'", path);
    o->n = 0;
    o->rc = 0;
    o->err = err;
    o->errlen = errlen;
    if (io_atomic_open(&o->a, path, err, errlen) != 0) {
        free(o);
        return -1;
    }
    uint64_t total = 0, dropped = 0;
    size_t cap = t->ranks[0].cap;
    out_fmt(o, "{\"traceEvents\":[\n");
    int first = 1;
    for (int ri = 0; ri < t->n_ranks && o->rc == 0; ri++) {
        tr_rank *r = &t->ranks[ri];
        pthread_mutex_lock(&r->mu);
        // Process and stream names first, so viewers label the rows "rank N / compute".
        out_fmt(o, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                   "\"args\":{\"name\":\"rank %d\"}}",
                first ? "" : ",\n", ri, ri);
        first = 0;
        out_fmt(o, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                   "\"args\":{\"sort_index\":%d}}", ri, ri);
        for (int k = 0; k < RT_TRACE_MAX_TIDS; k++) {
            if (r->tid_name[k] == NO_STR) continue;
            out_fmt(o, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                       "\"args\":{\"name\":", ri, k);
            out_str(o, r->pool + r->tid_name[k]);
            out_fmt(o, "}}");
            out_fmt(o, ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                       "\"args\":{\"sort_index\":%d}}", ri, k, k);
        }
        double last_ts = 0;
        for (size_t i = 0; i < r->n; i++) {
            const tr_event *e = &r->ev[i];
            out_fmt(o, ",\n{\"name\":");
            out_str(o, r->pool + e->name);
            out_fmt(o, ",\"cat\":");
            out_str(o, r->pool + e->cat);
            if (e->ph == 'X')
                out_fmt(o, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f", e->ts, e->dur);
            else
                out_fmt(o, ",\"ph\":\"i\",\"s\":\"t\",\"ts\":%.3f", e->ts);
            out_fmt(o, ",\"pid\":%d,\"tid\":%d", ri, e->tid);
            if (e->arg_key != NO_STR) {
                out_fmt(o, ",\"args\":{");
                out_str(o, r->pool + e->arg_key);
                out_put(o, ":", 1);
                out_str(o, r->pool + e->arg_val);
                out_put(o, "}", 1);
            }
            out_put(o, "}", 1);
            if (e->ts + e->dur > last_ts) last_ts = e->ts + e->dur;
        }
        // Say so in the trace itself, where the person reading it will look.
        if (r->dropped)
            out_fmt(o, ",\n{\"name\":\"trace buffer full: %llu events dropped on rank %d "
                       "(%zu kept; raise the per-rank event limit)\",\"cat\":\"trace\","
                       "\"ph\":\"i\",\"s\":\"p\",\"ts\":%.3f,\"pid\":%d,\"tid\":0}",
                    (unsigned long long)r->dropped, ri, r->n, last_ts, ri);
        total += r->n;
        dropped += r->dropped;
        pthread_mutex_unlock(&r->mu);
    }
    out_fmt(o, "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"generator\":\"fsdpgen\","
               "\"ranks\":%d,\"recorded_events\":%llu,\"dropped_events\":%llu,"
               "\"max_events_per_rank\":%zu}}\n",
            t->n_ranks, (unsigned long long)total, (unsigned long long)dropped, cap);
    out_flush(o);
    int rc = o->rc;
    if (rc != 0)
        io_atomic_abort(&o->a);
    else
        rc = io_atomic_commit(&o->a, err, errlen);
    free(o);
    return rc;
}
