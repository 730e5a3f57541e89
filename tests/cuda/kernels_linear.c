// test_cuda_kernels: the linear layer against the CPU's, the scaled linear against the linear and
// the scale op, and linears from several host threads.
#include "kernel_tests.h"

#include <pthread.h>

// ----------------------------------------------------------------------------
// linear

// prec RT_BF16 / RT_F16 runs the CUDA GEMMs on tensor cores; with operands exact in that
// dtype the products are exact, so only the summation order differs from the CPU's fp32
// GEMM (TOL_GEMM), and out and dinp are rounded to that dtype on both backends (cmp_dt:
// one ulp on top); dweight and dbias are not rounded.
void test_linear(int N, int C, int OC, int use_bias, rt_dtype prec) {
    char nm[160];
    float* inp = hrand((size_t)N * C, 1.0f, 0.0f);
    float* w = hrand((size_t)OC * C, 0.5f, 0.0f);
    float* b = hrand((size_t)OC, 1.0f, 0.0f);
    float* dout = hrand((size_t)N * OC, 1.0f, 0.0f);
    round_to(inp, (size_t)N * C, prec);
    round_to(w, (size_t)OC * C, prec);
    round_to(dout, (size_t)N * OC, prec);
    float* dinp = hrand((size_t)N * C, 1.0f, 0.0f);
    float* dw = hrand((size_t)OC * C, 1.0f, 0.0f);
    float* db = hrand((size_t)OC, 1.0f, 0.0f);
    float* out = hrand((size_t)N * OC, 1.0f, 0.0f);
    round_to(b, OC, prec);
    round_to(dinp, (size_t)N * C, prec);  // accumulated into: holds values exact in dt
    float *d_inp = dup(inp, (size_t)N * C), *d_w = dup(w, (size_t)OC * C), *d_b = dup(b, OC);
    float *d_dout = dup(dout, (size_t)N * OC), *d_out = dup(out, (size_t)N * OC);
    float *d_dinp = dup(dinp, (size_t)N * C), *d_dw = dup(dw, (size_t)OC * C),
          *d_db = dup(db, OC);

    const char* P = prec == RT_BF16 ? "bf16" : prec == RT_F16 ? "fp16" : "fp32";
    cpu_rt_linear_forward(out, inp, w, use_bias ? b : NULL, N, C, OC, prec);
    rt_linear_forward(d_out, d_inp, d_w, use_bias ? d_b : NULL, N, C, OC, prec);
    snprintf(nm, sizeof nm, "linear forward %s N=%d C=%d OC=%d bias=%d", P, N, C, OC, use_bias);
    cmp_dt(nm, d_out, out, (size_t)N * OC, TOL_GEMM, prec, 1);

    cpu_rt_linear_backward(dinp, dw, use_bias ? db : NULL, dout, inp, w, N, C, OC, prec, RT_ACCUMULATE);
    rt_linear_backward(d_dinp, d_dw, use_bias ? d_db : NULL, d_dout, d_inp, d_w, N, C, OC, prec, RT_ACCUMULATE);
    snprintf(nm, sizeof nm, "linear backward %s dinp (+=) N=%d C=%d OC=%d", P, N, C, OC);
    cmp_dt(nm, d_dinp, dinp, (size_t)N * C, TOL_GEMM, prec, 1);
    snprintf(nm, sizeof nm, "linear backward %s dweight (+=) N=%d C=%d OC=%d", P, N, C, OC);
    cmp(nm, d_dw, dw, (size_t)OC * C, TOL_GEMM);
    snprintf(nm, sizeof nm, "linear backward dbias (+=) N=%d OC=%d (%s)", N, OC,
             use_bias ? "computed" : "NULL: untouched");
    cmp(nm, d_db, db, OC, TOL_ELEM);

    // dweight only (dinp, dbias NULL)
    cpu_rt_linear_backward(NULL, dw, NULL, dout, inp, w, N, C, OC, prec, RT_ACCUMULATE);
    rt_linear_backward(NULL, d_dw, NULL, d_dout, d_inp, d_w, N, C, OC, prec, RT_ACCUMULATE);
    snprintf(nm, sizeof nm, "linear backward %s dweight only, dinp unchanged N=%d C=%d OC=%d", P,
             N, C, OC);
    cmp(nm, d_dw, dw, (size_t)OC * C, TOL_GEMM);
    cmp_dt("  ... dinp untouched", d_dinp, dinp, (size_t)N * C, TOL_GEMM, prec, 1);

    // dinp assigned over NaN (16-bit: rounded by cuBLAS into a padded copy, then widened)
    reset_out(dinp, d_dinp, NULL, (size_t)N * C, 1);
    cpu_rt_linear_backward(dinp, NULL, NULL, dout, inp, w, N, C, OC, prec, RT_ASSIGN_1);
    rt_linear_backward(d_dinp, NULL, NULL, d_dout, d_inp, d_w, N, C, OC, prec, RT_ASSIGN_1);
    snprintf(nm, sizeof nm, "linear backward %s dinp (=) N=%d C=%d OC=%d", P, N, C, OC);
    cmp_dt(nm, d_dinp, dinp, (size_t)N * C, TOL_GEMM, prec, 1);

    // dweight assigned over NaN (beta = 0: cuBLAS does not read it)
    reset_out(dw, d_dw, NULL, (size_t)OC * C, 1);
    cpu_rt_linear_backward(NULL, dw, NULL, dout, inp, w, N, C, OC, prec, RT_ASSIGN_DWEIGHT);
    rt_linear_backward(NULL, d_dw, NULL, d_dout, d_inp, d_w, N, C, OC, prec, RT_ASSIGN_DWEIGHT);
    snprintf(nm, sizeof nm, "linear backward %s dweight (=) N=%d C=%d OC=%d", P, N, C, OC);
    cmp(nm, d_dw, dw, (size_t)OC * C, TOL_GEMM);

    // dweight and dbias assigned over NaN: 16-bit with OC a multiple of 8, dbias in the weight
    // gradient's product (cuBLASLt's epilogue: rtc_gemm16_bgrad); else, and with
    // EMU_CUBLASLT_NO_BGRAD=1 (tests/cuda/run.sh), the column sums
    if (use_bias) {
        reset_out(dw, d_dw, NULL, (size_t)OC * C, 1);
        reset_out(db, d_db, NULL, (size_t)OC, 1);
        cpu_rt_linear_backward(NULL, dw, db, dout, inp, w, N, C, OC, prec, RT_ASSIGN_DWEIGHT);
        rt_linear_backward(NULL, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC, prec, RT_ASSIGN_DWEIGHT);
        snprintf(nm, sizeof nm, "linear backward %s dweight and dbias (=) N=%d C=%d OC=%d", P, N,
                 C, OC);
        cmp(nm, d_dw, dw, (size_t)OC * C, TOL_GEMM);
        cmp("  ... dbias (=)", d_db, db, OC, TOL_GEMM);
    }

    free(inp), free(w), free(b), free(dout), free(dinp), free(dw), free(db), free(out);
    dfree(d_inp), dfree(d_w), dfree(d_b), dfree(d_dout), dfree(d_out), dfree(d_dinp),
        dfree(d_dw), dfree(d_db);
}

// ----------------------------------------------------------------------------
// threads: each thread gets its own cuBLAS handle (created on its first GEMM)

typedef struct {
    const float *inp, *w, *want;
    int N, C, OC;
    double err;
} thread_arg;

static void* thread_fn(void* p) {
    thread_arg* a = p;
    const size_t n = (size_t)a->N * a->OC;
    float* d_inp = dup(a->inp, (size_t)a->N * a->C);
    float* d_w = dup(a->w, (size_t)a->OC * a->C);
    float* d_out = dalloc(n * sizeof(float));
    for (int it = 0; it < 4; it++)
        rt_linear_forward(d_out, d_inp, d_w, NULL, a->N, a->C, a->OC, RT_F32);
    float* got = down(d_out, n);
    a->err = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - a->want[i]) / (fabs(a->want[i]) > 1 ? fabs(a->want[i]) : 1);
        if (!(e <= a->err)) a->err = e;
    }
    free(got);
    dfree(d_inp), dfree(d_w), dfree(d_out);
    return NULL;
}

void test_threads(void) {
    enum { NT = 4 };
    const int N = 64, C = 96, OC = 80;
    float *inp = hrand((size_t)N * C, 1.0f, 0.0f), *w = hrand((size_t)OC * C, 1.0f, 0.0f);
    float* want = hrand((size_t)N * OC, 1.0f, 0.0f);
    cpu_rt_linear_forward(want, inp, w, NULL, N, C, OC, RT_F32);
    pthread_t th[NT];
    thread_arg args[NT];
    int dev = 0;
    RT_CHECK_CUDA(cudaGetDevice(&dev));
    for (int i = 0; i < NT; i++) {
        args[i] = (thread_arg){inp, w, want, N, C, OC, 0.0};
        RT_CHECK_SYS(pthread_create(&th[i], NULL, thread_fn, &args[i]) == 0, "pthread_create");
    }
    double worst = 0.0;
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        if (!(args[i].err <= worst)) worst = args[i].err;
    }
    CHECK(worst <= TOL_GEMM, "%d threads, one cuBLAS handle each: linear forward max diff %.3g",
          NT, worst);
    free(inp), free(w), free(want);
}

// ----------------------------------------------------------------------------
// scaled linear (rt_linear_scaled_*): alpha, a power of two, in the GEMMs

const float linear_alphas[4] = {2.0f, 0.5f, 4.0f, 1.0f};

// How many of n device values got and want, fp32 (es 4) or dt's 16-bit bits (es 2), differ
// bit for bit, a NaN in got counted too (an assigned output read before it was written);
// *maxdiff: the largest |got - want| / max(1, |want|).
size_t bits_differ(const void* dgot, const void* dwant, size_t n, int es, rt_dtype dt,
                   double* maxdiff) {
    float *got = malloc((n ? n : 1) * sizeof(float)), *want = malloc((n ? n : 1) * sizeof(float));
    if (!got || !want) abort();
    if (es == 2) {
        uint16_t *g = down16(dgot, n), *w = down16(dwant, n);
        for (size_t i = 0; i < n; i++)
            got[i] = rt_bits16_to_f32_inl(g[i], dt), want[i] = rt_bits16_to_f32_inl(w[i], dt);
        free(g), free(w);
    } else {
        float *g = down(dgot, n), *w = down(dwant, n);
        memcpy(got, g, n * sizeof(float)), memcpy(want, w, n * sizeof(float));
        free(g), free(w);
    }
    size_t differ = 0;
    *maxdiff = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&got[i], &want[i], sizeof(float)) == 0 && !isnan(got[i])) continue;
        differ++;
        const double d = fabs((double)got[i] - want[i]) / (fabs(want[i]) > 1 ? fabs(want[i]) : 1);
        if (!(d <= *maxdiff)) *maxdiff = d;  // NaN: NaN
    }
    free(got), free(want);
    return differ;
}

// device d (n floats) = init's values, or NaN where the call assigns it
static void fill_grad(float* d, const float* init, size_t n, int assigned) {
    float* h = malloc((n ? n : 1) * sizeof(float));
    if (!h) abort();
    reset_out(h, d, init, n, assigned);
    free(h);
}

// rt_linear_scaled_forward against rt_linear_forward then rt_scale_forward, and
// rt_linear_scaled_backward (accumulated; dinp and dweight assigned over NaN) against
// rt_scale_backward of dout into a temporary then rt_linear_backward, bit for bit, for each
// of linear_alphas: a power of two scales exactly, in the GEMMs' epilogues as in the scale.
void test_linear_scaled(int N, int C, int OC, rt_dtype dt) {
    const char* P = dt == RT_BF16 ? "bf16" : "fp32";
    const size_t ni = (size_t)N * C, no = (size_t)N * OC, nw = (size_t)OC * C;
    float *inp = hrand(ni, 1.0f, 0.0f), *w = hrand(nw, 0.5f, 0.0f), *dout = hrand(no, 1.0f, 0.0f);
    float *dinp0 = hrand(ni, 1.0f, 0.0f), *dw0 = hrand(nw, 1.0f, 0.0f);
    round_to(inp, ni, dt), round_to(w, nw, dt), round_to(dout, no, dt), round_to(dinp0, ni, dt);
    float *d_inp = dup(inp, ni), *d_w = dup(w, nw), *d_dout = dup(dout, no);
    float *d_lin = dalloc(no * sizeof(float)), *d_want = dalloc(no * sizeof(float)),
          *d_got = dalloc(no * sizeof(float)), *d_ds = dalloc(no * sizeof(float));
    float *d_g = dalloc(ni * sizeof(float)), *d_g2 = dalloc(ni * sizeof(float)),
          *d_dw = dalloc(nw * sizeof(float)), *d_dw2 = dalloc(nw * sizeof(float));
    for (int a = 0; a < 4; a++) {
        const float alpha = linear_alphas[a];
        double m, m2;
        rt_linear_forward(d_lin, d_inp, d_w, NULL, N, C, OC, dt);
        rt_scale_forward(d_want, d_lin, no, alpha, dt);
        rt_linear_scaled_forward(d_got, d_inp, d_w, N, C, OC, alpha, dt);
        size_t nd = bits_differ(d_got, d_want, no, 4, dt, &m);
        CHECK(nd == 0, "%s linear scaled forward alpha %g N=%d C=%d OC=%d == rt_linear_forward "
              "then rt_scale_forward, bit for bit: %zu of %zu differ, max diff %.3g", P,
              (double)alpha, N, C, OC, nd, no, m);
        rt_scale_backward(d_ds, d_dout, no, alpha, dt, RT_ASSIGN_1);
        for (int as = 0; as < 2; as++) {
            const int bits = as ? RT_ASSIGN_1 | RT_ASSIGN_DWEIGHT : RT_ACCUMULATE;
            fill_grad(d_g, dinp0, ni, as), fill_grad(d_g2, dinp0, ni, as);
            fill_grad(d_dw, dw0, nw, as), fill_grad(d_dw2, dw0, nw, as);
            rt_linear_backward(d_g, d_dw, NULL, d_ds, d_inp, d_w, N, C, OC, dt, bits);
            rt_linear_scaled_backward(d_g2, d_dw2, d_dout, d_inp, d_w, N, C, OC, alpha, dt, bits);
            nd = bits_differ(d_g2, d_g, ni, 4, dt, &m);
            const size_t nd2 = bits_differ(d_dw2, d_dw, nw, 4, dt, &m2);
            CHECK(nd == 0 && nd2 == 0, "%s linear scaled backward (%s) alpha %g N=%d C=%d OC=%d "
                  "== rt_scale_backward then rt_linear_backward, bit for bit: dinp %zu of %zu "
                  "differ (max diff %.3g), dweight %zu of %zu (max diff %.3g)", P,
                  as ? "assigned" : "accumulated", (double)alpha, N, C, OC, nd, ni, m, nd2, nw,
                  m2);
        }
    }
    free(inp), free(w), free(dout), free(dinp0), free(dw0);
    dfree(d_inp), dfree(d_w), dfree(d_dout), dfree(d_lin), dfree(d_want), dfree(d_got);
    dfree(d_ds), dfree(d_g), dfree(d_g2), dfree(d_dw), dfree(d_dw2);
}
