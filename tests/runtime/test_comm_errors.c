// Failure handling of rt_comm (threads backend): every failure class ends with a status
// on every rank, one clear line naming the operation and the ranks at fault, and a
// non-zero launcher result, never a hang or a crash.
//
// Robust to a loaded machine: a scenario whose point is not the timeout runs with a long
// one (30 s), so a slow thread start cannot turn a mismatch into a timeout. Where the
// point is the timeout (500 ms), the late rank waits for a condition, not a clock: it
// joins only after the punctual ranks have returned from the call that timed out (or
// after 30 s, when the timeout never fired, which then fails the check instead of
// hanging). Timing checks have a tight lower bound (never before the timeout) and a
// generous upper one (far below the 60 s default: the set timeout was the one used).
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "rt_comm.h"

// ---- shared state -----------------------------------------------------------------------

#define MAXW 128

typedef struct ctx {
    int scenario;
    int status[MAXW];        // first failing status per rank (0 if none)
    int later[MAXW];         // status of a call made after the failure
    char msg[MAXW][512];     // rt_comm_last_error after the failure
    double elapsed[MAXW];    // seconds spent in the failing call
    int64_t timeout[MAXW];
    atomic_int punctual;     // ranks that reached the failing call, all but the late one
    atomic_int returned;     // punctual ranks back from the failing call
} ctx;

#define SHORT_MS 500     // the timeout where timing out is the point
#define LONG_MS 30000    // where it is not; also the late rank's bound on its wait

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

// Waits until *v >= want, or LONG_MS.
static void wait_for(atomic_int* v, int want) {
    double t0 = seconds();
    while (atomic_load(v) < want && seconds() - t0 < LONG_MS / 1000.0) sleep_ms(1);
}

enum {
    S_COUNT, S_DTYPE, S_OP, S_RED, S_NULLBUF, S_NEGCOUNT, S_ROOT, S_INTRED, S_NANFACTOR,
    S_SPLITCOLOR, S_NEVER_JOINS, S_EXITS, S_ABORT, S_SUB_MISSING, S_ENV_TIMEOUT,
};

// ---- the scenarios ----------------------------------------------------------------------

static void rank_fn(rt_comm* comm, void* arg) {
    ctx* c = arg;
    int r = rt_comm_rank(comm), n = rt_comm_size(comm);
    float buf[64] = {0}, out[64 * MAXW];
    int st = 0;
    int timing = c->scenario == S_NEVER_JOINS || c->scenario == S_SUB_MISSING;
    if (c->scenario != S_ENV_TIMEOUT) rt_comm_set_timeout_ms(comm, timing ? SHORT_MS : LONG_MS);
    c->timeout[r] = rt_comm_timeout_ms(comm);
    double t0 = seconds();
    rt_comm* sub = NULL;
    switch (c->scenario) {
        case S_COUNT:  // rank 2 gathers 5 elements, the others 4
            st = rt_comm_all_gather(comm, buf, out, r == 2 ? 5 : 4, RT_F32, NULL);
            break;
        case S_DTYPE:
            st = rt_comm_all_gather(comm, buf, out, 4, r == 1 ? RT_BF16 : RT_F32, NULL);
            break;
        case S_OP:
            if (r == 1) st = rt_comm_reduce_scatter(comm, out, buf, 4, RT_F32, rt_red_sum(), NULL);
            else st = rt_comm_all_gather(comm, buf, out, 4, RT_F32, NULL);
            break;
        case S_RED:
            st = rt_comm_all_reduce(comm, buf, buf, 4, RT_F32, r == 3 ? rt_red_avg() : rt_red_sum(), NULL);
            break;
        case S_NULLBUF:
            st = rt_comm_all_gather(comm, buf, r == 1 ? NULL : out, 4, RT_F32, NULL);
            break;
        case S_NEGCOUNT:
            st = rt_comm_reduce_scatter(comm, out, buf, r == 0 ? -3 : 4, RT_F32, rt_red_sum(), NULL);
            break;
        case S_ROOT:
            st = rt_comm_broadcast(comm, buf, buf, 4, RT_F32, r == 2 ? n : 0, NULL);
            break;
        case S_INTRED:
            st = rt_comm_all_reduce(comm, buf, buf, 4, r == 0 ? RT_I32 : RT_F32, rt_red_sum(), NULL);
            break;
        case S_NANFACTOR:
            st = rt_comm_all_reduce(comm, buf, buf, 4, RT_F32,
                                    rt_red_premul_sum(r == 1 ? 0.0 / 0.0 : 0.5), NULL);
            break;
        case S_SPLITCOLOR:
            st = rt_comm_split(comm, r == 3 ? -5 : 0, r, &sub);
            break;
        case S_NEVER_JOINS:  // the last rank joins after the others timed out
            if (r == n - 1) {
                wait_for(&c->returned, n - 1);
            } else {
                // The punctual ranks start the barrier together: with 128 threads on a loaded
                // machine, the first could otherwise time out before the last were created.
                atomic_fetch_add(&c->punctual, 1);
                while (atomic_load(&c->punctual) < n - 1) sleep_ms(1);
                t0 = seconds();
            }
            st = rt_comm_barrier(comm, NULL);
            if (r != n - 1) atomic_fetch_add(&c->returned, 1);
            break;
        case S_EXITS:  // rank 3 returns without joining
            if (r == 3) return;
            st = rt_comm_barrier(comm, NULL);
            break;
        case S_ABORT:
            if (r == 0) st = rt_comm_abort(comm, "rank 0 found a NaN loss");
            else st = rt_comm_barrier(comm, NULL);
            break;
        case S_SUB_MISSING: {  // two groups of 4; in the second, rank 6 skips an all-gather
            rt_comm_set_timeout_ms(comm, LONG_MS);  // the split is not what times out
            st = rt_comm_split(comm, r / 4, r, &sub);
            if (st) break;
            rt_comm_set_timeout_ms(sub, SHORT_MS);
            if (r / 4 == 1 && r != 6) {
                atomic_fetch_add(&c->punctual, 1);
                while (atomic_load(&c->punctual) < 3) sleep_ms(1);
            }
            t0 = seconds();
            if (r != 6) st = rt_comm_all_gather(sub, buf, out, 4, RT_F32, NULL);
            else wait_for(&c->returned, 3);  // never joins; leaves after its peers timed out
            if (r / 4 == 1 && r != 6) atomic_fetch_add(&c->returned, 1);
            break;
        }
        case S_ENV_TIMEOUT:  // rank 0 never joins; returns only after the others timed out
            if (r == 0) {
                wait_for(&c->returned, n - 1);
            } else {
                st = rt_comm_barrier(comm, NULL);
                atomic_fetch_add(&c->returned, 1);
            }
            break;
    }
    c->elapsed[r] = seconds() - t0;
    c->status[r] = st;
    snprintf(c->msg[r], sizeof c->msg[r], "%s", rt_comm_last_error(sub ? sub : comm));
    // A failed communicator stays failed: a later call fails at once with the same status.
    rt_comm* after = (c->scenario == S_SUB_MISSING && sub) ? sub : comm;
    c->later[r] = rt_comm_barrier(after, NULL);
    rt_comm_free(sub);
}

// ---- driver -----------------------------------------------------------------------------

// A timeout message says how long the rank waited: at least the timeout it was given, and
// well below the 60 s default (so that timeout, not another, was the one applied). The
// upper bound leaves 10 s for a loaded machine to schedule the waiting thread.
static void check_waited(const char* what, const char* msg, int64_t timeout) {
    const char* p = strstr(msg, "timed out after ");
    long long ms = -1;
    if (p) sscanf(p, "timed out after %lld ms", &ms);
    CHECK(ms >= timeout && ms < timeout + 10000,
          "%s: the message says it waited %lld ms (timeout %lld ms; want at least that, and "
          "less than 10 s more)", what, ms, (long long)timeout);
}

// Runs a scenario and checks: the launcher failed, the given ranks got `want`, their
// message contains every needle, and a later call returned the same status.
static void expect(const char* what, int scenario, int world, int want, const char* needle1,
                   const char* needle2, int first, int last) {
    static ctx c;
    memset(&c, 0, sizeof c);
    c.scenario = scenario;
    double t0 = seconds();
    int rc = rt_threads_run(world, rank_fn, &c);
    double dt = seconds() - t0;
    int ok_status = 1, ok_msg = 1, ok_later = 1;
    for (int r = first; r <= last; r++) {
        if (c.status[r] != want) ok_status = 0;
        if (!strstr(c.msg[r], needle1) || (needle2 && !strstr(c.msg[r], needle2))) ok_msg = 0;
        if (c.later[r] != want) ok_later = 0;
    }
    CHECK(rc != 0 && ok_status && ok_msg && ok_later,
          "%s (world %d, %.2f s): launcher %d, ranks %d-%d status %s (want %s), later calls %s, "
          "message: \"%s\"",
          what, world, dt, rc, first, last, ok_status ? "ok" : "WRONG", rt_status_name(want),
          ok_later ? "fail the same" : "WRONG", c.msg[first]);
    if (want == RT_ERR_TIMEOUT && strstr(c.msg[first], "timed out after "))
        check_waited(what, c.msg[first], c.timeout[first]);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    expect("mismatched count", S_COUNT, 4, RT_ERR_MISMATCH, "all_gather", "count mismatch: rank 0 has 4 elements, rank 2 has 5", 0, 3);
    expect("mismatched dtype", S_DTYPE, 4, RT_ERR_MISMATCH, "dtype mismatch", "rank 1 has bf16", 0, 3);
    expect("mismatched operation", S_OP, 4, RT_ERR_MISMATCH, "operation mismatch", "rank 1 has reduce_scatter", 0, 3);
    expect("mismatched reduction", S_RED, 4, RT_ERR_MISMATCH, "reduction mismatch", "rank 3 has avg", 0, 3);
    expect("NULL recvbuf on rank 1", S_NULLBUF, 4, RT_ERR_ARG, "all_gather", "bad argument on rank 1: recvbuf is NULL", 0, 3);
    expect("negative count on rank 0", S_NEGCOUNT, 4, RT_ERR_ARG, "reduce_scatter", "count is -3", 0, 3);
    expect("broadcast root out of range on rank 2", S_ROOT, 4, RT_ERR_ARG, "broadcast", "root 4 is outside [0, 4)", 0, 3);
    expect("reduction over int32", S_INTRED, 4, RT_ERR_ARG, "all_reduce", "not int32", 0, 3);
    expect("premul_sum factor NaN", S_NANFACTOR, 4, RT_ERR_ARG, "all_reduce", "not finite", 0, 3);
    expect("split with color -5", S_SPLITCOLOR, 4, RT_ERR_ARG, "split", "color -5 is negative", 0, 3);
    expect("a rank that joins too late", S_NEVER_JOINS, 4, RT_ERR_TIMEOUT, "timed out after", "barrier", 0, 3);
    expect("rank 127 of 128 joins too late", S_NEVER_JOINS, 128, RT_ERR_TIMEOUT, "waiting for ranks 127", NULL, 0, 127);
    expect("a rank that returns without joining", S_EXITS, 4, RT_ERR_TIMEOUT, "ranks 3 returned from their function", NULL, 0, 2);
    expect("rt_comm_abort by rank 0", S_ABORT, 4, RT_ERR_ABORTED, "rank 0 aborted: rank 0 found a NaN loss", NULL, 0, 3);
    expect("sub-communicator member skips a collective", S_SUB_MISSING, 8, RT_ERR_TIMEOUT,
           "world/split(color 1)", "waiting for ranks 2 (world ranks 6)", 4, 5);

    // The exits case must not wait for the timeout (30 s): reported at once, 10 s allowing
    // for a loaded machine. The late case waits at least the timeout, not much more.
    static ctx c;
    memset(&c, 0, sizeof c);
    c.scenario = S_EXITS;
    rt_threads_run(4, rank_fn, &c);
    CHECK(c.elapsed[0] < 10.0, "a rank that exited is reported without waiting for the timeout: "
          "%.3f s (timeout %d s)", c.elapsed[0], LONG_MS / 1000);
    memset(&c, 0, sizeof c);
    c.scenario = S_NEVER_JOINS;
    rt_threads_run(4, rank_fn, &c);
    // The rank that entered first times out and fails the barrier for the others, which
    // may have entered a little later: the longest wait is the one at least the timeout.
    double longest = 0.0;
    for (int r = 0; r < 3; r++) longest = c.elapsed[r] > longest ? c.elapsed[r] : longest;
    CHECK(longest >= SHORT_MS / 1000.0 && longest < SHORT_MS / 1000.0 + 10.0,
          "a late rank is reported after the timeout: the punctual ranks waited up to %.3f s "
          "(timeout %.1f s; want at least that, and less than 10 s more)", longest,
          SHORT_MS / 1000.0);

    // RT_COMM_TIMEOUT_MS sets the default.
    setenv("RT_COMM_TIMEOUT_MS", "400", 1);
    memset(&c, 0, sizeof c);
    c.scenario = S_ENV_TIMEOUT;
    int rc = rt_threads_run(3, rank_fn, &c);
    CHECK(rc != 0 && c.timeout[1] == 400 && c.status[1] == RT_ERR_TIMEOUT && strstr(c.msg[1], "timed out after "),
          "RT_COMM_TIMEOUT_MS=400: timeout %lld ms, status %s, \"%s\"", (long long)c.timeout[1],
          rt_status_name(c.status[1]), c.msg[1]);
    check_waited("RT_COMM_TIMEOUT_MS=400", c.msg[1], 400);
    setenv("RT_COMM_TIMEOUT_MS", "junk", 1);
    CHECK(rt_comm_default_timeout_ms() == 60000, "RT_COMM_TIMEOUT_MS=junk falls back to 60000 ms");
    unsetenv("RT_COMM_TIMEOUT_MS");

    // Bad arguments outside a communicator.
    float x = 0;
    CHECK(rt_comm_all_gather(NULL, &x, &x, 1, RT_F32, NULL) == RT_ERR_ARG, "all_gather on a NULL comm returns bad argument");
    CHECK(rt_comm_barrier(NULL, NULL) == RT_ERR_ARG, "barrier on a NULL comm returns bad argument");
    CHECK(rt_comm_size(NULL) == -1 && rt_comm_rank(NULL) == -1, "size/rank of a NULL comm are -1");
    CHECK(rt_threads_run(0, rank_fn, &c) == 2, "world size 0 is rejected (status 2)");
    CHECK(rt_threads_run(-4, rank_fn, &c) == 2, "world size -4 is rejected (status 2)");
    return check_summary();
}
