// test_cuda_kernels: embedding, arange, rope, the binary elementwise ops, the product by a
// number, buffer helpers, dropout.
#include "kernel_tests.h"

// ----------------------------------------------------------------------------
// embedding and arange

// ids: pattern 0 spreads repeats over the vocabulary ((7 n + n / 3) % V); pattern 1 makes
// every other row id 7 (one long run after the sort, rows far apart) and the rest distinct
// where V allows.
void test_embedding(int N, int C, int V, int pattern) {
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

// The lookup into a 16-bit output (rt_embedding_packed_forward): the weight's rows rounded to
// dt, bit for bit, packed and in fp32 storage (the CPU's: tests/kernels/test_packed.c); C 64
// takes the kernel's groups of 8, C 20 (fp32 storage only: packed rows are groups of 8) one
// at a time.
void test_embedding_packed(rt_dtype dt, int N, int C, int V) {
    const char* P = dt == RT_BF16 ? "bf16" : "fp16";
    const size_t n = (size_t)N * C;
    int32_t* ids = (int32_t*)malloc((size_t)N * sizeof *ids);
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 7 + 3) % V);
    float* w = hrand((size_t)V * C, 1.0f, 0.0f);
    float* want = malloc(n * sizeof(float));
    for (int i = 0; i < N; i++) memcpy(want + (size_t)i * C, w + (size_t)ids[i] * C, (size_t)C * 4);
    round_to(want, n, dt);
    uint16_t* want16 = bits16(want, n, dt);
    int32_t* d_ids = dup_i32(ids, N);
    float *d_w = dup(w, (size_t)V * C), *d_out = dalloc(n * sizeof(float));
    int ok = 1;
    rt_embedding_packed_forward(d_out, d_ids, d_w, N, C, V, 0, dt);
    float* got = down(d_out, n);
    ok &= memcmp(got, want, n * 4) == 0;
    if (C % 8 == 0) {
        void* d16 = dalloc(n * 2);
        rt_embedding_packed_forward(d16, d_ids, d_w, N, C, V, RT_PACKED_OUT, dt);
        uint16_t* g16 = down16(d16, n);
        ok &= memcmp(g16, want16, n * 2) == 0;
        free(g16), dfree(d16);
    }
    CHECK(ok, "%s embedding lookup into a 16-bit output (%s) == the weight's rows rounded, bit for "
          "bit, N=%d C=%d V=%d", P, C % 8 == 0 ? "packed and fp32 storage" : "fp32 storage",
          N, C, V);
    free(ids), free(w), free(want), free(want16), free(got);
    dfree(d_ids), dfree(d_w), dfree(d_out);
}

void test_arange(void) {
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
// rope

// dt RT_BF16: out and dinp rounded to bf16 (one ulp on top of TOL_ELEM where the device's
// double cos/sin differ from the host's in the last bit). HD 16 takes the kernel's groups
// of four pairs, HD 10 its pairs one at a time; the groups' operands one float off their
// alignment take the pairs too, and must give the groups' bits.
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

void test_rope(rt_dtype dt) {
    test_rope_shape(dt, 2, 45, 3, 16);
    test_rope_shape(dt, 3, 7, 5, 10);
    // HD 1024 (four passes of the angles), 384 groups a row (two passes of a block's 256
    // threads), T 2048 (one block per position: each takes both batch rows in turn)
    if (dt == RT_BF16) test_rope_shape(dt, 2, 2048, 3, 1024);
}

// ----------------------------------------------------------------------------
// binary elementwise ops and buffer helpers

// The binary ops do the CPU's float operations in its order, so their rounded outputs are
// the CPU's bits for any dt (tolerance 0); broadcast_add's db (column sums, another order)
// is not rounded. The buffer helpers (no dt) run once, with dt RT_F32.
void test_elementwise(rt_dtype dt) {
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
// product by a number (x * s): the CPU's float operations, so its bits for any dt; the
// gradient accumulated, assigned (NaN before on both sides) and NULL, the forward in place;
// with a 16-bit dt, packed storage too

// n values of x in storage of es bytes (fp32, or dt's 16-bit bits) at h, and at d (device)
// unless NULL; poisoned (NaN, 0xABAB) where x is NULL: what an assigning call must overwrite.
static void scale_vals(void* h, void* d, const float* x, size_t n, int es, rt_dtype dt) {
    for (size_t i = 0; i < n; i++) {
        if (es == 4) ((float*)h)[i] = x ? x[i] : NAN;
        else ((uint16_t*)h)[i] = x ? rt_bits16_from_f32_inl(x[i], dt) : 0xABAB;
    }
    if (d) RT_CHECK_CUDA(cudaMemcpy(d, h, n * es, cudaMemcpyHostToDevice));
}

// The packed calls against the CPU's fp32-storage ones (whose bits the packed calls give,
// rt_kernels.h), bit for bit: every storage of out and inp (and both packed in place), of
// dout and dinp (dinp assigned and accumulated), at a 16-byte-aligned address and one
// element further (the vectorised kernel and the one-at-a-time one).
static void test_scale_packed(rt_dtype dt, const float* x, const float* dout, const float* init,
                              size_t n) {
    const char* P = dt == RT_BF16 ? "bf16" : "fp16";
    const float ss[2] = {0.37f, -3.0f};
    void *d_a = dalloc((n + 1) * 4), *d_b = dalloc((n + 1) * 4);
    void *h = malloc(n * 4), *want = malloc(n * 4), *got = malloc(n * 4);
    float* ref = malloc(n * sizeof(float));
    if (!h || !want || !got || !ref) abort();
    int same = 1, calls = 0;
    for (int k = 0; k < 2; k++) {
        for (int off = 0; off < 2; off++) {
            cpu_rt_scale_forward(ref, x, n, ss[k], dt);
            for (int bits = 1; bits < 5; bits++) {  // 4: out == inp, both packed
                const int pk = bits == 4 ? RT_PACKED_OUT | RT_PACKED_INP : bits;
                const int eo = pk & RT_PACKED_OUT ? 2 : 4, ei = pk & RT_PACKED_INP ? 2 : 4;
                void *po = (char*)d_a + off * eo, *pi = bits == 4 ? po : (char*)d_b + off * ei;
                scale_vals(h, pi, x, n, ei, dt);
                rt_scale_packed_forward(po, pi, n, ss[k], pk, dt);
                scale_vals(want, NULL, ref, n, eo, dt);
                RT_CHECK_CUDA(cudaMemcpy(got, po, n * eo, cudaMemcpyDeviceToHost));
                same &= memcmp(got, want, n * eo) == 0;
                calls++;
            }
            for (int bits = 0; bits < 8; bits++) {
                const int pk = (bits & 1 ? RT_PACKED_OUT : 0) | (bits & 2 ? RT_PACKED_DINP : 0);
                const int as = bits & 4 ? RT_ASSIGN_1 : RT_ACCUMULATE;
                const int eg = pk & RT_PACKED_DINP ? 2 : 4, ed = pk & RT_PACKED_OUT ? 2 : 4;
                void *pg = (char*)d_a + off * eg, *pd = (char*)d_b + off * ed;
                scale_vals(h, pg, as ? NULL : init, n, eg, dt);
                scale_vals(h, pd, dout, n, ed, dt);
                rt_scale_packed_backward(pg, pd, n, ss[k], pk, dt, as);
                for (size_t i = 0; i < n; i++) ref[i] = as ? NAN : init[i];
                cpu_rt_scale_backward(ref, dout, n, ss[k], dt, as);
                scale_vals(want, NULL, ref, n, eg, dt);
                RT_CHECK_CUDA(cudaMemcpy(got, pg, n * eg, cudaMemcpyDeviceToHost));
                same &= memcmp(got, want, n * eg) == 0;
                calls++;
            }
        }
    }
    rt_scale_packed_backward(NULL, d_b, n, 0.37f, RT_PACKED_OUT | RT_PACKED_DINP, dt,
                             RT_ASSIGN_1);  // nullable: no launch
    RT_CHECK_CUDA(cudaDeviceSynchronize());
    CHECK(same, "scale %s packed n=%zu, s=0.37 and -3: %d calls (every storage of out, inp, in "
          "place; of dout, dinp, assigned and accumulated; aligned and one element further) == "
          "the CPU's rt_scale_forward, rt_scale_backward, bit for bit", P, n, calls);
    free(h), free(want), free(got), free(ref), dfree(d_a), dfree(d_b);
}

void test_scale_op(rt_dtype dt) {
    const size_t n = 10007;
    const char* P = dt == RT_BF16 ? "bf16" : dt == RT_F16 ? "fp16" : "fp32";
    const float ss[2] = {0.37f, -3.0f};
    char nm[96];
    float *x = hrand(n, 4.0f, 0.0f), *dout = hrand(n, 2.0f, 0.0f), *init = hrand(n, 1.0f, 0.0f);
    float *out = hrand(n, 1.0f, 0.0f), *g = hrand(n, 1.0f, 0.0f);
    round_to(x, n, dt), round_to(dout, n, dt), round_to(init, n, dt);
    float *d_x = dup(x, n), *d_dout = dup(dout, n), *d_out = dup(out, n), *d_g = dup(g, n);
    for (int k = 0; k < 2; k++) {
        const float s = ss[k];
        cpu_rt_scale_forward(out, x, n, s, dt);
        rt_scale_forward(d_out, d_x, n, s, dt);
        snprintf(nm, sizeof nm, "scale %s forward s=%g n=10007", P, (double)s);
        cmp_dt(nm, d_out, out, n, TOL_EXACT, dt, 0);
        rt_scale_forward(d_out, d_out, n, s, dt);  // in place: out == inp
        cpu_rt_scale_forward(out, out, n, s, dt);
        snprintf(nm, sizeof nm, "scale %s forward s=%g in place", P, (double)s);
        cmp_dt(nm, d_out, out, n, TOL_EXACT, dt, 0);
        for (int as = 0; as < 2; as++) {
            reset_out(g, d_g, init, n, as);
            cpu_rt_scale_backward(g, dout, n, s, dt, as ? RT_ASSIGN_1 : RT_ACCUMULATE);
            rt_scale_backward(d_g, d_dout, n, s, dt, as ? RT_ASSIGN_1 : RT_ACCUMULATE);
            snprintf(nm, sizeof nm, "scale %s backward s=%g dinp (%s)", P, (double)s,
                     as ? "=" : "+=");
            cmp_dt(nm, d_g, g, n, TOL_EXACT, dt, 0);
        }
    }
    rt_scale_backward(NULL, d_dout, n, 0.37f, dt, RT_ASSIGN_1);  // nullable: no launch
    RT_CHECK_CUDA(cudaDeviceSynchronize());
    if (dt != RT_F32) test_scale_packed(dt, x, dout, init, n);
    free(x), free(dout), free(init), free(out), free(g);
    dfree(d_x), dfree(d_dout), dfree(d_out), dfree(d_g);
}

// ----------------------------------------------------------------------------
// dropout

void test_dropout(void) {
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
