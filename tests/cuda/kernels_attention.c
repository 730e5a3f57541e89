// test_cuda_kernels: attention (probs and flash, fp32 and tensor cores), packed rope and attention.
#include "kernel_tests.h"

// ----------------------------------------------------------------------------
// attention: the probs variant (cuBLAS) and the lowmem variant (flash attention) against
// the CPU, and against each other; the flash backward run twice gives the same bits

void test_attention(int B, int T, int NH, int NKV, int HD, int causal) {
    char nm[160];
    const size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    const size_t np = cpu_rt_attention_probs_floats(B, NH, T);
    const size_t ns = cpu_rt_attention_stats_floats(B, NH, T);
    const size_t nsc = cpu_rt_attention_lowmem_scratch_floats(B, NH, T);
    CHECK(rt_attention_probs_floats(B, NH, T) == np &&
              rt_attention_stats_floats(B, NH, T) == ns &&
              rt_attention_scratch_floats(T) == cpu_rt_attention_scratch_floats(T) &&
              rt_attention_lowmem_scratch_floats(B, NH, T) == nsc,
          "attention buffer sizes equal the CPU backend's (B=%d NH=%d T=%d)", B, NH, T);
    float *q = hrand(nq, 1.0f, 0.0f), *k = hrand(nk, 1.0f, 0.0f), *v = hrand(nk, 1.0f, 0.0f);
    float *dout = hrand(nq, 1.0f, 0.0f), *out = hrand(nq, 1.0f, 0.0f);
    float *probs = hrand(np, 1.0f, 0.0f), *stats = hrand(ns, 1.0f, 0.0f);
    float* scratch = hrand(nsc, 1.0f, 0.0f);
    float *dq = hrand(nq, 1.0f, 0.0f), *dk = hrand(nk, 1.0f, 0.0f), *dv = hrand(nk, 1.0f, 0.0f);
    float *dq0 = hcopy(dq, nq), *dk0 = hcopy(dk, nk), *dv0 = hcopy(dv, nk);
    float *d_q = dup(q, nq), *d_k = dup(k, nk), *d_v = dup(v, nk), *d_dout = dup(dout, nq);
    float *d_out = dup(out, nq), *d_out2 = dup(out, nq), *d_probs = dup(probs, np),
          *d_stats = dup(stats, ns), *d_scratch = dup(scratch, nsc);
    float *d_dq = dup(dq, nq), *d_dk = dup(dk, nk), *d_dv = dup(dv, nk);
    float *d_dq2 = dup(dq, nq), *d_dk2 = dup(dk, nk), *d_dv2 = dup(dv, nk);
    snprintf(nm, sizeof nm, "attention B=%d T=%d NH=%d NKV=%d HD=%d causal=%d", B, T, NH, NKV, HD,
             causal);

    // probs variant vs CPU
    cpu_rt_attention_forward(out, probs, q, k, v, B, T, NH, NKV, HD, causal);
    rt_attention_forward(d_out, d_probs, d_q, d_k, d_v, B, T, NH, NKV, HD, causal);
    printf("== %s\n", nm);
    cmp("  probs forward: out", d_out, out, nq, TOL_GEMM);
    cmp("  probs forward: probs", d_probs, probs, np, TOL_GEMM);
    RT_CHECK_CUDA(cudaMemcpy(d_probs, probs, np * sizeof(float), cudaMemcpyHostToDevice));
    cpu_rt_attention_backward(dq, dk, dv, scratch, dout, q, k, v, probs, B, T, NH, NKV, HD,
                              causal);
    rt_attention_backward(d_dq, d_dk, d_dv, d_scratch, d_dout, d_q, d_k, d_v, d_probs, B, T, NH,
                          NKV, HD, causal);
    cmp("  probs backward (CPU probs): dq (+=)", d_dq, dq, nq, TOL_GEMM);
    cmp("  probs backward (CPU probs): dk (+=)", d_dk, dk, nk, TOL_GEMM);
    cmp("  probs backward (CPU probs): dv (+=)", d_dv, dv, nk, TOL_GEMM);

    // flash forward vs CPU lowmem, and vs the GPU probs variant
    cpu_rt_attention_lowmem_forward(out, stats, scratch, q, k, v, B, T, NH, NKV, HD, causal,
                                    RT_F32, RT_F32);
    rt_attention_lowmem_forward(d_out2, d_stats, d_scratch, d_q, d_k, d_v, B, T, NH, NKV, HD,
                                causal, RT_F32, RT_F32);
    cmp("  flash forward: out vs CPU", d_out2, out, nq, TOL_GEMM);
    cmp("  flash forward: stats (max, 1/sum) vs CPU", d_stats, stats, ns, TOL_GEMM);
    rt_attention_forward(d_out, d_probs, d_q, d_k, d_v, B, T, NH, NKV, HD, causal);
    cmp_dev("  flash forward: out vs GPU probs variant", d_out2, d_out, nq, TOL_GEMM);

    // flash backward from the CPU's out and stats vs the CPU (accumulating onto dq0..dv0)
    float *dq2 = hcopy(dq0, nq), *dk2 = hcopy(dk0, nk), *dv2 = hcopy(dv0, nk);
    RT_CHECK_CUDA(cudaMemcpy(d_out2, out, nq * sizeof(float), cudaMemcpyHostToDevice));
    RT_CHECK_CUDA(cudaMemcpy(d_stats, stats, ns * sizeof(float), cudaMemcpyHostToDevice));
    float *d_dq3 = dup(dq2, nq), *d_dk3 = dup(dk2, nk), *d_dv3 = dup(dv2, nk);
    cpu_rt_attention_lowmem_backward(dq2, dk2, dv2, scratch, dout, out, q, k, v, stats, B, T, NH,
                                     NKV, HD, causal, RT_F32, RT_F32, RT_ACCUMULATE);
    rt_attention_lowmem_backward(d_dq3, d_dk3, d_dv3, d_scratch, d_dout, d_out2, d_q, d_k, d_v,
                                 d_stats, B, T, NH, NKV, HD, causal, RT_F32, RT_F32, RT_ACCUMULATE);
    cmp("  flash backward (CPU out, stats): dq (+=)", d_dq3, dq2, nq, TOL_GEMM);
    cmp("  flash backward (CPU out, stats): dk (+=)", d_dk3, dk2, nk, TOL_GEMM);
    cmp("  flash backward (CPU out, stats): dv (+=)", d_dv3, dv2, nk, TOL_GEMM);
    // deterministic: the same call from the same buffers gives the same bits
    RT_CHECK_CUDA(cudaMemcpy(d_dq2, dq0, nq * sizeof(float), cudaMemcpyHostToDevice));
    RT_CHECK_CUDA(cudaMemcpy(d_dk2, dk0, nk * sizeof(float), cudaMemcpyHostToDevice));
    RT_CHECK_CUDA(cudaMemcpy(d_dv2, dv0, nk * sizeof(float), cudaMemcpyHostToDevice));
    rt_attention_lowmem_backward(d_dq2, d_dk2, d_dv2, d_scratch, d_dout, d_out2, d_q, d_k, d_v,
                                 d_stats, B, T, NH, NKV, HD, causal, RT_F32, RT_F32, RT_ACCUMULATE);
    cmp_dev("  flash backward run twice: dq bit-identical", d_dq2, d_dq3, nq, TOL_EXACT);
    cmp_dev("  ... dk bit-identical", d_dk2, d_dk3, nk, TOL_EXACT);
    cmp_dev("  ... dv bit-identical", d_dv2, d_dv3, nk, TOL_EXACT);
    // dv only (dq, dk NULL)
    cpu_rt_attention_lowmem_backward(NULL, NULL, dv2, scratch, dout, out, q, k, v, stats, B, T,
                                     NH, NKV, HD, causal, RT_F32, RT_F32, RT_ACCUMULATE);
    rt_attention_lowmem_backward(NULL, NULL, d_dv3, d_scratch, d_dout, d_out2, d_q, d_k, d_v,
                                 d_stats, B, T, NH, NKV, HD, causal, RT_F32, RT_F32, RT_ACCUMULATE);
    cmp("  flash backward dq, dk NULL: dv (+=)", d_dv3, dv2, nk, TOL_GEMM);
    cmp("  ... dq untouched", d_dq3, dq2, nq, TOL_GEMM);

    free(q), free(k), free(v), free(dout), free(out), free(probs), free(stats), free(scratch);
    free(dq), free(dk), free(dv), free(dq0), free(dk0), free(dv0), free(dq2), free(dk2), free(dv2);
    dfree(d_q), dfree(d_k), dfree(d_v), dfree(d_dout), dfree(d_out), dfree(d_out2);
    dfree(d_probs), dfree(d_stats), dfree(d_scratch), dfree(d_dq), dfree(d_dk), dfree(d_dv);
    dfree(d_dq2), dfree(d_dk2), dfree(d_dv2), dfree(d_dq3), dfree(d_dk3), dfree(d_dv3);
}

// ----------------------------------------------------------------------------
// attention on tensor cores (prec RT_BF16 / RT_F16: runtime/cuda/kernels/flash_attention_tc.cuh)
// against the CPU, q, k, v and dout rounded to prec. Allowance per element: the bound of
// attention_tc_ref.h on the narrowing of P and dS to prec (u = 2^-8 bf16, 2^-11 fp16,
// times the sum of the magnitudes of the element's product terms) plus TOL_GEMM *
// max(1, |want|), what the fp32 flash kernels meet here; it passes at max diff/allowance
// <= 1.

// Compares n device values with the CPU's within bound (+ bound2) + tol * max(1, |want|).
static void cmp_tc(const char* name, const float* dgot, const float* want, const double* bound,
                   const double* bound2, size_t n, double tol) {
    float* got = down(dgot, n);
    const attn_tc_cmp_result r = attn_tc_compare(got, want, bound, bound2, n, tol);
    CHECK(r.ratio <= 1.0, "%s: %zu values, max diff %.3g, max diff/allowance %.3f (allowance "
          "up to %.3g)", name, n, r.diff, r.ratio, r.allow);
    free(got);
}

void test_attention_tc(int B, int T, int NH, int NKV, int HD, int causal, rt_dtype prec) {
    const size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    const size_t ns = cpu_rt_attention_stats_floats(B, NH, T);
    const size_t nsc = cpu_rt_attention_lowmem_scratch_floats(B, NH, T);
    float *q = hrand(nq, 1.5f, 0.0f), *k = hrand(nk, 1.5f, 0.0f), *v = hrand(nk, 1.0f, 0.0f);
    float* dout = hrand(nq, 1.0f, 0.0f);
    round_to(q, nq, prec), round_to(k, nk, prec), round_to(v, nk, prec), round_to(dout, nq, prec);
    float *out = hrand(nq, 1.0f, 0.0f), *stats = hrand(ns, 1.0f, 0.0f);
    float* scratch = hrand(nsc, 1.0f, 0.0f);
    float *dq0 = hrand(nq, 1.0f, 0.0f), *dk0 = hrand(nk, 1.0f, 0.0f), *dv0 = hrand(nk, 1.0f, 0.0f);
    float *dq = hcopy(dq0, nq), *dk = hcopy(dk0, nk), *dv = hcopy(dv0, nk);
    float *d_q = dup(q, nq), *d_k = dup(k, nk), *d_v = dup(v, nk), *d_dout = dup(dout, nq);
    float *d_out = dup(out, nq), *d_stats = dup(stats, ns), *d_scratch = dup(scratch, nsc);
    float *d_cout = dup(out, nq), *d_cstats = dup(stats, ns);
    attn_tc_bound bd;
    attn_tc_bound_compute(&bd, q, k, v, dout, B, T, NH, NKV, HD, causal,
                          attn_tc_u(prec == RT_BF16), attn_tc_eta(prec == RT_BF16));
    const char* P = prec == RT_BF16 ? "bf16" : "fp16";
    printf("== attention on tensor cores, %s, B=%d T=%d NH=%d NKV=%d HD=%d causal=%d\n", P, B, T,
           NH, NKV, HD, causal);

    // forward vs CPU
    cpu_rt_attention_lowmem_forward(out, stats, scratch, q, k, v, B, T, NH, NKV, HD, causal,
                                    RT_F32, RT_F32);
    rt_attention_lowmem_forward(d_out, d_stats, d_scratch, d_q, d_k, d_v, B, T, NH, NKV, HD,
                                causal, prec, RT_F32);
    cmp_tc("  tc forward: out vs CPU", d_out, out, bd.out, NULL, nq, TOL_GEMM);
    cmp("  tc forward: stats (max, 1/sum) vs CPU (no 16-bit rounding)", d_stats, stats, ns,
        TOL_GEMM);

    // backward from the CPU's out and stats, accumulated onto dq0..dv0
    RT_CHECK_CUDA(cudaMemcpy(d_cout, out, nq * sizeof(float), cudaMemcpyHostToDevice));
    RT_CHECK_CUDA(cudaMemcpy(d_cstats, stats, ns * sizeof(float), cudaMemcpyHostToDevice));
    cpu_rt_attention_lowmem_backward(dq, dk, dv, scratch, dout, out, q, k, v, stats, B, T, NH,
                                     NKV, HD, causal, RT_F32, RT_F32, RT_ACCUMULATE);
    float *d_dq = dup(dq0, nq), *d_dk = dup(dk0, nk), *d_dv = dup(dv0, nk);
    rt_attention_lowmem_backward(d_dq, d_dk, d_dv, d_scratch, d_dout, d_cout, d_q, d_k, d_v,
                                 d_cstats, B, T, NH, NKV, HD, causal, prec, RT_F32, RT_ACCUMULATE);
    cmp_tc("  tc backward (CPU out, stats): dq (+=)", d_dq, dq, bd.dq, NULL, nq, TOL_GEMM);
    cmp_tc("  tc backward (CPU out, stats): dk (+=)", d_dk, dk, bd.dk, NULL, nk, TOL_GEMM);
    cmp_tc("  tc backward (CPU out, stats): dv (+=)", d_dv, dv, bd.dv, NULL, nk, TOL_GEMM);

    // backward from the GPU forward's out and stats (its out error reaches D)
    float *d_gdq = dup(dq0, nq), *d_gdk = dup(dk0, nk), *d_gdv = dup(dv0, nk);
    rt_attention_lowmem_backward(d_gdq, d_gdk, d_gdv, d_scratch, d_dout, d_out, d_q, d_k, d_v,
                                 d_stats, B, T, NH, NKV, HD, causal, prec, RT_F32, RT_ACCUMULATE);
    cmp_tc("  tc forward then backward: dq (+=)", d_gdq, dq, bd.dq, bd.dq_D, nq, TOL_GEMM);
    cmp_tc("  tc forward then backward: dk (+=)", d_gdk, dk, bd.dk, bd.dk_D, nk, TOL_GEMM);
    cmp_tc("  tc forward then backward: dv (+=)", d_gdv, dv, bd.dv, NULL, nk, TOL_GEMM);

    // deterministic, and each gradient alone gives the joint call's bits
    float *d_sdq = dup(dq0, nq), *d_sdk = dup(dk0, nk), *d_sdv = dup(dv0, nk);
    rt_attention_lowmem_backward(d_sdq, NULL, NULL, d_scratch, d_dout, d_out, d_q, d_k, d_v,
                                 d_stats, B, T, NH, NKV, HD, causal, prec, RT_F32, RT_ACCUMULATE);
    rt_attention_lowmem_backward(NULL, d_sdk, NULL, d_scratch, d_dout, d_out, d_q, d_k, d_v,
                                 d_stats, B, T, NH, NKV, HD, causal, prec, RT_F32, RT_ACCUMULATE);
    rt_attention_lowmem_backward(NULL, NULL, d_sdv, d_scratch, d_dout, d_out, d_q, d_k, d_v,
                                 d_stats, B, T, NH, NKV, HD, causal, prec, RT_F32, RT_ACCUMULATE);
    cmp_dev("  tc backward dq alone: the joint call's bits", d_sdq, d_gdq, nq, TOL_EXACT);
    cmp_dev("  ... dk alone", d_sdk, d_gdk, nk, TOL_EXACT);
    cmp_dev("  ... dv alone", d_sdv, d_gdv, nk, TOL_EXACT);
    RT_CHECK_CUDA(cudaMemcpy(d_sdq, dq0, nq * sizeof(float), cudaMemcpyHostToDevice));
    RT_CHECK_CUDA(cudaMemcpy(d_sdk, dk0, nk * sizeof(float), cudaMemcpyHostToDevice));
    RT_CHECK_CUDA(cudaMemcpy(d_sdv, dv0, nk * sizeof(float), cudaMemcpyHostToDevice));
    rt_attention_lowmem_backward(d_sdq, d_sdk, d_sdv, d_scratch, d_dout, d_out, d_q, d_k, d_v,
                                 d_stats, B, T, NH, NKV, HD, causal, prec, RT_F32, RT_ACCUMULATE);
    cmp_dev("  tc backward run twice: dq, dk, dv bit-identical", d_sdq, d_gdq, nq, TOL_EXACT);
    cmp_dev("  ... dk", d_sdk, d_gdk, nk, TOL_EXACT);
    cmp_dev("  ... dv", d_sdv, d_gdv, nk, TOL_EXACT);

    // as the generated code calls it: out, dq, dk, dv rounded to prec at their store, the
    // gradients assigned over NaN: the fp32 stores' bits (onto zeros), rounded
    // (test_flash_tc_emu checks every combination of the bits)
    float* h = hrand(nq, 1.0f, 0.0f);
    reset_out(h, d_sdq, NULL, nq, 1);
    rt_attention_lowmem_forward(d_sdq, d_stats, d_scratch, d_q, d_k, d_v, B, T, NH, NKV, HD,
                                causal, prec, prec);
    float* want = down(d_out, nq);
    round_to(want, nq, prec);
    cmp("  tc forward, dt = prec: out == the fp32 store rounded", d_sdq, want, nq, TOL_EXACT);
    free(want);
    memset(h, 0, nq * sizeof(float));
    RT_CHECK_CUDA(cudaMemcpy(d_gdq, h, nq * sizeof(float), cudaMemcpyHostToDevice));
    RT_CHECK_CUDA(cudaMemcpy(d_gdk, h, nk * sizeof(float), cudaMemcpyHostToDevice));
    RT_CHECK_CUDA(cudaMemcpy(d_gdv, h, nk * sizeof(float), cudaMemcpyHostToDevice));
    rt_attention_lowmem_backward(d_gdq, d_gdk, d_gdv, d_scratch, d_dout, d_out, d_q, d_k, d_v,
                                 d_stats, B, T, NH, NKV, HD, causal, prec, RT_F32, RT_ACCUMULATE);
    reset_out(h, d_sdq, NULL, nq, 1);
    reset_out(h, d_sdk, NULL, nk, 1);
    reset_out(h, d_sdv, NULL, nk, 1);
    rt_attention_lowmem_backward(d_sdq, d_sdk, d_sdv, d_scratch, d_dout, d_out, d_q, d_k, d_v,
                                 d_stats, B, T, NH, NKV, HD, causal, prec, prec,
                                 RT_ASSIGN_1 | RT_ASSIGN_2 | RT_ASSIGN_3);
    const char* gname[3] = {
        "  tc backward, dt = prec, assigned: dq == the fp32 store onto 0, rounded", "  ... dk",
        "  ... dv"};
    float* dgot[3] = {d_sdq, d_sdk, d_sdv};
    float* dref[3] = {d_gdq, d_gdk, d_gdv};
    for (int i = 0; i < 3; i++) {
        const size_t n = i == 0 ? nq : nk;
        want = down(dref[i], n);
        round_to(want, n, prec);
        cmp(gname[i], dgot[i], want, n, TOL_EXACT);
        free(want);
    }
    free(h);

    attn_tc_bound_free(&bd);
    free(q), free(k), free(v), free(dout), free(out), free(stats), free(scratch);
    free(dq0), free(dk0), free(dv0), free(dq), free(dk), free(dv);
    dfree(d_q), dfree(d_k), dfree(d_v), dfree(d_dout), dfree(d_out), dfree(d_stats);
    dfree(d_scratch), dfree(d_cout), dfree(d_cstats), dfree(d_dq), dfree(d_dk), dfree(d_dv);
    dfree(d_gdq), dfree(d_gdk), dfree(d_gdv), dfree(d_sdq), dfree(d_sdk), dfree(d_sdv);
}

// packed rope and attention (rt_kernels.h): every storage of q, k, v and out, forward and
// backward, and of dq, dk, dv, against the fp32-storage calls, bit for bit; HD 64 runs the
// tensor-core kernels, HD 136 the fp32 ones on widened operands.
void test_packed_attention(rt_dtype dt, int B, int T, int NH, int NKV, int HD) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    const size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    const size_t ns = rt_attention_stats_floats(B, NH, T), nsc = rt_attention_lowmem_scratch_floats(B, NH, T);
    float *q = hrand(nq, 1.0f, 0.0f), *k = hrand(nk, 1.0f, 0.0f), *v = hrand(nk, 1.0f, 0.0f),
          *dy = hrand(nq, 1.0f, 0.0f), *g0 = hrand(nq, 1.0f, 0.0f);
    round_to(q, nq, dt), round_to(k, nk, dt), round_to(v, nk, dt), round_to(dy, nq, dt), round_to(g0, nq, dt);
    float *d_q = dup(q, nq), *d_k = dup(k, nk), *d_v = dup(v, nk), *d_dy = dup(dy, nq);
    void *q16 = dev_packed(q, 1, (int)nq, dt), *k16 = dev_packed(k, 1, (int)nk, dt),
         *v16 = dev_packed(v, 1, (int)nk, dt), *dy16 = dev_packed(dy, 1, (int)nq, dt);
    void *y16 = dalloc(nq * 2), *g16 = dalloc(nq * 2);
    float *d_y = dalloc(nq * sizeof(float)), *d_y2 = dalloc(nq * sizeof(float));
    float *d_g = dalloc(nq * sizeof(float)), *d_g2 = dalloc(nq * sizeof(float));
    int pad, ok = 1;
    rt_rope_forward(d_y, d_q, B, T, NH, HD, RT_ROPE_THETA, dt);
    for (int bits = 1; bits < 4; bits++) {
        rt_rope_packed_forward(bits & RT_PACKED_OUT ? y16 : (void*)d_y2,
                               bits & RT_PACKED_INP ? q16 : (const void*)d_q, B, T, NH, HD,
                               RT_ROPE_THETA, bits, dt);
        ok &= bits & RT_PACKED_OUT ? packed_same(y16, d_y, 1, (int)nq, dt, &pad) : dev_same(d_y, d_y2, nq);
    }
    for (int bits = 0; bits < 8; bits++) {
        const int pk = (bits & 1) | (bits & 2 ? RT_PACKED_DINP : 0);
        const int as = bits & 4 ? RT_ASSIGN_1 : RT_ACCUMULATE;
        upload(d_g, g0, nq), upload(d_g2, g0, nq);
        dev_grad16(g16, g0, nq, as, dt);
        rt_rope_backward(d_g, d_dy, B, T, NH, HD, RT_ROPE_THETA, dt, as);
        rt_rope_packed_backward(pk & RT_PACKED_DINP ? g16 : (void*)d_g2,
                                pk & RT_PACKED_OUT ? dy16 : (const void*)d_dy, B, T, NH, HD,
                                RT_ROPE_THETA, pk, dt, as, 0);
        ok &= pk & RT_PACKED_DINP ? packed_same(g16, d_g, 1, (int)nq, dt, &pad) : dev_same(d_g, d_g2, nq);
    }
    CHECK(ok, "%s rope packed forward and backward (every storage) == the fp32-storage calls, "
          "B=%d T=%d NH=%d HD=%d", nm, B, T, NH, HD);

    float *d_st = dalloc(ns * sizeof(float)), *d_st2 = dalloc(ns * sizeof(float)), *d_sc = dalloc(nsc * sizeof(float));
    float *d_dq = dalloc(nq * sizeof(float)), *d_dk = dalloc(nk * sizeof(float)), *d_dv = dalloc(nk * sizeof(float));
    float *d_dq2 = dalloc(nq * sizeof(float)), *d_dk2 = dalloc(nk * sizeof(float)), *d_dv2 = dalloc(nk * sizeof(float));
    const int as = RT_ASSIGN_1 | RT_ASSIGN_2 | RT_ASSIGN_3;
    rt_attention_lowmem_forward(d_y, d_st, d_sc, d_q, d_k, d_v, B, T, NH, NKV, HD, 1, dt, dt);
    rt_attention_lowmem_backward(d_dq, d_dk, d_dv, d_sc, d_dy, d_y, d_q, d_k, d_v, d_st, B, T, NH,
                                 NKV, HD, 1, dt, dt, as);
    float* y = down(d_y, nq);
    void* ya16 = dev_packed(y, 1, (int)nq, dt);
    ok = 1;
    for (int bits = 1; bits < 16; bits++) {
        const int pk = (bits & 1 ? RT_PACKED_OUT : 0) | (bits & 2 ? RT_PACKED_INP : 0) |
                       (bits & 4 ? RT_PACKED_INP2 : 0) | (bits & 8 ? RT_PACKED_INP3 : 0);
        const void *x = pk & RT_PACKED_INP ? q16 : (const void*)d_q,
                   *xk = pk & RT_PACKED_INP2 ? k16 : (const void*)d_k,
                   *xv = pk & RT_PACKED_INP3 ? v16 : (const void*)d_v;
        rt_attention_lowmem_packed_forward(pk & RT_PACKED_OUT ? y16 : (void*)d_y2, d_st2, d_sc, x, xk,
                                           xv, B, T, NH, NKV, HD, 1, dt, pk, dt);
        ok &= (pk & RT_PACKED_OUT ? packed_same(y16, d_y, 1, (int)nq, dt, &pad) : dev_same(d_y, d_y2, nq)) &&
              dev_same(d_st, d_st2, ns);
        rt_attention_lowmem_packed_backward(d_dq2, d_dk2, d_dv2, d_sc,
                                            pk & RT_PACKED_OUT ? dy16 : (const void*)d_dy,
                                            pk & RT_PACKED_OUT ? ya16 : (const void*)d_y, x, xk, xv,
                                            d_st, B, T, NH, NKV, HD, 1, dt, pk, dt, as, 0, 0, 0);
        ok &= dev_same(d_dq, d_dq2, nq) && dev_same(d_dk, d_dk2, nk) && dev_same(d_dv, d_dv2, nk);
    }
    CHECK(ok, "%s attention packed forward and backward (every storage of q, k, v, out) == the "
          "fp32-storage calls, B=%d T=%d NH=%d NKV=%d HD=%d", nm, B, T, NH, NKV, HD);
    // backward from packed operands into every storage of dq, dk, dv, assigned, or added to
    // g0's values (dk, dv: its first nk)
    ok = 1;
    void *dq16 = dalloc(nq * 2), *dk16 = dalloc(nk * 2), *dv16 = dalloc(nk * 2);
    const int ops = RT_PACKED_OUT | RT_PACKED_INP | RT_PACKED_INP2 | RT_PACKED_INP3;
    for (int bits = 0; bits < 16; bits++) {
        const int pk = ops | (bits & 1 ? RT_PACKED_DINP : 0) | (bits & 2 ? RT_PACKED_DINP2 : 0) |
                       (bits & 4 ? RT_PACKED_DINP3 : 0);
        const int asg = bits & 8 ? as : RT_ACCUMULATE;
        upload(d_dq, g0, nq), upload(d_dk, g0, nk), upload(d_dv, g0, nk);
        upload(d_dq2, g0, nq), upload(d_dk2, g0, nk), upload(d_dv2, g0, nk);
        dev_grad16(dq16, g0, nq, asg, dt), dev_grad16(dk16, g0, nk, asg, dt), dev_grad16(dv16, g0, nk, asg, dt);
        rt_attention_lowmem_backward(d_dq, d_dk, d_dv, d_sc, d_dy, d_y, d_q, d_k, d_v, d_st, B, T, NH,
                                     NKV, HD, 1, dt, dt, asg);
        rt_attention_lowmem_packed_backward(bits & 1 ? dq16 : (void*)d_dq2, bits & 2 ? dk16 : (void*)d_dk2,
                                            bits & 4 ? dv16 : (void*)d_dv2, d_sc, dy16, ya16, q16, k16,
                                            v16, d_st, B, T, NH, NKV, HD, 1, dt, pk, dt, asg, 0, 0,
                                            0);
        ok &= (bits & 1 ? packed_same(dq16, d_dq, 1, (int)nq, dt, &pad) : dev_same(d_dq, d_dq2, nq)) &&
              (bits & 2 ? packed_same(dk16, d_dk, 1, (int)nk, dt, &pad) : dev_same(d_dk, d_dk2, nk)) &&
              (bits & 4 ? packed_same(dv16, d_dv, 1, (int)nk, dt, &pad) : dev_same(d_dv, d_dv2, nk));
    }
    CHECK(ok, "%s attention packed backward into every storage of dq, dk, dv (assigned, accumulated) "
          "== the fp32-storage call, B=%d T=%d NH=%d NKV=%d HD=%d", nm, B, T, NH, NKV, HD);
    dfree(dq16), dfree(dk16), dfree(dv16);
    free(q), free(k), free(v), free(dy), free(g0), free(y);
    dfree(d_q), dfree(d_k), dfree(d_v), dfree(d_dy), dfree(q16), dfree(k16), dfree(v16), dfree(dy16);
    dfree(y16), dfree(g16), dfree(d_y), dfree(d_y2), dfree(d_g), dfree(d_g2), dfree(ya16);
    dfree(d_st), dfree(d_st2), dfree(d_sc), dfree(d_dq), dfree(d_dk), dfree(d_dv), dfree(d_dq2),
        dfree(d_dk2), dfree(d_dv2);
}
