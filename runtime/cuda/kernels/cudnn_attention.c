// Fused SDPA forward and backward through cuDNN's backend API (rt_cudnn.h). The graphs are
// the ones cudnn-frontend's CompositeSDPANode / CompositeSDPABackwardNode emit for cuDNN
// 9.x without dropout, padding, bias or paging (scaled_dot_product_flash_attention.h), as
// the fused engines match that exact shape: Q.K^T, * scale, causal mask (gen_index row and
// column, row >= column, binary select against -inf), softmax with stats = max + log(sum),
// P (16-bit) . V; backward from Q, K, V, O, dO and stats with its own fp32 tensors
// (rowsum(dO * O), the dQ accumulator) at the start of the workspace.
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cudnn_graph.h"
#include "rt_check.h"
#include "rt_cudnn.h"

enum { U_Q = 1, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV, U_SCALE, U_NEG_INF, U_ONE,
       U_SUM, U_DQ_ACC };

struct rt_cudnn_sdpa {
    int B, T, NH, NKV, HD, causal;
    cudnnHandle_t handle;
    cg fwd, bwd;                  // own every descriptor of the two plans
    cg_desc fwd_plan, bwd_plan;
    int64_t fwd_ws, bwd_ws;       // the engines' workspace bytes
    int dq_acc;                   // backward accumulates dQ in fp32 at offset 0
    size_t sum_off, bwd_own;      // rowsum(dO * O) offset; bytes before the engine's part
    size_t ws;
    float scale, neg_inf, one;    // by-value scalars (their addresses go to cuDNN)
};

static size_t up256(size_t n) { return (n + 255) / 256 * 256; }

size_t rt_cudnn_sdpa_workspace_bytes(const rt_cudnn_sdpa* s) { return s ? s->ws : 0; }

// The graphs' shapes: scores [B,NH,T,T] (and transposed), rows [B,NH,T,1], packed tensors.
typedef struct {
    int64_t q[4], qs[4], kt[4], kts[4], k[4], ks[4], s[4], ss[4], st[4], sts[4], r[4], rs[4];
    int64_t f[4], fs[4], o[4], os[4];  // [B,NH,T,HD] fp32/16-bit, packed per head
    cudnnDataType_t io;
} shapes;

static void get_shapes(const rt_cudnn_sdpa* s, cudnnDataType_t io, shapes* h) {
    const int64_t B = s->B, T = s->T, NH = s->NH, HD = s->HD;
    rt_cudnn_sdpa_layout(s->B, s->T, s->NH, s->HD, 0, h->q, h->qs);
    rt_cudnn_sdpa_layout(s->B, s->T, s->NKV, s->HD, 1, h->kt, h->kts);
    rt_cudnn_sdpa_layout(s->B, s->T, s->NKV, s->HD, 0, h->k, h->ks);
    const int64_t sc[4] = {B, NH, T, T}, scs[4] = {NH * T * T, T * T, T, 1};
    const int64_t sts[4] = {NH * T * T, T * T, 1, T};
    const int64_t r[4] = {B, NH, T, 1}, rs[4] = {NH * T, T, 1, 1};
    const int64_t f[4] = {B, NH, T, HD}, fs[4] = {NH * T * HD, T * HD, HD, 1};
    const int64_t os[4] = {NH * T * HD, T * HD, NH * HD, 1};  // the frontend's dO * O
    for (int i = 0; i < 4; i++) {
        h->s[i] = h->st[i] = sc[i], h->ss[i] = scs[i], h->sts[i] = sts[i];
        h->r[i] = r[i], h->rs[i] = rs[i], h->f[i] = h->o[i] = f[i], h->fs[i] = fs[i];
        h->os[i] = os[i];
    }
    h->io = io;
}

static cg_desc virt(cg* g, cudnnDataType_t dt, const int64_t* dim, const int64_t* stride) {
    return cg_tensor(g, dt, dim, stride, 0, 1);
}

// Causal mask as the frontend's diagonal band (top-left, right bound 0): keep row >= col.
static cg_desc causal_mask(cg* g, const shapes* h, cg_desc x) {
    cg_desc row = virt(g, CUDNN_DATA_INT32, h->s, h->ss);
    cg_desc col = virt(g, CUDNN_DATA_INT32, h->s, h->ss);
    cg_desc keep = virt(g, CUDNN_DATA_BOOLEAN, h->s, h->ss);
    cg_desc y = virt(g, CUDNN_DATA_FLOAT, h->s, h->ss);
    cg_desc ninf = cg_scalar(g, U_NEG_INF);
    cg_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL, row, 2);
    cg_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL, col, 3);
    cg_pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep, -1);
    cg_pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, ninf, keep, y, -1);
    return y;
}

// y = mode(a[, b]) in fp32 into a new virtual tensor of the given shape.
static cg_desc pw(cg* g, cudnnPointwiseMode_t mode, cg_desc a, cg_desc b, cudnnDataType_t dt,
                  const int64_t* dim, const int64_t* stride) {
    cg_desc y = virt(g, dt, dim, stride);
    cg_pointwise(g, mode, CUDNN_DATA_FLOAT, a, b, NULL, y, -1);
    return y;
}

static void build_forward(rt_cudnn_sdpa* s, const shapes* h) {
    cg* g = &s->fwd;
    const cudnnDataType_t F = CUDNN_DATA_FLOAT;
    cg_desc q = cg_tensor(g, h->io, h->q, h->qs, U_Q, 0);
    cg_desc kt = cg_tensor(g, h->io, h->kt, h->kts, U_K, 0);
    cg_desc v = cg_tensor(g, h->io, h->k, h->ks, U_V, 0);
    cg_desc sc = virt(g, F, h->s, h->ss);
    cg_matmul(g, q, kt, sc);
    cg_desc x = pw(g, CUDNN_POINTWISE_MUL, sc, cg_scalar(g, U_SCALE), F, h->s, h->ss);
    if (s->causal) x = causal_mask(g, h, x);
    cg_desc mx = virt(g, F, h->r, h->rs);
    cg_reduce(g, CUDNN_REDUCE_TENSOR_MAX, x, mx);
    cg_desc e = pw(g, CUDNN_POINTWISE_SUB, x, mx, F, h->s, h->ss);
    e = pw(g, CUDNN_POINTWISE_EXP, e, NULL, F, h->s, h->ss);
    cg_desc sum = virt(g, F, h->r, h->rs);
    cg_reduce(g, CUDNN_REDUCE_TENSOR_ADD, e, sum);
    cg_desc lg = pw(g, CUDNN_POINTWISE_LOG, sum, NULL, F, h->r, h->rs);
    cg_desc stats = cg_tensor(g, F, h->r, h->rs, U_STATS, 0);
    cg_pointwise(g, CUDNN_POINTWISE_ADD, F, mx, lg, NULL, stats, -1);
    cg_desc p = pw(g, CUDNN_POINTWISE_DIV, e, sum, h->io, h->s, h->ss);  // 16-bit P
    cg_desc o = cg_tensor(g, h->io, h->q, h->qs, U_O, 0);
    cg_matmul(g, p, v, o);
    s->fwd_plan = cg_plan(g, "SDPA forward", &s->fwd_ws);
}

// dst = a^T-side product into a gradient of kv shape; GQA sums the NH/NKV query heads.
static void grad_kv(cg* g, const rt_cudnn_sdpa* s, const shapes* h, cg_desc a, cg_desc b,
                    int64_t uid) {
    cg_desc out = cg_tensor(g, h->io, h->k, h->ks, uid, 0);
    if (s->NH == s->NKV) {
        cg_matmul(g, a, b, out);
        return;
    }
    cg_desc full = virt(g, h->io, h->f, h->fs);
    cg_matmul(g, a, b, full);
    cg_reduce(g, CUDNN_REDUCE_TENSOR_ADD, full, out);
}

// dq_acc: the frontend's default (dQ accumulated in fp32 in the workspace, then copied);
// without it dQ comes straight from the matmul (its deterministic / dP-workspace form).
static void build_backward(rt_cudnn_sdpa* s, const shapes* h, int dq_acc) {
    cg* g = &s->bwd;
    const cudnnDataType_t F = CUDNN_DATA_FLOAT;
    cg_desc q = cg_tensor(g, h->io, h->q, h->qs, U_Q, 0);
    cg_desc kt = cg_tensor(g, h->io, h->kt, h->kts, U_K, 0);
    cg_desc vt = cg_tensor(g, h->io, h->kt, h->kts, U_V, 0);
    cg_desc o = cg_tensor(g, h->io, h->q, h->qs, U_O, 0);
    cg_desc dout = cg_tensor(g, h->io, h->q, h->qs, U_DO, 0);
    cg_desc stats = cg_tensor(g, F, h->r, h->rs, U_STATS, 0);
    cg_desc scale = cg_scalar(g, U_SCALE);
    // softmax_sum = rowsum(dO * O) * 1, an fp32 tensor of its own in the workspace
    cg_desc x = pw(g, CUDNN_POINTWISE_MUL, dout, o, F, h->o, h->os);
    cg_desc r = virt(g, F, h->r, h->rs);
    cg_reduce(g, CUDNN_REDUCE_TENSOR_ADD, x, r);
    cg_desc ssum = cg_tensor(g, F, h->r, h->rs, U_SUM, 0);
    cg_pointwise(g, CUDNN_POINTWISE_MUL, F, r, cg_scalar(g, U_ONE), NULL, ssum, -1);
    // P = exp(scale * Q K^T - stats), masked
    cg_desc sc = virt(g, F, h->s, h->ss);
    cg_matmul(g, q, kt, sc);
    x = pw(g, CUDNN_POINTWISE_MUL, sc, scale, F, h->s, h->ss);
    x = pw(g, CUDNN_POINTWISE_SUB, x, stats, F, h->s, h->ss);
    if (s->causal) x = causal_mask(g, h, x);
    cg_desc e = pw(g, CUDNN_POINTWISE_EXP, x, NULL, F, h->s, h->ss);
    // dV = P^T dO (P in 16 bits)
    cg_desc pt = virt(g, h->io, h->st, h->sts);
    cg_reshape(g, e, pt);
    grad_kv(g, s, h, pt, dout, U_DV);
    // dS = P * (dO V^T - softmax_sum) * scale
    cg_desc dp = virt(g, F, h->s, h->ss);
    cg_matmul(g, dout, vt, dp);
    x = pw(g, CUDNN_POINTWISE_SUB, dp, ssum, F, h->s, h->ss);
    x = pw(g, CUDNN_POINTWISE_MUL, x, e, F, h->s, h->ss);
    cg_desc ds = pw(g, CUDNN_POINTWISE_MUL, x, scale, F, h->s, h->ss);
    // dK = dS^T Q (dS in 16 bits)
    cg_desc dst = virt(g, h->io, h->st, h->sts);
    cg_reshape(g, ds, dst);
    grad_kv(g, s, h, dst, q, U_DK);
    // dQ = dS K
    cg_desc k = virt(g, F, h->k, h->ks);  // the frontend leaves this view fp32
    cg_reshape(g, kt, k);
    cg_desc dq = cg_tensor(g, h->io, h->q, h->qs, U_DQ, 0);
    if (dq_acc) {
        cg_desc acc = cg_tensor(g, F, h->f, h->fs, U_DQ_ACC, 0);
        cg_matmul(g, ds, k, acc);
        cg_pointwise(g, CUDNN_POINTWISE_IDENTITY, F, acc, NULL, NULL, dq, -1);
    } else {
        cg_matmul(g, ds, k, dq);
    }
    s->bwd_plan = cg_plan(g, "SDPA backward", &s->bwd_ws);
}

void rt_cudnn_sdpa_destroy(rt_cudnn_sdpa* s) {
    if (!s) return;
    cg_free(&s->bwd);
    cg_free(&s->fwd);
    if (s->handle) cudnnDestroy(s->handle);
    free(s);
}

static rt_cudnn_sdpa* give_up(rt_cudnn_sdpa* s) {
    rt_cudnn_sdpa_destroy(s);
    return NULL;
}

rt_cudnn_sdpa* rt_cudnn_sdpa_create(int B, int T, int NH, int NKV, int HD, int causal,
                                    rt_dtype prec, char* why, size_t why_len) {
    char scratch[8];
    if (!why || !why_len) why = scratch, why_len = sizeof scratch;
    why[0] = 0;
    if (rt_cudnn_sdpa_check(B, T, NH, NKV, HD, prec, why, why_len)) return NULL;
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
    s->scale = (float)(1.0 / sqrt((double)HD));
    // the frontend's mask value: -inf from cuDNN 9.10, the lowest float before
    s->neg_inf = cudnnGetVersion() >= 91000 ? -INFINITY : -FLT_MAX;
    s->one = 1.0f;
    cudnnStatus_t st = cudnnCreate(&s->handle);
    if (st != CUDNN_STATUS_SUCCESS) {
        char text[384];
        cg_status_text(st, text, sizeof text);
        snprintf(why, why_len, "cuDNN attention: cudnnCreate failed: %s", text);
        s->handle = NULL;
        return give_up(s);
    }
    shapes h;
    get_shapes(s, prec == RT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF, &h);
    cg_init(&s->fwd, s->handle, why, why_len);
    build_forward(s, &h);
    if (!s->fwd_plan) return give_up(s);
    // the frontend's default backward first; if cuDNN has no engine for it, its other form
    s->dq_acc = 1;
    cg_init(&s->bwd, s->handle, why, why_len);
    build_backward(s, &h, 1);
    if (!s->bwd_plan) {
        char first[512];
        snprintf(first, sizeof first, "%s", why);
        cg_free(&s->bwd);
        s->dq_acc = 0;
        cg_init(&s->bwd, s->handle, why, why_len);
        build_backward(s, &h, 0);
        if (!s->bwd_plan) {
            snprintf(why, why_len, "%s", first);
            return give_up(s);
        }
    }
    const size_t rows = (size_t)B * NH * T;
    s->sum_off = s->dq_acc ? up256(rows * HD * sizeof(float)) : 0;
    s->bwd_own = s->sum_off + up256(rows * sizeof(float));
    const size_t bwd = s->bwd_own + (size_t)s->bwd_ws, fwd = (size_t)s->fwd_ws;
    s->ws = bwd > fwd ? bwd : fwd;
    return s;
}

static void set_stream(const rt_cudnn_sdpa* s, rt_cudnn_stream stream, int line) {
    cudnnStatus_t st = cudnnSetStream(s->handle, (cudaStream_t)stream);
    if (st != CUDNN_STATUS_SUCCESS) {
        char text[384];
        cg_status_text(st, text, sizeof text);
        rt_check_fail(__FILE__, line, "cudnnSetStream", text, "check the stream's device");
    }
}

void rt_cudnn_sdpa_forward(const rt_cudnn_sdpa* s, void* out, float* stats, const void* q,
                           const void* k, const void* v, void* workspace,
                           rt_cudnn_stream stream) {
    set_stream(s, stream, __LINE__);
    int64_t uids[7] = {U_Q, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEG_INF};
    void* ptrs[7] = {(void*)q, (void*)k, (void*)v, out, stats, (void*)&s->scale,
                     (void*)&s->neg_inf};
    cg_execute(s->handle, s->fwd_plan, s->causal ? 7 : 6, uids, ptrs, workspace,
               "cudnnBackendExecute(SDPA forward)", __FILE__, __LINE__);
}

void rt_cudnn_sdpa_backward(const rt_cudnn_sdpa* s, void* dq, void* dk, void* dv,
                            const void* dout, const void* out, const void* q, const void* k,
                            const void* v, const float* stats, void* workspace,
                            rt_cudnn_stream stream) {
    set_stream(s, stream, __LINE__);
    char* ws = workspace;
    int64_t uids[14] = {U_Q, U_K, U_V, U_O, U_DO, U_STATS, U_DQ, U_DK, U_DV, U_SCALE, U_ONE,
                        U_SUM};
    void* ptrs[14] = {(void*)q, (void*)k, (void*)v, (void*)out, (void*)dout, (void*)stats,
                      dq, dk, dv, (void*)&s->scale, (void*)&s->one, ws + s->sum_off};
    int n = 12;
    if (s->dq_acc) {
        uids[n] = U_DQ_ACC, ptrs[n++] = ws;
        // cuDNN before 9.6 expects the accumulator zeroed (the frontend memsets it there)
        if (cudnnGetVersion() < 90600)
            RT_CHECK_CUDA(cudaMemsetAsync(ws, 0, s->sum_off, (cudaStream_t)stream));
    }
    if (s->causal) uids[n] = U_NEG_INF, ptrs[n++] = (void*)&s->neg_inf;
    cg_execute(s->handle, s->bwd_plan, n, uids, ptrs, ws + s->bwd_own,
               "cudnnBackendExecute(SDPA backward)", __FILE__, __LINE__);
}
