// test_cuda_kernels: LayerNorm and RMSNorm, their kernel paths and fixed-order sums, residual + norm.
#include "kernel_tests.h"

// ----------------------------------------------------------------------------
// LayerNorm and RMSNorm

// dt RT_BF16: inputs exact in bf16, out and dinp rounded to it (cmp_dt, one ulp on top of
// the fp32 tolerance: reduction orders differ); mean, rstd, dweight, dbias stay fp32.
void test_layernorm(int N, int C, int affine, rt_dtype dt) {
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

void test_rmsnorm(int N, int C, int affine, rt_dtype dt) {  // dt: as test_layernorm
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
void test_norm_paths(int N, int C, int bias_only) {
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

void test_last_block_sums(void) {
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

// A residual add and the norm of its sum in one call (ln: rt_residual_layernorm_packed_forward
// with a bias, else rt_residual_rmsnorm_packed_forward) == the two calls, bit for bit: the
// sum, the norm's output, mean and rstd, with every storage of a, b, the sum and the output;
// rows of 256 V elements (one kernel, a warp per row) and rows of other lengths (the two
// kernels).
void test_residual_norm(int ln, rt_dtype dt, int N, int C) {
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
