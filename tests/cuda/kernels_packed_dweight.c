// test_cuda_kernels: packed parameter gradients (RT_PACKED_DWEIGHT) of the linear and the norms.
#include "kernel_tests.h"

// On the CPU emulator (main: the device's name), where a 16-bit GEMM output is the fp32
// product rounded, so a packed dweight (and a dbias computed with it) has the fp32 call's
// bits rounded; on a GPU cuBLAS may pick another kernel for a 16-bit output, which may sum
// in another order.
int on_emulator;

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

// The linear's packed parameter gradients (RT_PACKED_DWEIGHT, assigned) against the same call
// with them in fp32 storage, rounded: dweight [OC, C] (cuBLAS's 16-bit output: bits on the
// emulator; on a GPU, whose cuBLAS may sum it in another order, within TOL_GEMM and an ulp
// of dt, as cmp_dt), dbias (in the same product or by the column sums, N over one chunk of
// them or not: the same), with
// every storage of inp, weight, dout and dinp (dinp assigned and accumulated: the fp32
// call's bits) and dbias NULL; a stack's weight gradients in one call (dinp NULL, dout a
// column slice of wider rows); no rows: zeros.
void test_packed_dweight_linear(rt_dtype dt, int N, int C, int OC) {
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
                                  N, C, OC, pk, dt, bits, ld, 0);
        rt_linear_packed_backward(pg ? d_q16 : (void*)d_g2, d_dw16, no_bias ? NULL : d_db16, d, x,
                                  wt, N, C, OC, pk | RT_PACKED_DWEIGHT, dt, bits, ld, 0);
        over_w += packed_grad_over(d_dw16, d_dw, nw, dt, tol, ulps, &differ_w, &worst_w);
        if (!no_bias) {
            over_b += packed_grad_over(d_db16, d_db, OC, dt, tol, ulps, &differ_b, &worst_b);
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
    check_packed_grad("  ... dbias packed (in the weight gradient's product, or the column sums'"
                      " store)", over_b, differ_b, worst_b, 32, OC, dt, tol, ulps);
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
                                  ldw, 0);
        rt_linear_packed_backward(NULL, d_dw16, d_db16, d_wide + col, x, d_w, N, C, OC,
                                  (ops ? RT_PACKED_INP : 0) | RT_PACKED_OUT | RT_PACKED_DWEIGHT,
                                  dt, RT_ASSIGN_DWEIGHT, ldw, 0);
        over_w = differ_w = over_b = differ_b = 0, worst_w = worst_b = 0.0;
        over_w += packed_grad_over(d_dw16, d_dw, nw, dt, tol, ulps, &differ_w, &worst_w);
        over_b += packed_grad_over(d_db16, d_db, OC, dt, tol, ulps, &differ_b, &worst_b);
        snprintf(nmk, sizeof nmk, "%s linear backward N=%d C=%d, a stack's weight gradients in "
                 "one call (dinp NULL, OC %d, dout the columns %d.. of rows of %d; input %s), "
                 "dweight packed == the fp32-storage call's rounded", nm, N, C, OC, col, ldw,
                 ops ? "packed" : "fp32");
        check_packed_grad(nmk, over_w, differ_w, worst_w, 1, nw, dt, tol, ulps);
        check_packed_grad("  ... dbias packed", over_b, differ_b, worst_b, 1, OC, dt, tol, ulps);
    }
    uint16_t* got = down16(d_wide, (size_t)N * ldw);
    CHECK(memcmp(got, start, (size_t)N * ldw * 2) == 0, "  ... the stack's dout unchanged");

    // no rows: the assigned gradients are zeros
    RT_CHECK_CUDA(cudaMemset(d_dw16, 0xAB, nw * 2));
    RT_CHECK_CUDA(cudaMemset(d_db16, 0xAB, (size_t)OC * 2));
    rt_linear_packed_backward(NULL, d_dw16, d_db16, d_d16, d_i16, d_w16, 0, C, OC,
                              RT_PACKED_INP | RT_PACKED_INP2 | RT_PACKED_OUT | RT_PACKED_DWEIGHT,
                              dt, RT_ASSIGN_DWEIGHT, 0, 0);
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
void test_packed_dweight_norms(rt_dtype dt, int N, int C) {
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
