// test_cuda_kernels: the sum loss, cross-entropy, and the LM head's packed logits and fused loss.
#include "kernel_tests.h"

// ----------------------------------------------------------------------------
// losses

void test_sum_loss(void) {
    const size_t n = 300007;
    float *x = hrand(n, 1.0f, 0.1f), *dx = hrand(n, 1.0f, 0.0f);
    float *d_x = dup(x, n), *d_dx = dup(dx, n), *d_loss = dup(x, 1);
    float loss;
    cpu_rt_sum_loss_forward(&loss, x, n);
    rt_sum_loss_forward(d_loss, d_x, n);
    cmp("sum loss forward n=300007", d_loss, &loss, 1, TOL_ELEM);
    const float half = 0.5f;
    float* d_half = dscalar(half);
    cpu_rt_sum_loss_backward(dx, n, &half, RT_ACCUMULATE);
    rt_sum_loss_backward(d_dx, n, d_half, RT_ACCUMULATE);
    cmp("sum loss backward (+=) dloss=0.5", d_dx, dx, n, TOL_EXACT);
    free(x), free(dx);
    dfree(d_x), dfree(d_dx), dfree(d_loss), dfree(d_half);
}

void test_cross_entropy(int N, int V, int ignore_every, int all_ignored) {
    char nm[128];
    const size_t nv = (size_t)N * V;
    int32_t* t = malloc((size_t)N * sizeof(int32_t));
    if (!t) abort();
    for (int n = 0; n < N; n++)
        t[n] = (all_ignored || (ignore_every && n % ignore_every == 1)) ? RT_IGNORE_INDEX
                                                                        : (int32_t)((n * 131) % V);
    float *x = hrand(nv, 5.0f, 0.0f), *dx = hrand(nv, 1.0f, 0.0f), *losses = hrand(N, 1.0f, 0.0f);
    float loss = 0.0f;
    float *d_x = dup(x, nv), *d_dx = dup(dx, nv), *d_losses = dup(losses, N), *d_loss = dup(x, 1);
    int32_t* d_t = dup_i32(t, N);
    cpu_rt_cross_entropy_forward(&loss, losses, x, t, N, V);
    rt_cross_entropy_forward(d_loss, d_losses, d_x, d_t, N, V);
    snprintf(nm, sizeof nm, "cross-entropy forward N=%d V=%d ignore_every=%d all_ignored=%d: loss",
             N, V, ignore_every, all_ignored);
    cmp(nm, d_loss, &loss, 1, TOL_ELEM);
    cmp("  ... per-row losses", d_losses, losses, N, TOL_ELEM);
    const float two = 2.0f;
    float* d_two = dscalar(two);
    cpu_rt_cross_entropy_backward(dx, x, t, N, V, &two, RT_F32, RT_ACCUMULATE);
    rt_cross_entropy_backward(d_dx, d_x, d_t, N, V, d_two, RT_F32, RT_ACCUMULATE);
    cmp("  ... backward dlogits (+=) dloss=2", d_dx, dx, nv, TOL_ELEM);
    // assigned and rounded to bf16 (the gradient of a bf16 tensor's fp32 view)
    reset_out(dx, d_dx, NULL, nv, 1);
    cpu_rt_cross_entropy_backward(dx, x, t, N, V, &two, RT_BF16, RT_ASSIGN_1);
    rt_cross_entropy_backward(d_dx, d_x, d_t, N, V, d_two, RT_BF16, RT_ASSIGN_1);
    cmp_dt("  ... backward dlogits (=) rounded to bf16", d_dx, dx, nv, TOL_ELEM, RT_BF16, 1);
    free(t), free(x), free(dx), free(losses);
    dfree(d_x), dfree(d_dx), dfree(d_losses), dfree(d_loss), dfree(d_t), dfree(d_two);
}

// A NaN logit makes the row's loss NaN, as on the CPU, also where it is all of what one
// thread read first (elements 0..7 of a 1000-wide row: its first group, and its second
// past the row's end), where the running max stays -inf.
void test_cross_entropy_nan(void) {
    enum { N = 2, V = 1000 };
    float *x = hrand((size_t)N * V, 5.0f, 0.0f), losses[N], loss = 0.0f;
    for (int j = 0; j < 8; j++) x[j] = NAN;
    const int32_t t[N] = {500, 7};
    float *d_x = dup(x, (size_t)N * V), *d_losses = dalloc(N * sizeof(float)), *d_loss = dup(x, 1);
    int32_t* d_t = dup_i32(t, N);
    cpu_rt_cross_entropy_forward(&loss, losses, x, t, N, V);
    rt_cross_entropy_forward(d_loss, d_losses, d_x, d_t, N, V);
    float *g = down(d_losses, N), *gl = down(d_loss, 1);
    CHECK(isnan(losses[0]) && isnan(g[0]) && isnan(loss) && isnan(gl[0]) && !isnan(g[1]) &&
              fabsf(g[1] - losses[1]) <= 1e-5f * fabsf(losses[1]),
          "cross-entropy forward, NaN in elements 0..7 of row 0: row 0's loss and the mean NaN "
          "(CPU %g, %g; GPU %g, %g), row 1's finite (CPU %g, GPU %g)", (double)losses[0],
          (double)loss, (double)g[0], (double)gl[0], (double)losses[1], (double)g[1]);
    free(x), free(g), free(gl);
    dfree(d_x), dfree(d_losses), dfree(d_loss), dfree(d_t);
}

// packed 16-bit logits (rt_kernels.h): the LM head's forward, the fused cross-entropy and
// the head's backward on packed buffers give the fp32-storage calls' bits on the GPU (the
// same products and kernels), with the padding columns zeros

void test_packed(rt_dtype dt, int N, int C, int V) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    const size_t np = (size_t)N * RT_LD16(V) * 2;
    float *inp = hrand((size_t)N * C, 1.0f, 0.0f), *w = hrand((size_t)V * C, 0.2f, 0.0f);
    round_to(inp, (size_t)N * C, dt), round_to(w, (size_t)V * C, dt);
    int32_t* t = malloc((size_t)N * sizeof(int32_t));
    if (!t) abort();
    for (int n = 0; n < N; n++) t[n] = n % 7 == 3 ? RT_IGNORE_INDEX : (int32_t)((n * 131) % V);
    float *d_inp = dup(inp, (size_t)N * C), *d_w = dup(w, (size_t)V * C);
    int32_t* d_t = dup_i32(t, N);
    float* d_logits = dalloc((size_t)N * V * sizeof(float));
    void *d_l16 = dalloc(np), *d_g16 = dalloc(np);
    RT_CHECK_CUDA(cudaMemset(d_l16, 0xAB, np));  // the padding must be written
    RT_CHECK_CUDA(cudaMemset(d_g16, 0xAB, np));
    rt_linear_forward(d_logits, d_inp, d_w, NULL, N, C, V, dt);
    rt_linear_packed_forward(d_l16, d_inp, d_w, NULL, N, C, V, RT_PACKED_OUT, dt);
    int pad;
    int ok = packed_same(d_l16, d_logits, N, V, dt, &pad);
    CHECK(ok && pad == 0, "%s packed linear forward N=%d C=%d OC=%d == rt_linear_forward, bit for "
          "bit; %d non-zero padding values", nm, N, C, V, pad);
    float* d_g = dalloc((size_t)N * V * sizeof(float));
    float *d_loss = dalloc(sizeof(float)), *d_loss16 = dalloc(sizeof(float));
    float* d_one = dscalar(1.0f);
    rt_cross_entropy_forward_backward(d_g, d_loss, d_logits, d_t, N, V, d_one, dt, RT_ASSIGN_1);
    rt_cross_entropy_packed_forward_backward(d_g16, d_loss16, d_l16, d_t, N, V, d_one, dt,
                                             RT_ASSIGN_1);
    ok = packed_same(d_g16, d_g, N, V, dt, &pad) && dev_same(d_loss, d_loss16, 1);
    CHECK(ok && pad == 0, "%s packed cross-entropy forward_backward (=) == fp32 storage: loss and "
          "dlogits bit for bit; %d non-zero padding values", nm, pad);
    float *dinp0 = hrand((size_t)N * C, 1.0f, 0.0f), *dw0 = hrand((size_t)V * C, 1.0f, 0.0f);
    round_to(dinp0, (size_t)N * C, dt);
    for (int as = 0; as < 2; as++) {
        const int bits = as ? RT_ASSIGN_1 | RT_ASSIGN_DWEIGHT : RT_ACCUMULATE;
        float *d_dinp = dup(dinp0, (size_t)N * C), *d_dw = dup(dw0, (size_t)V * C);
        float *d_dinp2 = dup(dinp0, (size_t)N * C), *d_dw2 = dup(dw0, (size_t)V * C);
        rt_linear_backward(d_dinp, d_dw, NULL, d_g, d_inp, d_w, N, C, V, dt, bits);
        rt_linear_packed_backward(d_dinp2, d_dw2, NULL, d_g16, d_inp, d_w, N, C, V, RT_PACKED_OUT, dt,
                                  bits, RT_LD16(V), 0);
        CHECK(dev_same(d_dinp, d_dinp2, (size_t)N * C) && dev_same(d_dw, d_dw2, (size_t)V * C),
              "%s packed linear backward (%s) == rt_linear_backward: dinp, dweight bit for bit", nm,
              as ? "assigned" : "accumulated");
        dfree(d_dinp), dfree(d_dw), dfree(d_dinp2), dfree(d_dw2);
    }
    free(inp), free(w), free(t), free(dinp0), free(dw0);
    dfree(d_inp), dfree(d_w), dfree(d_t), dfree(d_logits), dfree(d_l16), dfree(d_g16);
    dfree(d_g), dfree(d_loss), dfree(d_loss16), dfree(d_one);
}
