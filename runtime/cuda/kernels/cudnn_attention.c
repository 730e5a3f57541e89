// rt_cudnn.h on cuDNN's backend API: the forward and backward plans built once per shape
// (cudnn_sdpa_graphs.c builds the graphs), the workspace they share, and their execution
// with no allocation, synchronization or host read (CUDA-graph capture safe).
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cudnn_sdpa.h"
#include "rt_check.h"

static size_t up256(size_t n) { return (n + 255) / 256 * 256; }

size_t rt_cudnn_sdpa_workspace_bytes(const rt_cudnn_sdpa* s) { return s ? s->ws : 0; }

int rt_cudnn_sdpa_deterministic(const rt_cudnn_sdpa* s) { return !s->dq_acc; }

static _Thread_local int32_t sm_count;  // rt_cudnn_set_sm_count: this thread's plans'

void rt_cudnn_set_sm_count(int sms) { sm_count = sms; }

void rt_cudnn_sdpa_destroy(rt_cudnn_sdpa* s) {
    if (!s) return;
    cg_free(&s->bwd);
    cg_free(&s->fwd);
    if (s->handle) cudnnDestroy(s->handle);
    free(s);
}

// One graph in one form into s->fwd or s->bwd: 1 when it finalized (with a handle: into a
// plan). Forward forms: 1 the unified operation, 0 the composite graph; backward forms:
// 1 dQ accumulated in fp32, 0 dQ straight from its matmul.
static int attempt(rt_cudnn_sdpa* s, cudnnHandle_t handle, int fwd, int form,
                   cudnnDataType_t io, char* why, size_t why_len) {
    cg* g = fwd ? &s->fwd : &s->bwd;
    cg_free(g);
    cg_init(g, handle, why, why_len);
    g->sm_count = sm_count;
    if (fwd && form) cudnn_sdpa_build_forward_unified(s, io);
    if (fwd && !form) cudnn_sdpa_build_forward(s, io);
    if (!fwd) cudnn_sdpa_build_backward(s, io, form);
    return !g->failed;
}

// The frontend's form first (forward: the unified operation where there is no mask;
// backward: dQ accumulated in fp32, unless deterministic), then the other one; the first
// failure is the reason.
static int build(rt_cudnn_sdpa* s, cudnnHandle_t handle, int fwd, int deterministic,
                 cudnnDataType_t io, char* why, size_t why_len) {
    const int first = fwd ? !s->causal : !deterministic;  // a causal forward has one form
    int form = first;
    int ok = attempt(s, handle, fwd, form, io, why, why_len);
    if (!ok && first) {
        char reason[512];
        snprintf(reason, sizeof reason, "%s", why);
        form = !first;
        ok = attempt(s, handle, fwd, form, io, why, why_len);
        if (!ok) snprintf(why, why_len, "%s", reason);
    }
    if (ok && !fwd) s->dq_acc = form;
    return ok;
}

static rt_cudnn_sdpa* give_up(rt_cudnn_sdpa* s) {
    rt_cudnn_sdpa_destroy(s);
    return NULL;
}

rt_cudnn_sdpa* rt_cudnn_sdpa_create(int B, int T, int NH, int NKV, int HD, int causal,
                                       rt_dtype prec, int deterministic, int ld_dq, int ld_dk,
                                       int ld_dv, char* why, size_t why_len) {
    char scratch[8];
    if (!why || !why_len) why = scratch, why_len = sizeof scratch;
    why[0] = 0;
    if (rt_cudnn_sdpa_check(B, T, NH, NKV, HD, prec, ld_dq, ld_dk, ld_dv, why, why_len))
        return NULL;
    if (rt_cudnn_load(why, why_len)) return NULL;
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess || count == 0) {
        snprintf(why, why_len, "cuDNN attention: no CUDA device (cudaGetDeviceCount: %s)",
                 ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
        return NULL;
    }
    rt_cudnn_sdpa* s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(why, why_len, "cuDNN attention: out of host memory");
        return NULL;
    }
    s->B = B, s->T = T, s->NH = NH, s->NKV = NKV, s->HD = HD, s->causal = causal != 0;
    s->ld_dq = ld_dq, s->ld_dk = ld_dk, s->ld_dv = ld_dv;
    s->scale = (float)(1.0 / sqrt((double)HD));
    // the frontend's mask value: -inf from cuDNN 9.10, the lowest float before
    const size_t version = cudnnGetVersion();
    s->neg_inf = version >= 91000 ? -INFINITY : -FLT_MAX;
    s->zero_dq_acc = version < 90600;
    s->one = 1.0f;
    cudnnStatus_t st = cudnnCreate(&s->handle);
    if (st != CUDNN_STATUS_SUCCESS) {
        char text[384];
        cg_status_text(st, text, sizeof text);
        snprintf(why, why_len, "cuDNN attention: cudnnCreate failed: %s", text);
        s->handle = NULL;
        return give_up(s);
    }
    const cudnnDataType_t io = prec == RT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    if (!build(s, s->handle, 1, 0, io, why, why_len)) return give_up(s);
    if (!build(s, s->handle, 0, deterministic, io, why, why_len)) return give_up(s);
    const size_t rows = (size_t)B * NH * T;
    s->sum_off = s->dq_acc ? up256(rows * HD * sizeof(float)) : 0;
    s->bwd_own = s->sum_off + up256(rows * sizeof(float));
    const size_t bwd = s->bwd_own + (size_t)s->bwd_ws, fwd = (size_t)s->fwd_ws;
    s->ws = bwd > fwd ? bwd : fwd;
    why[0] = 0;  // a first form's refusal, where the other form was taken
    return s;
}

int rt_cudnn_sdpa_lower(int B, int T, int NH, int NKV, int HD, int causal, rt_dtype prec,
                        int dq_acc, int ld_dq, int ld_dk, int ld_dv, char* why, size_t why_len) {
    char scratch[8];
    if (!why || !why_len) why = scratch, why_len = sizeof scratch;
    why[0] = 0;
    if (rt_cudnn_sdpa_check(B, T, NH, NKV, HD, prec, ld_dq, ld_dk, ld_dv, why, why_len))
        return -1;
    if (rt_cudnn_load(why, why_len)) return -1;
    rt_cudnn_sdpa s = {.B = B, .T = T, .NH = NH, .NKV = NKV, .HD = HD, .causal = causal != 0,
                       .ld_dq = ld_dq, .ld_dk = ld_dk, .ld_dv = ld_dv};
    const cudnnDataType_t io = prec == RT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    int ok = attempt(&s, NULL, 1, 0, io, why, why_len);
    if (ok && !s.causal) ok = attempt(&s, NULL, 1, 1, io, why, why_len);
    if (ok) ok = attempt(&s, NULL, 0, dq_acc != 0, io, why, why_len);
    cg_free(&s.fwd);
    cg_free(&s.bwd);
    return ok ? 0 : -1;
}

static void set_stream(const rt_cudnn_sdpa* s, rt_cudnn_stream stream, int line) {
    cudnnStatus_t st = cudnnSetStream(s->handle, (cudaStream_t)stream);
    if (st != CUDNN_STATUS_SUCCESS) {
        char text[384];
        cg_status_text(st, text, sizeof text);
        rt_check_fail(__FILE__, line, "cudnnSetStream", text, "check the stream's device");
    }
}

// The forward and the backward, each with why: a failure is reported there (cg_execute).
static int forward(const rt_cudnn_sdpa* s, void* out, float* stats, const void* q, const void* k,
                   const void* v, void* workspace, rt_cudnn_stream stream, char* why,
                   size_t why_len) {
    set_stream(s, stream, __LINE__);
    int64_t uids[7] = {U_Q, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEG_INF};
    void* ptrs[7] = {(void*)q, (void*)k, (void*)v, out, stats, (void*)&s->scale,
                     (void*)&s->neg_inf};
    return cg_execute(s->handle, s->fwd_plan, s->causal ? 7 : 6, uids, ptrs, workspace,
                      "cudnnBackendExecute(SDPA forward)", __FILE__, __LINE__, why, why_len);
}

static int backward(const rt_cudnn_sdpa* s, void* dq, void* dk, void* dv, const void* dout,
                    const void* out, const void* q, const void* k, const void* v,
                    const float* stats, void* workspace, rt_cudnn_stream stream, char* why,
                    size_t why_len) {
    set_stream(s, stream, __LINE__);
    char* ws = workspace;
    int64_t uids[14] = {U_Q, U_K, U_V, U_O, U_DO, U_STATS, U_DQ, U_DK, U_DV, U_SCALE, U_ONE,
                        U_SUM};
    void* ptrs[14] = {(void*)q, (void*)k, (void*)v, (void*)out, (void*)dout, (void*)stats,
                      dq, dk, dv, (void*)&s->scale, (void*)&s->one, ws + s->sum_off};
    int n = 12;
    if (s->dq_acc) {
        uids[n] = U_DQ_ACC, ptrs[n++] = ws;
        if (s->zero_dq_acc)
            RT_CHECK_CUDA(cudaMemsetAsync(ws, 0, s->sum_off, (cudaStream_t)stream));
    }
    if (s->causal) uids[n] = U_NEG_INF, ptrs[n++] = (void*)&s->neg_inf;
    return cg_execute(s->handle, s->bwd_plan, n, uids, ptrs, ws + s->bwd_own,
                      "cudnnBackendExecute(SDPA backward)", __FILE__, __LINE__, why, why_len);
}

void rt_cudnn_sdpa_forward(const rt_cudnn_sdpa* s, void* out, float* stats, const void* q,
                           const void* k, const void* v, void* workspace,
                           rt_cudnn_stream stream) {
    forward(s, out, stats, q, k, v, workspace, stream, NULL, 0);
}

void rt_cudnn_sdpa_backward(const rt_cudnn_sdpa* s, void* dq, void* dk, void* dv,
                            const void* dout, const void* out, const void* q, const void* k,
                            const void* v, const float* stats, void* workspace,
                            rt_cudnn_stream stream) {
    backward(s, dq, dk, dv, dout, out, q, k, v, stats, workspace, stream, NULL, 0);
}

int rt_cudnn_sdpa_try(const rt_cudnn_sdpa* s, void* out, float* stats, void* dq, void* dk,
                      void* dv, const void* dout, const void* q, const void* k, const void* v,
                      void* workspace, rt_cudnn_stream stream, char* why, size_t why_len) {
    if (forward(s, out, stats, q, k, v, workspace, stream, why, why_len) ||
        backward(s, dq, dk, dv, dout, out, q, k, v, stats, workspace, stream, why, why_len))
        return -1;
    const cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
    if (e == cudaSuccess) return 0;
    cudaGetLastError();
    snprintf(why, why_len, "the GPU reported %s after cuDNN's first forward and backward",
             cudaGetErrorString(e));
    return -1;
}
