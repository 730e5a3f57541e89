// The SDPA graphs cudnn-frontend's CompositeSDPANode / CompositeSDPABackwardNode emit for
// cuDNN 9.x without dropout, padding, bias or paging (scaled_dot_product_flash_attention.h,
// utils/attn_score_modifiers.h, node/diagonal_band_mask.h, node/softmax.h), rebuilt
// operation by operation with the same tensors (dims, strides, data types, virtual or not,
// scalars by value), because cuDNN's fused engines match that exact shape: Q.K^T, * scale,
// causal mask (gen_index row and column, row >= column, binary select against -inf),
// softmax with stats = max + log(sum), P (16-bit) . V; backward from Q, K, V, O, dO and
// stats with its own fp32 tensors (rowsum(dO * O), the dQ accumulator) in the workspace.
// Without a mask the frontend emits one unified SDPA forward operation instead
// (UnifiedSDPANode), built here too. tests/cuda/cudnn_sdpa_graphs.txt holds the frontend's.
#include "cudnn_sdpa.h"

// The graphs' shapes: scores [B,NH,T,T] (and transposed), rows [B,NH,T,1], packed tensors,
// the gradients dQ, dK, dV in rows of their own lengths.
typedef struct {
    int64_t q[4], qs[4], kt[4], kts[4], k[4], ks[4], s[4], ss[4], st[4], sts[4], r[4], rs[4];
    int64_t f[4], fs[4], o[4], os[4];  // [B,NH,T,HD] fp32/16-bit, packed per head
    int64_t dq[4], dqs[4], dk[4], dks[4], dv[4], dvs[4];
    cudnnDataType_t io;
} shapes;

static void get_shapes(const rt_cudnn_sdpa* s, cudnnDataType_t io, shapes* h) {
    const int64_t B = s->B, T = s->T, NH = s->NH, HD = s->HD;
    rt_cudnn_sdpa_layout(s->B, s->T, s->NH, s->HD, 0, 0, h->q, h->qs);
    rt_cudnn_sdpa_layout(s->B, s->T, s->NKV, s->HD, 0, 1, h->kt, h->kts);
    rt_cudnn_sdpa_layout(s->B, s->T, s->NKV, s->HD, 0, 0, h->k, h->ks);
    rt_cudnn_sdpa_layout(s->B, s->T, s->NH, s->HD, s->ld_dq, 0, h->dq, h->dqs);
    rt_cudnn_sdpa_layout(s->B, s->T, s->NKV, s->HD, s->ld_dk, 0, h->dk, h->dks);
    rt_cudnn_sdpa_layout(s->B, s->T, s->NKV, s->HD, s->ld_dv, 0, h->dv, h->dvs);
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
    cg_desc ninf = cg_scalar(g, U_NEG_INF, 4);
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

void cudnn_sdpa_build_forward(rt_cudnn_sdpa* s, cudnnDataType_t io) {
    shapes sh, *h = &sh;
    get_shapes(s, io, h);
    cg* g = &s->fwd;
    const cudnnDataType_t F = CUDNN_DATA_FLOAT;
    cg_desc q = cg_tensor(g, h->io, h->q, h->qs, U_Q, 0);
    cg_desc kt = cg_tensor(g, h->io, h->kt, h->kts, U_K, 0);
    cg_desc v = cg_tensor(g, h->io, h->k, h->ks, U_V, 0);
    cg_desc sc = virt(g, F, h->s, h->ss);
    cg_matmul(g, q, kt, sc);
    cg_desc x = pw(g, CUDNN_POINTWISE_MUL, sc, cg_scalar(g, U_SCALE, 4), F, h->s, h->ss);
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
    s->fwd_plan = cg_finish(g, "SDPA forward", &s->fwd_ws);
}

void cudnn_sdpa_build_forward_unified(rt_cudnn_sdpa* s, cudnnDataType_t io) {
    shapes sh, *h = &sh;
    get_shapes(s, io, h);
    cg* g = &s->fwd;
    cg_desc q = cg_tensor(g, h->io, h->q, h->qs, U_Q, 0);
    cg_desc k = cg_tensor(g, h->io, h->k, h->ks, U_K, 0);
    cg_desc v = cg_tensor(g, h->io, h->k, h->ks, U_V, 0);
    cg_desc o = cg_tensor(g, h->io, h->q, h->qs, U_O, 0);
    cg_desc stats = cg_tensor(g, CUDNN_DATA_FLOAT, h->r, h->rs, U_STATS, 0);
    cg_sdpa_fwd(g, q, k, v, o, stats, cg_scalar(g, U_SCALE, 1));
    s->fwd_plan = cg_finish(g, "unified SDPA forward", &s->fwd_ws);
}

// dst = a^T-side product into a gradient of kv shape (dims, strides); GQA sums the NH/NKV
// query heads.
static void grad_kv(cg* g, const rt_cudnn_sdpa* s, const shapes* h, cg_desc a, cg_desc b,
                    const int64_t* dim, const int64_t* stride, int64_t uid) {
    cg_desc out = cg_tensor(g, h->io, dim, stride, uid, 0);
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
void cudnn_sdpa_build_backward(rt_cudnn_sdpa* s, cudnnDataType_t io, int dq_acc) {
    shapes sh, *h = &sh;
    get_shapes(s, io, h);
    cg* g = &s->bwd;
    const cudnnDataType_t F = CUDNN_DATA_FLOAT;
    cg_desc q = cg_tensor(g, h->io, h->q, h->qs, U_Q, 0);
    cg_desc kt = cg_tensor(g, h->io, h->kt, h->kts, U_K, 0);
    cg_desc vt = cg_tensor(g, h->io, h->kt, h->kts, U_V, 0);
    cg_desc o = cg_tensor(g, h->io, h->q, h->qs, U_O, 0);
    cg_desc dout = cg_tensor(g, h->io, h->q, h->qs, U_DO, 0);
    cg_desc stats = cg_tensor(g, F, h->r, h->rs, U_STATS, 0);
    cg_desc scale = cg_scalar(g, U_SCALE, 4);
    // softmax_sum = rowsum(dO * O) * 1, an fp32 tensor of its own in the workspace
    cg_desc x = pw(g, CUDNN_POINTWISE_MUL, dout, o, F, h->o, h->os);
    cg_desc r = virt(g, F, h->r, h->rs);
    cg_reduce(g, CUDNN_REDUCE_TENSOR_ADD, x, r);
    cg_desc ssum = cg_tensor(g, F, h->r, h->rs, U_SUM, 0);
    cg_pointwise(g, CUDNN_POINTWISE_MUL, F, r, cg_scalar(g, U_ONE, 4), NULL, ssum, -1);
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
    grad_kv(g, s, h, pt, dout, h->dv, h->dvs, U_DV);
    // dS = P * (dO V^T - softmax_sum) * scale
    cg_desc dp = virt(g, F, h->s, h->ss);
    cg_matmul(g, dout, vt, dp);
    x = pw(g, CUDNN_POINTWISE_SUB, dp, ssum, F, h->s, h->ss);
    x = pw(g, CUDNN_POINTWISE_MUL, x, e, F, h->s, h->ss);
    cg_desc ds = pw(g, CUDNN_POINTWISE_MUL, x, scale, F, h->s, h->ss);
    // dK = dS^T Q (dS in 16 bits)
    cg_desc dst = virt(g, h->io, h->st, h->sts);
    cg_reshape(g, ds, dst);
    grad_kv(g, s, h, dst, q, h->dk, h->dks, U_DK);
    // dQ = dS K
    cg_desc k = virt(g, F, h->k, h->ks);  // the frontend leaves this view fp32
    cg_reshape(g, kt, k);
    cg_desc dq = cg_tensor(g, h->io, h->dq, h->dqs, U_DQ, 0);
    if (dq_acc) {
        cg_desc acc = cg_tensor(g, F, h->f, h->fs, U_DQ_ACC, 0);
        cg_matmul(g, ds, k, acc);
        cg_pointwise(g, CUDNN_POINTWISE_IDENTITY, F, acc, NULL, NULL, dq, -1);
    } else {
        cg_matmul(g, ds, k, dq);
    }
    s->bwd_plan = cg_finish(g, "SDPA backward", &s->bwd_ws);
}
