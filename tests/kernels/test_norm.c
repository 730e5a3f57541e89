// Tests of LayerNorm and RMSNorm: forward vs a double reference (and the normalized rows'
// known statistics), saved mean/rstd, gradcheck of input, weight and bias, nullable
// weight/bias and nullable gradients.
#include "gradcheck.h"

// ----------------------------------------------------------------------------
// LayerNorm

typedef struct {
    float *out, *mean, *rstd, *inp, *w, *b, *proj;
    int N, C;
    float eps;
} ln_ctx;

static double ln_loss(void* p) {
    ln_ctx* c = (ln_ctx*)p;
    rt_layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C, c->eps, RT_F32);
    return tk_dot(c->out, c->proj, (size_t)c->N * c->C);
}

static void test_layernorm(void) {
    const int N = 5, C = 12;
    const size_t n = (size_t)N * C;
    ln_ctx c = {tk_alloc(n), tk_alloc(N), tk_alloc(N), tk_alloc(n), tk_alloc(C), tk_alloc(C),
                tk_alloc(n), N, C, RT_LAYERNORM_EPS};
    tk_fill(c.inp, n, -2, 2), tk_fill(c.w, C, 0.5f, 1.5f), tk_fill(c.b, C, -1, 1);
    tk_fill(c.proj, n, -1, 1);
    for (int i = 0; i < C; i++) c.inp[i] += 10.0f;  // a row with a large mean
    ln_loss(&c);
    double* ref = (double*)calloc(n, sizeof(double));
    double rmean[5], rrstd[5];
    for (int r = 0; r < N; r++) {
        double m = 0, v = 0;
        for (int i = 0; i < C; i++) m += c.inp[r * C + i];
        m /= C;
        for (int i = 0; i < C; i++) v += (c.inp[r * C + i] - m) * (c.inp[r * C + i] - m);
        v /= C;
        rmean[r] = m, rrstd[r] = 1.0 / sqrt(v + RT_LAYERNORM_EPS);
        for (int i = 0; i < C; i++)
            ref[r * C + i] = (c.inp[r * C + i] - m) * rrstd[r] * c.w[i] + c.b[i];
    }
    TK_CHECK_REF("layernorm forward vs double reference", c.out, ref, n, 1e-5);
    TK_CHECK_REF("layernorm saved mean", c.mean, rmean, (size_t)N, 1e-6);
    TK_CHECK_REF("layernorm saved rstd", c.rstd, rrstd, (size_t)N, 1e-6);

    // without affine params the rows have mean 0 and (biased) variance 1/(1+eps/var)
    float* o2 = tk_alloc(n);
    rt_layernorm_forward(o2, NULL, NULL, c.inp, NULL, NULL, N, C, RT_LAYERNORM_EPS, RT_F32);
    double worst_m = 0, worst_v = 0;
    for (int r = 0; r < N; r++) {
        double m = 0, v = 0;
        for (int i = 0; i < C; i++) m += o2[r * C + i];
        m /= C;
        for (int i = 0; i < C; i++) v += (o2[r * C + i] - m) * (o2[r * C + i] - m);
        v /= C;
        worst_m = fmax(worst_m, fabs(m));
        worst_v = fmax(worst_v, fabs(v - 1.0));
    }
    CHECK(worst_m < 1e-6 && worst_v < 1e-4,
          "layernorm without weight/bias: row means within %.2g of 0, variances within %.2g of 1",
          worst_m, worst_v);

    tk_grad di = tk_grad_new(n), dw = tk_grad_new(C), db = tk_grad_new(C);
    rt_layernorm_backward(di.buf, dw.buf, db.buf, c.proj, c.inp, c.w, c.mean, c.rstd, N, C, RT_F32, RT_ACCUMULATE);
    tk_gradcheck("layernorm dinp", c.inp, tk_grad_delta(&di), n, ln_loss, &c, 1e-2f, 1e-2, 1e-3);
    tk_gradcheck("layernorm dweight", c.w, tk_grad_delta(&dw), C, ln_loss, &c, 1e-2f, 1e-2, 1e-3);
    tk_gradcheck("layernorm dbias", c.b, tk_grad_delta(&db), C, ln_loss, &c, 1e-2f, 1e-2, 1e-3);
    ln_loss(&c);  // restore the saved stats of the unperturbed input

    // nullable gradients give the same values
    tk_grad di2 = tk_grad_new(n), dw2 = tk_grad_new(C);
    rt_layernorm_backward(di2.buf, NULL, NULL, c.proj, c.inp, c.w, c.mean, c.rstd, N, C, RT_F32, RT_ACCUMULATE);
    rt_layernorm_backward(NULL, dw2.buf, NULL, c.proj, c.inp, c.w, c.mean, c.rstd, N, C, RT_F32, RT_ACCUMULATE);
    TK_CHECK_SAME("layernorm dinp alone", tk_grad_delta(&di2), di.delta, n, 1e-6);
    TK_CHECK_SAME("layernorm dweight alone", tk_grad_delta(&dw2), dw.delta, (size_t)C, 1e-6);

    // weight and bias NULL (no affine): gradcheck of the input alone
    ln_ctx c2 = c;
    c2.w = NULL, c2.b = NULL;
    ln_loss(&c2);
    tk_grad di3 = tk_grad_new(n);
    rt_layernorm_backward(di3.buf, NULL, NULL, c.proj, c.inp, NULL, c.mean, c.rstd, N, C, RT_F32, RT_ACCUMULATE);
    tk_gradcheck("layernorm dinp (no affine)", c.inp, tk_grad_delta(&di3), n, ln_loss, &c2, 1e-2f,
                 1e-2, 1e-3);
    tk_grad_free(&di), tk_grad_free(&dw), tk_grad_free(&db), tk_grad_free(&di2);
    tk_grad_free(&dw2), tk_grad_free(&di3);
    free(ref), free(o2), free(c.out), free(c.mean), free(c.rstd), free(c.inp), free(c.w);
    free(c.b), free(c.proj);
}

// ----------------------------------------------------------------------------
// RMSNorm

typedef struct {
    float *out, *rstd, *inp, *w, *proj;
    int N, C;
    float eps;
} rms_ctx;

static double rms_loss(void* p) {
    rms_ctx* c = (rms_ctx*)p;
    rt_rmsnorm_forward(c->out, c->rstd, c->inp, c->w, c->N, c->C, c->eps, RT_F32);
    return tk_dot(c->out, c->proj, (size_t)c->N * c->C);
}

static void test_rmsnorm(void) {
    const int N = 5, C = 12;
    const size_t n = (size_t)N * C;
    rms_ctx c = {tk_alloc(n), tk_alloc(N), tk_alloc(n), tk_alloc(C), tk_alloc(n), N, C, 1e-6f};
    tk_fill(c.inp, n, -2, 2), tk_fill(c.w, C, 0.5f, 1.5f), tk_fill(c.proj, n, -1, 1);
    rms_loss(&c);
    double* ref = (double*)calloc(n, sizeof(double));
    double rr[5];
    for (int r = 0; r < N; r++) {
        double ss = 0;
        for (int i = 0; i < C; i++) ss += (double)c.inp[r * C + i] * c.inp[r * C + i];
        rr[r] = 1.0 / sqrt(ss / C + 1e-6);
        for (int i = 0; i < C; i++) ref[r * C + i] = c.inp[r * C + i] * rr[r] * c.w[i];
    }
    TK_CHECK_REF("rmsnorm forward vs double reference", c.out, ref, n, 1e-5);
    TK_CHECK_REF("rmsnorm saved rstd", c.rstd, rr, (size_t)N, 1e-6);
    // known value: row (3, 4) -> rms = sqrt(12.5), out = (3, 4) / sqrt(12.5)
    float x2[2] = {3, 4}, o2[2], r2;
    rt_rmsnorm_forward(o2, &r2, x2, NULL, 1, 2, 0.0f, RT_F32);
    CHECK_CLOSE("rmsnorm (3,4) eps 0 -> 3/sqrt(12.5)", o2[0], 3.0 / sqrt(12.5), 1e-7);
    CHECK_CLOSE("rmsnorm (3,4) eps 0 -> 4/sqrt(12.5)", o2[1], 4.0 / sqrt(12.5), 1e-7);

    tk_grad di = tk_grad_new(n), dw = tk_grad_new(C);
    rt_rmsnorm_backward(di.buf, dw.buf, c.proj, c.inp, c.w, c.rstd, N, C, RT_F32, RT_ACCUMULATE);
    tk_gradcheck("rmsnorm dinp", c.inp, tk_grad_delta(&di), n, rms_loss, &c, 1e-2f, 1e-2, 1e-3);
    tk_gradcheck("rmsnorm dweight", c.w, tk_grad_delta(&dw), C, rms_loss, &c, 1e-2f, 1e-2, 1e-3);
    rms_loss(&c);
    tk_grad di2 = tk_grad_new(n);
    rt_rmsnorm_backward(di2.buf, NULL, c.proj, c.inp, c.w, c.rstd, N, C, RT_F32, RT_ACCUMULATE);
    TK_CHECK_SAME("rmsnorm dinp alone", tk_grad_delta(&di2), di.delta, n, 1e-6);

    rms_ctx c2 = c;
    c2.w = NULL;
    rms_loss(&c2);
    tk_grad di3 = tk_grad_new(n);
    rt_rmsnorm_backward(di3.buf, NULL, c.proj, c.inp, NULL, c.rstd, N, C, RT_F32, RT_ACCUMULATE);
    tk_gradcheck("rmsnorm dinp (no weight)", c.inp, tk_grad_delta(&di3), n, rms_loss, &c2, 1e-2f,
                 1e-2, 1e-3);
    tk_grad_free(&di), tk_grad_free(&dw), tk_grad_free(&di2), tk_grad_free(&di3);
    free(ref), free(c.out), free(c.rstd), free(c.inp), free(c.w), free(c.proj);
}

int main(void) {
    rt_kernels_init();
    tk_seed(2);
    test_layernorm();
    test_rmsnorm();
    return tk_summary("test_norm");
}
