// Backend-independent front of rt_comm.h: local argument checks (so a bad call fails the
// communicator with a message instead of hanging the peers), dispatch to the backend,
// timeouts, status names and message helpers.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"

// ---- names ------------------------------------------------------------------------------

const char* rt_status_name(int status) {
    switch (status) {
        case RT_OK: return "ok";
        case RT_ERR_ARG: return "bad argument";
        case RT_ERR_MISMATCH: return "mismatch";
        case RT_ERR_TIMEOUT: return "timeout";
        case RT_ERR_ABORTED: return "aborted";
        case RT_ERR_BACKEND: return "backend error";
        case RT_ERR_NOMEM: return "out of memory";
        default: return "unknown status";
    }
}

char* rt_redop_str(rt_redop op, char* buf, size_t cap) {
    if (!buf || cap == 0) return buf;
    switch (op.kind) {
        case RT_RED_SUM: snprintf(buf, cap, "sum"); break;
        case RT_RED_AVG: snprintf(buf, cap, "avg"); break;
        case RT_RED_PREMUL_SUM: snprintf(buf, cap, "premul_sum(%.9g)", op.factor); break;
        default: snprintf(buf, cap, "invalid(%d)", (int)op.kind); break;
    }
    return buf;
}

// ---- messages ---------------------------------------------------------------------------

char* rt_comm_msg_prefix(const rt_comm* c, const char* opname, char* buf, size_t cap) {
    snprintf(buf, cap, "rt_comm %s on '%s' (%s, size %d, rank %d, call #%llu)", opname, c->name,
             c->ops->name, c->size, c->rank, (unsigned long long)c->calls);
    return buf;
}

char* rt_comm_rank_list(const int* ranks, int n, char* buf, size_t cap) {
    size_t len = 0;
    if (!buf || cap == 0) return buf;
    buf[0] = '\0';
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && ranks[j + 1] == ranks[j] + 1) j++;
        char item[48];
        if (j > i)
            snprintf(item, sizeof item, "%s%d-%d", i ? ", " : "", ranks[i], ranks[j]);
        else
            snprintf(item, sizeof item, "%s%d", i ? ", " : "", ranks[i]);
        if (len + strlen(item) + 5 >= cap) {
            snprintf(buf + len, cap - len, "%s...", i ? ", " : "");
            break;
        }
        len += (size_t)snprintf(buf + len, cap - len, "%s", item);
        i = j + 1;
    }
    return buf;
}

void rt_comm_set_error(rt_comm* c, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->last_error, sizeof c->last_error, fmt, ap);
    va_end(ap);
}

// ---- timeouts ---------------------------------------------------------------------------

int64_t rt_comm_default_timeout_ms(void) {
    const char* env = getenv("RT_COMM_TIMEOUT_MS");
    if (env && *env) {
        char* end = NULL;
        long long v = strtoll(env, &end, 10);
        if (end && *end == '\0' && v > 0) return (int64_t)v;
    }
    return 60000;
}

void rt_comm_init_base(rt_comm* c, const rt_comm_ops* ops, int rank, int size, const char* name,
                       int64_t timeout_ms) {
    memset(c, 0, sizeof *c);
    c->ops = ops;
    c->rank = rank;
    c->size = size;
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : rt_comm_default_timeout_ms();
    snprintf(c->name, sizeof c->name, "%s", name ? name : "comm");
}

void rt_comm_set_timeout_ms(rt_comm* comm, int64_t ms) {
    if (comm) comm->timeout_ms = ms > 0 ? ms : rt_comm_default_timeout_ms();
}

int64_t rt_comm_timeout_ms(const rt_comm* comm) { return comm ? comm->timeout_ms : 0; }

// ---- accessors --------------------------------------------------------------------------

int rt_comm_rank(const rt_comm* comm) { return comm ? comm->rank : -1; }
int rt_comm_size(const rt_comm* comm) { return comm ? comm->size : -1; }
const char* rt_comm_backend(const rt_comm* comm) { return comm ? comm->ops->name : "none"; }
const char* rt_comm_name(const rt_comm* comm) { return comm ? comm->name : "(null)"; }
const char* rt_comm_last_error(const rt_comm* comm) { return comm ? comm->last_error : ""; }

// ---- local argument checks --------------------------------------------------------------

// A NULL communicator cannot notify anyone: print and return.
static int null_comm(const char* opname) {
    fprintf(stderr, "rt_comm %s: bad argument: comm is NULL\n", opname);
    return RT_ERR_ARG;
}

// Fails the communicator with "PREFIX: bad argument on rank R: WHY" so that peers blocked
// in the same collective return at once instead of timing out.
static int bad_arg(rt_comm* c, const char* opname, const char* fmt, ...) {
    char why[256], prefix[200], msg[RT_COMM_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    snprintf(msg, sizeof msg, "%s: bad argument on rank %d: %s",
             rt_comm_msg_prefix(c, opname, prefix, sizeof prefix), c->rank, why);
    return c->ops->fail(c, RT_ERR_ARG, msg);
}

static int check_common(rt_comm* c, const char* opname, int64_t count, rt_dtype dt) {
    if (count < 0) return bad_arg(c, opname, "count is %lld (must be >= 0)", (long long)count);
    if (!rt_dtype_valid(dt)) return bad_arg(c, opname, "dtype %d is not an rt_dtype", (int)dt);
    return RT_OK;
}

static int check_reduction(rt_comm* c, const char* opname, rt_dtype dt, rt_redop op) {
    if (!rt_dtype_is_float(dt))
        return bad_arg(c, opname, "reductions support fp32, bf16 and fp16, not %s",
                       rt_dtype_name(dt));
    if (op.kind != RT_RED_SUM && op.kind != RT_RED_AVG && op.kind != RT_RED_PREMUL_SUM)
        return bad_arg(c, opname, "reduction kind %d is not an rt_red_kind", (int)op.kind);
    if (op.kind == RT_RED_PREMUL_SUM && !isfinite(op.factor))
        return bad_arg(c, opname, "premul_sum factor %g is not finite", op.factor);
    return RT_OK;
}

// ---- collectives ------------------------------------------------------------------------

int rt_comm_all_gather(rt_comm* comm, const void* sendbuf, void* recvbuf, int64_t sendcount,
                       rt_dtype dtype, void* stream) {
    const char* op = "all_gather";
    if (!comm) return null_comm(op);
    comm->calls++;
    int st = check_common(comm, op, sendcount, dtype);
    if (st) return st;
    if (sendcount > 0 && !sendbuf) return bad_arg(comm, op, "sendbuf is NULL");
    if (sendcount > 0 && !recvbuf) return bad_arg(comm, op, "recvbuf is NULL");
    return comm->ops->all_gather(comm, sendbuf, recvbuf, sendcount, dtype, stream);
}

int rt_comm_reduce_scatter(rt_comm* comm, const void* sendbuf, void* recvbuf, int64_t recvcount,
                           rt_dtype dtype, rt_redop red, void* stream) {
    const char* op = "reduce_scatter";
    if (!comm) return null_comm(op);
    comm->calls++;
    int st = check_common(comm, op, recvcount, dtype);
    if (!st) st = check_reduction(comm, op, dtype, red);
    if (st) return st;
    if (recvcount > 0 && !sendbuf) return bad_arg(comm, op, "sendbuf is NULL");
    if (recvcount > 0 && !recvbuf) return bad_arg(comm, op, "recvbuf is NULL");
    return comm->ops->reduce_scatter(comm, sendbuf, recvbuf, recvcount, dtype, red, stream);
}

int rt_comm_all_reduce(rt_comm* comm, const void* sendbuf, void* recvbuf, int64_t count,
                       rt_dtype dtype, rt_redop red, void* stream) {
    const char* op = "all_reduce";
    if (!comm) return null_comm(op);
    comm->calls++;
    int st = check_common(comm, op, count, dtype);
    if (!st) st = check_reduction(comm, op, dtype, red);
    if (st) return st;
    if (count > 0 && !sendbuf) return bad_arg(comm, op, "sendbuf is NULL");
    if (count > 0 && !recvbuf) return bad_arg(comm, op, "recvbuf is NULL");
    return comm->ops->all_reduce(comm, sendbuf, recvbuf, count, dtype, red, stream);
}

int rt_comm_broadcast(rt_comm* comm, const void* sendbuf, void* recvbuf, int64_t count,
                      rt_dtype dtype, int root, void* stream) {
    const char* op = "broadcast";
    if (!comm) return null_comm(op);
    comm->calls++;
    int st = check_common(comm, op, count, dtype);
    if (st) return st;
    if (root < 0 || root >= comm->size)
        return bad_arg(comm, op, "root %d is outside [0, %d)", root, comm->size);
    if (count > 0 && comm->rank == root && !sendbuf)
        return bad_arg(comm, op, "sendbuf is NULL on the root");
    if (count > 0 && !recvbuf) return bad_arg(comm, op, "recvbuf is NULL");
    return comm->ops->broadcast(comm, sendbuf, recvbuf, count, dtype, root, stream);
}

int rt_comm_barrier(rt_comm* comm, void* stream) {
    if (!comm) return null_comm("barrier");
    comm->calls++;
    return comm->ops->barrier(comm, stream);
}

// A sum of 0s and 1s over the ranks in a buffer of the backend's, equal to the size only
// where every rank said 1 (fp32 counts exactly up to 2^24 ranks).
int rt_comm_all_true(rt_comm* comm, int* flags, int n, void* stream) {
    if (!comm) return null_comm("all_true");
    if (n < 0 || (n > 0 && !flags))
        return bad_arg(comm, "all_true", "%d flags at %p", n, (void*)flags);
    if (n == 0) return RT_OK;
    float* host = malloc((size_t)n * sizeof *host);
    float* buf = rt_comm_buffer_alloc(comm, (size_t)n * sizeof *buf);
    // the peers are entering the all-reduce: fail it for them rather than let them wait
    int st = host && buf ? RT_OK : rt_comm_abort(comm, "all_true: out of memory");
    for (int i = 0; i < n && host; i++) host[i] = flags[i] != 0;
    if (!st) st = rt_comm_buffer_write(comm, buf, host, (size_t)n * sizeof *host);
    if (!st) st = rt_comm_all_reduce(comm, buf, buf, n, RT_F32, rt_red_sum(), stream);
    if (!st) st = rt_comm_sync(comm, stream);
    if (!st) st = rt_comm_buffer_read(comm, host, buf, (size_t)n * sizeof *host);
    for (int i = 0; i < n && !st; i++) flags[i] = host[i] == (float)comm->size;
    rt_comm_buffer_free(comm, buf);
    free(host);
    return st;
}

int rt_comm_split(rt_comm* parent, int color, int key, rt_comm** out) {
    const char* op = "split";
    if (out) *out = NULL;
    if (!parent) return null_comm(op);
    parent->calls++;
    if (!out) return bad_arg(parent, op, "out is NULL");
    if (color < 0 && color != RT_COMM_SPLIT_NONE)
        return bad_arg(parent, op, "color %d is negative (use >= 0, or RT_COMM_SPLIT_NONE to "
                                   "join no group)", color);
    return parent->ops->split(parent, color, key, out);
}

int rt_comm_abort(rt_comm* comm, const char* reason) {
    if (!comm) return null_comm("abort");
    char msg[RT_COMM_ERRLEN];
    snprintf(msg, sizeof msg, "rt_comm '%s' (%s, size %d): rank %d aborted: %s", comm->name,
             comm->ops->name, comm->size, comm->rank, reason ? reason : "no reason given");
    return comm->ops->fail(comm, RT_ERR_ABORTED, msg);
}

void rt_comm_free(rt_comm* comm) {
    if (comm) comm->ops->free(comm);
}

// ---- buffers ----------------------------------------------------------------------------

void* rt_comm_buffer_alloc(rt_comm* comm, size_t bytes) {
    return comm ? comm->ops->buf_alloc(comm, bytes) : NULL;
}

void rt_comm_buffer_free(rt_comm* comm, void* buf) {
    if (comm && buf) comm->ops->buf_free(comm, buf);
}

int rt_comm_buffer_write(rt_comm* comm, void* dst, const void* host_src, size_t bytes) {
    if (!comm || ((!dst || !host_src) && bytes)) return RT_ERR_ARG;
    return comm->ops->buf_write(comm, dst, host_src, bytes);
}

int rt_comm_buffer_read(rt_comm* comm, void* host_dst, const void* src, size_t bytes) {
    if (!comm || ((!host_dst || !src) && bytes)) return RT_ERR_ARG;
    return comm->ops->buf_read(comm, host_dst, src, bytes);
}

int rt_comm_sync(rt_comm* comm, void* stream) {
    if (!comm) return RT_ERR_ARG;
    return comm->ops->sync(comm, stream);
}
