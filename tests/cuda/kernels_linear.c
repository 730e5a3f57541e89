// test_cuda_kernels: the linear layer against the CPU's, and linears from several host threads.
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
