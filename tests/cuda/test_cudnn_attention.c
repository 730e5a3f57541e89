// GPU test of cuDNN's fused attention (rt_cudnn.h) against the CPU attention kernel
// (rt_attention_lowmem_forward/backward of runtime/cpu, renamed cpu_rt_*, on the widened
// 16-bit values), at the attention shapes of models/ and examples/ with T = 100 (not a
// multiple of any tile), B = 2, causal and not, bf16 and fp16; plus a control that must
// differ (causal output against the non-causal reference), a refused shape, create and
// destroy without leaking device memory, and forward + backward captured in a CUDA graph.
// Each shape runs with the deterministic backward (the generated step's: a second backward
// must give the same bits) and, in bf16, with the frontend's default (dQ accumulated with
// atomics). The deterministic backward writing dq, dk, dv as column slices of one wider
// matrix (rt_cudnn_sdpa_create) gives the dense plan's bits and leaves the other columns
// alone.
// Without a GPU it prints a SKIP line and `0 passed, 0 failed`.
//
// Bounds (attention_tc_ref.h): cuDNN narrows P before P.V and P^T.dO and dS before dS.K
// and dS^T.Q, as the tensor-core kernels do, so its per-element bounds apply, plus the
// rounding of each result to 16 bits: out rounds once more (|u out| <= u sum P|v|, the
// P-narrowing bound itself: bound2 = bound), so the out that reaches backward's
// D = rowsum(dO * O) errs by at most twice that bound (2 dq_D, 2 dk_D), and dq, dk, dv
// add u |want|. With GQA the graph (as the frontend's) rounds each query head's dK and dV
// to 16 bits before summing the group: at most u sum_h |partial_h|, which the dk, dv
// bounds' own u-terms already exceed, so they count twice there. fp32 round-off (cuDNN's
// summation order, exp) is TOL_GEMM * max(1, |want|).
#include <cuda_runtime.h>
#include <cudnn.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/common/dtype_bits.h"
#include "attention_tc_ref.h"
#include "check.h"
#include "cuda_helpers.h"
#include "rt_check.h"
#include "rt_cudnn.h"
#include "rt_dtype.h"

#include "cpu_rename.h"
#include "rt_kernels.h"
#include "cpu_unrename.h"

static uint16_t* pack(const float* x, size_t n, rt_dtype p) {
    uint16_t* h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = rt_bits16_from_f32_inl(x[i], p);
    void* d = dalloc(n * 2);
    RT_CHECK_CUDA(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static float* unpack(const void* d, size_t n, rt_dtype p) {
    uint16_t* h = malloc(n * sizeof *h);
    float* f = malloc(n * sizeof *f);
    RT_CHECK_CUDA(cudaMemcpy(h, d, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) f[i] = rt_bits16_to_f32_inl(h[i], p);
    free(h);
    return f;
}

static void round_to(float* x, size_t n, rt_dtype p) {
    for (size_t i = 0; i < n; i++) x[i] = rt_round_inl(x[i], p);
}

// bound2 = k1 * b1 + k2 * b2 + u |want| (b1, b2 nullable)
static double* extra(const double* b1, double k1, const double* b2, double k2,
                     const float* want, double u, size_t n) {
    double* e = attn_tc_zeros(n);
    for (size_t i = 0; i < n; i++)
        e[i] = (b1 ? k1 * b1[i] : 0.0) + (b2 ? k2 * b2[i] : 0.0) + u * fabs(want[i]);
    return e;
}

static void cmp_bound(const char* what, const float* got, const float* want, const double* b,
                      const double* b2, size_t n) {
    attn_tc_cmp_result r = attn_tc_compare(got, want, b, b2, n, TOL_GEMM);
    CHECK(r.ratio <= 1.0, "%s: max diff %.3g (relative to max(1,|want|)), %.2f of the bound "
          "(bound up to %.3g)", what, r.diff, r.ratio, r.allow);
}

// One shape: forward and backward against the CPU; returns 0 when cuDNN refused it.
static int run(int B, int T, int NH, int NKV, int HD, int causal, rt_dtype p, int det,
               int required, int capture) {
    const char* P = p == RT_BF16 ? "bf16" : "fp16";
    char why[512];
    rt_cudnn_sdpa* s = rt_cudnn_sdpa_create(B, T, NH, NKV, HD, causal, p, det, 0, 0, 0, why, sizeof why);
    char name[160];
    snprintf(name, sizeof name, "%s B=%d T=%d NH=%d NKV=%d HD=%d causal=%d%s", P, B, T, NH, NKV,
             HD, causal, det ? " deterministic" : "");
    if (!s && !required) {
        printf("SKIP %s: cuDNN refuses it (the runtime keeps its own kernels): %s\n", name, why);
        return 0;
    }
    CHECK(s != NULL, "%s: plans built%s%s", name, s ? "" : ": ", s ? "" : why);
    if (!s) return 0;
    // deterministic: only that form; else the atomic one where cuDNN has it (said, not
    // required: the deterministic form is the fallback)
    if (det)
        CHECK(rt_cudnn_sdpa_deterministic(s), "%s: the backward is the deterministic form", name);
    else
        printf("# %s: cuDNN's backward form: %s\n", name,
               rt_cudnn_sdpa_deterministic(s) ? "deterministic (no atomic one for the shape)"
                                              : "atomic");
    const size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    const size_t ns = rt_cudnn_sdpa_stats_floats(B, NH, T);
    float *q = hrand(nq, 1.5f, 0.0f), *k = hrand(nk, 1.5f, 0.0f), *v = hrand(nk, 1.0f, 0.0f);
    float* dout = hrand(nq, 1.0f, 0.0f);
    round_to(q, nq, p), round_to(k, nk, p), round_to(v, nk, p), round_to(dout, nq, p);
    // CPU reference (fp32 on the 16-bit values), causal as asked and, as a control, not
    const size_t nsc = cpu_rt_attention_lowmem_scratch_floats(B, NH, T);
    float *out = malloc(nq * 4), *st = malloc(ns * 8), *sc = malloc(nsc * 4);
    float *dq = malloc(nq * 4), *dk = malloc(nk * 4), *dv = malloc(nk * 4);
    float* out_nc = malloc(nq * 4);
    cpu_rt_attention_lowmem_forward(out, st, sc, q, k, v, B, T, NH, NKV, HD, causal, RT_F32,
                                    RT_F32);
    cpu_rt_attention_lowmem_backward(dq, dk, dv, sc, dout, out, q, k, v, st, B, T, NH, NKV, HD,
                                     causal, RT_F32, RT_F32,
                                     RT_ASSIGN_1 | RT_ASSIGN_2 | RT_ASSIGN_3);
    cpu_rt_attention_lowmem_forward(out_nc, st, sc, q, k, v, B, T, NH, NKV, HD, !causal,
                                    RT_F32, RT_F32);
    cpu_rt_attention_lowmem_forward(out, st, sc, q, k, v, B, T, NH, NKV, HD, causal, RT_F32,
                                    RT_F32);  // st back to the causal-as-asked stats
    // cuDNN
    void *d_q = pack(q, nq, p), *d_k = pack(k, nk, p), *d_v = pack(v, nk, p);
    void *d_do = pack(dout, nq, p), *d_o = dalloc(nq * 2), *d_dq = dalloc(nq * 2);
    void *d_dk = dalloc(nk * 2), *d_dv = dalloc(nk * 2);
    float* d_st = dalloc(ns * 4);
    const size_t wsb = rt_cudnn_sdpa_workspace_bytes(s);
    void* ws = dalloc(wsb ? wsb : 1);
    printf("== %s: workspace %zu bytes\n", name, wsb);
    rt_cudnn_sdpa_forward(s, d_o, d_st, d_q, d_k, d_v, ws, 0);
    rt_cudnn_sdpa_backward(s, d_dq, d_dk, d_dv, d_do, d_o, d_q, d_k, d_v, d_st, ws, 0);
    RT_CHECK_CUDA(cudaDeviceSynchronize());
    float *g_o = unpack(d_o, nq, p), *g_dq = unpack(d_dq, nq, p);
    float *g_dk = unpack(d_dk, nk, p), *g_dv = unpack(d_dv, nk, p);
    float* g_st = malloc(ns * 4);
    RT_CHECK_CUDA(cudaMemcpy(g_st, d_st, ns * 4, cudaMemcpyDeviceToHost));

    attn_tc_bound bd;
    const double u = attn_tc_u(p == RT_BF16);
    attn_tc_bound_compute(&bd, q, k, v, dout, B, T, NH, NKV, HD, causal, u,
                          attn_tc_eta(p == RT_BF16));
    cmp_bound("  forward: out", g_o, out, bd.out, bd.out, nq);
    float* lse = malloc(ns * 4);  // the CPU's (max, 1/sum) as logsumexp
    for (size_t i = 0; i < ns; i++) lse[i] = st[2 * i] - logf(st[2 * i + 1]);
    double sd = 0.0;
    for (size_t i = 0; i < ns; i++)
        sd = fmax(sd, isnan(g_st[i]) ? INFINITY : fabs(g_st[i] - lse[i]));
    CHECK(sd <= 1e-3, "  forward: stats (logsumexp, fp32) max diff %.3g", sd);
    const double g = NH != NKV;  // GQA: per-head partial dK, dV in 16 bits, then summed
    double* e = extra(bd.dq_D, 2.0, NULL, 0.0, dq, u, nq);
    cmp_bound("  backward: dq", g_dq, dq, bd.dq, e, nq);
    free(e), e = extra(bd.dk_D, 2.0, bd.dk, g, dk, u, nk);
    cmp_bound("  backward: dk", g_dk, dk, bd.dk, e, nk);
    free(e), e = extra(NULL, 0.0, bd.dv, g, dv, u, nk);
    cmp_bound("  backward: dv", g_dv, dv, bd.dv, e, nk);
    free(e);
    if (det) {  // the deterministic backward again: the same bits
        void *d_dq2 = dalloc(nq * 2), *d_dk2 = dalloc(nk * 2), *d_dv2 = dalloc(nk * 2);
        rt_cudnn_sdpa_backward(s, d_dq2, d_dk2, d_dv2, d_do, d_o, d_q, d_k, d_v, d_st, ws, 0);
        RT_CHECK_CUDA(cudaDeviceSynchronize());
        float *a = unpack(d_dq2, nq, p), *b = unpack(d_dk2, nk, p), *c = unpack(d_dv2, nk, p);
        CHECK(!memcmp(a, g_dq, nq * 4) && !memcmp(b, g_dk, nk * 4) && !memcmp(c, g_dv, nk * 4),
              "  backward again: dq, dk, dv the same bits (deterministic)");
        free(a), free(b), free(c), dfree(d_dq2), dfree(d_dk2), dfree(d_dv2);
    }
    if (causal) {  // control: the non-causal reference must be far off
        attn_tc_cmp_result r = attn_tc_compare(g_o, out_nc, bd.out, bd.out, nq, TOL_GEMM);
        CHECK(r.ratio > 10.0, "  control: causal out vs the non-causal reference differs "
              "(max diff %.3g, %.1f x the bound)", r.diff, r.ratio);
    }
    if (capture) {  // the same two calls captured in a CUDA graph give the same bits
        cudaStream_t str;
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        RT_CHECK_CUDA(cudaStreamCreateWithFlags(&str, cudaStreamNonBlocking));
        void *c_o = dalloc(nq * 2), *c_dq = dalloc(nq * 2);
        RT_CHECK_CUDA(cudaStreamBeginCapture(str, cudaStreamCaptureModeGlobal));
        rt_cudnn_sdpa_forward(s, c_o, d_st, d_q, d_k, d_v, ws, str);
        rt_cudnn_sdpa_backward(s, c_dq, d_dk, d_dv, d_do, c_o, d_q, d_k, d_v, d_st, ws, str);
        RT_CHECK_CUDA(cudaStreamEndCapture(str, &graph));
        RT_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
        RT_CHECK_CUDA(cudaGraphLaunch(exec, str));
        RT_CHECK_CUDA(cudaStreamSynchronize(str));
        float *c_go = unpack(c_o, nq, p), *c_gdq = unpack(c_dq, nq, p);
        CHECK(memcmp(c_go, g_o, nq * 4) == 0, "  CUDA graph: out, same bits as the eager call");
        attn_tc_cmp_result r = attn_tc_compare(c_gdq, g_dq, bd.dq, bd.dq, nq, TOL_GEMM);
        CHECK(r.ratio <= 1.0, "  CUDA graph: dq within the bound of the eager call's "
              "(max diff %.3g; cuDNN's dQ may sum in any order)", r.diff);
        free(c_go), free(c_gdq), dfree(c_o), dfree(c_dq);
        RT_CHECK_CUDA(cudaGraphExecDestroy(exec));
        RT_CHECK_CUDA(cudaGraphDestroy(graph));
        RT_CHECK_CUDA(cudaStreamDestroy(str));
    }
    attn_tc_bound_free(&bd);
    rt_cudnn_sdpa_destroy(s);
    free(q), free(k), free(v), free(dout), free(out), free(st), free(sc), free(dq), free(dk);
    free(dv), free(out_nc), free(g_o), free(g_dq), free(g_dk), free(g_dv), free(g_st), free(lse);
    dfree(d_q), dfree(d_k), dfree(d_v), dfree(d_do), dfree(d_o), dfree(d_dq), dfree(d_dk);
    dfree(d_dv), dfree(d_st), dfree(ws);
    return 1;
}

// The deterministic backward with dq, dk, dv side by side in rows of cq + 2 ck + 8 elements
// (rt_kernels.h "Gradient row lengths") against the dense plan's: the same bits in the
// slices (only the stores' addresses differ), the sentinel bytes elsewhere.
static void strided(int B, int T, int NH, int NKV, int HD, int causal, rt_dtype p) {
    const int cq = NH * HD, ck = NKV * HD, ld = cq + 2 * ck + 8;
    const size_t nq = (size_t)B * T * cq, nk = (size_t)B * T * ck, nw = (size_t)B * T * ld;
    char why[512], name[160];
    snprintf(name, sizeof name, "%s B=%d T=%d NH=%d NKV=%d HD=%d causal=%d, gradients in rows "
             "of %d", p == RT_BF16 ? "bf16" : "fp16", B, T, NH, NKV, HD, causal, ld);
    rt_cudnn_sdpa* s = rt_cudnn_sdpa_create(B, T, NH, NKV, HD, causal, p, 1, 0, 0, 0, why, sizeof why);
    rt_cudnn_sdpa* w =
        rt_cudnn_sdpa_create(B, T, NH, NKV, HD, causal, p, 1, ld, ld, ld, why, sizeof why);
    CHECK(s && w, "%s: plans built%s%s", name, w ? "" : ": ", w ? "" : why);
    if (!s || !w) {
        rt_cudnn_sdpa_destroy(s), rt_cudnn_sdpa_destroy(w);
        return;
    }
    float *q = hrand(nq, 1.5f, 0.0f), *k = hrand(nk, 1.5f, 0.0f), *v = hrand(nk, 1.0f, 0.0f);
    float* dout = hrand(nq, 1.0f, 0.0f);
    void *d_q = pack(q, nq, p), *d_k = pack(k, nk, p), *d_v = pack(v, nk, p);
    void *d_do = pack(dout, nq, p), *d_o = dalloc(nq * 2), *d_dq = dalloc(nq * 2);
    void *d_dk = dalloc(nk * 2), *d_dv = dalloc(nk * 2);
    uint16_t* d_w = dalloc(nw * 2);
    float* d_st = dalloc(rt_cudnn_sdpa_stats_floats(B, NH, T) * 4);
    const size_t wa = rt_cudnn_sdpa_workspace_bytes(s), wb = rt_cudnn_sdpa_workspace_bytes(w);
    void* ws = dalloc(wa > wb ? wa : wb);
    RT_CHECK_CUDA(cudaMemset(d_w, 0x5A, nw * 2));
    rt_cudnn_sdpa_forward(s, d_o, d_st, d_q, d_k, d_v, ws, 0);
    rt_cudnn_sdpa_backward(s, d_dq, d_dk, d_dv, d_do, d_o, d_q, d_k, d_v, d_st, ws, 0);
    rt_cudnn_sdpa_backward(w, d_w, d_w + cq, d_w + cq + ck, d_do, d_o, d_q, d_k, d_v, d_st, ws,
                           0);
    RT_CHECK_CUDA(cudaDeviceSynchronize());
    uint16_t *h = malloc(nw * 2), *g[3] = {malloc(nq * 2), malloc(nk * 2), malloc(nk * 2)};
    RT_CHECK_CUDA(cudaMemcpy(h, d_w, nw * 2, cudaMemcpyDeviceToHost));
    RT_CHECK_CUDA(cudaMemcpy(g[0], d_dq, nq * 2, cudaMemcpyDeviceToHost));
    RT_CHECK_CUDA(cudaMemcpy(g[1], d_dk, nk * 2, cudaMemcpyDeviceToHost));
    RT_CHECK_CUDA(cudaMemcpy(g[2], d_dv, nk * 2, cudaMemcpyDeviceToHost));
    const int off[3] = {0, cq, cq + ck}, cols[3] = {cq, ck, ck};
    size_t differ = 0, touched = 0;
    for (size_t r = 0; r < (size_t)B * T; r++) {
        for (int i = 0; i < 3; i++)
            differ += memcmp(h + r * ld + off[i], g[i] + r * cols[i], (size_t)cols[i] * 2) != 0;
        for (int j = cq + 2 * ck; j < ld; j++) touched += h[r * ld + j] != 0x5A5A;
    }
    CHECK(differ == 0 && touched == 0, "%s: dq, dk, dv the dense plan's bits (%zu slice rows "
          "differ), the other columns untouched (%zu changed)", name, differ, touched);
    free(q), free(k), free(v), free(dout), free(h), free(g[0]), free(g[1]), free(g[2]);
    dfree(d_q), dfree(d_k), dfree(d_v), dfree(d_do), dfree(d_o), dfree(d_dq), dfree(d_dk);
    dfree(d_dv), dfree(d_w), dfree(d_st), dfree(ws);
    rt_cudnn_sdpa_destroy(s), rt_cudnn_sdpa_destroy(w);
}

int main(void) {
    if (skip_without_gpu("test_cudnn_attention")) return 0;
    struct cudaDeviceProp prop;
    RT_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    printf("device 0: %s (sm_%d%d), cuDNN %zu\n", prop.name, prop.major, prop.minor,
           cudnnGetVersion());
    cpu_rt_kernels_init();
    // head shapes: GPT-2 124M (12 x 64), Llama 1B (32 x 64, 8 kv), HD 128 with 4 query heads
    // per kv head; the small examples' HD 16 and 32 (cuDNN may refuse those: a SKIP)
    static const int shapes[][4] = {{12, 12, 64, 1}, {32, 8, 64, 1}, {8, 2, 128, 1},
                                    {4, 2, 16, 0}, {4, 4, 32, 0}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int causal = 1; causal >= 0; causal--)
            for (int pi = 0; pi < 3; pi++)  // bf16, fp16 deterministic; bf16 with atomics
                run(2, 100, shapes[i][0], shapes[i][1], shapes[i][2], causal,
                    pi == 1 ? RT_F16 : RT_BF16, pi < 2, shapes[i][3], 0);
    // the gradients as column slices of one matrix (Llama's GQA, GPT-2's MHA)
    strided(2, 100, 32, 8, 64, 1, RT_BF16);
    strided(2, 100, 12, 12, 64, 0, RT_F16);
    // a refused shape: NULL and a reason (HD 300 is past every engine's head size)
    char why[512] = "";
    rt_cudnn_sdpa* bad = rt_cudnn_sdpa_create(2, 100, 4, 4, 300, 1, RT_BF16, 1, 0, 0, 0, why, sizeof why);
    CHECK(bad == NULL && why[0], "HD=300 refused with a reason: %s", why);
    rt_cudnn_sdpa_destroy(bad);
    // create and destroy twice after a first (warm-up) pair: no device memory kept
    size_t f0, f1, total;
    rt_cudnn_sdpa_destroy(rt_cudnn_sdpa_create(2, 100, 8, 2, 128, 1, RT_BF16, 1, 0, 0, 0, why, sizeof why));
    RT_CHECK_CUDA(cudaMemGetInfo(&f0, &total));
    for (int i = 0; i < 2; i++)
        rt_cudnn_sdpa_destroy(
            rt_cudnn_sdpa_create(2, 100, 8, 2, 128, 1, RT_BF16, 1, 0, 0, 0, why, sizeof why));
    RT_CHECK_CUDA(cudaMemGetInfo(&f1, &total));
    CHECK(f1 + (4u << 20) >= f0, "create/destroy twice: free device memory %zu -> %zu bytes", f0,
          f1);
    // last, as a cuDNN engine that cannot be captured stops the program: forward and
    // backward captured in a CUDA graph (both forward forms: causal and not)
    run(2, 100, 8, 2, 128, 1, RT_BF16, 1, 1, 1);
    run(2, 100, 12, 12, 64, 0, RT_F16, 0, 1, 1);
    return check_summary();
}
