// Tests of the dense and elementwise kernels: linear (GEMM vs triple loop, gradcheck with
// and without bias, nullable grads), embedding (gather, scatter-add with repeated ids),
// residual / product / broadcast add, the product by a number, buffer helpers and the sum of
// squares.
#include "gradcheck.h"

// ----------------------------------------------------------------------------
// linear

typedef struct {
    float *out, *inp, *w, *b, *proj;
    int N, C, OC;
} linear_ctx;

static double linear_loss(void* p) {
    linear_ctx* c = (linear_ctx*)p;
    rt_linear_forward(c->out, c->inp, c->w, c->b, c->N, c->C, c->OC, RT_F32);
    return tk_dot(c->out, c->proj, (size_t)c->N * c->OC);
}

static void test_linear(int with_bias) {
    const int N = 6, C = 7, OC = 5;
    linear_ctx c = {tk_alloc((size_t)N * OC), tk_alloc((size_t)N * C), tk_alloc((size_t)OC * C),
                    with_bias ? tk_alloc(OC) : NULL, tk_alloc((size_t)N * OC), N, C, OC};
    tk_fill(c.inp, (size_t)N * C, -1, 1);
    tk_fill(c.w, (size_t)OC * C, -1, 1);
    if (c.b) tk_fill(c.b, OC, -1, 1);
    tk_fill(c.proj, (size_t)N * OC, -1, 1);

    // forward vs the triple loop in double
    rt_linear_forward(c.out, c.inp, c.w, c.b, N, C, OC, RT_F32);
    double* ref = (double*)calloc((size_t)N * OC, sizeof(double));
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = c.b ? c.b[o] : 0.0;
            for (int k = 0; k < C; k++) s += (double)c.inp[n * C + k] * c.w[o * C + k];
            ref[n * OC + o] = s;
        }
    TK_CHECK_REF(with_bias ? "linear forward (bias) vs triple loop"
                           : "linear forward (no bias) vs triple loop",
                 c.out, ref, (size_t)N * OC, 1e-5);
    free(ref);

    tk_grad di = tk_grad_new((size_t)N * C), dw = tk_grad_new((size_t)OC * C), db = tk_grad_new(OC);
    rt_linear_backward(di.buf, dw.buf, c.b ? db.buf : NULL, c.proj, c.inp, c.w, N, C, OC, RT_F32, RT_ACCUMULATE);
    const char* tag = with_bias ? "(bias)" : "(no bias)";
    char name[96];
    snprintf(name, sizeof name, "linear dinp %s", tag);
    tk_gradcheck(name, c.inp, tk_grad_delta(&di), (size_t)N * C, linear_loss, &c, 1e-2f, 1e-2, 1e-3);
    snprintf(name, sizeof name, "linear dweight %s", tag);
    tk_gradcheck(name, c.w, tk_grad_delta(&dw), (size_t)OC * C, linear_loss, &c, 1e-2f, 1e-2, 1e-3);
    if (c.b) {
        tk_gradcheck("linear dbias", c.b, tk_grad_delta(&db), OC, linear_loss, &c, 1e-2f, 1e-2, 1e-3);
    } else {
        // dbias NULL: the untouched buffer must be exactly as before
        CHECK(memcmp(db.buf, db.before, OC * sizeof(float)) == 0, "linear: dbias untouched when NULL");
    }

    // nullable gradients: only dweight requested, dinp buffer untouched
    tk_grad di2 = tk_grad_new((size_t)N * C), dw2 = tk_grad_new((size_t)OC * C);
    rt_linear_backward(NULL, dw2.buf, NULL, c.proj, c.inp, c.w, N, C, OC, RT_F32, RT_ACCUMULATE);
    TK_CHECK_SAME("linear dweight alone equals dweight with all grads", tk_grad_delta(&dw2),
                  dw.delta, (size_t)OC * C, 1e-6);
    rt_linear_backward(di2.buf, NULL, NULL, c.proj, c.inp, c.w, N, C, OC, RT_F32, RT_ACCUMULATE);
    TK_CHECK_SAME("linear dinp alone equals dinp with all grads", tk_grad_delta(&di2), di.delta,
                  (size_t)N * C, 1e-6);
    tk_grad_free(&di), tk_grad_free(&dw), tk_grad_free(&db), tk_grad_free(&di2), tk_grad_free(&dw2);
    free(c.out), free(c.inp), free(c.w), free(c.b), free(c.proj);
}

// A larger GEMM through every BLAS path the backward uses, against loops in double.
static void test_linear_large(void) {
    const int N = 67, C = 129, OC = 65;
    float *inp = tk_alloc((size_t)N * C), *w = tk_alloc((size_t)OC * C), *b = tk_alloc(OC);
    float *out = tk_alloc((size_t)N * OC), *dout = tk_alloc((size_t)N * OC);
    float *di = tk_alloc((size_t)N * C), *dw = tk_alloc((size_t)OC * C), *db = tk_alloc(OC);
    tk_fill(inp, (size_t)N * C, -1, 1), tk_fill(w, (size_t)OC * C, -1, 1), tk_fill(b, OC, -1, 1);
    tk_fill(dout, (size_t)N * OC, -1, 1);
    rt_linear_forward(out, inp, w, b, N, C, OC, RT_F32);
    rt_linear_backward(di, dw, db, dout, inp, w, N, C, OC, RT_F32, RT_ACCUMULATE);
    double* r = (double*)calloc((size_t)N * C + (size_t)OC * C + (size_t)N * OC + OC, sizeof(double));
    double *rout = r, *rdi = r + (size_t)N * OC, *rdw = rdi + (size_t)N * C, *rdb = rdw + (size_t)OC * C;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = b[o];
            for (int k = 0; k < C; k++) s += (double)inp[n * C + k] * w[o * C + k];
            rout[n * OC + o] = s;
            for (int k = 0; k < C; k++) {
                rdi[n * C + k] += (double)dout[n * OC + o] * w[o * C + k];
                rdw[o * C + k] += (double)dout[n * OC + o] * inp[n * C + k];
            }
            rdb[o] += dout[n * OC + o];
        }
    TK_CHECK_REF("linear 67x129->65 forward vs loops", out, rout, (size_t)N * OC, 1e-5);
    TK_CHECK_REF("linear 67x129->65 dinp vs loops", di, rdi, (size_t)N * C, 1e-5);
    TK_CHECK_REF("linear 67x129->65 dweight vs loops", dw, rdw, (size_t)OC * C, 1e-5);
    TK_CHECK_REF("linear 67x129->65 dbias vs loops", db, rdb, (size_t)OC, 1e-6);
    free(r), free(inp), free(w), free(b), free(out), free(dout), free(di), free(dw), free(db);
}

// ----------------------------------------------------------------------------
// embedding

typedef struct {
    float *out, *w, *proj;
    const int32_t* ids;
    int N, C, V;
} emb_ctx;

static double emb_loss(void* p) {
    emb_ctx* c = (emb_ctx*)p;
    rt_embedding_forward(c->out, c->ids, c->w, c->N, c->C, c->V);
    return tk_dot(c->out, c->proj, (size_t)c->N * c->C);
}

static void test_embedding(void) {
    const int N = 7, C = 5, V = 6;
    const int32_t ids[7] = {3, 0, 5, 3, 3, 1, 0};  // repeats must accumulate
    emb_ctx c = {tk_alloc((size_t)N * C), tk_alloc((size_t)V * C), tk_alloc((size_t)N * C), ids, N, C, V};
    tk_fill(c.w, (size_t)V * C, -1, 1), tk_fill(c.proj, (size_t)N * C, -1, 1);
    rt_embedding_forward(c.out, ids, c.w, N, C, V);
    int same = 1;
    for (int n = 0; n < N; n++)
        same &= memcmp(c.out + n * C, c.w + ids[n] * C, C * sizeof(float)) == 0;
    CHECK(same, "embedding forward: %d rows are exact copies of weight[ids]", N);
    tk_grad dw = tk_grad_new((size_t)V * C);
    rt_embedding_backward(dw.buf, c.proj, ids, N, C, V);
    tk_gradcheck("embedding dweight (repeated ids)", c.w, tk_grad_delta(&dw), (size_t)V * C,
                 emb_loss, &c, 1e-2f, 1e-2, 1e-3);
    // row 2 and 4 are never looked up: exactly untouched
    CHECK(memcmp(dw.buf + 2 * C, dw.before + 2 * C, C * sizeof(float)) == 0 &&
              memcmp(dw.buf + 4 * C, dw.before + 4 * C, C * sizeof(float)) == 0,
          "embedding backward leaves unused rows 2 and 4 untouched");
    int32_t pos[5];
    rt_arange_i32(pos, 5, 3);
    CHECK(pos[0] == 3 && pos[4] == 7, "arange_i32(5, start 3) = 3..7: got %d..%d", pos[0], pos[4]);
    tk_grad_free(&dw);
    free(c.out), free(c.w), free(c.proj);
}

// ----------------------------------------------------------------------------
// residual, product, broadcast add

typedef struct {
    int op;  // 0 residual, 1 mul, 2 broadcast add
    float *out, *a, *b, *proj;
    int rows, cols;
} bin_ctx;

static double bin_loss(void* p) {
    bin_ctx* c = (bin_ctx*)p;
    size_t n = (size_t)c->rows * c->cols;
    if (c->op == 0) rt_residual_forward(c->out, c->a, c->b, n, RT_F32);
    if (c->op == 1) rt_mul_forward(c->out, c->a, c->b, n, RT_F32);
    if (c->op == 2) rt_broadcast_add_forward(c->out, c->a, c->b, c->rows, c->cols, RT_F32);
    return tk_dot(c->out, c->proj, n);
}

static void test_binary(void) {
    const char* names[3] = {"residual", "mul", "broadcast_add"};
    for (int op = 0; op < 3; op++) {
        const int rows = 4, cols = 9;
        const size_t n = (size_t)rows * cols, nb = op == 2 ? (size_t)cols : n;
        bin_ctx c = {op, tk_alloc(n), tk_alloc(n), tk_alloc(nb), tk_alloc(n), rows, cols};
        tk_fill(c.a, n, -1, 1), tk_fill(c.b, nb, -1, 1), tk_fill(c.proj, n, -1, 1);
        bin_loss(&c);
        double* ref = (double*)calloc(n, sizeof(double));
        for (size_t i = 0; i < n; i++) {
            double bv = op == 2 ? c.b[i % cols] : c.b[i];
            ref[i] = op == 1 ? (double)c.a[i] * bv : (double)c.a[i] + bv;
        }
        char name[96];
        snprintf(name, sizeof name, "%s forward vs reference", names[op]);
        TK_CHECK_REF(name, c.out, ref, n, 1e-6);
        tk_grad da = tk_grad_new(n), db = tk_grad_new(nb);
        if (op == 0) rt_residual_backward(da.buf, db.buf, c.proj, n, RT_F32, RT_ACCUMULATE);
        if (op == 1) rt_mul_backward(da.buf, db.buf, c.proj, c.a, c.b, n, RT_F32, RT_ACCUMULATE);
        if (op == 2) rt_broadcast_add_backward(da.buf, db.buf, c.proj, rows, cols, RT_F32, RT_ACCUMULATE);
        snprintf(name, sizeof name, "%s da", names[op]);
        tk_gradcheck(name, c.a, tk_grad_delta(&da), n, bin_loss, &c, 1e-2f, 1e-2, 1e-3);
        snprintf(name, sizeof name, "%s db", names[op]);
        tk_gradcheck(name, c.b, tk_grad_delta(&db), nb, bin_loss, &c, 1e-2f, 1e-2, 1e-3);
        // nullable: each side alone
        tk_grad da2 = tk_grad_new(n);
        if (op == 0) rt_residual_backward(da2.buf, NULL, c.proj, n, RT_F32, RT_ACCUMULATE);
        if (op == 1) rt_mul_backward(da2.buf, NULL, c.proj, c.a, c.b, n, RT_F32, RT_ACCUMULATE);
        if (op == 2) rt_broadcast_add_backward(da2.buf, NULL, c.proj, rows, cols, RT_F32, RT_ACCUMULATE);
        snprintf(name, sizeof name, "%s da with db NULL", names[op]);
        TK_CHECK_SAME(name, tk_grad_delta(&da2), da.delta, n, 1e-6);
        tk_grad_free(&da), tk_grad_free(&db), tk_grad_free(&da2);
        free(ref), free(c.out), free(c.a), free(c.b), free(c.proj);
    }
    // in place forward: out == a
    float x[4] = {1, 2, 3, 4}, y[4] = {10, 20, 30, 40};
    rt_residual_forward(x, x, y, 4, RT_F32);
    CHECK(x[0] == 11 && x[3] == 44, "residual forward in place (out == a): %g %g", x[0], x[3]);
}

// ----------------------------------------------------------------------------
// helpers and sum of squares

static void test_helpers(void) {
    float a[5] = {1, -2, 3, -4, 5}, b[5];
    rt_copy(b, a, 5);
    CHECK(memcmp(a, b, sizeof a) == 0, "copy: 5 values identical");
    rt_scale(b, a, 5, 0.5f);
    CHECK(b[0] == 0.5f && b[3] == -2.0f, "scale by 0.5: %g %g", b[0], b[3]);
    rt_scale(b, b, 5, 2.0f);
    CHECK(memcmp(a, b, sizeof a) == 0, "scale in place by 2 restores the input");
    rt_accumulate(b, a, 5);
    CHECK(b[1] == -4.0f && b[4] == 10.0f, "accumulate: %g %g", b[1], b[4]);
    rt_axpy(b, a, 5, -2.0f);
    CHECK(b[0] == 0.0f && b[4] == 0.0f, "axpy alpha -2 cancels: %g %g", b[0], b[4]);
    rt_copy(b, a, 5);
    rt_zero(b, 5);
    int zero = 1;
    for (int i = 0; i < 5; i++) zero &= b[i] == 0.0f;
    CHECK(zero, "zero: 5 values are 0");
    CHECK(rt_sumsq(a, 5) == 55.0, "sumsq(1,-2,3,-4,5) = 55: got %.17g", rt_sumsq(a, 5));

    // sumsq over an odd-length buffer vs double loop, and split sums (sharded) vs whole
    const size_t n = 100003;
    float* x = tk_alloc(n);
    tk_fill(x, n, -3, 3);
    double ref = 0.0;
    for (size_t i = 0; i < n; i++) ref += (double)x[i] * x[i];
    double got = rt_sumsq(x, n);
    CHECK(fabs(got - ref) <= 1e-12 * ref, "sumsq of %zu values: %.17g vs loop %.17g (rel %.2g)", n,
          got, ref, fabs(got - ref) / ref);
    double split = rt_sumsq(x, 33333) + rt_sumsq(x + 33333, 33333) + rt_sumsq(x + 66666, n - 66666);
    CHECK(fabs(split - ref) <= 1e-12 * ref, "sumsq as 3 shards summed: rel diff %.2g",
          fabs(split - ref) / ref);
    free(x);
}

// ----------------------------------------------------------------------------
// scale as an op: out = s * inp, backward dinp += s * dout (rt_axpy)

typedef struct {
    float *out, *inp, *proj;
    size_t n;
    float s;
} scale_ctx;

static double scale_loss(void* p) {
    scale_ctx* c = (scale_ctx*)p;
    rt_scale(c->out, c->inp, c->n, c->s);
    return tk_dot(c->out, c->proj, c->n);
}

static void test_scale_grad(void) {
    scale_ctx c = {tk_alloc(20), tk_alloc(20), tk_alloc(20), 20, -1.75f};
    tk_fill(c.inp, 20, -1, 1), tk_fill(c.proj, 20, -1, 1);
    tk_grad di = tk_grad_new(20);
    rt_axpy(di.buf, c.proj, 20, c.s);
    tk_gradcheck("scale (s=-1.75) dinp via axpy", c.inp, tk_grad_delta(&di), 20, scale_loss, &c,
                 1e-2f, 1e-2, 1e-3);
    tk_grad_free(&di);
    free(c.out), free(c.inp), free(c.proj);
}

// ----------------------------------------------------------------------------
// product by a number (rt_scale_forward / rt_scale_backward): PyTorch's x * s for a float
// s, the scalar already fp32: out = round(x * s), dinp = round(dinp + dout * s) to dt. The
// reference multiplies in double (exact for two floats), rounds to float, then to dt.

typedef struct {
    float *out, *inp, *proj;
    size_t n;
    float s;
} scale_op_ctx;

static double scale_op_loss(void* p) {
    scale_op_ctx* c = (scale_op_ctx*)p;
    rt_scale_forward(c->out, c->inp, c->n, c->s, RT_F32);
    return tk_dot(c->out, c->proj, c->n);
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static float prod_f(float x, float s) { return (float)((double)x * (double)s); }

static void test_scale_op(void) {
    const rt_dtype dts[3] = {RT_F32, RT_BF16, RT_F16};
    const char* dn[3] = {"fp32", "bf16", "fp16"};
    const float ss[3] = {0.37f, 2.0f, -1.0f / 3.0f};
    const size_t n = 4099;
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 3; k++) {
            const rt_dtype dt = dts[d];
            const float s = ss[k];
            float *x = tk_alloc(n), *dout = tk_alloc(n), *init = tk_alloc(n), *out = tk_alloc(n);
            tk_fill(x, n, -6, 6), tk_fill(dout, n, -3, 3), tk_fill(init, n, -1, 1);
            tk_round_all(x, n, dt), tk_round_all(dout, n, dt), tk_round_all(init, n, dt);
            x[0] = 0.0f, x[1] = -0.0f;
            rt_scale_forward(out, x, n, s, dt);
            size_t diff = 0, changed = 0;
            for (size_t i = 0; i < n; i++) {
                const float p = prod_f(x[i], s);
                diff += !same_bits(out[i], tk_round(p, dt));
                changed += !same_bits(p, tk_round(p, dt));
            }
            // x * 2 is exact in any dtype; another s must leave values for dt to round
            const int rounds = dt == RT_F32 || s == 2.0f || changed > 0;
            CHECK(diff == 0 && rounds, "scale %s forward s=%.9g: %zu values = round(x * s) bit "
                  "for bit: %zu differ (%zu changed by the rounding)", dn[d], (double)s, n, diff,
                  changed);
            float* g = tk_dup(init, n);
            rt_scale_backward(g, dout, n, s, dt, RT_ACCUMULATE);
            diff = 0;
            for (size_t i = 0; i < n; i++)
                diff += !same_bits(g[i], tk_round(init[i] + prod_f(dout[i], s), dt));
            CHECK(diff == 0, "scale %s backward s=%.9g dinp (+=): %zu values = round(dinp + dout "
                  "* s): %zu differ", dn[d], (double)s, n, diff);
            for (size_t i = 0; i < n; i++) g[i] = NAN;
            rt_scale_backward(g, dout, n, s, dt, RT_ASSIGN_1);
            diff = 0;
            for (size_t i = 0; i < n; i++)
                diff += !same_bits(g[i], tk_round(0.0f + prod_f(dout[i], s), dt));
            CHECK(diff == 0, "scale %s backward s=%.9g dinp (=, RT_ASSIGN_1, NaN before): %zu "
                  "values = round(dout * s): %zu differ", dn[d], (double)s, n, diff);
            rt_scale_backward(NULL, dout, n, s, dt, RT_ASSIGN_1);  // nullable: nothing written
            memcpy(g, x, n * sizeof(float));
            rt_scale_forward(g, g, n, s, dt);
            CHECK(memcmp(g, out, n * sizeof(float)) == 0, "scale %s forward in place (out == inp) "
                  "s=%.9g: the same bits", dn[d], (double)s);
            free(x), free(dout), free(init), free(out), free(g);
        }
    scale_op_ctx c = {tk_alloc(20), tk_alloc(20), tk_alloc(20), 20, 0.37f};
    tk_fill(c.inp, 20, -1, 1), tk_fill(c.proj, 20, -1, 1);
    tk_grad di = tk_grad_new(20);
    rt_scale_backward(di.buf, c.proj, 20, c.s, RT_F32, RT_ACCUMULATE);
    tk_gradcheck("scale op (s=0.37) dinp", c.inp, tk_grad_delta(&di), 20, scale_op_loss, &c, 1e-2f,
                 1e-2, 1e-3);
    tk_grad_free(&di);
    free(c.out), free(c.inp), free(c.proj);
}

int main(void) {
    rt_kernels_init();
    tk_seed(1);
    test_linear(1);
    test_linear(0);
    test_linear_large();
    test_embedding();
    test_binary();
    test_helpers();
    test_scale_grad();
    test_scale_op();
    return tk_summary("test_dense");
}
