// test_cuda_kernels: assigned gradient outputs (rt_kernels.h "Assign") of every kernel with them.
#include "kernel_tests.h"

// ----------------------------------------------------------------------------
// assigned gradient outputs (rt_kernels.h "Assign"): each kernel with `assign`, each bit,
// against the CPU kernel with the same bits (test_assign there checks that equals
// accumulating onto zeros). Assigned outputs start NaN on both sides, so a read of them
// shows; an output whose bit is clear accumulates onto its old values as before.

void test_assign(rt_dtype dt) {
    const char* P = dt == RT_BF16 ? "bf16" : "fp32";
    char nm[160];
    const int N = 67, C = 96, OC = 40;
    const size_t n = 4099, nc = (size_t)N * C;
    float *x = hrand(nc, 2.0f, 0.5f), *w = hrand((size_t)OC * C, 0.5f, 0.0f);
    float *y = hrand(nc, 2.0f, 0.0f), *dout = hrand(nc, 1.0f, 0.0f);
    float *init = hrand(nc, 1.0f, 0.0f), *init2 = hrand(nc, 1.0f, 0.0f);
    round_to(x, nc, dt), round_to(w, (size_t)OC * C, dt), round_to(y, nc, dt);
    round_to(dout, nc, dt), round_to(init, nc, dt), round_to(init2, nc, dt);
    x[0] = 0.0f;  // ReLU's kink
    float *d_x = dup(x, nc), *d_w = dup(w, (size_t)OC * C), *d_y = dup(y, nc),
          *d_dout = dup(dout, nc);
    float *h1 = hrand(nc, 1.0f, 0.0f), *h2 = hrand(nc, 1.0f, 0.0f);
    float *d1 = dup(h1, nc), *d2 = dup(h2, nc);

    // linear dinp (dout [N,OC] from the first N*OC values of dout)
    reset_out(h1, d1, init, nc, 1);
    cpu_rt_linear_backward(h1, NULL, NULL, dout, x, w, N, C, OC, dt, RT_ASSIGN_1);
    rt_linear_backward(d1, NULL, NULL, d_dout, d_x, d_w, N, C, OC, dt, RT_ASSIGN_1);
    snprintf(nm, sizeof nm, "assign %s linear backward dinp (=)", P);
    cmp_dt(nm, d1, h1, nc, TOL_GEMM, dt, 1);

    // norms: statistics from the CPU forward on both sides
    float *mean = hrand(N, 1.0f, 0.0f), *rstd = hrand(N, 1.0f, 0.0f), *out = hrand(nc, 1.0f, 0.0f);
    cpu_rt_layernorm_forward(out, mean, rstd, x, w, NULL, N, C, RT_LAYERNORM_EPS, RT_F32);
    float *d_mean = dup(mean, N), *d_rstd = dup(rstd, N);
    reset_out(h1, d1, init, nc, 1);
    cpu_rt_layernorm_backward(h1, NULL, NULL, dout, x, w, mean, rstd, N, C, dt, RT_ASSIGN_1);
    rt_layernorm_backward(d1, NULL, NULL, d_dout, d_x, d_w, d_mean, d_rstd, N, C, dt, RT_ASSIGN_1);
    snprintf(nm, sizeof nm, "assign %s layernorm backward dinp (=)", P);
    cmp_dt(nm, d1, h1, nc, 1e-5, dt, 1);
    cpu_rt_rmsnorm_forward(out, rstd, x, w, N, C, 1e-6f, RT_F32);
    RT_CHECK_CUDA(cudaMemcpy(d_rstd, rstd, N * sizeof(float), cudaMemcpyHostToDevice));
    reset_out(h1, d1, init, nc, 1);
    cpu_rt_rmsnorm_backward(h1, NULL, dout, x, w, rstd, N, C, dt, RT_ASSIGN_1);
    rt_rmsnorm_backward(d1, NULL, d_dout, d_x, d_w, d_rstd, N, C, dt, RT_ASSIGN_1);
    snprintf(nm, sizeof nm, "assign %s rmsnorm backward dinp (=)", P);
    cmp_dt(nm, d1, h1, nc, 1e-5, dt, 1);

    // unary elementwise
    act_bwd cb[3] = {cpu_rt_gelu_backward, cpu_rt_relu_backward, cpu_rt_silu_backward};
    act_bwd gb[3] = {rt_gelu_backward, rt_relu_backward, rt_silu_backward};
    const char* an[3] = {"gelu", "relu", "silu"};
    for (int k = 0; k < 3; k++) {
        reset_out(h1, d1, init, n, 1);
        cb[k](h1, dout, x, n, dt, RT_ASSIGN_1);
        gb[k](d1, d_dout, d_x, n, dt, RT_ASSIGN_1);
        snprintf(nm, sizeof nm, "assign %s %s backward dinp (=)", P, an[k]);
        cmp_dt(nm, d1, h1, n, TOL_ELEM, dt, 1);
    }
    reset_out(h1, d1, init, n, 1);
    cpu_rt_rope_backward(h1, dout, 2, 7, 4, 16, RT_ROPE_THETA, dt, RT_ASSIGN_1);  // 896 values
    rt_rope_backward(d1, d_dout, 2, 7, 4, 16, RT_ROPE_THETA, dt, RT_ASSIGN_1);
    snprintf(nm, sizeof nm, "assign %s rope backward dinp (=)", P);
    cmp_dt(nm, d1, h1, 896, TOL_ELEM, dt, 1);
    const float ps[3] = {0.3f, 0.0f, 1.0f};
    for (int k = 0; k < 3; k++) {
        reset_out(h1, d1, init, n, 1);
        cpu_rt_dropout_backward(h1, dout, n, ps[k], 7, 2, 3, dt, RT_ASSIGN_1);
        rt_dropout_backward(d1, d_dout, n, ps[k], 7, 2, 3, dt, RT_ASSIGN_1);
        snprintf(nm, sizeof nm, "assign %s dropout p=%g backward dinp (=)", P, (double)ps[k]);
        cmp_dt(nm, d1, h1, n, TOL_ELEM, dt, 1);
    }

    // two gradient outputs: both assigned, then da assigned and db accumulated
    for (int mask = 1; mask <= 3; mask += 2) {
        const int as2 = (mask & RT_ASSIGN_2) != 0;
        for (int k = 0; k < 3; k++) {
            reset_out(h1, d1, init, n, 1);
            reset_out(h2, d2, init2, n, as2);
            const char* kn = k == 0 ? "residual" : k == 1 ? "mul" : "swiglu";
            if (k == 0) {
                cpu_rt_residual_backward(h1, h2, dout, n, dt, mask);
                rt_residual_backward(d1, d2, d_dout, n, dt, mask);
            } else if (k == 1) {
                cpu_rt_mul_backward(h1, h2, dout, x, y, n, dt, mask);
                rt_mul_backward(d1, d2, d_dout, d_x, d_y, n, dt, mask);
            } else {
                cpu_rt_swiglu_backward(h1, h2, dout, x, y, n, dt, mask);
                rt_swiglu_backward(d1, d2, d_dout, d_x, d_y, n, dt, mask);
            }
            snprintf(nm, sizeof nm, "assign %s %s backward bits %d: da (=)", P, kn, mask);
            cmp_dt(nm, d1, h1, n, TOL_ELEM, dt, 2);
            snprintf(nm, sizeof nm, "  ... db (%s)", as2 ? "=" : "+=");
            cmp_dt(nm, d2, h2, n, TOL_ELEM, dt, 2);
        }
    }
    // broadcast add: da assigned, db (a parameter gradient) accumulated
    reset_out(h1, d1, init, nc, 1);
    reset_out(h2, d2, init2, C, 0);
    cpu_rt_broadcast_add_backward(h1, h2, dout, N, C, dt, RT_ASSIGN_1);
    rt_broadcast_add_backward(d1, d2, d_dout, N, C, dt, RT_ASSIGN_1);
    snprintf(nm, sizeof nm, "assign %s broadcast_add backward da (=)", P);
    cmp_dt(nm, d1, h1, nc, TOL_ELEM, dt, 1);
    cmp("  ... db (+=)", d2, h2, C, 1e-5);

    // losses (no dt): once
    if (dt == RT_F32) {
        reset_out(h1, d1, init, n, 1);
        const float half = 0.5f, two = 2.0f;
        float *d_half = dscalar(half), *d_two = dscalar(two);
        cpu_rt_sum_loss_backward(h1, n, &half, RT_ASSIGN_1);
        rt_sum_loss_backward(d1, n, d_half, RT_ASSIGN_1);
        cmp("assign sum loss backward dlogits (=)", d1, h1, n, TOL_EXACT);
        const int CN = 40, CV = 100;
        int32_t t[40];
        for (int i = 0; i < CN; i++) t[i] = i % 4 == 1 ? RT_IGNORE_INDEX : (int32_t)((i * 37) % CV);
        int32_t* d_t = NULL;
        RT_CHECK_CUDA(cudaMalloc((void**)&d_t, sizeof t));
        for (int all = 0; all < 2; all++) {
            if (all)
                for (int i = 0; i < CN; i++) t[i] = RT_IGNORE_INDEX;
            RT_CHECK_CUDA(cudaMemcpy(d_t, t, sizeof t, cudaMemcpyHostToDevice));
            reset_out(h1, d1, init, (size_t)CN * CV, 1);
            cpu_rt_cross_entropy_backward(h1, x, t, CN, CV, &two, RT_F32, RT_ASSIGN_1);
            rt_cross_entropy_backward(d1, d_x, d_t, CN, CV, d_two, RT_F32, RT_ASSIGN_1);
            snprintf(nm, sizeof nm, "assign cross_entropy backward dlogits (=)%s",
                     all ? ", every target ignored: zeros" : ", some targets ignored");
            cmp(nm, d1, h1, (size_t)CN * CV, TOL_ELEM);
        }
        RT_CHECK_CUDA(cudaFree(d_t));
        dfree(d_half), dfree(d_two);
    }

    free(x), free(w), free(y), free(dout), free(init), free(init2), free(h1), free(h2),
        free(mean), free(rstd), free(out);
    dfree(d_x), dfree(d_w), dfree(d_y), dfree(d_dout), dfree(d1), dfree(d2), dfree(d_mean),
        dfree(d_rstd);
}
