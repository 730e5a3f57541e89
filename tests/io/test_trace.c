// Tests for the Chrome trace writer: events recorded from many threads at once land in
// a file that parses as JSON (our parser, and Python's json module when python3 is
// there) with the structure chrome://tracing / Perfetto expect, names are escaped, and a
// full buffer drops events, counts them and says so in the file.
#include <pthread.h>
#include <stdint.h>

#include "io_json.h"
#include "io_test.h"
#include "rt_trace.h"

static char err[512];

// ---- reading a trace back -----------------------------------------------------------

typedef struct {
    io_json_doc *doc;
    const io_json *events;  // the traceEvents array
} trace_file;

static int load_trace(const char *path, trace_file *tf) {
    size_t n;
    unsigned char *text = read_bytes(path, &n);
    tf->doc = NULL;
    tf->events = NULL;
    if (!text) return -1;
    int rc = io_json_parse((const char *)text, n, &tf->doc, err, sizeof err);
    free(text);
    if (rc) return -1;
    tf->events = io_json_get(io_json_root(tf->doc), "traceEvents");
    return tf->events && tf->events->type == IO_JSON_ARRAY ? 0 : -1;
}

static const char *str_of(const io_json *obj, const char *key) {
    const io_json *v = io_json_get(obj, key);
    return v && v->type == IO_JSON_STRING ? v->str : NULL;
}

static int is(const io_json *obj, const char *key, const char *want) {
    const char *s = str_of(obj, key);
    return s && strcmp(s, want) == 0;
}

static double num_of(const io_json *obj, const char *key) {
    const io_json *v = io_json_get(obj, key);
    return v && v->type == IO_JSON_NUMBER ? v->num : -1;
}

// Python's json module as an independent validator; returns 1 ok, 0 bad, -1 no python.
static int python_parses(const char *path) {
    if (system("command -v python3 >/dev/null 2>&1") != 0) return -1;
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
             "assert isinstance(d[\"traceEvents\"], list)' '%s'", path);
    return system(cmd) == 0 ? 1 : 0;
}

// ---- concurrent recording -----------------------------------------------------------

#define RANKS 2
#define THREADS_PER_RANK 3
#define PER_THREAD 200

typedef struct {
    rt_trace *t;
    int rank, thread;
} worker;

static void *record_thread(void *p) {
    worker *w = p;
    static const int tids[] = {RT_TRACE_COMPUTE, RT_TRACE_ALL_GATHER, RT_TRACE_REDUCE_SCATTER};
    static const char *names[] = {"matmul layers.0", "all_gather layers.0", "reduce_scatter layers.0"};
    for (int i = 0; i < PER_THREAD; i++) {
        double ts = rt_trace_now_us(w->t);
        rt_trace_complete(w->t, w->rank, tids[w->thread], names[w->thread],
                          w->thread ? "comm" : "compute", ts, 1.5, w->thread ? "bytes" : NULL,
                          "4096");
    }
    return NULL;
}

static void test_concurrent(void) {
    rt_trace *t = NULL;
    int rc = rt_trace_create(RANKS, 4096, 0, &t, err, sizeof err);
    CHECK(rc == 0, "create trace for %d ranks (%s)", RANKS, rc ? err : "ok");
    if (rc) return;
    pthread_t th[RANKS * THREADS_PER_RANK];
    worker w[RANKS * THREADS_PER_RANK];
    for (int r = 0; r < RANKS; r++)
        for (int k = 0; k < THREADS_PER_RANK; k++) {
            w[r * THREADS_PER_RANK + k] = (worker){t, r, k};
            pthread_create(&th[r * THREADS_PER_RANK + k], NULL, record_thread,
                           &w[r * THREADS_PER_RANK + k]);
        }
    // FSDP events from the main thread while the workers record.
    rt_trace_instant(t, 0, RT_TRACE_COMPUTE, "unshard layers.0", "fsdp", 10.0, "state", "FORWARD");
    rt_trace_instant(t, 1, RT_TRACE_COMPUTE, "post_backward layers.1", "fsdp", 20.0, "state",
                     "POST_BACKWARD");
    rt_trace_instant(t, 0, RT_TRACE_COMPUTE, "reshard \"root\"\n\\ \xff", "fsdp", 30.0, NULL, NULL);
    CHECK(rt_trace_thread_name(t, 1, 7, "optimizer") == 0, "custom name for tid 7");
    CHECK(rt_trace_thread_name(t, 1, RT_TRACE_MAX_TIDS, "x") == -1, "tid out of range refused");
    for (int i = 0; i < RANKS * THREADS_PER_RANK; i++) pthread_join(th[i], NULL);
    rt_trace_complete(t, 5, 0, "bad rank", "x", 0, 1, NULL, NULL);  // ignored, no crash

    uint64_t want = RANKS * THREADS_PER_RANK * PER_THREAD + 3;
    CHECK(rt_trace_recorded(t) == want && rt_trace_dropped(t) == 0,
          "recorded %llu events (want %llu), dropped %llu", (unsigned long long)rt_trace_recorded(t),
          (unsigned long long)want, (unsigned long long)rt_trace_dropped(t));
    const char *path = tpath("trace.json");
    rc = rt_trace_write(t, path, err, sizeof err);
    CHECK(rc == 0 && !file_exists(tpath("trace.json.tmp")), "write %s (%s)", "trace.json",
          rc ? err : "ok");
    rt_trace_destroy(t);

    trace_file tf;
    rc = load_trace(path, &tf);
    CHECK(rc == 0, "trace parses as JSON with a traceEvents array (%s)", rc ? err : "ok");
    if (rc) return;
    const io_json *root = io_json_root(tf.doc);
    CHECK(is(root, "displayTimeUnit", "ms"), "displayTimeUnit is \"ms\"");
    const io_json *other = io_json_get(root, "otherData");
    CHECK(other && num_of(other, "dropped_events") == 0 &&
              num_of(other, "recorded_events") == (double)want,
          "otherData: recorded_events %g, dropped_events %g", num_of(other, "recorded_events"),
          num_of(other, "dropped_events"));

    int n_x[RANKS][3] = {{0}}, bad = 0, thread_names = 0, have_opt = 0, args_ok = 0;
    int unshard = 0, post_bw = 0, escaped = 0;
    for (const io_json *e = tf.events->child; e; e = e->next) {
        const char *ph = str_of(e, "ph");
        double pid = num_of(e, "pid"), tid = num_of(e, "tid");
        if (!ph || pid < 0 || tid < 0 || !str_of(e, "name")) {
            bad++;
            continue;
        }
        if (strcmp(ph, "M") == 0) {
            if (is(e, "name", "thread_name")) {
                const char *nm = str_of(io_json_get(e, "args"), "name");
                thread_names += nm && ((tid == 0 && !strcmp(nm, "compute")) ||
                                       (tid == 2 && !strcmp(nm, "all_gather")) ||
                                       (tid == 3 && !strcmp(nm, "reduce_scatter")));
                have_opt += nm && pid == 1 && tid == 7 && !strcmp(nm, "optimizer");
            }
        } else if (strcmp(ph, "X") == 0) {
            if (num_of(e, "ts") < 0 || num_of(e, "dur") != 1.5 || pid >= RANKS) {
                bad++;
                continue;
            }
            int k = tid == 0 ? 0 : tid == 2 ? 1 : tid == 3 ? 2 : -1;
            if (k < 0) bad++; else n_x[(int)pid][k]++;
            if (k > 0) args_ok += is(io_json_get(e, "args"), "bytes", "4096");
        } else if (strcmp(ph, "i") == 0) {
            const io_json *args = io_json_get(e, "args");
            unshard += is(e, "name", "unshard layers.0") && pid == 0 && is(args, "state", "FORWARD") &&
                       num_of(e, "ts") == 10.0 && is(e, "cat", "fsdp");
            post_bw += is(e, "name", "post_backward layers.1") && pid == 1 &&
                       is(args, "state", "POST_BACKWARD");
            escaped += is(e, "name", "reshard \"root\"\n\\ \xef\xbf\xbd");
        } else {
            bad++;
        }
    }
    int all = 1;
    for (int r = 0; r < RANKS; r++)
        for (int k = 0; k < 3; k++) all &= n_x[r][k] == PER_THREAD;
    CHECK(all && bad == 0, "complete events per rank x stream all %d (rank0 compute %d, "
          "all_gather %d, reduce_scatter %d); malformed events %d", PER_THREAD, n_x[0][0],
          n_x[0][1], n_x[0][2], bad);
    CHECK(args_ok == RANKS * 2 * PER_THREAD, "collective events carry args {bytes: \"4096\"} (%d)",
          args_ok);
    CHECK(thread_names == 3 * RANKS, "thread_name metadata compute/all_gather/reduce_scatter on "
          "every rank (%d of %d)", thread_names, 3 * RANKS);
    CHECK(have_opt == 1, "custom thread name 'optimizer' on rank 1 tid 7");
    CHECK(unshard == 1, "instant event 'unshard layers.0' on rank 0, args {state: FORWARD}");
    CHECK(post_bw == 1, "instant event 'post_backward layers.1' on rank 1, args {state: POST_BACKWARD}");
    CHECK(escaped == 1, "name with quote, newline, backslash and a bad UTF-8 byte round-trips "
          "(bad byte as U+FFFD)");
    io_json_free(tf.doc);

    int py = python_parses(path);
    if (py < 0)
        printf("note: python3 not found, skipped the json.load cross-check\n");
    else
        CHECK(py == 1, "python3 json.load accepts the trace");
}

// ---- bounded memory -----------------------------------------------------------------

static void test_dropped(void) {
    rt_trace *t = NULL;
    int rc = rt_trace_create(1, 10, 0, &t, err, sizeof err);
    CHECK(rc == 0, "create trace with room for 10 events");
    if (rc) return;
    for (int i = 0; i < 25; i++)
        rt_trace_complete(t, 0, RT_TRACE_COMPUTE, "step", "compute", i * 10.0, 5.0, NULL, NULL);
    CHECK(rt_trace_recorded(t) == 10 && rt_trace_dropped(t) == 15, "25 recorded into 10 slots: "
          "kept %llu, dropped %llu", (unsigned long long)rt_trace_recorded(t),
          (unsigned long long)rt_trace_dropped(t));
    const char *path = tpath("dropped.json");
    rc = rt_trace_write(t, path, err, sizeof err);
    rt_trace_destroy(t);
    trace_file tf;
    rc = rc ? rc : load_trace(path, &tf);
    CHECK(rc == 0, "trace with dropped events still parses");
    if (rc) return;
    const io_json *other = io_json_get(io_json_root(tf.doc), "otherData");
    CHECK(num_of(other, "dropped_events") == 15 && num_of(other, "max_events_per_rank") == 10,
          "otherData says dropped_events 15, max_events_per_rank 10");
    int said = 0, kept = 0;
    for (const io_json *e = tf.events->child; e; e = e->next) {
        const char *nm = str_of(e, "name");
        said += nm && strstr(nm, "15 events dropped on rank 0") != NULL;
        kept += is(e, "ph", "X");
    }
    CHECK(said == 1 && kept == 10, "the trace shows an instant 'trace buffer full: 15 events "
          "dropped on rank 0' and the 10 kept events (%d)", kept);
    io_json_free(tf.doc);

    // A small string pool fills with distinct names: events beyond it are dropped too,
    // while repeated names cost nothing (interned).
    rc = rt_trace_create(1, 1000, 256, &t, err, sizeof err);
    for (int i = 0; i < 500; i++) {
        char name[32];
        snprintf(name, sizeof name, "distinct name %d", i);
        rt_trace_instant(t, 0, 0, name, "x", i, NULL, NULL);
    }
    uint64_t kept_distinct = rt_trace_recorded(t), dropped = rt_trace_dropped(t);
    for (int i = 0; i < 300; i++) rt_trace_instant(t, 0, 0, "distinct name 0", "x", i, NULL, NULL);
    CHECK(rc == 0 && kept_distinct < 20 && dropped == 500 - kept_distinct &&
              rt_trace_recorded(t) == kept_distinct + 300,
          "256-byte string pool: %llu distinct names kept, %llu dropped; 300 repeats of a kept "
          "name all recorded", (unsigned long long)kept_distinct, (unsigned long long)dropped);
    rt_trace_destroy(t);
}

// The root group's FQN is "": its spans are named "root", its events keep `unshard ""`.
static void test_root_name(void) {
    rt_trace *t = NULL;
    int rc = rt_trace_create(1, 0, 0, &t, err, sizeof err);
    CHECK(rc == 0, "create trace for the root's spans");
    if (rc) return;
    rt_trace_complete(t, 0, RT_TRACE_ALL_GATHER, "", "all_gather", 1, 2, NULL, NULL);
    rt_trace_instant(t, 0, 0, "unshard \"\"", "fsdp", 1, "state", "FORWARD");
    rc = rt_trace_write(t, tpath("root.json"), err, sizeof err);
    rt_trace_destroy(t);
    trace_file tf = {0};
    rc = rc ? rc : load_trace(tpath("root.json"), &tf);
    int root = 0, empty = 0, event = 0;
    for (const io_json *e = rc ? NULL : tf.events->child; e; e = e->next) {
        root += is(e, "ph", "X") && is(e, "name", "root");
        empty += is(e, "name", "");
        event += is(e, "ph", "i") && is(e, "name", "unshard \"\"");
    }
    CHECK(rc == 0 && root == 1 && empty == 0 && event == 1, "a span named \"\" (the root group) is "
          "written as \"root\", the event keeps unshard \"\" (root %d, empty %d, event %d)", root, empty, event);
    if (tf.doc) io_json_free(tf.doc);
}

static void test_errors(void) {
    rt_trace *t = NULL;
    int rc = rt_trace_create(0, 0, 0, &t, err, sizeof err);
    CHECK_ERR(rc, err, "zero ranks", "rank count 0");
    rc = rt_trace_create(1, 0, 0, &t, err, sizeof err);
    rt_trace_complete(t, 0, 0, "a", "b", -5, -1, NULL, NULL);  // clamped, still valid JSON
    rc = rt_trace_write(t, tpath("no/dir/trace.json"), err, sizeof err);
    CHECK_ERR(rc, err, "unwritable trace path", "cannot create", "trace.json.tmp");
    rc = rt_trace_write(t, tpath("t2.json"), err, sizeof err);
    trace_file tf = {0};
    CHECK(rc == 0 && load_trace(tpath("t2.json"), &tf) == 0, "negative duration clamped, file valid");
    if (tf.doc) io_json_free(tf.doc);
    rt_trace_destroy(t);
}

int main(void) {
    printf("== trace ==\n");
    test_concurrent();
    test_dropped();
    test_root_name();
    test_errors();
    return check_summary();
}
