// Tests of the CUDA kernels (runtime/cuda/, build/cuda/librt_kernels_cuda.a) against the
// CPU kernels, which are compiled into this test under renamed symbols (cpu_rt_*, see
// tests/cuda/gen_symbols.sh). Every function of rt_kernels.h and rt_optim.h is linked
// (all_symbols.c), so a missing CUDA implementation fails the build.
//
// Without a GPU (cudaGetDeviceCount reports none, as in CI) it prints a SKIP line and
// `0 passed, 0 failed`. With one, every kernel runs on random data of odd sizes on both
// backends and the results are compared: forward outputs, and backward gradients
// accumulated onto non-zero buffers (the += contract), with NULL gradients where they are
// nullable. Each check prints the largest difference, as |got - want| / max(1, |want|).
// Tolerances: 0 where the GPU does the CPU's float operations in the CPU's order
// (elementwise add/mul, dropout masks, embedding rows, optimizer steps, compiled with
// -fmad=false); ~1e-6 where only expf/erff or a double reduction order differ; ~1e-4 where
// cuBLAS and OpenBLAS sum GEMM products in different orders; for attention on tensor cores
// a per-element bound on its 16-bit rounding of P and dS (attention_tc_ref.h) on top. With
// dt = RT_BF16 (cmp_dt) the kernels round what they write to bf16 on both backends: where
// the fp32 values before the rounding agree exactly the rounded ones do too (tolerance 0);
// where they may differ (expf/erff, reduction or GEMM order) a rounding may go the other
// way, one bf16 ulp (two for SwiGLU, which rounds an intermediate too) on top.
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "../../runtime/common/dtype_bits.h"
#include "attention_tc_ref.h"
#include "check.h"
#include "cuda_helpers.h"
#include "rt_check.h"
#include "rt_cuda.h"

// the CUDA backend: rt_*
#include "packed_activations.h"
#include "rt_kernels.h"
#include "rt_optim.h"
// the CPU reference: cpu_rt_* (same headers, names renamed)
#undef FSDPGEN_RT_KERNELS_H
#undef FSDPGEN_RT_OPTIM_H
#include "cpu_rename.h"
#include "rt_kernels.h"
#include "rt_optim.h"
#include "cpu_unrename.h"

extern const int rt_all_symbols_count;

// ----------------------------------------------------------------------------
// linear

// x[i] rounded to prec's 16-bit format (unchanged for RT_F32): the values a tensor of that
// dtype holds under mixed precision.
static void round_to(float* x, size_t n, rt_dtype prec) {
    for (size_t i = 0; i < n; i++) {
        if (prec == RT_BF16) x[i] = rt_bf16_to_f32_inl(rt_bf16_from_f32_inl(x[i]));
        if (prec == RT_F16) x[i] = rt_f16_to_f32_inl(rt_f16_from_f32_inl(x[i]));
    }
}

// One unit in the last place of x in dt (bf16: 8 significant bits, fp16: 11, with the
// subnormal spacing 2^-24 below 2^-14), 0 for RT_F32.
static double ulp_in(double x, rt_dtype dt) {
    if (dt != RT_BF16 && dt != RT_F16) return 0.0;
    int e;
    frexp(fabs(x), &e);  // |x| = m * 2^e, m in [0.5, 1): the leading bit is 2^(e-1)
    if (dt == RT_F16 && e < -13) e = -13;
    return ldexp(1.0, e - (dt == RT_BF16 ? 8 : 11));
}

// Device values that the kernel rounded to dt against the CPU's: element i passes when
// |got - want| <= tol * max(1, |want|) + ulps * ulp_in(max(|got|, |want|), dt): the fp32
// values before the rounding agree within tol, and a rounding near a tie may then go the
// other way. Also checks that every device value is exact in dt (the store rounded it).
static void cmp_dt(const char* name, const float* dgot, const float* want, size_t n, double tol,
                   rt_dtype dt, int ulps) {
    float* got = down(dgot, n);
    double worst = 0.0;  // largest |got - want| in units of the allowed difference
    size_t over = 0, inexact = 0;
    for (size_t i = 0; i < n; i++) {
        const double g = got[i], w = want[i];
        float r = got[i];
        round_to(&r, 1, dt);
        if (memcmp(&r, &got[i], sizeof r) != 0) inexact++;
        if (isnan(g) || isnan(w)) {
            if (!(isnan(g) && isnan(w))) over++;
            continue;
        }
        const double m = fabs(g) > fabs(w) ? fabs(g) : fabs(w);
        const double allowed = tol * (fabs(w) > 1.0 ? fabs(w) : 1.0) + ulps * ulp_in(m, dt);
        const double d = fabs(g - w);
        if (d > allowed) over++;
        if (allowed > 0.0 && d / allowed > worst) worst = d / allowed;
        if (allowed == 0.0 && d > 0.0) worst = INFINITY;
    }
    free(got);
    const char* P = dt == RT_BF16 ? "bf16" : dt == RT_F16 ? "fp16" : "fp32";
    CHECK(over == 0 && inexact == 0,
          "%s: %zu values, worst diff %.3g of the allowed (tol %.3g + %d %s ulp), %zu over, %zu "
          "not exact in %s",
          name, n, worst, tol, ulps, P, over, inexact, P);
}

// fills host h and device d (n values) with NaN (assigned) or copies of init
static void reset_out(float* h, float* d, const float* init, size_t n, int assigned) {
    if (assigned)
        for (size_t i = 0; i < n; i++) h[i] = NAN;
    else
        memcpy(h, init, n * sizeof(float));
    RT_CHECK_CUDA(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
}

// prec RT_BF16 / RT_F16 runs the CUDA GEMMs on tensor cores; with operands exact in that
// dtype the products are exact, so only the summation order differs from the CPU's fp32
// GEMM (TOL_GEMM), and out and dinp are rounded to that dtype on both backends (cmp_dt:
// one ulp on top); dweight and dbias are not rounded.
static void test_linear(int N, int C, int OC, int use_bias, rt_dtype prec) {
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

    free(inp), free(w), free(b), free(dout), free(dinp), free(dw), free(db), free(out);
    dfree(d_inp), dfree(d_w), dfree(d_b), dfree(d_dout), dfree(d_out), dfree(d_dinp),
        dfree(d_dw), dfree(d_db);
}

// ----------------------------------------------------------------------------
// embedding and arange

// ids: pattern 0 spreads repeats over the vocabulary ((7 n + n / 3) % V); pattern 1 makes
// every other row id 7 (one long run after the sort, rows far apart) and the rest distinct
// where V allows.
static void test_embedding(int N, int C, int V, int pattern) {
    char nm[160];
    int32_t* ids = (int32_t*)malloc((size_t)N * sizeof *ids);
    for (int n = 0; n < N; n++)
        ids[n] = (int32_t)(pattern == 0 ? (n * 7 + n / 3) % V : n % 2 ? 7 : (n / 2) % V);
    float* w = hrand((size_t)V * C, 1.0f, 0.0f);
    float* dout = hrand((size_t)N * C, 1.0f, 0.0f);
    float* dw = hrand((size_t)V * C, 1.0f, 0.0f);
    float* out = hrand((size_t)N * C, 1.0f, 0.0f);
    int32_t* d_ids = dup_i32(ids, N);
    float *d_w = dup(w, (size_t)V * C), *d_dout = dup(dout, (size_t)N * C),
          *d_dw = dup(dw, (size_t)V * C), *d_out = dup(out, (size_t)N * C);

    cpu_rt_embedding_forward(out, ids, w, N, C, V);
    rt_embedding_forward(d_out, d_ids, d_w, N, C, V);
    snprintf(nm, sizeof nm, "embedding forward N=%d C=%d V=%d", N, C, V);
    cmp(nm, d_out, out, (size_t)N * C, TOL_EXACT);
    cpu_rt_embedding_backward(dw, dout, ids, N, C, V);
    rt_embedding_backward(d_dw, d_dout, d_ids, N, C, V);
    snprintf(nm, sizeof nm,
             "embedding backward N=%d C=%d V=%d ids pattern %d (+=, repeated ids in row order: "
             "CPU bits)", N, C, V, pattern);
    cmp(nm, d_dw, dw, (size_t)V * C, TOL_EXACT);

    free(ids), free(w), free(dout), free(dw), free(out);
    dfree(d_ids), dfree(d_w), dfree(d_dout), dfree(d_dw), dfree(d_out);
}

static void test_arange(void) {
    int32_t got[37] = {0}, want[37];
    int32_t* d = dup_i32(got, 37);
    cpu_rt_arange_i32(want, 37, 5);
    rt_arange_i32(d, 37, 5);
    RT_CHECK_CUDA(cudaMemcpy(got, d, sizeof got, cudaMemcpyDeviceToHost));
    CHECK(memcmp(got, want, sizeof got) == 0, "arange_i32 n=37 start=5: got %d..%d", got[0],
          got[36]);
    dfree(d);
}

// ----------------------------------------------------------------------------
// LayerNorm and RMSNorm

// dt RT_BF16: inputs exact in bf16, out and dinp rounded to it (cmp_dt, one ulp on top of
// the fp32 tolerance: reduction orders differ); mean, rstd, dweight, dbias stay fp32.
static void test_layernorm(int N, int C, int affine, rt_dtype dt) {
    char nm[128];
    const size_t nc = (size_t)N * C;
    float* x = hrand(nc, 2.0f, 3.0f);  // non-zero mean
    float* w = hrand(C, 1.0f, 1.0f);
    float* b = hrand(C, 1.0f, 0.0f);
    float* dout = hrand(nc, 1.0f, 0.0f);
    float* out = hrand(nc, 1.0f, 0.0f);
    float* mean = hrand(N, 1.0f, 0.0f);
    float* rstd = hrand(N, 1.0f, 0.0f);
    float* dx = hrand(nc, 1.0f, 0.0f);
    float* dw = hrand(C, 1.0f, 0.0f);
    float* db = hrand(C, 1.0f, 0.0f);
    round_to(x, nc, dt), round_to(w, C, dt), round_to(b, C, dt), round_to(dout, nc, dt);
    round_to(dx, nc, dt);
    float *d_x = dup(x, nc), *d_w = dup(w, C), *d_b = dup(b, C), *d_dout = dup(dout, nc),
          *d_out = dup(out, nc), *d_mean = dup(mean, N), *d_rstd = dup(rstd, N),
          *d_dx = dup(dx, nc), *d_dw = dup(dw, C), *d_db = dup(db, C);
    const char* P = dt == RT_BF16 ? "bf16" : "fp32";
    const float *wp = affine ? w : NULL, *bp = affine ? b : NULL;
    const float *d_wp = affine ? d_w : NULL, *d_bp = affine ? d_b : NULL;

    cpu_rt_layernorm_forward(out, mean, rstd, x, wp, bp, N, C, RT_LAYERNORM_EPS, dt);
    rt_layernorm_forward(d_out, d_mean, d_rstd, d_x, d_wp, d_bp, N, C, RT_LAYERNORM_EPS, dt);
    snprintf(nm, sizeof nm, "layernorm %s forward N=%d C=%d affine=%d: out", P, N, C, affine);
    cmp_dt(nm, d_out, out, nc, TOL_ELEM, dt, 1);
    cmp("  ... mean", d_mean, mean, N, TOL_ELEM);
    cmp("  ... rstd", d_rstd, rstd, N, TOL_ELEM);

    // backward from the CPU statistics on both sides, so only the backward is compared
    RT_CHECK_CUDA(cudaMemcpy(d_mean, mean, N * sizeof(float), cudaMemcpyHostToDevice));
    RT_CHECK_CUDA(cudaMemcpy(d_rstd, rstd, N * sizeof(float), cudaMemcpyHostToDevice));
    cpu_rt_layernorm_backward(dx, affine ? dw : NULL, affine ? db : NULL, dout, x, wp, mean, rstd,
                              N, C, dt, RT_ACCUMULATE);
    rt_layernorm_backward(d_dx, affine ? d_dw : NULL, affine ? d_db : NULL, d_dout, d_x, d_wp,
                          d_mean, d_rstd, N, C, dt, RT_ACCUMULATE);
    snprintf(nm, sizeof nm, "layernorm %s backward N=%d C=%d affine=%d: dinp (+=)", P, N, C,
             affine);
    cmp_dt(nm, d_dx, dx, nc, 1e-5, dt, 1);
    cmp("  ... dweight (+=)", d_dw, dw, C, 1e-5);
    cmp("  ... dbias (+=)", d_db, db, C, 1e-5);
    // dinp NULL: only the parameter gradients
    if (affine) {
        cpu_rt_layernorm_backward(NULL, dw, db, dout, x, wp, mean, rstd, N, C, dt, RT_ACCUMULATE);
        rt_layernorm_backward(NULL, d_dw, d_db, d_dout, d_x, d_wp, d_mean, d_rstd, N, C, dt, RT_ACCUMULATE);
        cmp("layernorm backward dinp NULL: dweight (+=)", d_dw, dw, C, 1e-5);
        cmp("  ... dbias (+=)", d_db, db, C, 1e-5);
    }

    free(x), free(w), free(b), free(dout), free(out), free(mean), free(rstd), free(dx), free(dw),
        free(db);
    dfree(d_x), dfree(d_w), dfree(d_b), dfree(d_dout), dfree(d_out), dfree(d_mean),
        dfree(d_rstd), dfree(d_dx), dfree(d_dw), dfree(d_db);
}

static void test_rmsnorm(int N, int C, int affine, rt_dtype dt) {  // dt: as test_layernorm
    char nm[128];
    const size_t nc = (size_t)N * C;
    float* x = hrand(nc, 2.0f, 0.5f);
    float* w = hrand(C, 1.0f, 1.0f);
    float* dout = hrand(nc, 1.0f, 0.0f);
    float* out = hrand(nc, 1.0f, 0.0f);
    float* rstd = hrand(N, 1.0f, 0.0f);
    float* dx = hrand(nc, 1.0f, 0.0f);
    float* dw = hrand(C, 1.0f, 0.0f);
    round_to(x, nc, dt), round_to(w, C, dt), round_to(dout, nc, dt), round_to(dx, nc, dt);
    float *d_x = dup(x, nc), *d_w = dup(w, C), *d_dout = dup(dout, nc), *d_out = dup(out, nc),
          *d_rstd = dup(rstd, N), *d_dx = dup(dx, nc), *d_dw = dup(dw, C);
    const char* P = dt == RT_BF16 ? "bf16" : "fp32";
    const float* wp = affine ? w : NULL;
    const float* d_wp = affine ? d_w : NULL;

    cpu_rt_rmsnorm_forward(out, rstd, x, wp, N, C, 1e-6f, dt);
    rt_rmsnorm_forward(d_out, d_rstd, d_x, d_wp, N, C, 1e-6f, dt);
    snprintf(nm, sizeof nm, "rmsnorm %s forward N=%d C=%d affine=%d: out", P, N, C, affine);
    cmp_dt(nm, d_out, out, nc, TOL_ELEM, dt, 1);
    cmp("  ... rstd", d_rstd, rstd, N, TOL_ELEM);

    RT_CHECK_CUDA(cudaMemcpy(d_rstd, rstd, N * sizeof(float), cudaMemcpyHostToDevice));
    cpu_rt_rmsnorm_backward(dx, affine ? dw : NULL, dout, x, wp, rstd, N, C, dt, RT_ACCUMULATE);
    rt_rmsnorm_backward(d_dx, affine ? d_dw : NULL, d_dout, d_x, d_wp, d_rstd, N, C, dt, RT_ACCUMULATE);
    snprintf(nm, sizeof nm, "rmsnorm %s backward N=%d C=%d affine=%d: dinp (+=)", P, N, C,
             affine);
    cmp_dt(nm, d_dx, dx, nc, 1e-5, dt, 1);
    cmp("  ... dweight (+=)", d_dw, dw, C, 1e-5);

    free(x), free(w), free(dout), free(out), free(rstd), free(dx), free(dw);
    dfree(d_x), dfree(d_w), dfree(d_dout), dfree(d_out), dfree(d_rstd), dfree(d_dx), dfree(d_dw);
}

// The norms' row-per-warp kernels (rows of 256 V elements, every row 16-byte aligned)
// against their block-per-row kernels, which the same call takes when the weight is not
// 16-byte aligned: forward and backward (dinp assigned) agree within fp32 round-off, and
// so do the weight and bias gradients, which the row-per-warp kernel adds from its rows
// (norm.cu "dw"; over two blocks per SM, so a warp takes several rows on the emulator's
// 4 SMs) and the block path by column sums (LayerNorm rows over 1024: both). bias_only:
// LayerNorm's weight gradient not asked for (NULL).
static int dev_same(const float* da, const float* db, size_t n);

static void test_norm_paths(int N, int C, int bias_only) {
    char nm[128];
    const size_t nc = (size_t)N * C;
    float *x = hrand(nc, 2.0f, 0.5f), *w = hrand(C, 1.0f, 1.0f), *dout = hrand(nc, 1.0f, 0.0f);
    float *d_x = dup(x, nc), *d_dout = dup(dout, nc), *d_wa = dup(w, C);
    float* d_wbuf = dalloc((C + 1) * sizeof(float));
    float* d_wu = d_wbuf + 1;  // 4 bytes past 16-byte alignment
    RT_CHECK_CUDA(cudaMemcpy(d_wu, w, C * sizeof(float), cudaMemcpyHostToDevice));
    float *d_y[2], *d_m[2], *d_r[2], *d_dx[2], *d_dw[2], *d_db[2];
    float* half = hrand(C, 1.0f, 0.0f);  // what the gradients accumulate onto
    for (int k = 0; k < 2; k++) {
        d_y[k] = dalloc(nc * sizeof(float)), d_dx[k] = dalloc(nc * sizeof(float));
        d_m[k] = dalloc(N * sizeof(float)), d_r[k] = dalloc(N * sizeof(float));
        d_dw[k] = dup(half, C), d_db[k] = dup(half, C);
    }
    for (int layer = 0; layer < 2; layer++) {
        const char* op = layer ? "layernorm" : "rmsnorm";
        for (int k = 0; k < 2; k++) {  // k = 0: aligned (a warp per row), 1: not (a block)
            const float* wk = k ? d_wu : d_wa;
            if (layer) {
                rt_layernorm_forward(d_y[k], d_m[k], d_r[k], d_x, wk, wk, N, C, RT_LAYERNORM_EPS,
                                     RT_F32);
                rt_layernorm_backward(d_dx[k], bias_only ? NULL : d_dw[k], d_db[k], d_dout, d_x, wk,
                                      d_m[0], d_r[0], N, C, RT_F32, RT_ASSIGN_1);
            } else {
                rt_rmsnorm_forward(d_y[k], d_r[k], d_x, wk, N, C, 1e-6f, RT_F32);
                rt_rmsnorm_backward(d_dx[k], d_dw[k], d_dout, d_x, wk, d_r[0], N, C, RT_F32,
                                    RT_ASSIGN_1);
            }
        }
        snprintf(nm, sizeof nm, "%s N=%d C=%d%s, a warp per row == a block per row: out", op, N, C,
                 layer && bias_only ? " (no dweight)" : "");
        cmp_dev(nm, d_y[0], d_y[1], nc, 1e-6);
        cmp_dev("  ... rstd", d_r[0], d_r[1], N, 1e-6);
        cmp_dev("  ... dinp (=)", d_dx[0], d_dx[1], nc, 1e-5);
        cmp_dev("  ... dweight (+=)", d_dw[0], d_dw[1], C, 1e-5);
        if (layer) cmp_dev("  ... dbias (+=)", d_db[0], d_db[1], C, 1e-5);
        // RT_ASSIGN_DWEIGHT: each path's weight gradients assigned into NaNs == the same path
        // accumulating onto zeros, bit for bit
        for (int k = 0; k < 2; k++) {
            const float* wk = k ? d_wu : d_wa;
            float* g[2][2];  // [assigned][dweight, dbias]
            for (int a = 0; a < 2; a++)
                for (int j = 0; j < 2; j++) {
                    g[a][j] = dalloc(C * sizeof(float));
                    RT_CHECK_CUDA(cudaMemset(g[a][j], a ? 0xFF : 0, C * sizeof(float)));  // NaN
                }
            for (int a = 0; a < 2; a++) {
                const int bits = RT_ASSIGN_1 | (a ? RT_ASSIGN_DWEIGHT : 0);
                if (layer)
                    rt_layernorm_backward(d_dx[k], bias_only ? NULL : g[a][0], g[a][1], d_dout, d_x,
                                          wk, d_m[0], d_r[0], N, C, RT_F32, bits);
                else
                    rt_rmsnorm_backward(d_dx[k], g[a][0], d_dout, d_x, wk, d_r[0], N, C, RT_F32,
                                        bits);
            }
            const int same = (layer && bias_only) || dev_same(g[1][0], g[0][0], C);
            CHECK(same && (!layer || dev_same(g[1][1], g[0][1], C)),
                  "  ... %s: dweight%s assigned (=) == accumulated onto zeros, bit for bit",
                  k ? "a block per row" : "a warp per row", layer ? " and dbias" : "");
            for (int a = 0; a < 2; a++) dfree(g[a][0]), dfree(g[a][1]);
        }
    }
    for (int k = 0; k < 2; k++) {
        dfree(d_y[k]), dfree(d_dx[k]), dfree(d_m[k]), dfree(d_r[k]);
        dfree(d_dw[k]), dfree(d_db[k]);
    }
    free(x), free(w), free(dout), free(half);
    dfree(d_x), dfree(d_dout), dfree(d_wa), dfree(d_wbuf);
}

// The sums of partials in a fixed order: a column sum in row chunks takes one launch, whose
// last block of a stripe to finish adds the chunks' partials and sets its count back to 0
// (column_sums.cuh rtc_last_block); the norms' weight gradients from a warp per row add
// the blocks' partials in a second kernel (norm.cu dw_finish_kernel). Each case below runs 3 times, the cases
// one after another (other shapes between two calls of one), then once more with the
// emulator's blocks last to first (another block is the last one; skipped on a GPU, which
// orders them as it likes every run): the same bits every time. Gradients are assigned
// into NaNs, so a call whose sums were never added (a count not set back) shows. Row 0's
// terms are 2^50 and row N - 1's their negatives, so that the double sums round, and a sum
// in another order (one that starts from the last block's own partial) gives other bits
// than the fixed order, chunk or block 0 first. Cases:
// linear bias gradients (column sums of K = 1) over many chunks, over many 32-column
// stripes, in one chunk; LayerNorm (K = 2, a warp per row: dweight and dbias from the
// blocks' partials; rows over 1024: column sums; dbias alone) and RMSNorm (K = 1), over
// several blocks and over one.
extern void emu_set_block_order(int reversed) __attribute__((weak));  // the emulator's

enum { LB_CASES = 10 };
static const int lb_shape[LB_CASES][3] = {  // {kind: 0 bias, 1 LayerNorm, 2 bias-only, 3 RMS; N, C}
    {0, 2050, 64}, {0, 300, 4000}, {0, 33, 17},  {1, 2000, 768}, {1, 3, 512},
    {1, 4100, 96}, {2, 300, 512},  {3, 700, 2048}, {3, 2, 256},  {3, 9000, 256}};

// Case i's gradients (C, or 2 C for LayerNorm's two), from inputs made once; copied to host.
static float* lb_run(int i) {
    const int kind = lb_shape[i][0], N = lb_shape[i][1], C = lb_shape[i][2];
    const size_t nc = (size_t)N * C;
    static float *d_x[LB_CASES], *d_dout[LB_CASES], *d_w[LB_CASES], *d_m[LB_CASES],
        *d_r[LB_CASES], *d_dx[LB_CASES];
    if (!d_x[i]) {  // made at the first call, kept (a leak the test does not mind)
        float *x = hrand(nc, 2.0f, 0.5f), *dout = hrand(nc, 1.0f, 0.0f), *w = hrand(C, 1.0f, 1.0f);
        float *m = hrand(N, 0.5f, 0.0f), *r = hrand(N, 0.5f, 1.0f);
        for (int c = 0; c < C; c++) {  // the last row's terms the first's, negated
            dout[c] = 0x1p50f, dout[nc - C + c] = -0x1p50f;
            x[nc - C + c] = x[c];
        }
        m[N - 1] = m[0], r[N - 1] = r[0];
        d_x[i] = dup(x, nc), d_dout[i] = dup(dout, nc), d_w[i] = dup(w, C);
        d_m[i] = dup(m, N), d_r[i] = dup(r, N), d_dx[i] = dalloc(nc * sizeof(float));
        free(x), free(dout), free(w), free(m), free(r);
    }
    float* g = dalloc(2 * C * sizeof(float));
    RT_CHECK_CUDA(cudaMemset(g, 0xFF, 2 * C * sizeof(float)));  // NaN where nothing is stored
    const int bits = RT_ASSIGN_1 | RT_ASSIGN_DWEIGHT;
    if (kind == 0)  // dbias = the column sums of dout (N x C, C outputs)
        rt_linear_backward(NULL, NULL, g, d_dout[i], d_x[i], d_w[i], N, 1, C, RT_F32,
                           RT_ASSIGN_DWEIGHT);
    else if (kind == 1 || kind == 2)
        rt_layernorm_backward(d_dx[i], kind == 1 ? g : NULL, g + C, d_dout[i], d_x[i], d_w[i],
                              d_m[i], d_r[i], N, C, RT_F32, bits);
    else
        rt_rmsnorm_backward(d_dx[i], g, d_dout[i], d_x[i], d_w[i], d_r[i], N, C, RT_F32, bits);
    float* h = down(g, 2 * (size_t)C);
    dfree(g);
    return h;
}

static void test_last_block_sums(void) {
    float* first[LB_CASES];
    int same[LB_CASES], nan[LB_CASES];
    for (int i = 0; i < LB_CASES; i++) same[i] = 1, nan[i] = 0;
    const int rounds = emu_set_block_order ? 4 : 3;
    for (int round = 0; round < rounds; round++) {
        if (round == 3) emu_set_block_order(1);
        for (int i = 0; i < LB_CASES; i++) {
            const int kind = lb_shape[i][0], C = lb_shape[i][2];
            float* h = lb_run(i);
            const int n = kind == 1 ? 2 * C : C, off = kind == 2 ? C : 0;  // the outputs given
            for (int c = off; c < off + n; c++) nan[i] |= isnan(h[c]);
            if (round == 0) first[i] = h;
            else same[i] &= memcmp(h + off, first[i] + off, n * sizeof(float)) == 0, free(h);
        }
    }
    if (emu_set_block_order) emu_set_block_order(0);
    for (int i = 0; i < LB_CASES; i++) {
        static const char* what[] = {"linear bias", "layernorm dweight, dbias",
                                     "layernorm dbias alone", "rmsnorm dweight"};
        CHECK(same[i] && !nan[i], "%s N=%d C=%d: the same bits in %d calls%s, no NaN",
              what[lb_shape[i][0]], lb_shape[i][1], lb_shape[i][2], rounds,
              rounds == 4 ? " (blocks reversed in the 4th)" : "");
        free(first[i]);
    }
}

// ----------------------------------------------------------------------------
// activations

typedef void (*act_fwd)(float*, const float*, size_t, rt_dtype);
typedef void (*act_bwd)(float*, const float*, const float*, size_t, rt_dtype, int);

// dt RT_BF16: out and dinp rounded to bf16 on both backends; where the device's expf/erff
// differ from the host's in the last fp32 bit, the rounding may go the other way (one ulp).
static void test_activation(const char* name, act_fwd cf, act_fwd gf, act_bwd cb, act_bwd gb,
                            rt_dtype dt) {
    char nm[128];
    const size_t n = 100003;
    const char* P = dt == RT_BF16 ? "bf16" : "fp32";
    float* x = hrand(n, 4.0f, 0.0f);
    x[0] = 0.0f;  // ReLU's gradient at 0
    float* dout = hrand(n, 1.0f, 0.0f);
    float* out = hrand(n, 1.0f, 0.0f);
    float* dx = hrand(n, 1.0f, 0.0f);
    round_to(x, n, dt), round_to(dout, n, dt), round_to(dx, n, dt);
    float *d_x = dup(x, n), *d_dout = dup(dout, n), *d_out = dup(out, n), *d_dx = dup(dx, n);
    cf(out, x, n, dt);
    gf(d_out, d_x, n, dt);
    snprintf(nm, sizeof nm, "%s %s forward n=%zu", name, P, n);
    cmp_dt(nm, d_out, out, n, TOL_ELEM, dt, 1);
    cb(dx, dout, x, n, dt, RT_ACCUMULATE);
    gb(d_dx, d_dout, d_x, n, dt, RT_ACCUMULATE);
    snprintf(nm, sizeof nm, "%s %s backward (+=) n=%zu", name, P, n);
    cmp_dt(nm, d_dx, dx, n, TOL_ELEM, dt, 1);
    gf(d_x, d_x, n, dt);  // in place
    snprintf(nm, sizeof nm, "%s %s forward in place (out == inp)", name, P);
    cmp_dt(nm, d_x, out, n, TOL_ELEM, dt, 1);
    free(x), free(dout), free(out), free(dx);
    dfree(d_x), dfree(d_dout), dfree(d_out), dfree(d_dx);
}

// ----------------------------------------------------------------------------
// assigned gradient outputs (rt_kernels.h "Assign"): each kernel with `assign`, each bit,
// against the CPU kernel with the same bits (test_assign there checks that equals
// accumulating onto zeros). Assigned outputs start NaN on both sides, so a read of them
// shows; an output whose bit is clear accumulates onto its old values as before.

static void test_assign(rt_dtype dt) {
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

// dt RT_BF16 rounds the intermediates silu(a) and dout * b and the results out, da, db:
// where the device's expf differs from the host's in the last bit, a rounding can go the
// other way, one bf16 ulp in the intermediate (a relative 2^-7 at most, carried into the
// result) and one more in the result's own rounding: two ulps on top of TOL_ELEM.
static void test_swiglu(rt_dtype dt) {
    const size_t n = 4099;
    const double tol = TOL_ELEM;
    const char* P = dt == RT_BF16 ? "bf16" : "fp32";
    char nm[96];
    float *a = hrand(n, 4.0f, 0.0f), *b = hrand(n, 2.0f, 0.0f), *dout = hrand(n, 1.0f, 0.0f);
    float *out = hrand(n, 1.0f, 0.0f), *da = hrand(n, 1.0f, 0.0f), *db = hrand(n, 1.0f, 0.0f);
    round_to(a, n, dt), round_to(b, n, dt), round_to(dout, n, dt);
    round_to(da, n, dt), round_to(db, n, dt);
    float *d_a = dup(a, n), *d_b = dup(b, n), *d_dout = dup(dout, n), *d_out = dup(out, n),
          *d_da = dup(da, n), *d_db = dup(db, n);
    cpu_rt_swiglu_forward(out, a, b, n, dt);
    rt_swiglu_forward(d_out, d_a, d_b, n, dt);
    snprintf(nm, sizeof nm, "swiglu %s forward n=4099", P);
    cmp_dt(nm, d_out, out, n, tol, dt, 2);
    cpu_rt_swiglu_backward(da, db, dout, a, b, n, dt, RT_ACCUMULATE);
    rt_swiglu_backward(d_da, d_db, d_dout, d_a, d_b, n, dt, RT_ACCUMULATE);
    snprintf(nm, sizeof nm, "swiglu %s backward da (+=)", P);
    cmp_dt(nm, d_da, da, n, tol, dt, 2);
    cmp_dt("  ... db (+=)", d_db, db, n, tol, dt, 2);
    cpu_rt_swiglu_backward(NULL, db, dout, a, b, n, dt, RT_ACCUMULATE);
    rt_swiglu_backward(NULL, d_db, d_dout, d_a, d_b, n, dt, RT_ACCUMULATE);
    snprintf(nm, sizeof nm, "swiglu %s backward da NULL: db (+=)", P);
    cmp_dt(nm, d_db, db, n, tol, dt, 4);  // two roundings, each of which may go either way
    cmp_dt("  ... da untouched", d_da, da, n, tol, dt, 2);
    // swiglu(x, x): da == db gets both contributions and one rounding
    RT_CHECK_CUDA(cudaMemcpy(d_da, da, n * sizeof(float), cudaMemcpyHostToDevice));
    cpu_rt_swiglu_backward(da, da, dout, a, a, n, dt, RT_ACCUMULATE);
    rt_swiglu_backward(d_da, d_da, d_dout, d_a, d_a, n, dt, RT_ACCUMULATE);
    snprintf(nm, sizeof nm, "swiglu %s backward da == db (swiglu(x, x))", P);
    cmp_dt(nm, d_da, da, n, tol, dt, 2);
    free(a), free(b), free(dout), free(out), free(da), free(db);
    dfree(d_a), dfree(d_b), dfree(d_dout), dfree(d_out), dfree(d_da), dfree(d_db);
}

// ----------------------------------------------------------------------------
// rope

// dt RT_BF16: out and dinp rounded to bf16 (one ulp on top of TOL_ELEM where the device's
// double cos/sin differ from the host's in the last bit). HD 16 takes the kernel's groups
// of four pairs, HD 10 its pairs one at a time; the groups' operands one float off their
// alignment take the pairs too, and must give the groups' bits.
static void upload(float* d, const float* h, size_t n);
static int dev_same(const float* da, const float* db, size_t n);

static void test_rope_shape(rt_dtype dt, int B, int T, int NH, int HD) {
    const size_t n = (size_t)B * T * NH * HD;
    const char* P = dt == RT_BF16 ? "bf16" : "fp32";
    char nm[96];
    float *x = hrand(n, 1.0f, 0.0f), *dout = hrand(n, 1.0f, 0.0f);
    float *out = hrand(n, 1.0f, 0.0f), *dx = hrand(n, 1.0f, 0.0f);
    round_to(x, n, dt), round_to(dout, n, dt), round_to(dx, n, dt);
    float *d_x = dup(x, n), *d_dout = dup(dout, n), *d_out = dup(out, n), *d_dx = dup(dx, n);
    float* d_odd = dalloc((2 * n + 1) * sizeof(float));  // two operands, one float off 16 bytes
    cpu_rt_rope_forward(out, x, B, T, NH, HD, RT_ROPE_THETA, dt);
    rt_rope_forward(d_out, d_x, B, T, NH, HD, RT_ROPE_THETA, dt);
    snprintf(nm, sizeof nm, "rope %s forward B=%d T=%d NH=%d HD=%d", P, B, T, NH, HD);
    cmp_dt(nm, d_out, out, n, TOL_ELEM, dt, 1);
    upload(d_odd + 1, x, n);
    rt_rope_forward(d_odd + 1 + n, d_odd + 1, B, T, NH, HD, RT_ROPE_THETA, dt);
    CHECK(dev_same(d_odd + 1 + n, d_out, n), "rope %s forward HD=%d unaligned == aligned, bit for bit", P, HD);
    rt_rope_forward(d_x, d_x, B, T, NH, HD, RT_ROPE_THETA, dt);
    snprintf(nm, sizeof nm, "rope %s forward in place HD=%d", P, HD);
    cmp_dt(nm, d_x, out, n, TOL_ELEM, dt, 1);
    upload(d_odd + 1, dx, n), upload(d_odd + 1 + n, dout, n);
    cpu_rt_rope_backward(dx, dout, B, T, NH, HD, 500000.0f, dt, RT_ACCUMULATE);
    rt_rope_backward(d_dx, d_dout, B, T, NH, HD, 500000.0f, dt, RT_ACCUMULATE);
    snprintf(nm, sizeof nm, "rope %s backward (+=) theta=5e5 HD=%d", P, HD);
    cmp_dt(nm, d_dx, dx, n, TOL_ELEM, dt, 1);
    rt_rope_backward(d_odd + 1, d_odd + 1 + n, B, T, NH, HD, 500000.0f, dt, RT_ACCUMULATE);
    CHECK(dev_same(d_odd + 1, d_dx, n), "rope %s backward HD=%d unaligned == aligned, bit for bit", P, HD);
    free(x), free(dout), free(out), free(dx);
    dfree(d_x), dfree(d_dout), dfree(d_out), dfree(d_dx), dfree(d_odd);
}

static void test_rope(rt_dtype dt) {
    test_rope_shape(dt, 2, 45, 3, 16);
    test_rope_shape(dt, 3, 7, 5, 10);
    // HD 1024 (four passes of the angles), 384 groups a row (two passes of a block's 256
    // threads), T 2048 (one block per position: each takes both batch rows in turn)
    if (dt == RT_BF16) test_rope_shape(dt, 2, 2048, 3, 1024);
}

// ----------------------------------------------------------------------------
// attention: the probs variant (cuBLAS) and the lowmem variant (flash attention) against
// the CPU, and against each other; the flash backward run twice gives the same bits

static void test_attention(int B, int T, int NH, int NKV, int HD, int causal) {
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

static void test_attention_tc(int B, int T, int NH, int NKV, int HD, int causal, rt_dtype prec) {
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

// ----------------------------------------------------------------------------
// binary elementwise ops and buffer helpers

// The binary ops do the CPU's float operations in its order, so their rounded outputs are
// the CPU's bits for any dt (tolerance 0); broadcast_add's db (column sums, another order)
// is not rounded. The buffer helpers (no dt) run once, with dt RT_F32.
static void test_elementwise(rt_dtype dt) {
    const size_t n = 10007;
    const int rows = 37, cols = 101;
    const size_t nb = (size_t)rows * cols;
    const char* P = dt == RT_BF16 ? "bf16" : "fp32";
    char nm[96];
    float *a = hrand(n, 1.0f, 0.0f), *b = hrand(n, 1.0f, 0.0f), *dout = hrand(n, 1.0f, 0.0f);
    float *out = hrand(n, 1.0f, 0.0f), *da = hrand(n, 1.0f, 0.0f), *db = hrand(n, 1.0f, 0.0f);
    round_to(a, n, dt), round_to(b, n, dt), round_to(dout, n, dt);
    round_to(da, n, dt), round_to(db, n, dt);
    float *d_a = dup(a, n), *d_b = dup(b, n), *d_dout = dup(dout, n), *d_out = dup(out, n),
          *d_da = dup(da, n), *d_db = dup(db, n);

    cpu_rt_residual_forward(out, a, b, n, dt);
    rt_residual_forward(d_out, d_a, d_b, n, dt);
    snprintf(nm, sizeof nm, "residual %s forward n=10007", P);
    cmp_dt(nm, d_out, out, n, TOL_EXACT, dt, 0);
    cpu_rt_residual_backward(da, db, dout, n, dt, RT_ACCUMULATE);
    rt_residual_backward(d_da, d_db, d_dout, n, dt, RT_ACCUMULATE);
    snprintf(nm, sizeof nm, "residual %s backward da (+=)", P);
    cmp_dt(nm, d_da, da, n, TOL_EXACT, dt, 0);
    cmp_dt("  ... db (+=)", d_db, db, n, TOL_EXACT, dt, 0);
    cpu_rt_residual_backward(da, da, dout, n, dt, RT_ACCUMULATE);  // one buffer for both (x + x)
    rt_residual_backward(d_da, d_da, d_dout, n, dt, RT_ACCUMULATE);
    snprintf(nm, sizeof nm, "residual %s backward da == db (x + x): += 2 dout", P);
    cmp_dt(nm, d_da, da, n, TOL_EXACT, dt, 0);

    cpu_rt_mul_forward(out, a, b, n, dt);
    rt_mul_forward(d_out, d_a, d_b, n, dt);
    snprintf(nm, sizeof nm, "mul %s forward", P);
    cmp_dt(nm, d_out, out, n, TOL_EXACT, dt, 0);
    cpu_rt_mul_backward(da, db, dout, a, b, n, dt, RT_ACCUMULATE);
    rt_mul_backward(d_da, d_db, d_dout, d_a, d_b, n, dt, RT_ACCUMULATE);
    snprintf(nm, sizeof nm, "mul %s backward da (+=)", P);
    cmp_dt(nm, d_da, da, n, TOL_EXACT, dt, 0);
    cmp_dt("  ... db (+=)", d_db, db, n, TOL_EXACT, dt, 0);
    cpu_rt_mul_backward(NULL, db, dout, a, b, n, dt, RT_ACCUMULATE);
    rt_mul_backward(NULL, d_db, d_dout, d_a, d_b, n, dt, RT_ACCUMULATE);
    snprintf(nm, sizeof nm, "mul %s backward da NULL: db (+=)", P);
    cmp_dt(nm, d_db, db, n, TOL_EXACT, dt, 0);
    cpu_rt_mul_backward(da, da, dout, a, a, n, dt, RT_ACCUMULATE);  // x * x
    rt_mul_backward(d_da, d_da, d_dout, d_a, d_a, n, dt, RT_ACCUMULATE);
    snprintf(nm, sizeof nm, "mul %s backward da == db (x * x)", P);
    cmp_dt(nm, d_da, da, n, TOL_EXACT, dt, 0);

    cpu_rt_broadcast_add_forward(out, a, b, rows, cols, dt);
    rt_broadcast_add_forward(d_out, d_a, d_b, rows, cols, dt);
    snprintf(nm, sizeof nm, "broadcast_add %s forward rows=37 cols=101", P);
    cmp_dt(nm, d_out, out, nb, TOL_EXACT, dt, 0);
    cpu_rt_broadcast_add_backward(da, db, dout, rows, cols, dt, RT_ACCUMULATE);
    rt_broadcast_add_backward(d_da, d_db, d_dout, rows, cols, dt, RT_ACCUMULATE);
    snprintf(nm, sizeof nm, "broadcast_add %s backward da (+=)", P);
    cmp_dt(nm, d_da, da, nb, TOL_EXACT, dt, 0);
    cmp("  ... db (+=, column sums, not rounded)", d_db, db, cols, TOL_ELEM);
    if (dt != RT_F32) {
        free(a), free(b), free(dout), free(out), free(da), free(db);
        dfree(d_a), dfree(d_b), dfree(d_dout), dfree(d_out), dfree(d_da), dfree(d_db);
        return;
    }

    cpu_rt_scale(out, a, n, 0.37f);
    rt_scale(d_out, d_a, n, 0.37f);
    cmp("scale", d_out, out, n, TOL_EXACT);
    cpu_rt_scale(out, out, n, -3.0f);
    rt_scale(d_out, d_out, n, -3.0f);
    cmp("scale in place", d_out, out, n, TOL_EXACT);
    cpu_rt_accumulate(out, b, n);
    rt_accumulate(d_out, d_b, n);
    cmp("accumulate", d_out, out, n, TOL_EXACT);
    cpu_rt_axpy(out, a, n, -0.7f);
    rt_axpy(d_out, d_a, n, -0.7f);
    cmp("axpy", d_out, out, n, TOL_EXACT);
    cpu_rt_copy(out + 1, a, n - 1);
    rt_copy(d_out + 1, d_a, n - 1);
    cmp("copy", d_out, out, n, TOL_EXACT);
    cpu_rt_zero(out + 3, n - 5);
    rt_zero(d_out + 3, n - 5);
    cmp("zero (a middle range)", d_out, out, n, TOL_EXACT);

    const size_t nbig = 1000003;
    float* big = hrand(nbig, 3.0f, 0.5f);
    float* d_big = dup(big, nbig);
    const double want = cpu_rt_sumsq(big, nbig), got = rt_sumsq(d_big, nbig);
    CHECK(fabs(got - want) <= 1e-12 * want, "sumsq n=%zu: got %.17g want %.17g (rel diff %.3g)",
          nbig, got, want, fabs(got - want) / want);
    CHECK(rt_sumsq(d_big, 0) == 0.0 && rt_sumsq(d_big, 1) == (double)big[0] * big[0],
          "sumsq of 0 and 1 values");
    const double again = rt_sumsq(d_big, nbig);
    CHECK(again == got, "sumsq deterministic: %.17g twice", got);

    free(a), free(b), free(dout), free(out), free(da), free(db), free(big);
    dfree(d_a), dfree(d_b), dfree(d_dout), dfree(d_out), dfree(d_da), dfree(d_db), dfree(d_big);
}

// ----------------------------------------------------------------------------
// vectorised flat kernels (cuda_common.cuh rtc_flat): groups of 8 elements with 16-byte
// accesses when every pointer is 16-byte aligned, one element at a time otherwise

// n values of h into device storage d: fp32 (es 4) or dt's 16-bit bits (es 2).
static void put_vals(void* d, const float* h, size_t n, int es, rt_dtype dt) {
    if (es == 4) {
        RT_CHECK_CUDA(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
        return;
    }
    uint16_t* b = malloc(n * sizeof *b);
    if (!b) abort();
    for (size_t i = 0; i < n; i++) b[i] = rt_bits16_from_f32_inl(h[i], dt);
    RT_CHECK_CUDA(cudaMemcpy(d, b, n * 2, cudaMemcpyHostToDevice));
    free(b);
}

typedef void (*act_packed_fwd)(void*, const void*, size_t, int, rt_dtype);
typedef void (*act_packed_bwd)(void*, const void*, const void*, size_t, int, rt_dtype, int);

// Each swiglu / residual / accumulate / gelu / relu / silu call on buffers at a
// 16-byte-aligned address (groups of 8 and a tail of 3: n = 4099) and one element further
// (each element alone): the same bits, in fp32 storage and (dt 16-bit) with every operand
// packed. Gradients accumulated, assigned (each assign bit), one of them NULL, and da == db
// (fp32 storage).
static void test_vec_offsets(rt_dtype dt) {
    const act_fwd af[3] = {rt_gelu_forward, rt_relu_forward, rt_silu_forward};
    const act_bwd ab[3] = {rt_gelu_backward, rt_relu_backward, rt_silu_backward};
    const act_packed_fwd paf[3] = {rt_gelu_packed_forward, rt_relu_packed_forward,
                                   rt_silu_packed_forward};
    const act_packed_bwd pab[3] = {rt_gelu_packed_backward, rt_relu_packed_backward,
                                   rt_silu_packed_backward};
    const char* P = dt == RT_BF16 ? "bf16" : dt == RT_F16 ? "fp16" : "fp32";
    const size_t n = 4099;
    float* h[5] = {hrand(n, 1.0f, 0.0f), hrand(n, 1.0f, 0.0f), hrand(n, 1.0f, 0.0f),
                   hrand(n, 4.0f, 0.0f), hrand(n, 2.0f, 0.0f)};  // da (out), db, dout, a, b
    void* buf[2][5];
    for (int k = 0; k < 5; k++) {
        round_to(h[k], n, dt);
        for (int off = 0; off < 2; off++) buf[off][k] = dalloc((n + 1) * sizeof(float));
    }
    int same = 1, calls = 0;
    for (int pk = 0; pk < (dt == RT_F32 ? 1 : 2); pk++) {
        const int fwd = RT_PACKED_OUT | RT_PACKED_INP | RT_PACKED_INP2,
                  grads = RT_PACKED_DINP | RT_PACKED_DINP2;
        for (int call = 0; call < 21; call++) {
            if (pk && call >= 9 && call <= 11) continue;  // da == db, rt_accumulate: fp32 only
            void* got[2][2] = {{NULL, NULL}, {NULL, NULL}};
            for (int off = 0; off < 2; off++) {
                void* p[5];
                int es[5];
                for (int k = 0; k < 5; k++) {
                    es[k] = pk ? 2 : 4;
                    p[k] = (char*)buf[off][k] + off * es[k];
                    put_vals(p[k], h[k], n, es[k], dt);
                }
                const int as = call >= 2 && call <= 5 ? call - 2 : call == 7 ? RT_ASSIGN_1 : 0;
                if (call == 0 && pk) rt_swiglu_packed_forward(p[0], p[3], p[4], n, fwd, dt);
                if (call == 0 && !pk) rt_swiglu_forward(p[0], p[3], p[4], n, dt);
                if (call == 1 && pk) rt_residual_packed_forward(p[0], p[3], p[4], n, fwd, dt);
                if (call == 1 && !pk) rt_residual_forward(p[0], p[3], p[4], n, dt);
                if (call >= 2 && call <= 6) {
                    void* da = call == 6 ? NULL : p[0];
                    if (pk)  // one row of n: its gradients' rows of RT_LD16(n) are dense
                        rt_swiglu_packed_backward(da, p[1], p[2], p[3], p[4], n, fwd | grads, dt,
                                                  as, (int)n, RT_LD16((int)n), RT_LD16((int)n));
                    else rt_swiglu_backward(da, p[1], p[2], p[3], p[4], n, dt, as);
                }
                if ((call == 7 || call == 8) && pk)
                    rt_residual_packed_backward(p[0], p[1], p[2], n, grads | RT_PACKED_OUT, dt, as);
                if ((call == 7 || call == 8) && !pk) rt_residual_backward(p[0], p[1], p[2], n, dt, as);
                if (call == 9) rt_swiglu_backward(p[0], p[0], p[2], p[3], p[3], n, dt, 0);
                if (call == 10) rt_residual_backward(p[0], p[0], p[2], n, dt, 0);
                if (call == 11) rt_accumulate(p[0], p[2], n);
                if (call >= 12) {  // activation (call - 12) / 3: forward, backward +=, backward =
                    const int a = (call - 12) / 3, kind = (call - 12) % 3;
                    const int bits = RT_PACKED_OUT | RT_PACKED_INP;
                    if (kind == 0 && pk) paf[a](p[0], p[3], n, bits, dt);
                    if (kind == 0 && !pk) af[a](p[0], p[3], n, dt);
                    if (kind > 0 && pk)
                        pab[a](p[0], p[2], p[3], n, bits | RT_PACKED_DINP, dt, kind - 1);
                    if (kind > 0 && !pk) ab[a](p[0], p[2], p[3], n, dt, kind - 1);
                }
                for (int k = 0; k < 2; k++) {
                    got[off][k] = malloc(n * es[k]);
                    if (!got[off][k]) abort();
                    RT_CHECK_CUDA(cudaMemcpy(got[off][k], p[k], n * es[k], cudaMemcpyDeviceToHost));
                }
                if (off == 1)
                    for (int k = 0; k < 2; k++) same &= memcmp(got[0][k], got[1][k], n * es[k]) == 0;
            }
            for (int off = 0; off < 2; off++) free(got[off][0]), free(got[off][1]);
            calls++;
        }
    }
    CHECK(same, "%s swiglu, residual, accumulate, gelu, relu, silu n=%zu: 16-byte-aligned "
          "(groups of 8) == one element further (each alone), bit for bit: %d calls (fp32 and "
          "packed storage; accumulated, assigned, da NULL, da == db)", P, n, calls);
    for (int k = 0; k < 5; k++) free(h[k]), dfree(buf[0][k]), dfree(buf[1][k]);
}

// ----------------------------------------------------------------------------
// dropout

static void test_dropout(void) {
    const size_t n = 1001;
    const uint64_t seed = 0x1234567890abcdefull, stream = 7, offset = 13;  // offset % 4 != 0
    float *x = hrand(n, 1.0f, 0.0f), *dout = hrand(n, 1.0f, 0.0f);
    float *out = hrand(n, 1.0f, 0.0f), *dx = hrand(n, 1.0f, 0.0f);
    float *d_x = dup(x, n), *d_dout = dup(dout, n), *d_out = dup(out, n), *d_dx = dup(dx, n);

    uint32_t ctr[4] = {1, 2, 3, 4}, key[2] = {5, 6}, o1[4], o2[4];
    rt_philox4x32_10(ctr, key, o1);
    cpu_rt_philox4x32_10(ctr, key, o2);
    CHECK(memcmp(o1, o2, sizeof o1) == 0, "philox4x32_10 (host function): %08x %08x %08x %08x",
          o1[0], o1[1], o1[2], o1[3]);
    CHECK(rt_dropout_uniform(seed, stream, 12345) == cpu_rt_dropout_uniform(seed, stream, 12345),
          "dropout_uniform(seed, 7, 12345) = %.9g", rt_dropout_uniform(seed, stream, 12345));

    // dt RT_BF16 (inputs exact in bf16): the same float operations rounded at the store on
    // both backends, so the CPU's bits
    const float ps[3] = {0.1f, 0.0f, 1.0f};
    const rt_dtype dts[2] = {RT_F32, RT_BF16};
    for (int di = 0; di < 2; di++)
        for (int pi = 0; pi < 3; pi++) {
            char nm[96];
            const float p = ps[pi];
            const rt_dtype dt = dts[di];
            const char* P = dt == RT_BF16 ? "bf16" : "fp32";
            if (dt == RT_BF16 && pi == 0) {
                round_to(x, n, dt), round_to(dout, n, dt), round_to(dx, n, dt);
                RT_CHECK_CUDA(cudaMemcpy(d_x, x, n * sizeof(float), cudaMemcpyHostToDevice));
                RT_CHECK_CUDA(cudaMemcpy(d_dout, dout, n * sizeof(float), cudaMemcpyHostToDevice));
                RT_CHECK_CUDA(cudaMemcpy(d_dx, dx, n * sizeof(float), cudaMemcpyHostToDevice));
            }
            cpu_rt_dropout_forward(out, x, n, p, seed, stream, offset, dt);
            rt_dropout_forward(d_out, d_x, n, p, seed, stream, offset, dt);
            snprintf(nm, sizeof nm, "dropout %s forward p=%g offset=13 (CPU masks)", P, p);
            cmp_dt(nm, d_out, out, n, TOL_EXACT, dt, 0);
            cpu_rt_dropout_backward(dx, dout, n, p, seed, stream, offset, dt, RT_ACCUMULATE);
            rt_dropout_backward(d_dx, d_dout, n, p, seed, stream, offset, dt, RT_ACCUMULATE);
            snprintf(nm, sizeof nm, "dropout %s backward (+=) p=%g", P, p);
            cmp_dt(nm, d_dx, dx, n, TOL_EXACT, dt, 0);
        }
    // in place, and a piece of the tensor (offset) reproduces the whole
    float* whole = hcopy(x, n);
    cpu_rt_dropout_forward(whole, whole, n, 0.3f, seed, stream, 0, RT_F32);
    RT_CHECK_CUDA(cudaMemcpy(d_out, x, n * sizeof(float), cudaMemcpyHostToDevice));
    rt_dropout_forward(d_out, d_out, 500, 0.3f, seed, stream, 0, RT_F32);
    rt_dropout_forward(d_out + 500, d_out + 500, n - 500, 0.3f, seed, stream, 500, RT_F32);
    cmp("dropout in place, in two pieces == whole (CPU)", d_out, whole, n, TOL_EXACT);

    free(x), free(dout), free(out), free(dx), free(whole);
    dfree(d_x), dfree(d_dout), dfree(d_out), dfree(d_dx);
}

// ----------------------------------------------------------------------------
// losses

static void test_sum_loss(void) {
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

static void test_cross_entropy(int N, int V, int ignore_every, int all_ignored) {
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
static void test_cross_entropy_nan(void) {
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

// n_rows rows of RT_LD16(cols) 16-bit values at d16, widened, equal x[rows, cols] (device)
// bit for bit; *pad counts non-zero padding values.
static int packed_same(const void* d16, const float* dx, int rows, int cols, rt_dtype dt,
                       int* pad) {
    const int ld = RT_LD16(cols);
    uint16_t* h = malloc((size_t)rows * ld * sizeof(uint16_t));
    float* x = down(dx, (size_t)rows * cols);
    if (!h) abort();
    RT_CHECK_CUDA(cudaMemcpy(h, d16, (size_t)rows * ld * 2, cudaMemcpyDeviceToHost));
    int same = 1;
    *pad = 0;
    for (int n = 0; n < rows; n++) {
        for (int j = 0; j < cols; j++) {
            const float w = rt_bits16_to_f32_inl(h[(size_t)n * ld + j], dt);
            same &= memcmp(&w, &x[(size_t)n * cols + j], sizeof w) == 0;
        }
        for (int j = cols; j < ld; j++) *pad += h[(size_t)n * ld + j] != 0;
    }
    free(h), free(x);
    return same;
}

// device d = host h (n floats)
static void upload(float* d, const float* h, size_t n) {
    RT_CHECK_CUDA(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
}

// device d = n zero floats
static void zero_dev(float* d, size_t n) { RT_CHECK_CUDA(cudaMemset(d, 0, n * sizeof(float))); }

// A packed gradient on the device before a backward call: poisoned when the call assigns
// it, else g0's n dense values packed (what the call adds to).
static void dev_grad16(void* d16, const float* g0, size_t n, int assigned, rt_dtype dt) {
    uint16_t* h = malloc(n * sizeof *h);
    if (!h) abort();
    for (size_t i = 0; i < n; i++) h[i] = assigned ? 0xABAB : rt_bits16_from_f32_inl(g0[i], dt);
    RT_CHECK_CUDA(cudaMemcpy(d16, h, n * sizeof *h, cudaMemcpyHostToDevice));
    free(h);
}

static int dev_same(const float* da, const float* db, size_t n) {
    float *a = down(da, n), *b = down(db, n);
    const int same = memcmp(a, b, n * sizeof(float)) == 0;
    free(a), free(b);
    return same;
}

static void test_packed(rt_dtype dt, int N, int C, int V) {
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
                                  bits, RT_LD16(V));
        CHECK(dev_same(d_dinp, d_dinp2, (size_t)N * C) && dev_same(d_dw, d_dw2, (size_t)V * C),
              "%s packed linear backward (%s) == rt_linear_backward: dinp, dweight bit for bit", nm,
              as ? "assigned" : "accumulated");
        dfree(d_dinp), dfree(d_dw), dfree(d_dinp2), dfree(d_dw2);
    }
    free(inp), free(w), free(t), free(dinp0), free(dw0);
    dfree(d_inp), dfree(d_w), dfree(d_t), dfree(d_logits), dfree(d_l16), dfree(d_g16);
    dfree(d_g), dfree(d_loss), dfree(d_loss16), dfree(d_one);
}

// x[rows, cols] (values of dt) as packed rows of RT_LD16(cols) on the device, zero padding.
static void* dev_packed(const float* x, int rows, int cols, rt_dtype dt) {
    const int ld = RT_LD16(cols);
    uint16_t* h = calloc((size_t)rows * ld, sizeof *h);
    if (!h) abort();
    for (int n = 0; n < rows; n++)
        for (int j = 0; j < cols; j++)
            h[(size_t)n * ld + j] = rt_bits16_from_f32_inl(x[(size_t)n * cols + j], dt);
    void* d = dalloc((size_t)rows * ld * 2);
    RT_CHECK_CUDA(cudaMemcpy(d, h, (size_t)rows * ld * 2, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

// A residual add and the norm of its sum in one call (ln: rt_residual_layernorm_packed_forward
// with a bias, else rt_residual_rmsnorm_packed_forward) == the two calls, bit for bit: the
// sum, the norm's output, mean and rstd, with every storage of a, b, the sum and the output;
// rows of 256 V elements (one kernel, a warp per row) and rows of other lengths (the two
// kernels).
static void test_residual_norm(int ln, rt_dtype dt, int N, int C) {
    const size_t n = (size_t)N * C;
    float *a = hrand(n, 2.0f, 0.0f), *b = hrand(n, 1.0f, 0.5f), *w = hrand(C, 0.5f, 1.0f),
          *bias = hrand(C, 0.5f, 0.0f);
    round_to(a, n, dt), round_to(b, n, dt), round_to(w, C, dt), round_to(bias, C, dt);
    float *d_a = dup(a, n), *d_b = dup(b, n), *d_w = dup(w, C), *d_bias = dup(bias, C);
    void *d_a16 = dev_packed(a, N, C, dt), *d_b16 = dev_packed(b, N, C, dt);
    void *sum[2], *out[2];
    float *mean[2], *rstd[2];
    for (int k = 0; k < 2; k++) {
        sum[k] = dalloc(n * sizeof(float)), out[k] = dalloc(n * sizeof(float));
        mean[k] = dalloc(N * sizeof(float)), rstd[k] = dalloc(N * sizeof(float));
    }
    int bad = 0;
    for (int bits = 0; bits < 16; bits++) {
        const int pa = bits & 1, pb = bits & 2, ps = bits & 4, po = bits & 8;
        const int add = (pa ? RT_PACKED_INP : 0) | (pb ? RT_PACKED_INP2 : 0) | (ps ? RT_PACKED_OUT : 0);
        const int norm = (ps ? RT_PACKED_INP : 0) | (po ? RT_PACKED_OUT : 0);
        const void *x = pa ? d_a16 : (void*)d_a, *y = pb ? d_b16 : (void*)d_b;
        for (int k = 0; k < 2; k++) {
            RT_CHECK_CUDA(cudaMemset(sum[k], 0xAB, n * sizeof(float)));
            RT_CHECK_CUDA(cudaMemset(out[k], 0xCD, n * sizeof(float)));
            RT_CHECK_CUDA(cudaMemset(mean[k], 0xEF, N * sizeof(float)));
        }
        rt_residual_packed_forward(sum[0], x, y, n, add, dt);
        if (ln) {
            rt_layernorm_packed_forward(out[0], mean[0], rstd[0], sum[0], d_w, d_bias, N, C, 1e-5f, norm, dt);
            rt_residual_layernorm_packed_forward(sum[1], out[1], mean[1], rstd[1], x, y, d_w, d_bias, N, C,
                                                 1e-5f, add, norm, dt);
        } else {
            rt_rmsnorm_packed_forward(out[0], rstd[0], sum[0], d_w, N, C, 1e-5f, norm, dt);
            rt_residual_rmsnorm_packed_forward(sum[1], out[1], rstd[1], x, y, d_w, N, C, 1e-5f, add, norm,
                                               dt);
        }
        // packed buffers: compared whole (their bytes are half the floats')
        bad += !dev_same(sum[0], sum[1], n) + !dev_same(out[0], out[1], n) + !dev_same(rstd[0], rstd[1], N) +
               !dev_same(mean[0], mean[1], N);
    }
    CHECK(bad == 0, "%s residual add + %s N=%d C=%d in one call == the two calls, bit for bit, for "
          "the 16 storages of a, b, the sum and the output (%d differ)", dt == RT_BF16 ? "bf16" : "fp16",
          ln ? "LayerNorm" : "RMSNorm", N, C, bad);
    for (int k = 0; k < 2; k++) dfree(sum[k]), dfree(out[k]), dfree(mean[k]), dfree(rstd[k]);
    dfree(d_a), dfree(d_b), dfree(d_w), dfree(d_bias), dfree(d_a16), dfree(d_b16);
    free(a), free(b), free(w), free(bias);
}

// packed linear inputs (rt_kernels.h): a linear reading its input's packed rows (with a
// bias; its output fp32 or packed), its backward (fp32 or packed dout, with dbias; an
// assigned dinp packed), the packed outputs of the norms that feed it, and the activations
// with every storage of their operands: the fp32-storage calls' bits.
static void test_packed_inputs(rt_dtype dt, int N, int C, int OC) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    const size_t ni = (size_t)N * C, no = (size_t)N * OC;
    float *inp = hrand(ni, 1.0f, 0.0f), *w = hrand((size_t)OC * C, 0.2f, 0.0f),
          *b = hrand((size_t)OC, 1.0f, 0.0f), *dout = hrand(no, 1.0f, 0.0f);
    round_to(inp, ni, dt), round_to(w, (size_t)OC * C, dt), round_to(b, OC, dt), round_to(dout, no, dt);
    float *d_inp = dup(inp, ni), *d_w = dup(w, (size_t)OC * C), *d_b = dup(b, OC), *d_dout = dup(dout, no);
    void *d_i16 = dev_packed(inp, N, C, dt), *d_d16 = dev_packed(dout, N, OC, dt);
    float *d_out = dalloc(no * sizeof(float)), *d_out2 = dalloc(no * sizeof(float));
    void* d_o16 = dalloc((size_t)N * RT_LD16(OC) * 2);
    RT_CHECK_CUDA(cudaMemset(d_o16, 0xAB, (size_t)N * RT_LD16(OC) * 2));
    rt_linear_forward(d_out, d_inp, d_w, d_b, N, C, OC, dt);
    rt_linear_packed_forward(d_out2, d_i16, d_w, d_b, N, C, OC, RT_PACKED_INP, dt);
    rt_linear_packed_forward(d_o16, d_i16, d_w, d_b, N, C, OC, RT_PACKED_INP | RT_PACKED_OUT, dt);
    int pad;
    const int ok = packed_same(d_o16, d_out, N, OC, dt, &pad);
    CHECK(dev_same(d_out, d_out2, no) && ok && pad == 0, "%s linear forward N=%d C=%d OC=%d, packed "
          "input (and output) == rt_linear_forward, bit for bit; %d non-zero padding", nm, N, C, OC, pad);
    float *dinp0 = hrand(ni, 1.0f, 0.0f), *dw0 = hrand((size_t)OC * C, 1.0f, 0.0f),
          *db0 = hrand(OC, 1.0f, 0.0f);
    round_to(dinp0, ni, dt);
    for (int as = 0; as < 2; as++) {
        const int bits = as ? RT_ASSIGN_1 | RT_ASSIGN_DWEIGHT : RT_ACCUMULATE;
        float *d_dinp = dup(dinp0, ni), *d_dw = dup(dw0, (size_t)OC * C), *d_db = dup(db0, OC);
        float *d_dinp2 = dup(dinp0, ni), *d_dw2 = dup(dw0, (size_t)OC * C), *d_db2 = dup(db0, OC);
        float *d_dinp3 = dup(dinp0, ni), *d_dw3 = dup(dw0, (size_t)OC * C), *d_db3 = dup(db0, OC);
        rt_linear_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC, dt, bits);
        rt_linear_packed_backward(d_dinp2, d_dw2, d_db2, d_dout, d_i16, d_w, N, C, OC, RT_PACKED_INP,
                                  dt, bits, OC);
        rt_linear_packed_backward(d_dinp3, d_dw3, d_db3, d_d16, d_i16, d_w, N, C, OC,
                                  RT_PACKED_INP | RT_PACKED_OUT, dt, bits, RT_LD16(OC));
        CHECK(dev_same(d_dinp, d_dinp2, ni) && dev_same(d_dw, d_dw2, (size_t)OC * C) &&
                  dev_same(d_db, d_db2, OC) && dev_same(d_dinp, d_dinp3, ni) &&
                  dev_same(d_dw, d_dw3, (size_t)OC * C) && dev_same(d_db, d_db3, OC),
              "%s linear backward (%s), packed input (and dout) == rt_linear_backward: dinp, "
              "dweight, dbias, bit for bit", nm, as ? "assigned" : "accumulated");
        {  // a packed dinp, assigned or added to (C a multiple of 8: dense rows)
            void* d_p16 = dalloc(ni * 2);
            dev_grad16(d_p16, dinp0, ni, as, dt);
            rt_linear_packed_backward(d_p16, NULL, NULL, d_d16, d_i16, d_w, N, C, OC,
                                      RT_PACKED_INP | RT_PACKED_OUT | RT_PACKED_DINP, dt, bits,
                                      RT_LD16(OC));
            const int ok16 = packed_same(d_p16, d_dinp, N, C, dt, &pad);
            CHECK(ok16 && pad == 0, "%s linear backward into a packed dinp (%s) == "
                  "rt_linear_backward's, %d non-zero padding", nm, as ? "assigned" : "accumulated", pad);
            dfree(d_p16);
        }
        dfree(d_dinp), dfree(d_dw), dfree(d_db), dfree(d_dinp2), dfree(d_dw2), dfree(d_db2);
        dfree(d_dinp3), dfree(d_dw3), dfree(d_db3);
    }

    // the producers: [N, C] outputs, C a multiple of 8
    float *d_mean = dalloc(N * sizeof(float)), *d_rstd = dalloc(N * sizeof(float));
    float *d_mean2 = dalloc(N * sizeof(float)), *d_rstd2 = dalloc(N * sizeof(float));
    float* d_y = dalloc(ni * sizeof(float));
    void* d_y16 = dalloc(ni * 2);
    float* g = hrand(C, 1.0f, 0.0f);
    round_to(g, C, dt);
    float* d_g = dup(g, C);  // the norms' weight and LayerNorm's bias
    float* dy = hrand(ni, 1.0f, 0.0f);  // the [N, C] outputs' gradient
    round_to(dy, ni, dt);
    float* d_dy = dup(dy, ni);
    void *d_dy16 = dev_packed(dy, N, C, dt), *d_g16 = dalloc(ni * 2), *d_h16 = dalloc(ni * 2);
    // norms: out and inp each packed or not; backward with every storage of dout, inp and
    // dinp (dinp assigned or accumulated onto dinp0's values; dweight, dbias onto zeros)
    float *d_yn = dalloc(ni * sizeof(float)), *d_gn = dup(dinp0, ni), *d_gn2 = dup(dinp0, ni);
    float *d_dw = dalloc(C * sizeof(float)), *d_dw2 = dalloc(C * sizeof(float));
    float *d_dbn = dalloc(C * sizeof(float)), *d_dbn2 = dalloc(C * sizeof(float));
    int ok_n = 1;
    rt_layernorm_forward(d_y, d_mean, d_rstd, d_inp, d_g, d_g, N, C, RT_LAYERNORM_EPS, dt);
    for (int bits = 1; bits < 4; bits++) {
        rt_layernorm_packed_forward(bits & RT_PACKED_OUT ? d_y16 : (void*)d_yn, d_mean2, d_rstd2,
                                    bits & RT_PACKED_INP ? d_i16 : (const void*)d_inp, d_g, d_g, N, C,
                                    RT_LAYERNORM_EPS, bits, dt);
        ok_n &= (bits & RT_PACKED_OUT ? packed_same(d_y16, d_y, N, C, dt, &pad) : dev_same(d_y, d_yn, ni)) &&
                dev_same(d_mean, d_mean2, N) && dev_same(d_rstd, d_rstd2, N);
    }
    for (int bits = 0; bits < 16; bits++) {
        const int pk = (bits & 3) | (bits & 4 ? RT_PACKED_DINP : 0);
        const int as = bits & 8 ? RT_ASSIGN_1 : RT_ACCUMULATE;
        upload(d_gn, dinp0, ni), upload(d_gn2, dinp0, ni), dev_grad16(d_g16, dinp0, ni, as, dt);
        zero_dev(d_dw, C), zero_dev(d_dw2, C), zero_dev(d_dbn, C), zero_dev(d_dbn2, C);
        rt_layernorm_backward(d_gn, d_dw, d_dbn, d_dy, d_inp, d_g, d_mean, d_rstd, N, C, dt, as);
        rt_layernorm_packed_backward(pk & RT_PACKED_DINP ? d_g16 : (void*)d_gn2, d_dw2, d_dbn2,
                                     pk & RT_PACKED_OUT ? d_dy16 : (const void*)d_dy,
                                     pk & RT_PACKED_INP ? d_i16 : (const void*)d_inp, d_g, d_mean,
                                     d_rstd, N, C, pk, dt, as);
        ok_n &= (pk & RT_PACKED_DINP ? packed_same(d_g16, d_gn, N, C, dt, &pad) : dev_same(d_gn, d_gn2, ni)) &&
                dev_same(d_dw, d_dw2, C) && dev_same(d_dbn, d_dbn2, C);
    }
    CHECK(ok_n, "%s layernorm packed forward (out, inp, both) and backward (every storage of dout, inp, "
          "dinp) N=%d C=%d == the fp32-storage calls: out, mean, rstd, dinp, dweight, dbias", nm, N, C);
    ok_n = 1;
    rt_rmsnorm_forward(d_y, d_rstd, d_inp, d_g, N, C, 1e-6f, dt);
    for (int bits = 1; bits < 4; bits++) {
        rt_rmsnorm_packed_forward(bits & RT_PACKED_OUT ? d_y16 : (void*)d_yn, d_rstd2,
                                  bits & RT_PACKED_INP ? d_i16 : (const void*)d_inp, d_g, N, C, 1e-6f,
                                  bits, dt);
        ok_n &= (bits & RT_PACKED_OUT ? packed_same(d_y16, d_y, N, C, dt, &pad) : dev_same(d_y, d_yn, ni)) &&
                dev_same(d_rstd, d_rstd2, N);
    }
    for (int bits = 0; bits < 16; bits++) {
        const int pk = (bits & 3) | (bits & 4 ? RT_PACKED_DINP : 0);
        const int as = bits & 8 ? RT_ASSIGN_1 : RT_ACCUMULATE;
        upload(d_gn, dinp0, ni), upload(d_gn2, dinp0, ni), dev_grad16(d_g16, dinp0, ni, as, dt);
        zero_dev(d_dw, C), zero_dev(d_dw2, C);
        rt_rmsnorm_backward(d_gn, d_dw, d_dy, d_inp, d_g, d_rstd, N, C, dt, as);
        rt_rmsnorm_packed_backward(pk & RT_PACKED_DINP ? d_g16 : (void*)d_gn2, d_dw2,
                                   pk & RT_PACKED_OUT ? d_dy16 : (const void*)d_dy,
                                   pk & RT_PACKED_INP ? d_i16 : (const void*)d_inp, d_g, d_rstd, N, C,
                                   pk, dt, as);
        ok_n &= (pk & RT_PACKED_DINP ? packed_same(d_g16, d_gn, N, C, dt, &pad) : dev_same(d_gn, d_gn2, ni)) &&
                dev_same(d_dw, d_dw2, C);
    }
    CHECK(ok_n, "%s rmsnorm packed forward (out, inp, both) and backward (every storage of dout, inp, "
          "dinp) N=%d C=%d == the fp32-storage calls: out, rstd, dinp, dweight", nm, N, C);
    dfree(d_yn), dfree(d_gn), dfree(d_gn2), dfree(d_dw), dfree(d_dw2), dfree(d_dbn), dfree(d_dbn2);
    // activations: out, inp (swiglu's b: dinp0's values) each fp32 or packed; backward (dout:
    // dy) with every storage of dinp (assigned when packed), dout and inp
    float *d_b2 = dup(dinp0, ni), *d_y2 = dalloc(ni * sizeof(float));
    float *d_g1 = dup(dinp0, ni), *d_g2 = dup(dinp0, ni), *d_h1 = dup(dinp0, ni), *d_h2 = dup(dinp0, ni);
    void* d_b16 = dev_packed(dinp0, N, C, dt);
    for (int k = 0; k < 3; k++) {
        const packed_activation* a = &packed_activations[k];
        a->forward(d_y, d_inp, ni, dt);
        int ok = 1;
        for (int bits = 1; bits < 4; bits++) {
            a->packed_forward(bits & RT_PACKED_OUT ? d_y16 : (void*)d_y2,
                              bits & RT_PACKED_INP ? d_i16 : (const void*)d_inp, ni, bits, dt);
            ok &= bits & RT_PACKED_OUT ? packed_same(d_y16, d_y, N, C, dt, &pad)
                                       : dev_same(d_y, d_y2, ni);
        }
        for (int bits = 0; bits < 16; bits++) {
            const int pk = (bits & 3) | (bits & 4 ? RT_PACKED_DINP : 0), pg = bits & 4;
            const int as = bits & 8 ? RT_ASSIGN_1 : RT_ACCUMULATE;
            upload(d_g1, dinp0, ni), upload(d_g2, dinp0, ni);
            dev_grad16(d_g16, dinp0, ni, as, dt);
            a->backward(d_g1, d_dy, d_inp, ni, dt, as);
            a->packed_backward(pg ? d_g16 : (void*)d_g2, pk & RT_PACKED_OUT ? d_dy16 : (const void*)d_dy,
                               pk & RT_PACKED_INP ? d_i16 : (const void*)d_inp, ni, pk, dt, as);
            ok &= pg ? packed_same(d_g16, d_g1, N, C, dt, &pad) : dev_same(d_g1, d_g2, ni);
        }
        CHECK(ok, "%s %s packed forward (out, inp, both packed) and backward (every storage of "
              "dinp, dout, inp) == rt_%s_forward, rt_%s_backward", nm, a->name, a->name, a->name);
    }
    rt_swiglu_forward(d_y, d_inp, d_b2, ni, dt);
    int ok_s = 1;
    for (int bits = 1; bits < 8; bits++) {
        rt_swiglu_packed_forward(bits & RT_PACKED_OUT ? d_y16 : (void*)d_y2,
                                 bits & RT_PACKED_INP ? d_i16 : (const void*)d_inp,
                                 bits & RT_PACKED_INP2 ? d_b16 : (const void*)d_b2, ni, bits, dt);
        ok_s &= bits & RT_PACKED_OUT ? packed_same(d_y16, d_y, N, C, dt, &pad) : dev_same(d_y, d_y2, ni);
    }
    for (int bits = 0; bits < 128; bits++) {  // dout, a, b, da, db; each gradient assigned or not
        const int pk = (bits & 7) | (bits & 8 ? RT_PACKED_DINP : 0) | (bits & 16 ? RT_PACKED_DINP2 : 0);
        const int as = (bits & 32 ? RT_ASSIGN_1 : 0) | (bits & 64 ? RT_ASSIGN_2 : 0);
        upload(d_g1, dinp0, ni), upload(d_g2, dinp0, ni), upload(d_h1, dinp0, ni), upload(d_h2, dinp0, ni);
        dev_grad16(d_g16, dinp0, ni, as & RT_ASSIGN_1, dt), dev_grad16(d_h16, dinp0, ni, as & RT_ASSIGN_2, dt);
        rt_swiglu_backward(d_g1, d_h1, d_dy, d_inp, d_b2, ni, dt, as);
        rt_swiglu_packed_backward(bits & 8 ? d_g16 : (void*)d_g2, bits & 16 ? d_h16 : (void*)d_h2,
                                  pk & RT_PACKED_OUT ? d_dy16 : (const void*)d_dy,
                                  pk & RT_PACKED_INP ? d_i16 : (const void*)d_inp,
                                  pk & RT_PACKED_INP2 ? d_b16 : (const void*)d_b2, ni, pk, dt, as,
                                  C, C, C);
        ok_s &= bits & 8 ? packed_same(d_g16, d_g1, N, C, dt, &pad) : dev_same(d_g1, d_g2, ni);
        ok_s &= bits & 16 ? packed_same(d_h16, d_h1, N, C, dt, &pad) : dev_same(d_h1, d_h2, ni);
    }
    CHECK(ok_s, "%s swiglu packed forward (every storage of out, a, b) and backward (every "
          "storage of da, db, dout, a, b) == rt_swiglu_forward, rt_swiglu_backward", nm);
    int ok_r = 1;  // residual add: out, a, b packed or not; dout, da, db likewise
    rt_residual_forward(d_y, d_inp, d_b2, ni, dt);
    for (int bits = 1; bits < 8; bits++) {
        rt_residual_packed_forward(bits & RT_PACKED_OUT ? d_y16 : (void*)d_y2,
                                   bits & RT_PACKED_INP ? d_i16 : (const void*)d_inp,
                                   bits & RT_PACKED_INP2 ? d_b16 : (const void*)d_b2, ni, bits, dt);
        ok_r &= bits & RT_PACKED_OUT ? packed_same(d_y16, d_y, N, C, dt, &pad) : dev_same(d_y, d_y2, ni);
    }
    for (int bits = 0; bits < 32; bits++) {
        const int pk = (bits & 1 ? RT_PACKED_DINP : 0) | (bits & 2 ? RT_PACKED_DINP2 : 0) |
                       (bits & 16 ? RT_PACKED_OUT : 0);
        const int as = (bits & 4 ? RT_ASSIGN_1 : 0) | (bits & 8 ? RT_ASSIGN_2 : 0);
        upload(d_g1, dinp0, ni), upload(d_g2, dinp0, ni), upload(d_h1, dinp0, ni), upload(d_h2, dinp0, ni);
        dev_grad16(d_g16, dinp0, ni, as & RT_ASSIGN_1, dt), dev_grad16(d_h16, dinp0, ni, as & RT_ASSIGN_2, dt);
        rt_residual_backward(d_g1, d_h1, d_dy, ni, dt, as);
        rt_residual_packed_backward(bits & 1 ? d_g16 : (void*)d_g2, bits & 2 ? d_h16 : (void*)d_h2,
                                    pk & RT_PACKED_OUT ? d_dy16 : (const void*)d_dy, ni, pk, dt, as);
        ok_r &= bits & 1 ? packed_same(d_g16, d_g1, N, C, dt, &pad) : dev_same(d_g1, d_g2, ni);
        ok_r &= bits & 2 ? packed_same(d_h16, d_h1, N, C, dt, &pad) : dev_same(d_h1, d_h2, ni);
    }
    CHECK(ok_r, "%s residual packed forward (every storage of a, b) and backward (every storage "
          "of dout, da, db) == rt_residual_forward, rt_residual_backward", nm);
    dfree(d_b2), dfree(d_y2), dfree(d_g1), dfree(d_g2), dfree(d_h1), dfree(d_h2), dfree(d_b16);
    dfree(d_dy), free(dy), dfree(d_dy16), dfree(d_g16), dfree(d_h16);
    free(inp), free(w), free(b), free(dout), free(dinp0), free(dw0), free(db0), free(g);
    dfree(d_g), dfree(d_inp), dfree(d_w), dfree(d_b), dfree(d_dout), dfree(d_i16), dfree(d_d16), dfree(d_out);
    dfree(d_out2), dfree(d_o16), dfree(d_mean), dfree(d_rstd), dfree(d_mean2), dfree(d_rstd2);
    dfree(d_y), dfree(d_y16);
}

// A linear reading its weight's packed rows in place (an unsharded parameter: dense [OC, C],
// both multiples of 8), alone and with the input, output, dout and dinp packed too: the
// fp32-storage calls' bits, dweight and dbias included.
static void test_packed_weight(rt_dtype dt, int N, int C, int OC) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    const size_t ni = (size_t)N * C, no = (size_t)N * OC, nw = (size_t)OC * C;
    float *inp = hrand(ni, 1.0f, 0.0f), *w = hrand(nw, 0.2f, 0.0f), *b = hrand((size_t)OC, 1.0f, 0.0f),
          *dout = hrand(no, 1.0f, 0.0f), *dinp0 = hrand(ni, 1.0f, 0.0f), *dw0 = hrand(nw, 1.0f, 0.0f);
    round_to(inp, ni, dt), round_to(w, nw, dt), round_to(b, OC, dt), round_to(dout, no, dt);
    round_to(dinp0, ni, dt);
    float *d_inp = dup(inp, ni), *d_w = dup(w, nw), *d_b = dup(b, OC), *d_dout = dup(dout, no);
    void *d_w16 = dev_packed(w, OC, C, dt), *d_i16 = dev_packed(inp, N, C, dt),
         *d_d16 = dev_packed(dout, N, OC, dt);
    float *d_out = dalloc(no * sizeof(float)), *d_out2 = dalloc(no * sizeof(float));
    void* d_o16 = dalloc(no * 2);
    rt_linear_forward(d_out, d_inp, d_w, d_b, N, C, OC, dt);
    rt_linear_packed_forward(d_out2, d_inp, d_w16, d_b, N, C, OC, RT_PACKED_INP2, dt);
    rt_linear_packed_forward(d_o16, d_i16, d_w16, d_b, N, C, OC,
                             RT_PACKED_INP | RT_PACKED_INP2 | RT_PACKED_OUT, dt);
    int pad;
    const int ok = packed_same(d_o16, d_out, N, OC, dt, &pad);
    CHECK(dev_same(d_out, d_out2, no) && ok, "%s linear forward N=%d C=%d OC=%d, packed weight "
          "(alone; with the input and output packed) == rt_linear_forward, bit for bit", nm, N, C, OC);
    // the bias packed too (OC a multiple of 8: cuBLASLt's epilogue reads it in place)
    void *d_b16 = dev_packed(b, 1, OC, dt), *d_o16b = dalloc(no * 2);
    float* d_out3 = dalloc(no * sizeof(float));
    rt_linear_packed_forward(d_out3, d_inp, d_w16, d_b16, N, C, OC, RT_PACKED_INP2 | RT_PACKED_INP3, dt);
    rt_linear_packed_forward(d_o16b, d_i16, d_w16, d_b16, N, C, OC,
                             RT_PACKED_INP | RT_PACKED_INP2 | RT_PACKED_INP3 | RT_PACKED_OUT, dt);
    CHECK(dev_same(d_out, d_out3, no) && packed_same(d_o16b, d_out, N, OC, dt, &pad),
          "%s linear forward N=%d C=%d OC=%d, packed weight and bias (alone; with the input and "
          "output packed) == rt_linear_forward, bit for bit", nm, N, C, OC);
    dfree(d_b16), dfree(d_o16b), dfree(d_out3);
    for (int as = 0; as < 2; as++) {
        const int bits = as ? RT_ASSIGN_1 | RT_ASSIGN_DWEIGHT : RT_ACCUMULATE;
        float *d_dinp = dup(dinp0, ni), *d_dw = dup(dw0, nw), *d_db = dalloc(OC * sizeof(float));
        float *d_dinp2 = dup(dinp0, ni), *d_dw2 = dup(dw0, nw), *d_db2 = dalloc(OC * sizeof(float));
        float *d_dw3 = dup(dw0, nw), *d_db3 = dalloc(OC * sizeof(float));
        RT_CHECK_CUDA(cudaMemset(d_db, 0, OC * sizeof(float)));
        RT_CHECK_CUDA(cudaMemset(d_db2, 0, OC * sizeof(float)));
        RT_CHECK_CUDA(cudaMemset(d_db3, 0, OC * sizeof(float)));
        void* d_p16 = dalloc(ni * 2);
        dev_grad16(d_p16, dinp0, ni, as, dt);
        rt_linear_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC, dt, bits);
        rt_linear_packed_backward(d_dinp2, d_dw2, d_db2, d_dout, d_inp, d_w16, N, C, OC,
                                  RT_PACKED_INP2, dt, bits, OC);
        rt_linear_packed_backward(d_p16, d_dw3, d_db3, d_d16, d_i16, d_w16, N, C, OC,
                                  RT_PACKED_INP | RT_PACKED_INP2 | RT_PACKED_OUT | RT_PACKED_DINP,
                                  dt, bits, OC);
        const int ok16 = packed_same(d_p16, d_dinp, N, C, dt, &pad);
        CHECK(dev_same(d_dinp, d_dinp2, ni) && dev_same(d_dw, d_dw2, nw) && dev_same(d_db, d_db2, OC) &&
                  ok16 && dev_same(d_dw, d_dw3, nw) && dev_same(d_db, d_db3, OC),
              "%s linear backward (%s), packed weight (alone; with everything packed) == "
              "rt_linear_backward: dinp, dweight, dbias, bit for bit", nm, as ? "assigned" : "accumulated");
        dfree(d_dinp), dfree(d_dw), dfree(d_db), dfree(d_dinp2), dfree(d_dw2), dfree(d_db2);
        dfree(d_dw3), dfree(d_db3), dfree(d_p16);
    }
    free(inp), free(w), free(b), free(dout), free(dinp0), free(dw0);
    dfree(d_inp), dfree(d_w), dfree(d_b), dfree(d_dout), dfree(d_w16), dfree(d_i16), dfree(d_d16);
    dfree(d_out), dfree(d_out2), dfree(d_o16);
}

// A linear with no input features (C = 0) and a packed bias: the bias rows, fp32 and packed
// outputs, as rt_linear_forward with the fp32 bias gives them.
static void test_packed_bias_no_terms(rt_dtype dt) {
    const int N = 3, OC = 16;
    const size_t no = (size_t)N * OC;
    float* b = hrand((size_t)OC, 1.0f, 0.0f);
    round_to(b, OC, dt);
    float *d_b = dup(b, OC), *d_out = dalloc(no * sizeof(float)), *d_out2 = dalloc(no * sizeof(float));
    void *d_b16 = dev_packed(b, 1, OC, dt), *d_o16 = dalloc(no * 2);
    rt_linear_forward(d_out, NULL, NULL, d_b, N, 0, OC, dt);
    rt_linear_packed_forward(d_out2, NULL, NULL, d_b16, N, 0, OC, RT_PACKED_INP3, dt);
    rt_linear_packed_forward(d_o16, NULL, NULL, d_b16, N, 0, OC, RT_PACKED_INP3 | RT_PACKED_OUT, dt);
    int pad;
    CHECK(dev_same(d_out, d_out2, no) && packed_same(d_o16, d_out, N, OC, dt, &pad),
          "%s linear forward with C = 0 and a packed bias: the bias rows (fp32 and packed output)",
          dt == RT_BF16 ? "bf16" : "fp16");
    free(b), dfree(d_b), dfree(d_out), dfree(d_out2), dfree(d_b16), dfree(d_o16);
}

// packed rope and attention (rt_kernels.h): every storage of q, k, v and out, forward and
// backward, and of dq, dk, dv, against the fp32-storage calls, bit for bit; HD 64 runs the
// tensor-core kernels, HD 136 the fp32 ones on widened operands.
static void test_packed_attention(rt_dtype dt, int B, int T, int NH, int NKV, int HD) {
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

// n 16-bit values from the device.
static uint16_t* down16(const void* d, size_t n) {
    uint16_t* h = malloc(n * sizeof *h);
    if (!h) abort();
    RT_CHECK_CUDA(cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost));
    return h;
}

// rows x ld 16-bit values on the host: `sentinel` everywhere but the n column slices (slice
// i from column off[i], cols[i] wide), which hold the dense rows of src[i].
static void wide_rows(uint16_t* w, int rows, int ld, int n, const int* off, const int* cols,
                      uint16_t* const* src, uint16_t sentinel) {
    for (size_t i = 0; i < (size_t)rows * ld; i++) w[i] = sentinel;
    for (int i = 0; i < n; i++)
        for (int r = 0; r < rows; r++)
            memcpy(w + (size_t)r * ld + off[i], src[i] + (size_t)r * cols[i],
                   (size_t)cols[i] * sizeof *w);
}

// Rope's and attention's packed gradients as column slices of one [B*T, ld] matrix (dq, dk,
// dv side by side and 8 columns more, a sentinel where no slice is: rt_kernels.h "Gradient
// row lengths"), assigned and added to: the dense calls' bits in the slices, the sentinel
// elsewhere. HD a multiple of 16 up to 128 runs the tensor-core kernels, which write the
// rows in place; other head dims the fp32 kernels, through dense copies.
static void test_packed_grad_rows(rt_dtype dt, int B, int T, int NH, int NKV, int HD) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    const int rows = B * T, cq = NH * HD, ck = NKV * HD, ld = cq + 2 * ck + 8;
    const size_t nq = (size_t)rows * cq, nk = (size_t)rows * ck, nw = (size_t)rows * ld;
    const int off[3] = {0, cq, cq + ck}, cols[3] = {cq, ck, ck};
    const size_t n[3] = {nq, nk, nk};
    const uint16_t sentinel = 0x7E57;
    float *q = hrand(nq, 1.0f, 0.0f), *k = hrand(nk, 1.0f, 0.0f), *v = hrand(nk, 1.0f, 0.0f),
          *dy = hrand(nq, 1.0f, 0.0f), *g0 = hrand(nq, 1.0f, 0.0f);
    round_to(q, nq, dt), round_to(k, nk, dt), round_to(v, nk, dt), round_to(dy, nq, dt);
    round_to(g0, nq, dt);
    void *q16 = dev_packed(q, 1, (int)nq, dt), *k16 = dev_packed(k, 1, (int)nk, dt),
         *v16 = dev_packed(v, 1, (int)nk, dt), *dy16 = dev_packed(dy, 1, (int)nq, dt);
    float* d_dy = dup(dy, nq);
    void* y16 = dalloc(nq * 2);
    float* d_st = dalloc(rt_attention_stats_floats(B, NH, T) * sizeof(float));
    float* d_sc = dalloc(rt_attention_lowmem_scratch_floats(B, NH, T) * sizeof(float));
    const int ops = RT_PACKED_OUT | RT_PACKED_INP | RT_PACKED_INP2 | RT_PACKED_INP3;
    const int pk = ops | RT_PACKED_DINP | RT_PACKED_DINP2 | RT_PACKED_DINP3;
    rt_attention_lowmem_packed_forward(y16, d_st, d_sc, q16, k16, v16, B, T, NH, NKV, HD, 1, dt,
                                       ops, dt);
    void* d_g[3] = {dalloc(nq * 2), dalloc(nk * 2), dalloc(nk * 2)};
    uint16_t* d_wide = dalloc(nw * 2);
    uint16_t *start = malloc(nw * 2), *want = malloc(nw * 2), *got = NULL;
    int ok_rope = 1, ok_attn = 1;
    for (int a = 0; a < 2; a++) {
        const int as = a ? RT_ASSIGN_1 | RT_ASSIGN_2 | RT_ASSIGN_3 : RT_ACCUMULATE;
        for (int part = 0; part < 2; part++) {  // rope (dq, dk slices), then attention (all)
            const int ns = part ? 3 : 2;
            uint16_t* g[3];
            for (int i = 0; i < ns; i++) {
                dev_grad16(d_g[i], g0, n[i], as, dt);
                g[i] = down16(d_g[i], n[i]);
            }
            wide_rows(start, rows, ld, ns, off, cols, g, sentinel);
            RT_CHECK_CUDA(cudaMemcpy(d_wide, start, nw * 2, cudaMemcpyHostToDevice));
            for (int i = 0; i < ns; i++) free(g[i]);
            if (part == 0) {  // q's gradient from a packed dout, k's from an fp32 one
                rt_rope_packed_backward(d_g[0], dy16, B, T, NH, HD, RT_ROPE_THETA,
                                        RT_PACKED_OUT | RT_PACKED_DINP, dt, as, 0);
                rt_rope_packed_backward(d_g[1], d_dy, B, T, NKV, HD, RT_ROPE_THETA,
                                        RT_PACKED_DINP, dt, as, 0);
                rt_rope_packed_backward(d_wide + off[0], dy16, B, T, NH, HD, RT_ROPE_THETA,
                                        RT_PACKED_OUT | RT_PACKED_DINP, dt, as, ld);
                rt_rope_packed_backward(d_wide + off[1], d_dy, B, T, NKV, HD, RT_ROPE_THETA,
                                        RT_PACKED_DINP, dt, as, ld);
            } else {
                rt_attention_lowmem_packed_backward(d_g[0], d_g[1], d_g[2], d_sc, dy16, y16, q16,
                                                    k16, v16, d_st, B, T, NH, NKV, HD, 1, dt, pk,
                                                    dt, as, 0, 0, 0);
                rt_attention_lowmem_packed_backward(d_wide + off[0], d_wide + off[1],
                                                    d_wide + off[2], d_sc, dy16, y16, q16, k16,
                                                    v16, d_st, B, T, NH, NKV, HD, 1, dt, pk, dt,
                                                    as, ld, ld, ld);
            }
            for (int i = 0; i < ns; i++) g[i] = down16(d_g[i], n[i]);
            wide_rows(want, rows, ld, ns, off, cols, g, sentinel);
            for (int i = 0; i < ns; i++) free(g[i]);
            got = down16(d_wide, nw);
            const int same = memcmp(got, want, nw * 2) == 0 && memcmp(got, start, nw * 2) != 0;
            if (part) ok_attn &= same;
            else ok_rope &= same;
            free(got);
        }
    }
    CHECK(ok_rope, "%s rope packed backward into rows of %d (q's and k's gradients at columns 0 "
          "and %d; assigned, accumulated) == the dense calls' bits, other columns untouched, "
          "B=%d T=%d NH=%d NKV=%d HD=%d", nm, ld, cq, B, T, NH, NKV, HD);
    CHECK(ok_attn, "%s attention packed backward into rows of %d (dq, dk, dv at columns 0, %d, "
          "%d; assigned, accumulated) == the dense call's bits, other columns untouched, B=%d "
          "T=%d NH=%d NKV=%d HD=%d (%s kernels)", nm, ld, cq, cq + ck, B, T, NH, NKV, HD,
          HD % 16 == 0 && HD <= 128 ? "tensor-core" : "fp32");
    free(q), free(k), free(v), free(dy), free(g0), free(start), free(want);
    dfree(q16), dfree(k16), dfree(v16), dfree(dy16), dfree(d_dy), dfree(y16), dfree(d_st);
    dfree(d_sc), dfree(d_g[0]), dfree(d_g[1]), dfree(d_g[2]), dfree(d_wide);
}

// Host 16-bit bits of x[n] (values of dt).
static uint16_t* bits16(const float* x, size_t n, rt_dtype dt) {
    uint16_t* h = malloc(n * sizeof *h);
    if (!h) abort();
    for (size_t i = 0; i < n; i++) h[i] = rt_bits16_from_f32_inl(x[i], dt);
    return h;
}

// Stacked linears (rt_kernels.h "Gradient row lengths"): two linears of one input whose
// output gradients are column slices of one packed [N, ld] matrix (at columns 8 and
// 8 + OC1, a sentinel in the other columns), as Llama's w1 and w3: the stack's input
// gradient in one call on both slices (dweight, dbias NULL; dinp fp32 and packed), each
// linear's weight and bias gradients in one call on its slice (dinp NULL), and all three from
// the second slice, the input and weights fp32 or packed, assigned and accumulated: the
// bits of rt_linear_backward on the dense gradients, the matrix unchanged.
static void test_linear_dout_slices(rt_dtype dt, int N, int C, int OC1, int OC2) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    const int OCS = OC1 + OC2, ld = OCS + 16, col = 8;
    const int off[2] = {col, col + OC1}, cols[2] = {OC1, OC2};
    const size_t ni = (size_t)N * C, nw = (size_t)OCS * C, nwide = (size_t)N * ld;
    const uint16_t sentinel = 0x7E57;  // fp16 NaN, bf16 ~7e37: any read of it shows
    float *inp = hrand(ni, 1.0f, 0.0f), *w = hrand(nw, 0.2f, 0.0f), *dS = hrand((size_t)N * OCS, 1.0f, 0.0f);
    float *dinp0 = hrand(ni, 1.0f, 0.0f), *dw0 = hrand(nw, 1.0f, 0.0f), *db0 = hrand(OCS, 1.0f, 0.0f);
    round_to(inp, ni, dt), round_to(w, nw, dt), round_to(dS, (size_t)N * OCS, dt), round_to(dinp0, ni, dt);
    float* dm[2] = {malloc((size_t)N * OC1 * sizeof(float)), malloc((size_t)N * OC2 * sizeof(float))};
    if (!dm[0] || !dm[1]) abort();
    for (int n = 0; n < N; n++)  // the members' gradients: the stack's columns
        for (int j = 0; j < OCS; j++) {
            if (j < OC1) dm[0][(size_t)n * OC1 + j] = dS[(size_t)n * OCS + j];
            else dm[1][(size_t)n * OC2 + j - OC1] = dS[(size_t)n * OCS + j];
        }
    float *d_inp = dup(inp, ni), *d_w = dup(w, nw), *d_dS = dup(dS, (size_t)N * OCS);
    float* d_dm[2] = {dup(dm[0], (size_t)N * OC1), dup(dm[1], (size_t)N * OC2)};
    void *d_i16 = dev_packed(inp, N, C, dt), *d_w16 = dev_packed(w, OCS, C, dt);
    uint16_t* h16[2] = {bits16(dm[0], (size_t)N * OC1, dt), bits16(dm[1], (size_t)N * OC2, dt)};
    uint16_t *start = malloc(nwide * 2), *got = NULL;
    if (!start) abort();
    wide_rows(start, N, ld, 2, off, cols, h16, sentinel);
    uint16_t* d_wide = dalloc(nwide * 2);
    RT_CHECK_CUDA(cudaMemcpy(d_wide, start, nwide * 2, cudaMemcpyHostToDevice));
    float *d_g = dalloc(ni * sizeof(float)), *d_g2 = dalloc(ni * sizeof(float));
    float *d_dw = dalloc(nw * sizeof(float)), *d_dw2 = dalloc(nw * sizeof(float));
    float *d_db = dalloc(OCS * sizeof(float)), *d_db2 = dalloc(OCS * sizeof(float));
    void* d_p16 = dalloc(ni * 2);
    int ok_in = 1, ok_w = 1, ok_all = 1, pad;
    for (int k = 0; k < 4; k++) {
        const int as = k & 1, ops = k & 2 ? RT_PACKED_INP | RT_PACKED_INP2 : 0;
        const int bits = as ? RT_ASSIGN_1 | RT_ASSIGN_DWEIGHT : RT_ACCUMULATE;
        const void* x = ops ? d_i16 : (const void*)d_inp;
        // the input's gradient over the stack: fp32 storage, then packed
        upload(d_g, dinp0, ni), upload(d_g2, dinp0, ni), dev_grad16(d_p16, dinp0, ni, as, dt);
        rt_linear_backward(d_g, NULL, NULL, d_dS, d_inp, d_w, N, C, OCS, dt, bits);
        rt_linear_packed_backward(d_g2, NULL, NULL, d_wide + col, x, ops ? d_w16 : (const void*)d_w,
                                  N, C, OCS, ops | RT_PACKED_OUT, dt, bits, ld);
        rt_linear_packed_backward(d_p16, NULL, NULL, d_wide + col, x, ops ? d_w16 : (const void*)d_w,
                                  N, C, OCS, ops | RT_PACKED_OUT | RT_PACKED_DINP, dt, bits, ld);
        ok_in &= dev_same(d_g, d_g2, ni) && packed_same(d_p16, d_g, N, C, dt, &pad);
        // each member's weight and bias gradients from its slice
        for (int m = 0; m < 2; m++) {
            const int oc = cols[m];
            const size_t wo = (size_t)(m ? OC1 : 0) * C;
            upload(d_dw, dw0, (size_t)oc * C), upload(d_dw2, dw0, (size_t)oc * C);
            upload(d_db, db0, oc), upload(d_db2, db0, oc);
            rt_linear_backward(NULL, d_dw, d_db, d_dm[m], d_inp, d_w + wo, N, C, oc, dt, bits);
            rt_linear_packed_backward(NULL, d_dw2, d_db2, d_wide + off[m], x,
                                      ops ? (const void*)((uint16_t*)d_w16 + wo)
                                          : (const void*)(d_w + wo),
                                      N, C, oc, ops | RT_PACKED_OUT, dt, bits, ld);
            ok_w &= dev_same(d_dw, d_dw2, (size_t)oc * C) && dev_same(d_db, d_db2, oc);
        }
        // all three from the second slice, dinp packed
        const size_t wo = (size_t)OC1 * C;
        upload(d_g, dinp0, ni), dev_grad16(d_p16, dinp0, ni, as, dt);
        upload(d_dw, dw0, (size_t)OC2 * C), upload(d_dw2, dw0, (size_t)OC2 * C);
        upload(d_db, db0, OC2), upload(d_db2, db0, OC2);
        rt_linear_backward(d_g, d_dw, d_db, d_dm[1], d_inp, d_w + wo, N, C, OC2, dt, bits);
        rt_linear_packed_backward(d_p16, d_dw2, d_db2, d_wide + off[1], x,
                                  ops ? (const void*)((uint16_t*)d_w16 + wo) : (const void*)(d_w + wo),
                                  N, C, OC2, ops | RT_PACKED_OUT | RT_PACKED_DINP, dt, bits, ld);
        ok_all &= packed_same(d_p16, d_g, N, C, dt, &pad) && dev_same(d_dw, d_dw2, (size_t)OC2 * C) &&
                  dev_same(d_db, d_db2, OC2);
    }
    got = down16(d_wide, nwide);
    const int untouched = memcmp(got, start, nwide * 2) == 0;
    CHECK(ok_in && untouched, "%s linear backward N=%d C=%d, dinp only, dout the columns %d..%d of "
          "rows of %d (OC %d; input and weight fp32 or packed; dinp fp32 and packed; assigned, "
          "accumulated) == rt_linear_backward on the dense dout, bit for bit; dout unchanged", nm,
          N, C, col, col + OCS, ld, OCS);
    CHECK(ok_w, "%s linear backward N=%d C=%d, dweight and dbias only, dout the column slices at "
          "%d (OC %d) and %d (OC %d) of rows of %d == rt_linear_backward on each dense dout", nm,
          N, C, off[0], OC1, off[1], OC2, ld);
    CHECK(ok_all, "%s linear backward N=%d C=%d, dinp (packed), dweight and dbias from the column "
          "slice at %d of rows of %d == rt_linear_backward", nm, N, C, off[1], ld);
    free(inp), free(w), free(dS), free(dinp0), free(dw0), free(db0), free(dm[0]), free(dm[1]);
    free(h16[0]), free(h16[1]), free(start), free(got);
    dfree(d_inp), dfree(d_w), dfree(d_dS), dfree(d_dm[0]), dfree(d_dm[1]), dfree(d_i16), dfree(d_w16);
    dfree(d_wide), dfree(d_g), dfree(d_g2), dfree(d_dw), dfree(d_dw2), dfree(d_db), dfree(d_db2);
    dfree(d_p16);
}

// On the CPU emulator (main: the device's name), where a 16-bit GEMM output is the fp32
// product rounded, so a packed dweight has the fp32 call's bits rounded; on a GPU cuBLAS may
// pick another kernel for a 16-bit output, which may sum in another order.
static int on_emulator;

// Packed parameter gradients (RT_PACKED_DWEIGHT): n 16-bit values at d16 against the device
// fp32 values dx rounded to dt, within tol * max(1, |want|) + ulps units in the last place of
// dt (as cmp_dt: the fp32 values agree within tol, a rounding may then go the other way; 0
// and 0: the same bits). Returns how many are not; adds how many differ in bits to *differ
// and keeps the largest difference, in ulps of dt, in *worst.
static size_t packed_grad_over(const void* d16, const float* dx, size_t n, rt_dtype dt,
                               double tol, int ulps, size_t* differ, double* worst) {
    uint16_t* h = down16(d16, n);
    float* x = down(dx, n);
    size_t over = 0;
    for (size_t i = 0; i < n; i++) {
        const uint16_t w = rt_bits16_from_f32_inl(x[i], dt);
        if (h[i] == w) continue;
        ++*differ;
        const double g = rt_bits16_to_f32_inl(h[i], dt), r = rt_bits16_to_f32_inl(w, dt);
        const double u = ulp_in(fabs(g) > fabs(r) ? fabs(g) : fabs(r), dt), d = fabs(g - r);
        if (!(d / u <= *worst)) *worst = d / u;  // NaN-sticky
        const double allowed = tol * (fabs(r) > 1.0 ? fabs(r) : 1.0) + ulps * u;
        if (!(d <= allowed) || allowed == 0.0) over++;
    }
    free(h), free(x);
    return over;
}

// One check of packed_grad_over's counts over `calls` buffers of n values.
static void check_packed_grad(const char* name, size_t over, size_t differ, double worst,
                              size_t calls, size_t n, rt_dtype dt, double tol, int ulps) {
    const char* P = dt == RT_BF16 ? "bf16" : "fp16";
    CHECK(over == 0, "%s: %zu x %zu values, %zu differ in bits, worst %.3g %s ulp (allowed "
          "tol %.3g + %d %s ulp), %zu over", name, calls, n, differ, worst, P, tol, ulps, P, over);
}

// Two device buffers of n 16-bit values, bit for bit.
static int dev_same16(const void* da, const void* db, size_t n) {
    uint16_t *a = down16(da, n), *b = down16(db, n);
    const int same = memcmp(a, b, n * 2) == 0;
    free(a), free(b);
    return same;
}

// The linear's packed parameter gradients (RT_PACKED_DWEIGHT, assigned) against the same call
// with them in fp32 storage, rounded: dweight [OC, C] (cuBLAS's 16-bit output: bits on the
// emulator; on a GPU, whose cuBLAS may sum it in another order, within TOL_GEMM and an ulp
// of dt, as cmp_dt), dbias (the column sums, N over one chunk of them or not: bits), with
// every storage of inp, weight, dout and dinp (dinp assigned and accumulated: the fp32
// call's bits) and dbias NULL; a stack's weight gradients in one call (dinp NULL, dout a
// column slice of wider rows); no rows: zeros.
static void test_packed_dweight_linear(rt_dtype dt, int N, int C, int OC) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    const int ulps = on_emulator ? 0 : 1;
    const double tol = on_emulator ? 0.0 : TOL_GEMM;
    const size_t ni = (size_t)N * C, no = (size_t)N * OC, nw = (size_t)OC * C;
    float *inp = hrand(ni, 1.0f, 0.0f), *w = hrand(nw, 0.2f, 0.0f), *dout = hrand(no, 1.0f, 0.0f);
    float* g0 = hrand(ni, 1.0f, 0.0f);
    round_to(inp, ni, dt), round_to(w, nw, dt), round_to(dout, no, dt), round_to(g0, ni, dt);
    float *d_inp = dup(inp, ni), *d_w = dup(w, nw), *d_dout = dup(dout, no);
    void *d_i16 = dev_packed(inp, N, C, dt), *d_w16 = dev_packed(w, OC, C, dt),
         *d_d16 = dev_packed(dout, N, OC, dt);
    float *d_g = dalloc(ni * sizeof(float)), *d_g2 = dalloc(ni * sizeof(float));
    float *d_dw = dalloc(nw * sizeof(float)), *d_db = dalloc(OC * sizeof(float));
    void *d_p16 = dalloc(ni * 2), *d_q16 = dalloc(ni * 2), *d_dw16 = dalloc(nw * 2),
         *d_db16 = dalloc((size_t)OC * 2);
    size_t over_w = 0, over_b = 0, differ_w = 0, differ_b = 0, untouched = 0;
    double worst_w = 0.0, worst_b = 0.0;
    int ok_dinp = 1;
    for (int k = 0; k < 64; k++) {
        const int pk = (k & 1 ? RT_PACKED_INP : 0) | (k & 2 ? RT_PACKED_INP2 : 0) |
                       (k & 4 ? RT_PACKED_OUT : 0) | (k & 8 ? RT_PACKED_DINP : 0);
        const int bits = RT_ASSIGN_DWEIGHT | (k & 16 ? RT_ASSIGN_1 : 0), pg = k & 8;
        const int no_bias = k & 32;
        const void* x = pk & RT_PACKED_INP ? d_i16 : (const void*)d_inp;
        const void* wt = pk & RT_PACKED_INP2 ? d_w16 : (const void*)d_w;
        const void* d = pk & RT_PACKED_OUT ? d_d16 : (const void*)d_dout;
        const int ld = pk & RT_PACKED_OUT ? RT_LD16(OC) : OC;
        upload(d_g, g0, ni), upload(d_g2, g0, ni);
        dev_grad16(d_p16, g0, ni, bits & RT_ASSIGN_1, dt);
        dev_grad16(d_q16, g0, ni, bits & RT_ASSIGN_1, dt);
        RT_CHECK_CUDA(cudaMemset(d_dw, 0xFF, nw * sizeof(float)));  // NaNs: assigned, not read
        RT_CHECK_CUDA(cudaMemset(d_db, 0xFF, OC * sizeof(float)));
        RT_CHECK_CUDA(cudaMemset(d_dw16, 0xAB, nw * 2));
        RT_CHECK_CUDA(cudaMemset(d_db16, 0xAB, (size_t)OC * 2));
        rt_linear_packed_backward(pg ? d_p16 : (void*)d_g, d_dw, no_bias ? NULL : d_db, d, x, wt,
                                  N, C, OC, pk, dt, bits, ld);
        rt_linear_packed_backward(pg ? d_q16 : (void*)d_g2, d_dw16, no_bias ? NULL : d_db16, d, x,
                                  wt, N, C, OC, pk | RT_PACKED_DWEIGHT, dt, bits, ld);
        over_w += packed_grad_over(d_dw16, d_dw, nw, dt, tol, ulps, &differ_w, &worst_w);
        if (!no_bias) {
            over_b += packed_grad_over(d_db16, d_db, OC, dt, 0.0, 0, &differ_b, &worst_b);
        } else {
            uint16_t* h = down16(d_db16, OC);
            for (int i = 0; i < OC; i++) untouched += h[i] == 0xABAB;
            free(h);
        }
        ok_dinp &= pg ? dev_same16(d_p16, d_q16, ni) : dev_same(d_g, d_g2, ni);
    }
    char nmk[240];
    snprintf(nmk, sizeof nmk, "%s linear backward N=%d C=%d OC=%d, dweight packed (every "
             "storage of inp, weight, dout, dinp; dinp assigned and accumulated) == the "
             "fp32-storage call's rounded", nm, N, C, OC);
    check_packed_grad(nmk, over_w, differ_w, worst_w, 64, nw, dt, tol, ulps);
    check_packed_grad("  ... dbias packed (the column sums' store)", over_b, differ_b, worst_b, 32,
                      OC, dt, 0.0, 0);
    CHECK(untouched == 32 * (size_t)OC, "  ... dbias NULL: its buffer untouched (%zu of %zu "
          "values)", untouched, 32 * (size_t)OC);
    CHECK(ok_dinp, "  ... dinp (fp32 and packed; assigned and accumulated) the fp32-storage "
          "call's, bit for bit");

    // a stack's weight gradients in one call: dout the columns 8.. of rows of OC + 16
    const int ldw = OC + 16, col = 8, off[1] = {col}, cols[1] = {OC};
    uint16_t *h16 = bits16(dout, no, dt), *start = malloc((size_t)N * ldw * 2);
    if (!start) abort();
    wide_rows(start, N, ldw, 1, off, cols, &h16, 0x7E57);
    uint16_t* d_wide = dalloc((size_t)N * ldw * 2);
    RT_CHECK_CUDA(cudaMemcpy(d_wide, start, (size_t)N * ldw * 2, cudaMemcpyHostToDevice));
    for (int ops = 0; ops < 2; ops++) {
        const void* x = ops ? d_i16 : (const void*)d_inp;
        RT_CHECK_CUDA(cudaMemset(d_dw16, 0xAB, nw * 2));
        RT_CHECK_CUDA(cudaMemset(d_db16, 0xAB, (size_t)OC * 2));
        rt_linear_packed_backward(NULL, d_dw, d_db, d_wide + col, x, d_w, N, C, OC,
                                  (ops ? RT_PACKED_INP : 0) | RT_PACKED_OUT, dt, RT_ASSIGN_DWEIGHT,
                                  ldw);
        rt_linear_packed_backward(NULL, d_dw16, d_db16, d_wide + col, x, d_w, N, C, OC,
                                  (ops ? RT_PACKED_INP : 0) | RT_PACKED_OUT | RT_PACKED_DWEIGHT,
                                  dt, RT_ASSIGN_DWEIGHT, ldw);
        over_w = differ_w = over_b = differ_b = 0, worst_w = worst_b = 0.0;
        over_w += packed_grad_over(d_dw16, d_dw, nw, dt, tol, ulps, &differ_w, &worst_w);
        over_b += packed_grad_over(d_db16, d_db, OC, dt, 0.0, 0, &differ_b, &worst_b);
        snprintf(nmk, sizeof nmk, "%s linear backward N=%d C=%d, a stack's weight gradients in "
                 "one call (dinp NULL, OC %d, dout the columns %d.. of rows of %d; input %s), "
                 "dweight packed == the fp32-storage call's rounded", nm, N, C, OC, col, ldw,
                 ops ? "packed" : "fp32");
        check_packed_grad(nmk, over_w, differ_w, worst_w, 1, nw, dt, tol, ulps);
        check_packed_grad("  ... dbias packed", over_b, differ_b, worst_b, 1, OC, dt, 0.0, 0);
    }
    uint16_t* got = down16(d_wide, (size_t)N * ldw);
    CHECK(memcmp(got, start, (size_t)N * ldw * 2) == 0, "  ... the stack's dout unchanged");

    // no rows: the assigned gradients are zeros
    RT_CHECK_CUDA(cudaMemset(d_dw16, 0xAB, nw * 2));
    RT_CHECK_CUDA(cudaMemset(d_db16, 0xAB, (size_t)OC * 2));
    rt_linear_packed_backward(NULL, d_dw16, d_db16, d_d16, d_i16, d_w16, 0, C, OC,
                              RT_PACKED_INP | RT_PACKED_INP2 | RT_PACKED_OUT | RT_PACKED_DWEIGHT,
                              dt, RT_ASSIGN_DWEIGHT, 0);
    uint16_t *zw = down16(d_dw16, nw), *zb = down16(d_db16, OC);
    size_t nonzero = 0;
    for (size_t i = 0; i < nw; i++) nonzero += zw[i] != 0;
    for (int i = 0; i < OC; i++) nonzero += zb[i] != 0;
    CHECK(nonzero == 0, "%s linear backward over no rows (C=%d OC=%d), dweight and dbias "
          "packed: zeros, %zu values not", nm, C, OC, nonzero);
    free(inp), free(w), free(dout), free(g0), free(h16), free(start), free(got), free(zw);
    free(zb);
    dfree(d_inp), dfree(d_w), dfree(d_dout), dfree(d_i16), dfree(d_w16), dfree(d_d16), dfree(d_g);
    dfree(d_g2), dfree(d_dw), dfree(d_db), dfree(d_p16), dfree(d_q16), dfree(d_dw16);
    dfree(d_db16), dfree(d_wide);
}

// The norms' packed parameter gradients (RT_PACKED_DWEIGHT, assigned) against the same call
// with them in fp32 storage, rounded, bit for bit: LayerNorm's dweight and dbias (or one of
// them NULL), RMSNorm's dweight, with every storage of dout, inp and dinp (dinp assigned or
// NULL: the fp32 call's bits). Rows of 256 V elements with dinp take the warp-per-row
// kernel's sums (dw_finish_kernel); other rows, or no dinp, the column sums (over several
// chunks when N > 64: the last block's sum of the partials); N = 0: zeros.
static void test_packed_dweight_norms(rt_dtype dt, int N, int C) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    const size_t ne = (size_t)N * C;
    float *x = hrand(ne, 1.0f, 0.0f), *dy = hrand(ne, 1.0f, 0.0f), *w = hrand(C, 0.5f, 1.0f),
          *b = hrand(C, 1.0f, 0.0f);
    round_to(x, ne, dt), round_to(dy, ne, dt), round_to(w, C, dt), round_to(b, C, dt);
    float *d_x = dup(x, ne), *d_dy = dup(dy, ne), *d_w = dup(w, C), *d_b = dup(b, C);
    void *d_x16 = dev_packed(x, N, C, dt), *d_dy16 = dev_packed(dy, N, C, dt);
    float *d_y = dalloc(ne * sizeof(float)), *d_mean = dalloc(N * sizeof(float) + 4),
          *d_rstd = dalloc(N * sizeof(float) + 4);
    float *d_g = dalloc(ne * sizeof(float)), *d_g2 = dalloc(ne * sizeof(float));
    void *d_p16 = dalloc(ne * 2), *d_q16 = dalloc(ne * 2);
    float *d_dw = dalloc(C * sizeof(float)), *d_db = dalloc(C * sizeof(float));
    void *d_dw16 = dalloc((size_t)C * 2), *d_db16 = dalloc((size_t)C * 2);
    char nmk[240];
    for (int ln = 1; ln >= 0; ln--) {
        const char* op = ln ? "layernorm" : "rmsnorm";
        if (ln)
            rt_layernorm_forward(d_y, d_mean, d_rstd, d_x, d_w, d_b, N, C, RT_LAYERNORM_EPS, dt);
        else
            rt_rmsnorm_forward(d_y, d_rstd, d_x, d_w, N, C, 1e-6f, dt);
        size_t over = 0, differ = 0, untouched = 0, calls = 0;
        double worst = 0.0;
        int ok_dinp = 1;
        for (int k = 0; k < (ln ? 11 : 9); k++) {
            // k < 8: dout, inp, dinp each fp32 or packed; 8: no dinp; 9, 10: LayerNorm's
            // dweight, then dbias NULL
            const int pk = k < 8 ? (k & 1 ? RT_PACKED_OUT : 0) | (k & 2 ? RT_PACKED_INP : 0) |
                                       (k & 4 ? RT_PACKED_DINP : 0)
                                 : RT_PACKED_OUT | RT_PACKED_INP;
            const int bits = RT_ASSIGN_DWEIGHT | RT_ASSIGN_1, pg = pk & RT_PACKED_DINP;
            const int has_w = k != 9, has_b = ln && k != 10;
            const void* d = pk & RT_PACKED_OUT ? d_dy16 : (const void*)d_dy;
            const void* xx = pk & RT_PACKED_INP ? d_x16 : (const void*)d_x;
            void* g = k >= 8 ? NULL : pg ? d_p16 : (void*)d_g;
            void* g2 = k >= 8 ? NULL : pg ? d_q16 : (void*)d_g2;
            RT_CHECK_CUDA(cudaMemset(d_dw, 0xFF, C * sizeof(float)));
            RT_CHECK_CUDA(cudaMemset(d_db, 0xFF, C * sizeof(float)));
            RT_CHECK_CUDA(cudaMemset(d_dw16, 0xAB, (size_t)C * 2));
            RT_CHECK_CUDA(cudaMemset(d_db16, 0xAB, (size_t)C * 2));
            if (ln) {
                rt_layernorm_packed_backward(g, has_w ? d_dw : NULL, has_b ? d_db : NULL, d, xx,
                                             d_w, d_mean, d_rstd, N, C, pk, dt, bits);
                rt_layernorm_packed_backward(g2, has_w ? d_dw16 : NULL, has_b ? d_db16 : NULL, d,
                                             xx, d_w, d_mean, d_rstd, N, C,
                                             pk | RT_PACKED_DWEIGHT, dt, bits);
            } else {
                rt_rmsnorm_packed_backward(g, d_dw, d, xx, d_w, d_rstd, N, C, pk, dt, bits);
                rt_rmsnorm_packed_backward(g2, d_dw16, d, xx, d_w, d_rstd, N, C,
                                           pk | RT_PACKED_DWEIGHT, dt, bits);
            }
            if (has_w) over += packed_grad_over(d_dw16, d_dw, C, dt, 0.0, 0, &differ, &worst);
            if (has_b) over += packed_grad_over(d_db16, d_db, C, dt, 0.0, 0, &differ, &worst);
            calls += has_w + has_b;
            if (ln && !(has_w && has_b)) {  // the NULL one's buffer
                uint16_t* h = down16(has_w ? d_db16 : d_dw16, C);
                for (int i = 0; i < C; i++) untouched += h[i] == 0xABAB;
                free(h);
            }
            if (g) ok_dinp &= pg ? dev_same16(d_p16, d_q16, ne) : dev_same(d_g, d_g2, ne);
        }
        snprintf(nmk, sizeof nmk, "%s %s backward N=%d C=%d, %s packed (every storage of dout, "
                 "inp, dinp; no dinp%s) == the fp32-storage call's rounded", nm, op, N, C,
                 ln ? "dweight and dbias" : "dweight", ln ? "; one of them NULL" : "");
        check_packed_grad(nmk, over, differ, worst, calls, C, dt, 0.0, 0);
        if (ln)
            CHECK(untouched == 2 * (size_t)C, "  ... the NULL gradient's buffer untouched (%zu "
                  "of %zu values)", untouched, 2 * (size_t)C);
        CHECK(ok_dinp, "  ... dinp (every storage of dout, inp, dinp) the fp32-storage call's, "
              "bit for bit");
        // no rows: zeros
        RT_CHECK_CUDA(cudaMemset(d_dw16, 0xAB, (size_t)C * 2));
        RT_CHECK_CUDA(cudaMemset(d_db16, 0xAB, (size_t)C * 2));
        if (ln)
            rt_layernorm_packed_backward(NULL, d_dw16, d_db16, d_dy16, d_x16, d_w, d_mean, d_rstd,
                                         0, C, RT_PACKED_OUT | RT_PACKED_INP | RT_PACKED_DWEIGHT,
                                         dt, RT_ASSIGN_DWEIGHT);
        else
            rt_rmsnorm_packed_backward(NULL, d_dw16, d_dy16, d_x16, d_w, d_rstd, 0, C,
                                       RT_PACKED_OUT | RT_PACKED_INP | RT_PACKED_DWEIGHT, dt,
                                       RT_ASSIGN_DWEIGHT);
        uint16_t *zw = down16(d_dw16, C), *zb = down16(d_db16, C);
        size_t nonzero = 0;
        for (int i = 0; i < C; i++) nonzero += zw[i] != 0 || (ln && zb[i] != 0);
        CHECK(nonzero == 0, "%s %s backward over no rows (C=%d), packed parameter gradients: "
              "zeros, %zu values not", nm, op, C, nonzero);
        free(zw), free(zb);
    }
    free(x), free(dy), free(w), free(b);
    dfree(d_x), dfree(d_dy), dfree(d_w), dfree(d_b), dfree(d_x16), dfree(d_dy16), dfree(d_y);
    dfree(d_mean), dfree(d_rstd), dfree(d_g), dfree(d_g2), dfree(d_p16), dfree(d_q16);
    dfree(d_dw), dfree(d_db), dfree(d_dw16), dfree(d_db16);
}

// swiglu's backward writing da and db as column slices of one packed [R, ld] matrix (at
// columns 8 and 8 + D, as w1's and w3's output gradients in their stack, a sentinel in the
// other columns), or one of them fp32 storage (dense rows) or NULL, each assigned or added
// to, dout, a and b fp32 or packed: rt_swiglu_backward's bits in the slices, the sentinel
// untouched. D a multiple of 8: groups of 8 (16-byte accesses) in each row; else one at a
// time.
static void test_swiglu_grad_slices(rt_dtype dt, int R, int D) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    const int ld = RT_LD16(2 * D) + 16, col = 8;
    const int off[2] = {col, col + RT_LD16(D)}, cols[2] = {D, D};
    const size_t n = (size_t)R * D, nwide = (size_t)R * ld;
    const uint16_t sentinel = 0x7E57;
    float *x = hrand(n, 3.0f, 0.0f), *z = hrand(n, 3.0f, 0.0f), *dy = hrand(n, 1.0f, 0.0f),
          *g0 = hrand(n, 1.0f, 0.0f), *h0 = hrand(n, 1.0f, 0.0f);
    round_to(x, n, dt), round_to(z, n, dt), round_to(dy, n, dt), round_to(g0, n, dt), round_to(h0, n, dt);
    float *d_x = dup(x, n), *d_z = dup(z, n), *d_dy = dup(dy, n);
    void *d_x16 = dalloc(n * 2), *d_z16 = dalloc(n * 2), *d_dy16 = dalloc(n * 2);
    put_vals(d_x16, x, n, 2, dt), put_vals(d_z16, z, n, 2, dt), put_vals(d_dy16, dy, n, 2, dt);
    float *d_g = dalloc(n * sizeof(float)), *d_h = dalloc(n * sizeof(float));
    float *d_g2 = dalloc(n * sizeof(float)), *d_h2 = dalloc(n * sizeof(float));
    uint16_t* d_wide = dalloc(nwide * 2);
    uint16_t *start = malloc(nwide * 2), *want = malloc(nwide * 2);
    float *g = malloc(n * sizeof(float)), *h = malloc(n * sizeof(float));
    if (!start || !want || !g || !h) abort();
    int ok = 1, calls = 0;
    // mode: da, db slices (0); da a slice, db fp32 (1); da NULL, db a slice (2); da fp32, db a
    // slice (3)
    for (int k = 0; k < 32; k++) {
        const int mode = k & 3, as = (k >> 2) & 3, inpk = k & 16;
        const int assign = (as & 1 ? RT_ASSIGN_1 : 0) | (as & 2 ? RT_ASSIGN_2 : 0);
        const int sa = mode == 0 || mode == 1, sb = mode != 1;
        uint16_t* st[2] = {bits16(g0, n, dt), bits16(h0, n, dt)};
        for (size_t i = 0; i < n; i++) {  // an assigned slice's old values: never read
            if (as & 1) st[0][i] = 0xABAB;
            if (as & 2) st[1][i] = 0xABAB;
        }
        wide_rows(start, R, ld, 2, off, cols, st, sentinel);
        RT_CHECK_CUDA(cudaMemcpy(d_wide, start, nwide * 2, cudaMemcpyHostToDevice));
        upload(d_g, g0, n), upload(d_h, h0, n), upload(d_g2, g0, n), upload(d_h2, h0, n);
        rt_swiglu_backward(mode == 2 ? NULL : d_g, d_h, d_dy, d_x, d_z, n, dt, assign);
        const int pk = (inpk ? RT_PACKED_OUT | RT_PACKED_INP | RT_PACKED_INP2 : 0) |
                       (sa ? RT_PACKED_DINP : 0) | (sb ? RT_PACKED_DINP2 : 0);
        rt_swiglu_packed_backward(mode == 2 ? NULL : sa ? (void*)(d_wide + off[0]) : (void*)d_g2,
                                  sb ? (void*)(d_wide + off[1]) : (void*)d_h2,
                                  inpk ? d_dy16 : (const void*)d_dy, inpk ? d_x16 : (const void*)d_x,
                                  inpk ? d_z16 : (const void*)d_z, n, pk, dt, assign, D,
                                  sa ? ld : D, sb ? ld : D);
        RT_CHECK_CUDA(cudaMemcpy(g, d_g, n * sizeof(float), cudaMemcpyDeviceToHost));
        RT_CHECK_CUDA(cudaMemcpy(h, d_h, n * sizeof(float), cudaMemcpyDeviceToHost));
        uint16_t* res[2] = {sa ? bits16(g, n, dt) : st[0], sb ? bits16(h, n, dt) : st[1]};
        wide_rows(want, R, ld, 2, off, cols, res, sentinel);
        uint16_t* got = down16(d_wide, nwide);
        ok &= memcmp(got, want, nwide * 2) == 0;
        ok &= (sa || mode == 2 || dev_same(d_g, d_g2, n)) && (sb || dev_same(d_h, d_h2, n));
        calls++;
        if (sa) free(res[0]);
        if (sb) free(res[1]);
        free(got), free(st[0]), free(st[1]);
    }
    CHECK(ok, "%s swiglu packed backward R=%d C=%d, da and db the columns at %d and %d of rows of "
          "%d (or one fp32 storage or NULL; dout, a, b fp32 or packed; each assigned, "
          "accumulated; %d calls) == rt_swiglu_backward's bits, other columns untouched (%s)",
          nm, R, D, off[0], off[1], ld, calls, D % 8 ? "one element at a time" : "groups of 8");
    free(x), free(z), free(dy), free(g0), free(h0), free(start), free(want), free(g), free(h);
    dfree(d_x), dfree(d_z), dfree(d_dy), dfree(d_x16), dfree(d_z16), dfree(d_dy16);
    dfree(d_g), dfree(d_h), dfree(d_g2), dfree(d_h2), dfree(d_wide);
}

// This program's path (argv[0]), run again by aborts_with.
static const char* self_path;

// Runs this program again with --kcheck NAME (main), its stderr captured into out: 1 when it
// aborted (SIGABRT) with one line that contains `want`. The shell execs it, so that the
// status is the program's and the shell adds no line of its own.
static int aborts_with(const char* name, const char* want, char* out, size_t cap) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "exec '%s' --kcheck %s 2>&1", self_path, name);
    fflush(stdout);
    FILE* f = popen(cmd, "r");
    const size_t len = f ? fread(out, 1, cap - 1, f) : 0;
    out[len] = 0;
    const int st = f ? pclose(f) : -1;
    const char* nl = strchr(out, '\n');
    const int one_line = nl && nl[1] == 0;
    if (one_line) out[len - 1] = 0;  // printed inline by the check
    return st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strstr(out, want) &&
           one_line;
}

// Host pointers: the calls below stop at their argument checks, before any device work.
static uint16_t bad_buf[3][64];

static void rope_ld_short(void) {
    rt_rope_packed_backward(bad_buf[0], bad_buf[1], 1, 1, 4, 8, RT_ROPE_THETA,
                            RT_PACKED_OUT | RT_PACKED_DINP, RT_BF16, RT_ASSIGN_1, 24);
}

static void linear_ld_fp32(void) {
    rt_linear_packed_backward(bad_buf[0], NULL, NULL, bad_buf[1], bad_buf[2], bad_buf[2], 1, 8, 8,
                              0, RT_BF16, RT_ASSIGN_1, 16);
}

static void linear_ld_odd_oc(void) {
    rt_linear_packed_backward(bad_buf[0], NULL, NULL, bad_buf[1], bad_buf[2], bad_buf[2], 1, 8, 12,
                              RT_PACKED_OUT, RT_F16, RT_ASSIGN_1, 24);
}

static void swiglu_ld_short(void) {
    rt_swiglu_packed_backward(bad_buf[0], bad_buf[1], bad_buf[2], bad_buf[2], bad_buf[2], 32,
                              RT_PACKED_DINP | RT_PACKED_DINP2, RT_BF16, 0, 16, 16, 8);
}

static void swiglu_rows_bad(void) {
    rt_swiglu_packed_backward(bad_buf[0], bad_buf[1], bad_buf[2], bad_buf[2], bad_buf[2], 20,
                              RT_PACKED_DINP | RT_PACKED_DINP2, RT_BF16, 0, 8, 8, 8);
}

static void attention_ld_odd(void) {
    rt_attention_lowmem_packed_backward(bad_buf[0], bad_buf[1], bad_buf[2], NULL, bad_buf[0],
                                        bad_buf[0], bad_buf[0], bad_buf[0], bad_buf[0], NULL, 1, 1,
                                        4, 2, 16, 1, RT_F16, RT_PACKED_DINP | RT_PACKED_DINP2,
                                        RT_F16, RT_ACCUMULATE, 0, 36, 0);
}

static void linear_dweight_accumulated(void) {
    rt_linear_packed_backward(NULL, bad_buf[0], NULL, bad_buf[1], bad_buf[2], bad_buf[2], 1, 8, 8,
                              RT_PACKED_OUT | RT_PACKED_DWEIGHT, RT_BF16, RT_ACCUMULATE, 0);
}

static void linear_dweight_odd(void) {
    rt_linear_packed_backward(NULL, bad_buf[0], NULL, bad_buf[1], bad_buf[2], bad_buf[2], 1, 12, 8,
                              RT_PACKED_DWEIGHT, RT_F16, RT_ASSIGN_DWEIGHT, 0);
}

static void norm_dweight_accumulated(void) {
    rt_layernorm_packed_backward(NULL, bad_buf[0], bad_buf[1], bad_buf[2], bad_buf[2], NULL, NULL,
                                 NULL, 1, 8, RT_PACKED_DWEIGHT, RT_BF16, RT_ASSIGN_1);
}

static void adam_packed_fp32(void) {
    rt_cuda_adam_step_rows_dev((float*)bad_buf[0], bad_buf[1], (float*)bad_buf[2],
                               (float*)bad_buf[2], 8, (const int64_t*)bad_buf[0], 1, 1,
                               (const double*)bad_buf[0], 0.9, 0.95, 1e-8, 0.0, 1, RT_F32, 1,
                               NULL);
}

static void sgd_packed_fp32(void) {
    rt_cuda_sgd_step_rows_dev((float*)bad_buf[0], bad_buf[1], NULL, 8, (const int64_t*)bad_buf[0],
                              1, 1, (const double*)bad_buf[0], 0.0, 0.0, 0.0, 0, RT_F32, 1, NULL);
}

// Row lengths a packed gradient cannot take (too short, not a multiple of 8) stop the call
// with one line naming it.
static void test_grad_rows_checked(void) {
    char out[1024];
    int ok = aborts_with("rope", "dinp with row length 24, width 32, packed", out, sizeof out);
    CHECK(ok, "rope backward with dinp in rows of 24 (width 32) stops: %s", out);
    ok = aborts_with("attention", "dk with row length 36, width 32, packed", out, sizeof out);
    CHECK(ok, "attention backward with dk in rows of 36 (not a multiple of 8) stops: %s", out);
    ok = aborts_with("linear_fp32", "dout with row length 16, width 8, fp32 storage", out,
                     sizeof out);
    CHECK(ok, "linear backward with an fp32-storage dout in rows of 16 (OC 8) stops: %s", out);
    ok = aborts_with("linear_odd_oc", "packed dout with row length 24, width 12", out, sizeof out);
    CHECK(ok, "linear backward with a packed dout of OC 12 in rows of 24 (a slice of OC not a "
          "multiple of 8) stops: %s", out);
    ok = aborts_with("swiglu_short", "db with row length 8, width 16, packed", out, sizeof out);
    CHECK(ok, "swiglu backward with a packed db in rows of 8 (C 16) stops: %s", out);
    ok = aborts_with("swiglu_rows", "rt_swiglu_packed_backward with n = 20, C = 8", out,
                     sizeof out);
    CHECK(ok, "swiglu backward with n = 20 in rows of 8 stops: %s", out);
    ok = aborts_with("linear_dweight_acc",
                     "rt_linear_packed_backward with RT_PACKED_DWEIGHT and assign 0", out,
                     sizeof out);
    CHECK(ok, "linear backward adding to a packed dweight (no RT_ASSIGN_DWEIGHT) stops: %s", out);
    ok = aborts_with("linear_dweight_odd", "with a packed [8, 12] dweight", out, sizeof out);
    CHECK(ok, "linear backward with a packed [8, 12] dweight (C not a multiple of 8) stops: %s",
          out);
    ok = aborts_with("norm_dweight_acc",
                     "rt_layernorm_packed_backward with RT_PACKED_DWEIGHT and assign 1", out,
                     sizeof out);
    CHECK(ok, "layernorm backward adding to packed parameter gradients stops: %s", out);
    ok = aborts_with("adam_packed_fp32", "rt_cuda_adam_step_rows_dev with packed gradients of "
                     "dtype 0", out, sizeof out);
    CHECK(ok, "adam step on packed gradients of dtype RT_F32 stops: %s", out);
    ok = aborts_with("sgd_packed_fp32", "rt_cuda_sgd_step_rows_dev with packed gradients of "
                     "dtype 0", out, sizeof out);
    CHECK(ok, "sgd step on packed gradients of dtype RT_F32 stops: %s", out);
}

// ----------------------------------------------------------------------------
// optimizers and clipping (three steps each; the GPU is expected to give the CPU's bits),
// with the host step count (rt_optim.h) and with the step count in device memory
// (rt_cuda.h's graph-safe variants, counted as the k-th of two optimizer steps per step)

static void set_dev_step(int64_t* d_step, int64_t step) {
    RT_CHECK_CUDA(cudaMemcpy(d_step, &step, sizeof step, cudaMemcpyHostToDevice));
}

static void set_dev_lr(double* d_lr, double lr) {
    RT_CHECK_CUDA(cudaMemcpy(d_lr, &lr, sizeof lr, cudaMemcpyHostToDevice));
}

// In-place gradients (rt_cuda.h grad_dt): the device steps read fp32 gradients rounded to
// bf16 (AdamW) or fp16 (SGD with momentum) as they load them, the bits of the CPU steps on
// gradients rounded first (three steps of each).
static void test_optim_grad_round(void) {
    const size_t n = 10007;
    int64_t* d_step = dalloc(sizeof(int64_t));
    double* d_lr = dalloc(sizeof(double));
    set_dev_lr(d_lr, 1e-2);
    for (int kind = 0; kind < 2; kind++) {
        const rt_dtype dt = kind ? RT_F16 : RT_BF16;
        float *p = hrand(n, 1.0f, 0.0f), *m = hrand(n, 0.0f, 0.0f), *v = hrand(n, 0.0f, 0.0f);
        float *d_p = dup(p, n), *d_m = dup(m, n), *d_v = dup(v, n);
        int changed = 0;
        for (int64_t step = 1; step <= 3; step++) {
            float* g = hrand(n, 1.0f, 0.0f);
            float* d_g = dup(g, n);  // unrounded
            for (size_t i = 0; i < n; i++) {
                const float r = rt_round_inl(g[i], dt);
                changed += r != g[i];
                g[i] = r;
            }
            set_dev_step(d_step, step);
            if (kind) {
                cpu_rt_sgd_step(p, g, m, n, step, 1e-2, 0.9, 0.1, 0.01, 0);
                rt_cuda_sgd_step_dev(d_p, d_g, d_m, n, d_step, 1, 1, d_lr, 0.9, 0.1, 0.01, 0, dt);
            } else {
                cpu_rt_adamw_step(p, g, m, v, n, step, 1e-2, 0.9, 0.95, 1e-8, 0.1);
                rt_cuda_adam_step_dev(d_p, d_g, d_m, d_v, n, d_step, 1, 1, d_lr, 0.9, 0.95, 1e-8,
                                      0.1, 1, dt);
            }
            free(g), dfree(d_g);
        }
        char nm[128];
        snprintf(nm, sizeof nm, "%s reading fp32 gradients rounded to %s: param after 3 steps",
                 kind ? "sgd momentum" : "adamw", kind ? "fp16" : "bf16");
        CHECK(changed > (int)n, "%s: %d of %zu gradients change when rounded", nm, changed, 3 * n);
        cmp(nm, d_p, p, n, TOL_EXACT);
        cmp("  ... exp_avg / momentum_buf", d_m, m, n, TOL_EXACT);
        if (!kind) cmp("  ... exp_avg_sq", d_v, v, n, TOL_EXACT);
        free(p), free(m), free(v);
        dfree(d_p), dfree(d_m), dfree(d_v);
    }
    dfree(d_step), dfree(d_lr);
}

// The device side of the row tests below: twelve tokens (ids out of range included, which
// mark nothing) marked into a mask of vocab rows, a step counter and an lr of 1e-2.
static const int32_t rows_tokens[12] = {3, 29, 3, 0, 17, -1, 30, 11, 17, 5, 64, 22};
typedef struct {
    int32_t* d_tokens;
    uint8_t* d_mask;
    int64_t* d_step;
    double* d_lr;
} rows_dev;

static rows_dev rows_dev_make(int64_t vocab) {
    rows_dev r = {dup_i32(rows_tokens, 12), (uint8_t*)dalloc((size_t)vocab),
                  dalloc(sizeof(int64_t)), dalloc(sizeof(double))};
    set_dev_lr(r.d_lr, 1e-2);
    RT_CHECK_CUDA(cudaMemset(r.d_mask, 0, (size_t)vocab));
    rt_cuda_rows_mark(r.d_mask, vocab, r.d_tokens, 12);
    return r;
}

static void rows_dev_free(rows_dev r) {
    dfree(r.d_tokens), dfree(r.d_mask), dfree(r.d_step), dfree(r.d_lr);
}

// An optimizer step by rows (rt_cuda_rows, rt_step_optimizer_rows): the rows no token looks
// up stepped without gradients, then the looked-up rows with them, give the bits of the CPU
// step over every row with the unused rows' gradients zero, and leave the looked-up rows'
// gradients 0 and the others' as they were. Rows past the vocab are never looked up; the
// tokens include ids out of range, which mark nothing; the unused rows' device gradients are
// garbage (the first pass must not read them, the second must skip them). Row lengths 16
// (groups of RTC_VEC) and 6 (one element at a time), AdamW and SGD with momentum, two
// steps; `rows` past optim.cu's RTC_ROWS_BLOCKS (4096) make a block take several rows.
static void test_optim_rows(int64_t rows, int64_t vocab) {
    const int64_t ntok = 12;
    const int32_t* tokens = rows_tokens;
    const rows_dev dev = rows_dev_make(vocab);
    uint8_t* d_mask = dev.d_mask;
    int64_t* d_step = dev.d_step;
    double* d_lr = dev.d_lr;
    int* looked = calloc((size_t)rows, sizeof *looked);
    if (!looked) abort();
    for (int i = 0; i < ntok; i++)
        if (tokens[i] >= 0 && tokens[i] < vocab) looked[tokens[i]] = 1;
    for (int c = 0; c < 4; c++) {
        const int64_t row_len = c % 2 ? 6 : 16;
        const int sgd = c >= 2;
        const size_t n = (size_t)(rows * row_len);
        float *p = hrand(n, 1.0f, 0.0f), *m = hrand(n, 0.1f, 0.0f), *v = hrand(n, 0.1f, 0.1f);
        for (size_t i = 0; i < n; i++) v[i] = v[i] * v[i];
        float *d_p = dup(p, n), *d_m = dup(m, n), *d_v = dup(v, n);
        float* left = hrand(n, 0.0f, 0.0f);
        for (int64_t step = 1; step <= 2; step++) {
            float* g = hrand(n, 1.0f, 0.0f);
            float* d_g = dup(g, n);  // every row's gradient on the device: garbage where unused
            for (size_t i = 0; i < n; i++)  // what the device's gradients become
                if (looked[i / (size_t)row_len]) left[i] = 0.0f;
                else left[i] = g[i], g[i] = 0.0f;
            set_dev_step(d_step, step);
            for (int pass = 0; pass < 2; pass++) {
                const rt_cuda_rows sel = {d_mask, vocab, row_len, pass};
                float* dg = pass ? d_g : NULL;
                if (sgd)
                    rt_cuda_sgd_step_rows_dev(d_p, dg, d_m, n, d_step, 1, 1, d_lr, 0.9, 0.1, 0.01, 0,
                                              RT_BF16, 0, &sel);
                else
                    rt_cuda_adam_step_rows_dev(d_p, dg, d_m, d_v, n, d_step, 1, 1, d_lr, 0.9, 0.95,
                                               1e-8, 0.1, 1, RT_BF16, 0, &sel);
            }
            cmp("  ... grads after the looked-up rows' step", d_g, left, n, TOL_EXACT);
            for (size_t i = 0; i < n; i++) g[i] = rt_round_inl(g[i], RT_BF16);
            if (sgd)
                cpu_rt_sgd_step(p, g, m, n, step, 1e-2, 0.9, 0.1, 0.01, 0);
            else
                cpu_rt_adamw_step(p, g, m, v, n, step, 1e-2, 0.9, 0.95, 1e-8, 0.1);
            free(g), dfree(d_g);
        }
        char nm[128];
        snprintf(nm, sizeof nm, "%s by rows (%lld rows of %lld, vocab %lld; unused rows first, "
                 "no gradient): param after 2 steps", sgd ? "sgd momentum" : "adamw",
                 (long long)rows, (long long)row_len, (long long)vocab);
        cmp(nm, d_p, p, n, TOL_EXACT);
        cmp("  ... exp_avg / momentum_buf", d_m, m, n, TOL_EXACT);
        if (!sgd) cmp("  ... exp_avg_sq", d_v, v, n, TOL_EXACT);
        free(p), free(m), free(v), free(left);
        dfree(d_p), dfree(d_m), dfree(d_v);
    }
    rows_dev_free(dev);
    free(looked);
}

// Two device buffers of n floats, bit for bit: prints how many differ and the largest
// difference.
static void cmp_dev_bits(const char* name, const float* da, const float* db, size_t n) {
    float *a = down(da, n), *b = down(db, n);
    size_t differ = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&a[i], &b[i], sizeof a[i]) == 0) continue;
        differ++;
        const double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= worst)) worst = d;  // NaN-sticky
    }
    free(a), free(b);
    CHECK(differ == 0, "%s: %zu values, %zu differ in bits, max diff %.3g", name, n, differ,
          worst);
}

// Packed gradients (rt_cuda.h packed_grads): the graph-safe steps reading n 16-bit values of
// bf16 (AdamW) or fp16 (SGD with momentum) give the param and state bits of the same steps
// on fp32 gradients holding those values, two steps each: over every element (groups of
// RTC_VEC with a tail of 7; the buffers one element off their alignment: one at a time), and
// by rows (rt_cuda_rows: row lengths 16 and 6, the unused rows without gradients, then the
// looked-up ones). The looked-up rows' packed gradients become 16-bit zeros, the others'
// stay as they were (all of them without rows).
static void test_optim_packed_grads(void) {
    const int64_t rows = 37, vocab = 30, ntok = 12;
    const int32_t* tokens = rows_tokens;
    const rows_dev dev = rows_dev_make(vocab);
    uint8_t* d_mask = dev.d_mask;
    int64_t* d_step = dev.d_step;
    double* d_lr = dev.d_lr;
    int looked[37] = {0};
    for (int i = 0; i < ntok; i++)
        if (tokens[i] >= 0 && tokens[i] < vocab) looked[tokens[i]] = 1;
    for (int c = 0; c < 8; c++) {
        const int sgd = c & 1, mode = c >> 1;  // 0 aligned, 1 off by one, 2 and 3 by rows
        const rt_dtype dt = sgd ? RT_F16 : RT_BF16;
        const int64_t row_len = mode == 3 ? 6 : 16;
        const size_t n = mode < 2 ? 10007 : (size_t)(rows * row_len), o = mode == 1;
        float *p = hrand(n + o, 1.0f, 0.0f), *m = hrand(n + o, 0.1f, 0.0f),
              *v = hrand(n + o, 0.1f, 0.1f);
        for (size_t i = 0; i < n + o; i++) v[i] = v[i] * v[i];
        float *d_p = dup(p, n + o), *d_m = dup(m, n + o), *d_v = dup(v, n + o);  // fp32 grads
        float *e_p = dup(p, n + o), *e_m = dup(m, n + o), *e_v = dup(v, n + o);  // packed
        size_t wrong = 0;  // packed gradients not as the step leaves them
        for (int64_t step = 1; step <= 2; step++) {
            float* g = hrand(n + o, 1.0f, 0.0f);
            round_to(g, n + o, dt);
            uint16_t* h16 = bits16(g, n + o, dt);
            float* d_g = dup(g, n + o);
            uint16_t* d_g16 = dalloc((n + o) * 2);
            RT_CHECK_CUDA(cudaMemcpy(d_g16, h16, (n + o) * 2, cudaMemcpyHostToDevice));
            set_dev_step(d_step, step);
            for (int pass = mode < 2; pass < 2; pass++) {  // without rows: one pass
                const rt_cuda_rows sel = {d_mask, vocab, row_len, pass};
                const rt_cuda_rows* r = mode < 2 ? NULL : &sel;
                float* dg = pass ? d_g + o : NULL;
                void* dg16 = pass ? (void*)(d_g16 + o) : NULL;
                if (sgd) {
                    rt_cuda_sgd_step_rows_dev(d_p + o, dg, d_m + o, n, d_step, 1, 1, d_lr, 0.9,
                                              0.1, 0.01, 0, dt, 0, r);
                    rt_cuda_sgd_step_rows_dev(e_p + o, dg16, e_m + o, n, d_step, 1, 1, d_lr, 0.9,
                                              0.1, 0.01, 0, dt, 1, r);
                } else {
                    rt_cuda_adam_step_rows_dev(d_p + o, dg, d_m + o, d_v + o, n, d_step, 1, 1,
                                               d_lr, 0.9, 0.95, 1e-8, 0.1, 1, dt, 0, r);
                    rt_cuda_adam_step_rows_dev(e_p + o, dg16, e_m + o, e_v + o, n, d_step, 1, 1,
                                               d_lr, 0.9, 0.95, 1e-8, 0.1, 1, dt, 1, r);
                }
            }
            uint16_t* left = down16(d_g16, n + o);
            for (size_t i = 0; i < n + o; i++) {
                const int zeroed = mode >= 2 && looked[i / (size_t)row_len];
                wrong += left[i] != (zeroed ? 0 : h16[i]);
            }
            free(g), free(h16), free(left), dfree(d_g), dfree(d_g16);
        }
        char nm[200];
        snprintf(nm, sizeof nm, "%s, packed %s gradients (%s; n %zu) == fp32 gradients of the "
                 "same values: param after 2 steps", sgd ? "sgd momentum" : "adamw",
                 sgd ? "fp16" : "bf16",
                 mode == 0 ? "every element, groups of 8" : mode == 1 ? "every element, one "
                 "element off alignment" : mode == 2 ? "by rows of 16" : "by rows of 6", n);
        cmp_dev_bits(nm, e_p + o, d_p + o, n);
        cmp_dev_bits("  ... exp_avg / momentum_buf", e_m + o, d_m + o, n);
        if (!sgd) cmp_dev_bits("  ... exp_avg_sq", e_v + o, d_v + o, n);
        CHECK(wrong == 0, "  ... packed gradients after the steps: %s, %zu values not",
              mode >= 2 ? "the looked-up rows' zeros, the others' as they were" : "unchanged",
              wrong);
        free(p), free(m), free(v);
        dfree(d_p), dfree(d_m), dfree(d_v), dfree(e_p), dfree(e_m), dfree(e_v);
    }
    rows_dev_free(dev);
}

static void test_optim(void) {
    const size_t n = 10007;
    float* g[3] = {hrand(n, 1.0f, 0.0f), hrand(n, 0.1f, 0.0f), hrand(n, 3.0f, 0.0f)};
    float* d_g[3] = {dup(g[0], n), dup(g[1], n), dup(g[2], n)};
    int64_t* d_step = dalloc(sizeof(int64_t));
    double* d_lr = dalloc(sizeof(double));
    for (int kind = 0; kind < 5; kind++) {
        static const char* names[5] = {"sgd", "sgd momentum+dampening+wd", "sgd nesterov+wd",
                                       "adam wd=0.01", "adamw"};
        float *p = hrand(n, 1.0f, 0.0f), *m = hrand(n, 0.0f, 0.0f), *v = hrand(n, 0.0f, 0.0f);
        float *d_p = dup(p, n), *d_m = dup(m, n), *d_v = dup(v, n);
        float *e_p = dup(p, n), *e_m = dup(m, n), *e_v = dup(v, n);  // device-step variant
        for (int64_t step = 1; step <= 3; step++) {
            const float* gs = g[step - 1];
            const float* d_gs = d_g[step - 1];
            // The device count as a step of two optimizer steps each: training step
            // (step + 1) / 2, its optimizer step k = 1, 2, 1: counts 1, 2, 3 again.
            const int k = (int)((step - 1) % 2 + 1);
            set_dev_step(d_step, (step + 1) / 2);
            // A different lr at each step (a schedule): the device variant reads it from d_lr.
            const double f = 1.0 / (double)(step + 2);
            double lr = (kind == 2 ? 0.15 : kind > 2 ? 3e-2 : 0.3) * f;
            set_dev_lr(d_lr, lr);
            switch (kind) {
                case 0:
                    cpu_rt_sgd_step(p, gs, NULL, n, step, lr, 0.0, 0.0, 0.0, 0);
                    rt_sgd_step(d_p, d_gs, NULL, n, step, lr, 0.0, 0.0, 0.0, 0);
                    rt_cuda_sgd_step_dev(e_p, d_gs, NULL, n, d_step, k, 2, d_lr, 0.0, 0.0, 0.0, 0, RT_F32);
                    break;
                case 1:
                    cpu_rt_sgd_step(p, gs, m, n, step, lr, 0.9, 0.1, 0.01, 0);
                    rt_sgd_step(d_p, d_gs, d_m, n, step, lr, 0.9, 0.1, 0.01, 0);
                    rt_cuda_sgd_step_dev(e_p, d_gs, e_m, n, d_step, k, 2, d_lr, 0.9, 0.1, 0.01, 0, RT_F32);
                    break;
                case 2:
                    cpu_rt_sgd_step(p, gs, m, n, step, lr, 0.9, 0.0, 0.01, 1);
                    rt_sgd_step(d_p, d_gs, d_m, n, step, lr, 0.9, 0.0, 0.01, 1);
                    rt_cuda_sgd_step_dev(e_p, d_gs, e_m, n, d_step, k, 2, d_lr, 0.9, 0.0, 0.01, 1, RT_F32);
                    break;
                case 3:
                    cpu_rt_adam_step(p, gs, m, v, n, step, lr, 0.9, 0.999, 1e-8, 0.01);
                    rt_adam_step(d_p, d_gs, d_m, d_v, n, step, lr, 0.9, 0.999, 1e-8, 0.01);
                    rt_cuda_adam_step_dev(e_p, d_gs, e_m, e_v, n, d_step, k, 2, d_lr, 0.9, 0.999, 1e-8,
                                          0.01, 0, RT_F32);
                    break;
                default:
                    cpu_rt_adamw_step(p, gs, m, v, n, step, lr, 0.9, 0.95, 1e-8, 0.1);
                    rt_adamw_step(d_p, d_gs, d_m, d_v, n, step, lr, 0.9, 0.95, 1e-8, 0.1);
                    rt_cuda_adam_step_dev(e_p, d_gs, e_m, e_v, n, d_step, k, 2, d_lr, 0.9, 0.95, 1e-8,
                                          0.1, 1, RT_F32);
                    break;
            }
        }
        char nm[128];
        snprintf(nm, sizeof nm, "%s: param after 3 steps (n=%zu)", names[kind], n);
        cmp(nm, d_p, p, n, TOL_EXACT);
        if (kind > 0) cmp("  ... exp_avg / momentum_buf", d_m, m, n, TOL_EXACT);
        if (kind > 2) cmp("  ... exp_avg_sq", d_v, v, n, TOL_EXACT);
        snprintf(nm, sizeof nm, "%s, step count on the device (rt_cuda_*_step_dev): param",
                 names[kind]);
        cmp(nm, e_p, p, n, TOL_EXACT);
        if (kind > 0) cmp("  ... exp_avg / momentum_buf", e_m, m, n, TOL_EXACT);
        if (kind > 2) cmp("  ... exp_avg_sq", e_v, v, n, TOL_EXACT);
        free(p), free(m), free(v);
        dfree(d_p), dfree(d_m), dfree(d_v), dfree(e_p), dfree(e_m), dfree(e_v);
    }

    // clipping with a host norm
    CHECK(rt_clip_coef(10.0, 1.0) == cpu_rt_clip_coef(10.0, 1.0) &&
              rt_clip_coef(0.5, 1.0) == 1.0f,
          "clip_coef(10, 1) = %.9g, clip_coef(0.5, 1) = 1", rt_clip_coef(10.0, 1.0));
    float* gc = hcopy(g[0], n);
    const float cc = cpu_rt_clip_grad_norm(gc, n, 7.5, 2.0);
    const float cg = rt_clip_grad_norm(d_g[0], n, 7.5, 2.0);
    CHECK(cc == cg, "clip_grad_norm coefficient %.9g (CPU %.9g)", cg, cc);
    cmp("clip_grad_norm scaled grads", d_g[0], gc, n, TOL_EXACT);
    (void)rt_clip_grad_norm(d_g[0], n, 0.5, 2.0);  // coef 1: untouched
    cmp("clip_grad_norm below max_norm: untouched", d_g[0], gc, n, TOL_EXACT);

    // clipping with the norm on the device: the sum of squares of three shards accumulated
    // in double, rounded to float, then each shard scaled, as the CPU step does on the host
    double* d_acc = dalloc(sizeof(double));
    float* d_sum = dalloc(sizeof(float));
    RT_CHECK_CUDA(cudaMemset(d_acc, 0, sizeof(double)));
    double host_local = 0.0, cpu_local = 0.0;
    for (int i = 0; i < 3; i++) {
        rt_cuda_sumsq_accumulate(d_acc, d_g[i], n - (size_t)i);  // odd sizes
        host_local += rt_sumsq(d_g[i], n - (size_t)i);
        cpu_local += cpu_rt_sumsq(i == 0 ? gc : g[i], n - (size_t)i);  // g[0] clipped above
    }
    rt_cuda_sumsq_to_float(d_sum, d_acc);
    double acc = 0.0;
    float sum = 0.0f;
    RT_CHECK_CUDA(cudaMemcpy(&acc, d_acc, sizeof acc, cudaMemcpyDeviceToHost));
    RT_CHECK_CUDA(cudaMemcpy(&sum, d_sum, sizeof sum, cudaMemcpyDeviceToHost));
    CHECK(acc == host_local && sum == (float)host_local &&
              fabs(acc - cpu_local) <= 1e-12 * cpu_local,
          "sumsq_accumulate over 3 shards: %.17g == sum of rt_sumsq (CPU %.17g, rel diff %.3g); "
          "to_float %.9g",
          acc, cpu_local, fabs(acc - cpu_local) / cpu_local, sum);
    const double max_norms[2] = {0.5 * sqrt((double)sum), 2.0 * sqrt((double)sum)};
    for (int c = 0; c < 2; c++) {
        float* want = down(d_g[1], n);  // the host-norm path on a copy
        float* d_want = dup(want, n);
        (void)rt_clip_grad_norm(d_want, n, sqrt((double)sum), max_norms[c]);
        rt_cuda_clip_by_total(d_g[1], n, d_sum, max_norms[c]);
        char nm[128];
        snprintf(nm, sizeof nm, "clip_by_total (norm on the device, %s) == clip_grad_norm",
                 c ? "below max_norm: untouched" : "coefficient 0.5");
        cmp_dev(nm, d_g[1], d_want, n, TOL_EXACT);
        free(want);
        dfree(d_want);
    }
    free(gc);
    dfree(d_acc), dfree(d_sum), dfree(d_step), dfree(d_lr);
    for (int i = 0; i < 3; i++) {
        free(g[i]);
        dfree(d_g[i]);
    }
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

static void test_threads(void) {
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

int main(int argc, char** argv) {
    if (argc == 3 && !strcmp(argv[1], "--kcheck")) {  // one call its checks must stop
        if (!strcmp(argv[2], "rope")) rope_ld_short();
        else if (!strcmp(argv[2], "linear_fp32")) linear_ld_fp32();
        else if (!strcmp(argv[2], "linear_odd_oc")) linear_ld_odd_oc();
        else if (!strcmp(argv[2], "swiglu_short")) swiglu_ld_short();
        else if (!strcmp(argv[2], "swiglu_rows")) swiglu_rows_bad();
        else if (!strcmp(argv[2], "linear_dweight_acc")) linear_dweight_accumulated();
        else if (!strcmp(argv[2], "linear_dweight_odd")) linear_dweight_odd();
        else if (!strcmp(argv[2], "norm_dweight_acc")) norm_dweight_accumulated();
        else if (!strcmp(argv[2], "adam_packed_fp32")) adam_packed_fp32();
        else if (!strcmp(argv[2], "sgd_packed_fp32")) sgd_packed_fp32();
        else attention_ld_odd();
        return 0;
    }
    self_path = argv[0];
    printf("linked: all %d functions of rt_kernels.h and rt_optim.h from the CUDA library\n",
           rt_all_symbols_count);
    if (skip_without_gpu("cuda kernels")) return 0;
    struct cudaDeviceProp prop;
    RT_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    printf("device 0: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    // On the CPU emulator (tests/cuda/emu) the fp32 attention of a GPT-2 layer at sequence
    // 1024 would take minutes more; the same kernels run there at the smaller shapes, and the
    // tensor-core attention's longest sequences are shorter there.
    const int emulated = strncmp(prop.name, "cuda_emu", 8) == 0;
    on_emulator = emulated;
    RT_CHECK_CUDA(cudaSetDevice(0));
    rt_kernels_init();
    cpu_rt_kernels_init();

    test_linear(37, 65, 29, 1, RT_F32);
    test_linear(256, 384, 512, 1, RT_F32);
    test_linear(33, 17, 9, 0, RT_F32);
    test_linear(37, 65, 29, 1, RT_BF16);
    test_linear(256, 384, 512, 1, RT_BF16);
    test_linear(256, 384, 512, 0, RT_F16);
    test_linear(2050, 64, 40, 1, RT_F32);  // bias gradient over 33 row chunks
    test_linear(33, 17, 9, 0, RT_F16);     // output stride not a multiple of 8: padded product
    test_linear(33, 17, 9, 1, RT_BF16);    // the same with a bias (cuBLASLt's epilogue)
    test_linear(40, 48, 1027, 1, RT_BF16);  // rows of 1027: per-row narrowing and widening
    test_embedding(300, 70, 50, 0);
    test_embedding(5000, 300, 1000, 1);  // a 2500-row run, the rest 1-3 rows per id
    test_arange();
    test_layernorm(67, 768, 1, RT_F32);
    test_layernorm(5, 33, 0, RT_F32);
    test_layernorm(3, 5000, 1, RT_F32);  // rows longer than 4096: not kept in registers
    test_layernorm(3, 5000, 0, RT_BF16);
    test_layernorm(67, 768, 1, RT_BF16);
    test_rmsnorm(67, 768, 1, RT_F32);
    test_rmsnorm(9, 31, 0, RT_F32);
    test_rmsnorm(67, 768, 1, RT_BF16);
    // rows of 256 V elements: a warp per row (norm.cu)
    test_rmsnorm(67, 2048, 1, RT_BF16);
    test_rmsnorm(9, 256, 0, RT_F32);
    test_layernorm(5, 512, 0, RT_BF16);
    test_norm_paths(33, 512, 0);
    test_norm_paths(1300, 256, 0);  // a warp takes several rows of the weight gradients
    test_norm_paths(70, 1024, 0);   // LayerNorm's two sums at the shared-memory limit
    test_norm_paths(40, 2048, 1);   // LayerNorm's over it: the column sums; dbias alone
    test_last_block_sums();
    for (int ln = 0; ln < 2; ln++) {
        test_residual_norm(ln, RT_BF16, 33, 2048);  // a warp per row (V = 8)
        test_residual_norm(ln, RT_F16, 5, 768);     // V = 3
        test_residual_norm(ln, RT_BF16, 7, 200);    // not 256 V: the two kernels
    }
    // many rows: the weight/bias gradients are summed in row chunks (column_sums.cuh)
    test_layernorm(4100, 96, 1, RT_F32);
    test_rmsnorm(3000, 200, 1, RT_BF16);
    test_rmsnorm(3, 5000, 1, RT_BF16);  // rows longer than 4096: not kept in registers
    for (int di = 0; di < 2; di++) {
        const rt_dtype dt = di ? RT_BF16 : RT_F32;
        test_activation("gelu", cpu_rt_gelu_forward, rt_gelu_forward, cpu_rt_gelu_backward,
                        rt_gelu_backward, dt);
        test_activation("relu", cpu_rt_relu_forward, rt_relu_forward, cpu_rt_relu_backward,
                        rt_relu_backward, dt);
        test_activation("silu", cpu_rt_silu_forward, rt_silu_forward, cpu_rt_silu_backward,
                        rt_silu_backward, dt);
    }
    test_swiglu(RT_F32);
    test_swiglu(RT_BF16);
    test_rope(RT_F32);
    test_rope(RT_BF16);
    test_attention(2, 37, 4, 2, 16, 1);
    test_attention(1, 64, 2, 2, 32, 0);
    test_attention(2, 130, 6, 1, 8, 1);
    test_attention(2, 64, 4, 4, 32, 1);     // gpt_bytes
    test_attention(1, 200, 4, 2, 64, 1);    // head dims of each flash tile configuration
    test_attention(1, 150, 2, 1, 128, 0);
    test_attention(1, 97, 2, 2, 200, 1);
    if (!emulated)
        test_attention(2, 1024, 12, 12, 64, 1);  // a GPT-2 layer
    else
        printf("SKIP fp32 attention at T = 1024 on the emulator (minutes; smaller shapes cover "
               "the same kernels)\n");
    // On the emulator the longer shapes below run half the heads (h = 2), GQA ratios kept:
    // each head is its own blocks running the same code, and emulated tensor-core attention
    // costs seconds per head
    const int h = emulated ? 2 : 1;
    test_attention_tc(2, 37, 4, 2, 16, 1, RT_BF16);  // tensor cores: each tile configuration
    test_attention_tc(1, 200, 4 / h, 2 / h, 64, 1, RT_BF16);
    test_attention_tc(1, 200, 4 / h, 2 / h, 64, 0, RT_F16);
    test_attention_tc(1, 150, 2, 1, 128, 0, RT_BF16);
    test_attention_tc(1, 97, 2, 2, 128, 1, RT_F16);
    // GPT-2's head dim at seq 1024, Llama 1B's GQA ratio (32/8) at HD 64; on the emulator at
    // a quarter and three eighths of the length: still several tiles of every kernel and the
    // causal diagonal, in seconds instead of minutes
    test_attention_tc(1, emulated ? 256 : 1024, 4 / h, 4 / h, 64, 1, RT_BF16);
    test_attention_tc(1, emulated ? 192 : 512, 8 / h, 2 / h, 64, 1, RT_BF16);
    test_elementwise(RT_F32);
    test_elementwise(RT_BF16);
    test_vec_offsets(RT_F32);
    test_vec_offsets(RT_BF16);
    test_vec_offsets(RT_F16);
    test_dropout();
    test_sum_loss();
    test_cross_entropy(67, 1000, 5, 0);
    test_cross_entropy(8, 50257, 0, 0);
    test_cross_entropy(1500, 64, 3, 0);  // more rows than reduction partials
    test_cross_entropy(4, 100, 0, 1);    // every target ignored: NaN loss, no gradient
    test_cross_entropy_nan();
    test_packed(RT_BF16, 37, 24, 1027);  // odd vocabulary: padded rows
    test_packed(RT_F16, 16, 40, 64);
    // The fused loss stages rows in shared memory (loss.cu rtc_ce_stage): rows longer than a
    // block's (the emulator's 99 KiB, an H100's 227 KB), more rows than blocks, and 3
    // groups of each row staged, the rest read twice.
    test_packed(RT_BF16, 3, 8, 130001);
    test_packed(RT_BF16, 1500, 8, 72);
    rt_cuda_set_loss_stage(48);
    test_packed(RT_BF16, 37, 24, 1027);
    rt_cuda_set_loss_stage((size_t)-1);  // the device's opt-in maximum again
    test_packed_inputs(RT_BF16, 37, 24, 1027);  // OC odd: padded rows of a packed output
    test_packed_inputs(RT_F16, 64, 128, 96);
    test_packed_inputs(RT_BF16, 16, 256, 64);  // the norms' rows a warp each
    test_packed_weight(RT_F16, 64, 128, 96);
    test_packed_weight(RT_BF16, 40, 256, 512);
    test_packed_bias_no_terms(RT_BF16);
    test_packed_bias_no_terms(RT_F16);
    // tensor cores (T = 70: two query tiles, one partial; GQA); on the emulator one batch and
    // two heads, which keeps the GQA ratio and the tiles: its 31 storage combinations take
    // minutes there at B = 2, NH = 4
    test_packed_attention(RT_BF16, emulated ? 1 : 2, 70, emulated ? 2 : 4, emulated ? 1 : 2, 64);
    test_packed_attention(RT_F16, 1, 33, 2, 1, 136);   // the fp32 kernels, operands widened
    // gradients in rows of a wider matrix: the tensor cores (HD 64, 16), the fp32 kernels
    // (HD 20: rope a pair at a time; HD 136)
    test_packed_grad_rows(RT_BF16, emulated ? 1 : 2, 70, emulated ? 2 : 4, emulated ? 1 : 2, 64);
    test_packed_grad_rows(RT_F16, 1, 37, 2, 1, 16);
    test_packed_grad_rows(RT_F16, 2, 33, 4, 2, 20);
    test_packed_grad_rows(RT_BF16, 1, 33, 2, 1, 136);
    // stacked linears (w1, w3): dout a column slice; swiglu's gradients column slices (groups
    // of 8, and one element at a time for C = 20)
    test_linear_dout_slices(RT_BF16, 37, 64, 48, 32);
    test_linear_dout_slices(RT_F16, 64, 128, 96, 64);
    test_swiglu_grad_slices(RT_BF16, 33, 256);
    test_swiglu_grad_slices(RT_F16, 7, 20);
    // packed parameter gradients: the bias sums over several row chunks (N 300) and in one
    // (N 37), C and OC not multiples of 32; the norms' rows a warp each (C 256: the dw sums)
    // or a block each (C 200, and no dinp: the column sums in chunks)
    test_packed_dweight_linear(RT_BF16, 300, 72, 40);
    test_packed_dweight_linear(RT_F16, 37, 64, 48);
    test_packed_dweight_norms(RT_BF16, 300, 256);
    test_packed_dweight_norms(RT_F16, 300, 200);
    test_packed_dweight_norms(RT_BF16, 37, 24);
    test_grad_rows_checked();
    test_assign(RT_F32);
    test_assign(RT_BF16);
    test_optim();
    test_optim_grad_round();
    test_optim_rows(37, 30);
    test_optim_rows(4103, 4100);
    test_optim_packed_grads();
    test_threads();

    RT_CHECK_CUDA(cudaDeviceSynchronize());
    return check_summary();
}
