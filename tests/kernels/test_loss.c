// Tests of the losses: sum loss (known value, backward adds dloss), cross-entropy (known
// values, per-row losses vs a double reference, gradcheck with a dloss scale, large
// logits, ignore_index -100 as PyTorch), the fused forward+backward (the two calls' bits).
#include "gradcheck.h"

// ----------------------------------------------------------------------------
// sum loss

typedef struct {
    float* logits;
    size_t n;
    float scale;
} sum_ctx;

static double sum_loss(void* p) {
    sum_ctx* c = (sum_ctx*)p;
    float l;
    rt_sum_loss_forward(&l, c->logits, c->n);
    return c->scale * (double)l;
}

static void test_sum(void) {
    float x[100];
    for (int i = 0; i < 100; i++) x[i] = (float)(i + 1);
    float l;
    rt_sum_loss_forward(&l, x, 100);
    CHECK(l == 5050.0f, "sum loss of 1..100 = 5050: got %.9g", l);
    // double accumulation: 1e8 followed by 10000 ones sums exactly (float would stall)
    float* y = tk_alloc(10001);
    y[0] = 1e8f;
    for (int i = 1; i <= 10000; i++) y[i] = 1.0f;
    rt_sum_loss_forward(&l, y, 10001);
    CHECK(l == 100010000.0f, "sum loss of 1e8 + 10000 ones = 100010000 (double accumulation): got %.9g", l);
    free(y);

    sum_ctx c = {tk_alloc(30), 30, 0.75f};
    tk_fill(c.logits, 30, -1, 1);
    tk_grad d = tk_grad_new(30);
    rt_sum_loss_backward(d.buf, 30, &(const float){0.75f}, RT_ACCUMULATE);
    tk_gradcheck("sum loss dlogits (dloss 0.75)", c.logits, tk_grad_delta(&d), 30, sum_loss, &c,
                 1e-2f, 1e-2, 1e-3);
    float g[3] = {1, 2, 3};
    rt_sum_loss_backward(g, 3, &(const float){1.0f}, RT_ACCUMULATE);
    CHECK(g[0] == 2.0f && g[1] == 3.0f && g[2] == 4.0f, "sum loss backward dloss 1 adds exactly 1");
    tk_grad_free(&d);
    free(c.logits);
}

// ----------------------------------------------------------------------------
// cross-entropy

typedef struct {
    float *logits, *losses;
    const int32_t* targets;
    int N, V;
    float scale;
} ce_ctx;

static double ce_loss(void* p) {
    ce_ctx* c = (ce_ctx*)p;
    float l;
    rt_cross_entropy_forward(&l, c->losses, c->logits, c->targets, c->N, c->V);
    return c->scale * (double)l;
}

static void test_ce_known(void) {
    // uniform logits: every row's loss is log(V)
    float z[3 * 7] = {0};
    for (int i = 0; i < 21; i++) z[i] = 2.5f;
    const int32_t t[3] = {0, 6, 3};
    float l, ls[3];
    rt_cross_entropy_forward(&l, ls, z, t, 3, 7);
    CHECK_CLOSE("cross-entropy of uniform logits = log(7)", l, log(7.0), 1e-7);
    // logits (1, 2, 3), target 2: log(e + e^2 + e^3) - 3 = 0.40760596
    const float z2[3] = {1, 2, 3};
    const int32_t t2 = 2;
    rt_cross_entropy_forward(&l, NULL, z2, &t2, 1, 3);
    CHECK_CLOSE("cross-entropy logits (1,2,3) target 2 = 0.4076060", l, 0.40760596444438013, 1e-7);
    // its gradient: softmax - onehot = (0.0900306, 0.2447285, -0.3347590)
    float g[3] = {0};
    rt_cross_entropy_backward(g, z2, &t2, 1, 3, &(const float){1.0f}, RT_F32, RT_ACCUMULATE);
    CHECK_CLOSE("cross-entropy grad logit 0 = softmax 0.0900306", g[0], 0.09003057317038046, 1e-7);
    CHECK_CLOSE("cross-entropy grad logit 2 = softmax - 1 = -0.3347590", g[2], -0.3347590442251781, 1e-7);
    // large logits: no overflow, same loss as shifted ones
    const float z3[3] = {1001, 1002, 1003};
    rt_cross_entropy_forward(&l, NULL, z3, &t2, 1, 3);
    CHECK_CLOSE("cross-entropy logits (1001,1002,1003) = same as (1,2,3)", l, 0.40760596444438013, 1e-6);
}

static void test_ce(void) {
    const int N = 6, V = 9;
    const int32_t targets[6] = {3, 0, 8, 3, RT_IGNORE_INDEX, 5};
    ce_ctx c = {tk_alloc((size_t)N * V), tk_alloc(N), targets, N, V, 0.7f};
    tk_fill(c.logits, (size_t)N * V, -3, 3);
    float l;
    rt_cross_entropy_forward(&l, c.losses, c.logits, targets, N, V);
    double ref[6], mean = 0.0;
    int m = 0;
    for (int n = 0; n < N; n++) {
        if (targets[n] == RT_IGNORE_INDEX) {
            ref[n] = 0.0;
            continue;
        }
        double s = 0.0;
        for (int j = 0; j < V; j++) s += exp((double)c.logits[n * V + j]);
        ref[n] = log(s) - c.logits[n * V + targets[n]];
        mean += ref[n];
        m++;
    }
    mean /= m;
    TK_CHECK_REF("cross-entropy per-row losses vs double reference (row 4 ignored -> 0)", c.losses,
                 ref, (size_t)N, 1e-6);
    CHECK_CLOSE("cross-entropy mean over the 5 non-ignored rows", l, mean, 1e-6);
    tk_grad d = tk_grad_new((size_t)N * V);
    rt_cross_entropy_backward(d.buf, c.logits, targets, N, V, &(const float){0.7f}, RT_F32, RT_ACCUMULATE);
    const float* delta = tk_grad_delta(&d);
    tk_gradcheck("cross-entropy dlogits (dloss 0.7, one ignored row)", c.logits, delta,
                 (size_t)N * V, ce_loss, &c, 1e-2f, 1e-2, 1e-3);
    int ignored_zero = 1;
    for (int j = 0; j < V; j++) ignored_zero &= d.buf[4 * V + j] == d.before[4 * V + j];
    CHECK(ignored_zero, "cross-entropy backward leaves the ignored row's gradient untouched");
    // every row's gradient sums to 0 (softmax sums to 1, minus the one-hot)
    double worst = 0.0;
    for (int n = 0; n < N; n++) {
        double s = 0.0;
        for (int j = 0; j < V; j++) s += delta[n * V + j];
        worst = fmax(worst, fabs(s));
    }
    CHECK(worst < 1e-6, "cross-entropy gradient rows sum to 0: max |sum| %.2g", worst);

    // all rows ignored: NaN loss (0/0, as PyTorch), zero gradient
    const int32_t all_ign[2] = {RT_IGNORE_INDEX, RT_IGNORE_INDEX};
    rt_cross_entropy_forward(&l, NULL, c.logits, all_ign, 2, V);
    float g2[18] = {0};
    rt_cross_entropy_backward(g2, c.logits, all_ign, 2, V, &(const float){1.0f}, RT_F32, RT_ACCUMULATE);
    int zero = 1;
    for (int i = 0; i < 18; i++) zero &= g2[i] == 0.0f;
    CHECK(isnan(l) && zero, "cross-entropy with every target ignored: loss %g (NaN), gradient zero", l);

    // forward and backward in one call: the two calls' bits, accumulated and assigned
    for (int as = 0; as < 2; as++) {
        const int assign = as ? RT_ASSIGN_1 : RT_ACCUMULATE;
        float g_sep[54], g_fused[54], l_sep, l_fused;
        for (int i = 0; i < N * V; i++) g_sep[i] = g_fused[i] = as ? NAN : 0.25f * (float)(i % 7);
        rt_cross_entropy_forward(&l_sep, NULL, c.logits, targets, N, V);
        rt_cross_entropy_backward(g_sep, c.logits, targets, N, V, &(const float){0.7f}, RT_BF16, assign);
        rt_cross_entropy_forward_backward(g_fused, &l_fused, c.logits, targets, N, V,
                                          &(const float){0.7f}, RT_BF16, assign);
        CHECK(memcmp(&l_sep, &l_fused, sizeof l_sep) == 0 &&
                  memcmp(g_sep, g_fused, sizeof g_sep) == 0,
              "cross-entropy forward_backward (%s, dt bf16) == forward then backward, bit for bit",
              as ? "assigned" : "accumulated");
    }
    tk_grad_free(&d);
    free(c.logits), free(c.losses);
}

int main(void) {
    rt_kernels_init();
    tk_seed(7);
    test_sum();
    test_ce_known();
    test_ce();
    return tk_summary("test_loss");
}
