// Tests of the activations: known values (GELU(1) = 0.8413447, ...), forward vs double
// reference, gradcheck, ReLU's zero gradient at 0, in-place forward, and the fused SwiGLU
// against separate silu and mul kernels with rounded outputs (bit for bit, fp32/bf16/fp16).
#include "gradcheck.h"

// ----------------------------------------------------------------------------
// unary ops through one context

typedef struct {
    int op;  // 0 gelu, 1 relu, 2 silu, 3 swiglu
    float *out, *a, *b, *proj;
    size_t n;
} act_ctx;

static const char* act_names[4] = {"gelu", "relu", "silu", "swiglu"};

static double act_loss(void* p) {
    act_ctx* c = (act_ctx*)p;
    if (c->op == 0) rt_gelu_forward(c->out, c->a, c->n, RT_F32);
    if (c->op == 1) rt_relu_forward(c->out, c->a, c->n, RT_F32);
    if (c->op == 2) rt_silu_forward(c->out, c->a, c->n, RT_F32);
    if (c->op == 3) rt_swiglu_forward(c->out, c->a, c->b, c->n, RT_F32);
    return tk_dot(c->out, c->proj, c->n);
}

static double ref_act(int op, double x, double y) {
    double silu = x / (1.0 + exp(-x));
    switch (op) {
        case 0: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
        case 1: return x > 0 ? x : 0.0;
        case 2: return silu;
        default: return silu * y;
    }
}

static void test_act(int op) {
    const size_t n = 64;
    act_ctx c = {op, tk_alloc(n), tk_alloc(n), op == 3 ? tk_alloc(n) : NULL, tk_alloc(n), n};
    // ReLU is not differentiable at 0: keep its inputs 0.05 away from the kink (h = 1e-2)
    if (op == 1)
        tk_fill_away_from_zero(c.a, n, 0.05f, 3.0f);
    else
        tk_fill(c.a, n, -4, 4);
    if (c.b) tk_fill(c.b, n, -2, 2);
    tk_fill(c.proj, n, -1, 1);
    act_loss(&c);
    double ref[64];
    for (size_t i = 0; i < n; i++) ref[i] = ref_act(op, c.a[i], c.b ? c.b[i] : 0.0);
    char name[96];
    snprintf(name, sizeof name, "%s forward vs double reference on [-4,4]", act_names[op]);
    TK_CHECK_REF(name, c.out, ref, n, 1e-6);
    tk_grad da = tk_grad_new(n), db = tk_grad_new(n);
    if (op == 0) rt_gelu_backward(da.buf, c.proj, c.a, n, RT_F32, RT_ACCUMULATE);
    if (op == 1) rt_relu_backward(da.buf, c.proj, c.a, n, RT_F32, RT_ACCUMULATE);
    if (op == 2) rt_silu_backward(da.buf, c.proj, c.a, n, RT_F32, RT_ACCUMULATE);
    if (op == 3) rt_swiglu_backward(da.buf, db.buf, c.proj, c.a, c.b, n, RT_F32, RT_ACCUMULATE);
    snprintf(name, sizeof name, "%s dinp", act_names[op]);
    tk_gradcheck(name, c.a, tk_grad_delta(&da), n, act_loss, &c, 1e-2f, 1e-2, 1e-3);
    if (op == 3) {
        tk_gradcheck("swiglu db", c.b, tk_grad_delta(&db), n, act_loss, &c, 1e-2f, 1e-2, 1e-3);
        tk_grad da2 = tk_grad_new(n);
        rt_swiglu_backward(da2.buf, NULL, c.proj, c.a, c.b, n, RT_F32, RT_ACCUMULATE);
        TK_CHECK_SAME("swiglu da with db NULL", tk_grad_delta(&da2), da.delta, n, 1e-6);
        tk_grad_free(&da2);
    }
    // in place: out == inp
    float* x = tk_dup(c.a, n);
    if (op == 0) rt_gelu_forward(x, x, n, RT_F32);
    if (op == 1) rt_relu_forward(x, x, n, RT_F32);
    if (op == 2) rt_silu_forward(x, x, n, RT_F32);
    if (op == 3) rt_swiglu_forward(x, x, c.b, n, RT_F32);
    act_loss(&c);
    snprintf(name, sizeof name, "%s forward in place equals out of place", act_names[op]);
    CHECK(memcmp(x, c.out, n * sizeof(float)) == 0, "%s", name);
    tk_grad_free(&da), tk_grad_free(&db);
    free(x), free(c.out), free(c.a), free(c.b), free(c.proj);
}

// ----------------------------------------------------------------------------
// known values

static void test_known(void) {
    float x[5] = {1.0f, -1.0f, 0.0f, 2.0f, -3.0f}, y[5];
    rt_gelu_forward(y, x, 5, RT_F32);
    CHECK_CLOSE("GELU(1) = 0.8413447", y[0], 0.8413447460685429, 2e-7);
    CHECK_CLOSE("GELU(-1) = -0.1586553", y[1], -0.15865525393145707, 2e-7);
    CHECK(y[2] == 0.0f, "GELU(0) = 0 exactly: got %g", y[2]);
    CHECK_CLOSE("GELU(2) = 1.9544997", y[3], 1.9544997361036416, 2e-7);
    CHECK_CLOSE("GELU(-3) = -0.0040497", y[4], -0.00404969409489031, 1e-8);
    float g[5] = {0};
    const float ones[5] = {1, 1, 1, 1, 1};
    rt_gelu_backward(g, ones, x, 5, RT_F32, RT_ACCUMULATE);
    CHECK_CLOSE("GELU'(1) = Phi(1) + phi(1) = 1.0833155", g[0], 1.0833154705876864, 2e-7);
    CHECK_CLOSE("GELU'(0) = 0.5", g[2], 0.5, 1e-7);
    rt_silu_forward(y, x, 5, RT_F32);
    CHECK_CLOSE("SiLU(1) = 0.7310586", y[0], 0.7310585786300049, 2e-7);
    CHECK_CLOSE("SiLU(-1) = -0.2689414", y[1], -0.2689414213699951, 2e-7);
    memset(g, 0, sizeof g);
    rt_silu_backward(g, ones, x, 5, RT_F32, RT_ACCUMULATE);
    CHECK_CLOSE("SiLU'(0) = 0.5", g[2], 0.5, 1e-7);
    CHECK_CLOSE("SiLU'(1) = s(1)(1 + 1 - s(1)) = 0.9276705", g[0], 0.9276705118714869, 2e-7);
    rt_relu_forward(y, x, 5, RT_F32);
    CHECK(y[0] == 1.0f && y[1] == 0.0f && y[2] == 0.0f && y[3] == 2.0f,
          "ReLU(1,-1,0,2) = (%g,%g,%g,%g)", y[0], y[1], y[2], y[3]);
    memset(g, 0, sizeof g);
    rt_relu_backward(g, ones, x, 5, RT_F32, RT_ACCUMULATE);
    CHECK(g[0] == 1.0f && g[1] == 0.0f && g[2] == 0.0f,
          "ReLU gradient at (1,-1,0) = (%g,%g,%g): 0 at the kink as PyTorch", g[0], g[1], g[2]);
    float b[5] = {2, 2, 2, 2, 2};
    rt_swiglu_forward(y, x, b, 5, RT_F32);
    CHECK_CLOSE("SwiGLU(a=1, b=2) = 2 SiLU(1)", y[0], 2 * 0.7310585786300049, 2e-7);
    // large |x|: no overflow to NaN in the sigmoid
    float big[2] = {-100.0f, 100.0f}, ob[2];
    rt_silu_forward(ob, big, 2, RT_F32);
    CHECK(ob[0] == 0.0f && ob[1] == 100.0f, "SiLU(-100) = %g, SiLU(100) = %g (no NaN)", ob[0], ob[1]);
    rt_gelu_forward(ob, big, 2, RT_F32);
    CHECK(ob[0] == 0.0f && ob[1] == 100.0f, "GELU(-100) = %g, GELU(100) = %g", ob[0], ob[1]);
}

// ----------------------------------------------------------------------------
// fused SwiGLU (which rounds out, da, db and its intermediates itself) = silu, round, mul,
// round (the unfused sequence: fp32 kernels, each output rounded in a separate pass)

static void test_swiglu_matches_unfused(rt_dtype dt) {
    const size_t n = 4096;
    float *a = tk_alloc(n), *b = tk_alloc(n), *dout = tk_alloc(n);
    float *da = tk_alloc(n), *db = tk_alloc(n), *out = tk_alloc(n);
    tk_fill(a, n, -6, 6), tk_fill(b, n, -3, 3), tk_fill(dout, n, -2, 2);
    tk_fill(da, n, -1, 1), tk_fill(db, n, -1, 1);
    a[0] = 0.0f, dout[1] = -0.0f, b[2] = 0.0f;  // signed zeros through both paths
    tk_round_all(a, n, dt), tk_round_all(b, n, dt), tk_round_all(dout, n, dt);
    tk_round_all(da, n, dt), tk_round_all(db, n, dt);
    float *da_u = tk_dup(da, n), *db_u = tk_dup(db, n), *s = tk_alloc(n), *out_u = tk_alloc(n);
    float* ds = tk_alloc(n);

    rt_swiglu_forward(out, a, b, n, dt);
    rt_swiglu_backward(da, db, dout, a, b, n, dt, RT_ACCUMULATE);

    rt_silu_forward(s, a, n, RT_F32);
    tk_round_all(s, n, dt);
    rt_mul_forward(out_u, s, b, n, RT_F32);
    tk_round_all(out_u, n, dt);
    memset(ds, 0, n * sizeof(float));  // rt_zero before the first contribution
    rt_mul_backward(ds, db_u, dout, s, b, n, RT_F32, RT_ACCUMULATE);
    tk_round_all(ds, n, dt), tk_round_all(db_u, n, dt);
    rt_silu_backward(da_u, ds, a, n, RT_F32, RT_ACCUMULATE);
    tk_round_all(da_u, n, dt);

    const char* nm = dt == RT_BF16 ? "bf16" : dt == RT_F16 ? "fp16" : "fp32";
    CHECK(memcmp(out, out_u, n * sizeof(float)) == 0,
          "%s swiglu forward equals silu, round, mul, round bit for bit (%zu values)", nm, n);
    CHECK(memcmp(da, da_u, n * sizeof(float)) == 0,
          "%s swiglu da (+=) equals mul then silu backward, rounded, bit for bit", nm);
    CHECK(memcmp(db, db_u, n * sizeof(float)) == 0,
          "%s swiglu db (+=) equals mul backward, rounded, bit for bit", nm);
    free(a), free(b), free(dout), free(da), free(db), free(out), free(da_u), free(db_u), free(s),
        free(out_u), free(ds);
}

int main(void) {
    rt_kernels_init();
    tk_seed(3);
    test_known();
    for (int op = 0; op < 4; op++) test_act(op);
    test_swiglu_matches_unfused(RT_F32);
    test_swiglu_matches_unfused(RT_BF16);
    test_swiglu_matches_unfused(RT_F16);
    return tk_summary("test_activation");
}
