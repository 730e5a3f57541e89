// NCCL backend of rt_comm.h (librt_nccl.a): one thread per GPU in one process, every
// communicator an ncclComm_t; collectives are enqueued on the caller's stream (an opaque
// cudaStream_t, NULL = the legacy default stream). Agreement between ranks is NCCL's
// business: a mismatch there is undefined behaviour or a hang, so the generated code
// must (and the conformance tests do) keep ranks in step.
//
// Differences from the threads backend, by NCCL's design: reductions accumulate in the
// buffer type (bf16/fp16 round at every step), and a rank that never joins is not timed
// out here (NCCL's own watchdog-free API blocks); rt_comm_abort calls ncclCommAbort.
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"

// ---- types ------------------------------------------------------------------------------

typedef struct nhandle {
    rt_comm base;  // first, so rt_comm* and nhandle* convert
    ncclComm_t nc;
    int device;
    int failed;     // sticky status
    int* scratch;   // one device int for barriers
    int owns_nc;
    int launcher_owned;  // rt_nccl_run's world handles: rt_comm_free ignores them
} nhandle;

static const rt_comm_ops nccl_ops;

// ---- errors -----------------------------------------------------------------------------

static int n_fail(rt_comm* c, int status, const char* msg) {
    nhandle* h = (nhandle*)c;
    if (!h->failed) {
        h->failed = status;
        snprintf(c->last_error, sizeof c->last_error, "%s", msg);
        fflush(stdout);
        fprintf(stderr, "%s\n", msg);
        fflush(stderr);
        // Peers may be blocked inside NCCL waiting for this rank: abort the communicator
        // so NCCL tears the connections down instead of hanging.
        if (h->nc) {
            ncclCommAbort(h->nc);
            h->nc = NULL;
        }
    }
    return h->failed;
}

static int nccl_err(nhandle* h, const char* opname, ncclResult_t r) {
    char prefix[200], msg[RT_COMM_ERRLEN];
    const char* last = h->nc ? ncclGetLastError(h->nc) : "";
    snprintf(msg, sizeof msg, "%s: NCCL error %d: %s%s%s (hint: rerun with NCCL_DEBUG=INFO)",
             rt_comm_msg_prefix(&h->base, opname, prefix, sizeof prefix), (int)r,
             ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
    return n_fail(&h->base, RT_ERR_BACKEND, msg);
}

static int cuda_err(nhandle* h, const char* opname, cudaError_t e) {
    char prefix[200], msg[RT_COMM_ERRLEN];
    snprintf(msg, sizeof msg, "%s: CUDA error %d: %s",
             rt_comm_msg_prefix(&h->base, opname, prefix, sizeof prefix), (int)e,
             cudaGetErrorString(e));
    return n_fail(&h->base, RT_ERR_BACKEND, msg);
}

static int refuse_if_failed(nhandle* h) {
    return h->failed;  // last_error already holds the message
}

// ---- mapping ----------------------------------------------------------------------------

static ncclDataType_t nccl_type(rt_dtype dt) {
    switch (dt) {
        case RT_F32: return ncclFloat32;
        case RT_BF16: return ncclBfloat16;
        case RT_F16: return ncclFloat16;
        case RT_I32: return ncclInt32;
        default: return ncclInt64;
    }
}

// Builds the NCCL reduction; *custom says it must be destroyed after the call (NCCL
// allows that as soon as the enqueuing call returned).
static ncclResult_t nccl_red(nhandle* h, rt_redop op, rt_dtype dt, ncclRedOp_t* out, int* custom) {
    *custom = 0;
    if (op.kind == RT_RED_SUM) {
        *out = ncclSum;
        return ncclSuccess;
    }
    if (op.kind == RT_RED_AVG) {
        *out = ncclAvg;
        return ncclSuccess;
    }
    // The scalar has the buffer's type, so round the factor the same way the data is.
    float f32 = (float)op.factor;
    uint16_t f16 = dt == RT_BF16 ? rt_f32_to_bf16(f32) : rt_f32_to_f16(f32);
    void* scalar = dt == RT_F32 ? (void*)&f32 : (void*)&f16;
    *custom = 1;
    return ncclRedOpCreatePreMulSum(out, scalar, nccl_type(dt), ncclScalarHostImmediate, h->nc);
}

// ---- collectives ------------------------------------------------------------------------

static int n_all_gather(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                        void* stream) {
    nhandle* h = (nhandle*)c;
    if (refuse_if_failed(h)) return h->failed;
    ncclResult_t r = ncclAllGather(send, recv, (size_t)count, nccl_type(dt), h->nc,
                                   (cudaStream_t)stream);
    return r == ncclSuccess ? 0 : nccl_err(h, "all_gather", r);
}

static int n_reduce(nhandle* h, const char* opname, int all, const void* send, void* recv,
                    int64_t count, rt_dtype dt, rt_redop op, void* stream) {
    if (refuse_if_failed(h)) return h->failed;
    ncclRedOp_t red;
    int custom;
    ncclResult_t r = nccl_red(h, op, dt, &red, &custom);
    if (r != ncclSuccess) return nccl_err(h, opname, r);
    if (all)
        r = ncclAllReduce(send, recv, (size_t)count, nccl_type(dt), red, h->nc, (cudaStream_t)stream);
    else
        r = ncclReduceScatter(send, recv, (size_t)count, nccl_type(dt), red, h->nc,
                              (cudaStream_t)stream);
    if (custom) ncclRedOpDestroy(red, h->nc);
    return r == ncclSuccess ? 0 : nccl_err(h, opname, r);
}

static int n_reduce_scatter(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                            rt_redop op, void* stream) {
    return n_reduce((nhandle*)c, "reduce_scatter", 0, send, recv, count, dt, op, stream);
}

static int n_all_reduce(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                        rt_redop op, void* stream) {
    return n_reduce((nhandle*)c, "all_reduce", 1, send, recv, count, dt, op, stream);
}

static int n_broadcast(rt_comm* c, const void* send, void* recv, int64_t count, rt_dtype dt,
                       int root, void* stream) {
    nhandle* h = (nhandle*)c;
    if (refuse_if_failed(h)) return h->failed;
    ncclResult_t r = ncclBroadcast(send, recv, (size_t)count, nccl_type(dt), root, h->nc,
                                   (cudaStream_t)stream);
    return r == ncclSuccess ? 0 : nccl_err(h, "broadcast", r);
}

static int n_barrier(rt_comm* c, void* stream) {
    nhandle* h = (nhandle*)c;
    if (refuse_if_failed(h)) return h->failed;
    ncclResult_t r = ncclAllReduce(h->scratch, h->scratch, 1, ncclInt32, ncclSum, h->nc,
                                   (cudaStream_t)stream);
    if (r != ncclSuccess) return nccl_err(h, "barrier", r);
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
    return e == cudaSuccess ? 0 : cuda_err(h, "barrier", e);
}

// ---- handles ----------------------------------------------------------------------------

static nhandle* handle_new(ncclComm_t nc, int device, const char* name, int64_t timeout_ms) {
    int rank = 0, size = 0;
    if (ncclCommUserRank(nc, &rank) != ncclSuccess || ncclCommCount(nc, &size) != ncclSuccess)
        return NULL;
    nhandle* h = calloc(1, sizeof *h);
    if (!h) return NULL;
    rt_comm_init_base(&h->base, &nccl_ops, rank, size, name, timeout_ms);
    h->nc = nc;
    h->device = device;
    h->owns_nc = 1;
    if (cudaMalloc((void**)&h->scratch, sizeof(int)) != cudaSuccess ||
        cudaMemset(h->scratch, 0, sizeof(int)) != cudaSuccess) {
        free(h);
        return NULL;
    }
    return h;
}

static int n_split(rt_comm* c, int color, int key, rt_comm** out) {
    nhandle* h = (nhandle*)c;
    if (refuse_if_failed(h)) return h->failed;
    ncclComm_t nc = NULL;
    ncclResult_t r = ncclCommSplit(h->nc, color == RT_COMM_SPLIT_NONE ? NCCL_SPLIT_NOCOLOR : color,
                                   key, &nc, NULL);
    if (r != ncclSuccess) return nccl_err(h, "split", r);
    if (!nc) return 0;  // RT_COMM_SPLIT_NONE
    char name[96];
    snprintf(name, sizeof name, "%.60s/split(color %d)", c->name, color);
    nhandle* nh = handle_new(nc, h->device, name, c->timeout_ms);
    if (!nh) {
        ncclCommDestroy(nc);
        char prefix[200], msg[RT_COMM_ERRLEN];
        snprintf(msg, sizeof msg, "%s: cannot set up the new communicator",
                 rt_comm_msg_prefix(c, "split", prefix, sizeof prefix));
        return n_fail(c, RT_ERR_NOMEM, msg);
    }
    *out = &nh->base;
    return 0;
}

static void n_release(nhandle* h) {
    if (h->nc && h->owns_nc) ncclCommDestroy(h->nc);
    cudaFree(h->scratch);
    free(h);
}

static void n_free(rt_comm* c) {
    nhandle* h = (nhandle*)c;
    if (!h->launcher_owned) n_release(h);
}

// ---- buffers ----------------------------------------------------------------------------

static void* n_buf_alloc(rt_comm* c, size_t bytes) {
    (void)c;
    void* p = NULL;
    return cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
}

static void n_buf_free(rt_comm* c, void* buf) {
    (void)c;
    cudaFree(buf);
}

static int n_buf_write(rt_comm* c, void* dst, const void* src, size_t bytes) {
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? 0 : cuda_err((nhandle*)c, "buffer_write", e);
}

static int n_buf_read(rt_comm* c, void* dst, const void* src, size_t bytes) {
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? 0 : cuda_err((nhandle*)c, "buffer_read", e);
}

static int n_sync(rt_comm* c, void* stream) {
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
    return e == cudaSuccess ? 0 : cuda_err((nhandle*)c, "sync", e);
}

static const rt_comm_ops nccl_ops = {
    .name = "nccl",
    .all_gather = n_all_gather,
    .reduce_scatter = n_reduce_scatter,
    .all_reduce = n_all_reduce,
    .broadcast = n_broadcast,
    .barrier = n_barrier,
    .split = n_split,
    .fail = n_fail,
    .free = n_free,
    .buf_alloc = n_buf_alloc,
    .buf_free = n_buf_free,
    .buf_write = n_buf_write,
    .buf_read = n_buf_read,
    .sync = n_sync,
};

// ---- bootstrap --------------------------------------------------------------------------

int rt_nccl_device_count(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        fprintf(stderr, "rt_nccl: cudaGetDeviceCount failed: %s (hint: no usable GPU or driver; "
                        "check nvidia-smi)\n", cudaGetErrorString(e));
        return RT_ERR_BACKEND;
    }
    return n;
}

int rt_nccl_get_unique_id(void* id_out, size_t id_bytes) {
    if (!id_out || id_bytes < sizeof(ncclUniqueId)) return RT_ERR_ARG;
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
        fprintf(stderr, "rt_nccl: ncclGetUniqueId failed: %s\n", ncclGetErrorString(r));
        return RT_ERR_BACKEND;
    }
    memcpy(id_out, &id, sizeof id);
    return 0;
}

int rt_nccl_comm_init(int world, const void* id, size_t id_bytes, int rank, int device,
                      rt_comm** out) {
    if (!out || !id || id_bytes < sizeof(ncclUniqueId) || world < 1 || rank < 0 || rank >= world) {
        fprintf(stderr, "rt_nccl_comm_init: bad argument (world %d, rank %d)\n", world, rank);
        return RT_ERR_ARG;
    }
    *out = NULL;
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        fprintf(stderr, "rt_nccl_comm_init: rank %d: cudaSetDevice(%d) failed: %s\n", rank, device,
                cudaGetErrorString(e));
        return RT_ERR_BACKEND;
    }
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    ncclComm_t nc = NULL;
    ncclResult_t r = ncclCommInitRank(&nc, world, uid, rank);
    if (r != ncclSuccess) {
        fprintf(stderr, "rt_nccl_comm_init: rank %d: ncclCommInitRank failed: %s (hint: rerun "
                        "with NCCL_DEBUG=INFO)\n", rank, ncclGetErrorString(r));
        return RT_ERR_BACKEND;
    }
    nhandle* h = handle_new(nc, device, "world", 0);
    if (!h) {
        ncclCommDestroy(nc);
        return RT_ERR_NOMEM;
    }
    *out = &h->base;
    return 0;
}

typedef struct nrank_ctx {
    int world, rank;
    const ncclUniqueId* id;
    rt_rank_fn fn;
    void* arg;
    int status;
} nrank_ctx;

static void* nrank_main(void* p) {
    nrank_ctx* ctx = p;
    rt_comm* comm = NULL;
    ctx->status = rt_nccl_comm_init(ctx->world, ctx->id, sizeof *ctx->id, ctx->rank, ctx->rank, &comm);
    if (ctx->status) return NULL;
    nhandle* h = (nhandle*)comm;
    h->launcher_owned = 1;
    ctx->fn(comm, ctx->arg);
    if (h->failed) ctx->status = h->failed;
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess && !ctx->status) {
        fprintf(stderr, "rt_nccl_run: rank %d: %s\n", ctx->rank, cudaGetErrorString(e));
        ctx->status = RT_ERR_BACKEND;
    }
    n_release(h);
    return NULL;
}

int rt_nccl_run(int world, rt_rank_fn fn, void* arg) {
    if (world < 1 || !fn) {
        fprintf(stderr, "rt_nccl_run: invalid world size %d or NULL fn\n", world);
        return 2;
    }
    int ndev = rt_nccl_device_count();
    if (ndev < 0) return 1;
    if (ndev < world) {
        fprintf(stderr, "rt_nccl_run: %d ranks need %d GPUs but %d are visible (hint: lower "
                        "--world or check CUDA_VISIBLE_DEVICES)\n", world, world, ndev);
        return 1;
    }
    ncclUniqueId id;
    if (rt_nccl_get_unique_id(&id, sizeof id)) return 1;
    nrank_ctx* ctx = calloc((size_t)world, sizeof *ctx);
    pthread_t* threads = calloc((size_t)world, sizeof *threads);
    if (!ctx || !threads) {
        free(ctx);
        free(threads);
        return 1;
    }
    int started = 0;
    for (; started < world; started++) {
        ctx[started] = (nrank_ctx){world, started, &id, fn, arg, 0};
        if (pthread_create(&threads[started], NULL, nrank_main, &ctx[started]) != 0) {
            fprintf(stderr, "rt_nccl_run: cannot start the thread of rank %d\n", started);
            break;
        }
    }
    // A partial start would leave ncclCommInitRank waiting for the missing ranks forever.
    if (started < world) abort();
    int failed = 0;
    for (int r = 0; r < started; r++) {
        pthread_join(threads[r], NULL);
        if (ctx[r].status) failed = 1;
    }
    free(ctx);
    free(threads);
    return failed;
}
