// Tests of the optimizers and gradient clipping: a 1-element case per optimizer with
// values derived by hand (derivations in the comments), a straightforward double
// reference over several steps on 1000 elements, sharded == unsharded, zero padding stays
// zero, and clip_grad_norm_'s coefficient.
#include "gradcheck.h"
#include "rt_optim.h"

// ----------------------------------------------------------------------------
// 1 element, p0 = 1, three steps, values derived by hand

typedef enum { OPT_SGD, OPT_ADAM, OPT_ADAMW } opt_kind;

typedef struct {
    const char* name;
    opt_kind kind;
    double lr, momentum, dampening, weight_decay;
    int nesterov;
    float grads[3];
    double want[3];
} hand_case;

// SGD, lr 0.1, grads 1, 0.5, -0.25:
//   plain:       p = 1 - 0.1 = 0.9;  0.9 - 0.05 = 0.85;  0.85 + 0.025 = 0.875
//   momentum .9: buf = 1 (clone of the first grad), p = 0.9;
//                buf = 0.9*1 + 0.5 = 1.4, p = 0.9 - 0.14 = 0.76;
//                buf = 0.9*1.4 - 0.25 = 1.01, p = 0.76 - 0.101 = 0.659
//   nesterov:    g = 1 + 0.9*1 = 1.9, p = 0.81;  g = 0.5 + 0.9*1.4 = 1.76, p = 0.634;
//                g = -0.25 + 0.9*1.01 = 0.659, p = 0.5681
//   dampening .5 (momentum .9): buf = 1 (no dampening on the first step), p = 0.9;
//                buf = 0.9 + 0.5*0.5 = 1.15, p = 0.785;  buf = 1.035 - 0.125 = 0.91, p = 0.694
//   weight decay .1: g = 1 + 0.1*1 = 1.1, p = 0.89;  g = 0.5 + 0.089 = 0.589, p = 0.8311;
//                g = -0.25 + 0.08311 = -0.16689, p = 0.847789
// Adam, lr 0.1, betas (0.9, 0.999), eps 1e-8, grads 0.5, -1, 0.25:
//   t=1: m = 0.05, v = 0.00025, bc1 = 0.1, bc2 = 0.001, step_size = 1,
//        denom = sqrt(0.00025)/sqrt(0.001) + 1e-8 = 0.50000001, p = 1 - 0.05/0.50000001
//        = 0.900000002
//   t=2: m = 0.05 + 0.1*(-1 - 0.05) = -0.055, v = 0.999*0.00025 + 0.001 = 0.00124975,
//        bc1 = 0.19, bc2 = 0.001999, step_size = 0.526315789, sqrt(v/bc2) = 0.790688051,
//        p = 0.900000002 + 0.526315789*0.055/0.790688061 = 0.936610354
//   t=3: m = -0.055 + 0.1*0.305 = -0.0245, v = 0.00124850025 + 0.0000625 = 0.00131100025,
//        bc1 = 0.271, bc2 = 0.002997001, step_size = 0.369003690, sqrt(v/bc2) = 0.661390,
//        p = 0.936610354 + 0.369003690*0.0245/0.661390 = 0.950279420
// Adam with L2 weight decay 0.1: t=1 g = 0.5 + 0.1 = 0.6, m = 0.06, v = 0.00036,
//   p = 1 - 0.06/(0.6 + 1e-8) = 0.900000002; t=2 g = -1 + 0.09 = -0.91, m = -0.037,
//   v = 0.00035964 + 0.0008281 = 0.00118774, p = 0.9 + 0.526315789*0.037/0.770822 = 0.925263519;
//   t=3 (same recipe) 0.924730574
// AdamW, weight decay 0.01: p is first scaled by 1 - 0.1*0.01 = 0.999, then the Adam
//   update of the plain case: t=1 0.999 - 0.099999998 = 0.899000002;
//   t=2 0.899000002*0.999 + 0.036610352 = 0.934711354; t=3 0.947445709
static const hand_case hand_cases[] = {
    {"sgd", OPT_SGD, 0.1, 0, 0, 0, 0, {1, 0.5f, -0.25f}, {0.9, 0.85, 0.875}},
    {"sgd momentum 0.9", OPT_SGD, 0.1, 0.9, 0, 0, 0, {1, 0.5f, -0.25f}, {0.9, 0.76, 0.659}},
    {"sgd nesterov", OPT_SGD, 0.1, 0.9, 0, 0, 1, {1, 0.5f, -0.25f}, {0.81, 0.634, 0.5681}},
    {"sgd dampening 0.5", OPT_SGD, 0.1, 0.9, 0.5, 0, 0, {1, 0.5f, -0.25f}, {0.9, 0.785, 0.694}},
    {"sgd weight decay 0.1", OPT_SGD, 0.1, 0, 0, 0.1, 0, {1, 0.5f, -0.25f}, {0.89, 0.8311, 0.847789}},
    {"adam", OPT_ADAM, 0.1, 0, 0, 0, 0, {0.5f, -1, 0.25f}, {0.900000002, 0.936610354, 0.950279420}},
    {"adam weight decay 0.1", OPT_ADAM, 0.1, 0, 0, 0.1, 0, {0.5f, -1, 0.25f},
     {0.900000002, 0.925263519, 0.924730574}},
    {"adamw weight decay 0.01", OPT_ADAMW, 0.1, 0, 0, 0.01, 0, {0.5f, -1, 0.25f},
     {0.899000002, 0.934711354, 0.947445709}},
};

static void opt_step(const hand_case* c, float* p, const float* g, float* s1, float* s2, size_t n,
                     int64_t t) {
    if (c->kind == OPT_SGD)
        rt_sgd_step(p, g, s1, n, t, c->lr, c->momentum, c->dampening, c->weight_decay, c->nesterov);
    if (c->kind == OPT_ADAM)
        rt_adam_step(p, g, s1, s2, n, t, c->lr, RT_ADAM_BETA1, RT_ADAM_BETA2, RT_ADAM_EPS,
                     c->weight_decay);
    if (c->kind == OPT_ADAMW)
        rt_adamw_step(p, g, s1, s2, n, t, c->lr, RT_ADAM_BETA1, RT_ADAM_BETA2, RT_ADAM_EPS,
                      c->weight_decay);
}

static void test_hand(void) {
    for (size_t k = 0; k < sizeof hand_cases / sizeof hand_cases[0]; k++) {
        const hand_case* c = &hand_cases[k];
        float p = 1.0f, s1 = 0.0f, s2 = 0.0f;
        for (int t = 1; t <= 3; t++) {
            opt_step(c, &p, &c->grads[t - 1], &s1, &s2, 1, t);
            char name[96];
            snprintf(name, sizeof name, "%s 1-element step %d (derived by hand)", c->name, t);
            CHECK_CLOSE(name, p, c->want[t - 1], 2e-7);
        }
    }
}

// ----------------------------------------------------------------------------
// double reference over several steps

typedef struct {
    double *p, *s1, *s2;
    int has_buf;
} ref_state;

static void ref_step(const hand_case* c, ref_state* r, const float* g, size_t n, int t) {
    for (size_t i = 0; i < n; i++) {
        double gi = g[i], p = r->p[i];
        if (c->kind == OPT_SGD) {
            if (c->weight_decay != 0) gi += c->weight_decay * p;
            if (c->momentum != 0) {
                r->s1[i] = t == 1 ? gi : c->momentum * r->s1[i] + (1 - c->dampening) * gi;
                gi = c->nesterov ? gi + c->momentum * r->s1[i] : r->s1[i];
            }
            r->p[i] = p - c->lr * gi;
        } else {
            if (c->kind == OPT_ADAMW) p *= 1 - c->lr * c->weight_decay;
            else gi += c->weight_decay * p;
            const double b1 = RT_ADAM_BETA1, b2 = RT_ADAM_BETA2;
            r->s1[i] = b1 * r->s1[i] + (1 - b1) * gi;
            r->s2[i] = b2 * r->s2[i] + (1 - b2) * gi * gi;
            const double mhat = r->s1[i] / (1 - pow(b1, t)), vhat = r->s2[i] / (1 - pow(b2, t));
            r->p[i] = p - c->lr * mhat / (sqrt(vhat) + RT_ADAM_EPS);
        }
    }
}

static void test_reference(void) {
    const hand_case cases[] = {
        {"sgd", OPT_SGD, 0.05, 0, 0, 0, 0, {0}, {0}},
        {"sgd momentum 0.9 dampening 0.1 wd 0.01", OPT_SGD, 0.05, 0.9, 0.1, 0.01, 0, {0}, {0}},
        {"sgd nesterov momentum 0.8 wd 0.02", OPT_SGD, 0.05, 0.8, 0, 0.02, 1, {0}, {0}},
        {"adam (defaults, lr 1e-3)", OPT_ADAM, RT_ADAM_LR, 0, 0, RT_ADAM_WEIGHT_DECAY, 0, {0}, {0}},
        {"adam lr 1e-2 wd 0.1", OPT_ADAM, 1e-2, 0, 0, 0.1, 0, {0}, {0}},
        {"adamw (defaults, wd 0.01)", OPT_ADAMW, RT_ADAM_LR, 0, 0, RT_ADAMW_WEIGHT_DECAY, 0, {0}, {0}},
        {"adamw lr 1e-2 wd 0.1", OPT_ADAMW, 1e-2, 0, 0, 0.1, 0, {0}, {0}},
    };
    const size_t n = 1000;
    const int steps = 6;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const hand_case* c = &cases[k];
        float *p = tk_alloc(n), *g = tk_alloc(n), *s1 = tk_alloc(n), *s2 = tk_alloc(n);
        ref_state r = {(double*)calloc(n, sizeof(double)), (double*)calloc(n, sizeof(double)),
                       (double*)calloc(n, sizeof(double)), 0};
        tk_fill(p, n, -1, 1);
        for (size_t i = 0; i < n; i++) r.p[i] = p[i];
        double worst = 0.0;
        for (int t = 1; t <= steps; t++) {
            tk_fill(g, n, -1, 1);
            // gradient scales spanning 1e-4 .. 1 exercise Adam's normalization
            for (size_t i = 0; i < n; i++) g[i] *= (float)pow(10.0, -4.0 * (double)(i % 5) / 4.0);
            opt_step(c, p, g, s1, s2, n, t);
            ref_step(c, &r, g, n, t);
            tk_err e = tk_compare(p, r.p, n);
            worst = fmax(worst, e.max_abs);
        }
        CHECK(worst < 2e-6, "%s: %d steps on %zu elements vs double reference, max |param diff| %.3g",
              c->name, steps, n, worst);
        free(p), free(g), free(s1), free(s2), free(r.p), free(r.s1), free(r.s2);
    }
}

// ----------------------------------------------------------------------------
// sharded == unsharded, zero padding stays zero

static void test_sharded(void) {
    const size_t n = 777, cut = 300;
    float *pa = tk_alloc(n), *pb, *g = tk_alloc(n), *ma = tk_alloc(n), *va = tk_alloc(n);
    float *mb = tk_alloc(n), *vb = tk_alloc(n);
    tk_fill(pa, n, -1, 1);
    pb = tk_dup(pa, n);
    for (int t = 1; t <= 3; t++) {
        tk_fill(g, n, -1, 1);
        rt_adamw_step(pa, g, ma, va, n, t, 1e-2, 0.9, 0.999, 1e-8, 0.01);
        rt_adamw_step(pb, g, mb, vb, cut, t, 1e-2, 0.9, 0.999, 1e-8, 0.01);
        rt_adamw_step(pb + cut, g + cut, mb + cut, vb + cut, n - cut, t, 1e-2, 0.9, 0.999, 1e-8, 0.01);
    }
    CHECK(memcmp(pa, pb, n * sizeof(float)) == 0 && memcmp(va, vb, n * sizeof(float)) == 0,
          "adamw on 2 shards is bit-identical to the whole buffer (3 steps, %zu elements)", n);

    // zero-padded tail: param 0, grad 0, state 0 stays exactly 0 for every optimizer
    float z[4] = {0}, zg[4] = {0}, zs1[4] = {0}, zs2[4] = {0};
    int zero = 1;
    for (int t = 1; t <= 3; t++) {
        rt_sgd_step(z, zg, zs1, 4, t, 0.1, 0.9, 0, 0.01, 1);
        rt_adam_step(z, zg, zs1, zs2, 4, t, 0.1, 0.9, 0.999, 1e-8, 0.1);
        rt_adamw_step(z, zg, zs1, zs2, 4, t, 0.1, 0.9, 0.999, 1e-8, 0.1);
    }
    for (int i = 0; i < 4; i++) zero &= z[i] == 0.0f && zs1[i] == 0.0f && zs2[i] == 0.0f;
    CHECK(zero, "zero padding (param, grad, state all 0) stays exactly 0 through sgd/adam/adamw");
    free(pa), free(pb), free(g), free(ma), free(va), free(mb), free(vb);
}

// ----------------------------------------------------------------------------
// gradient clipping

static void test_clip(void) {
    float g[4] = {3, 4, 0, 0};  // norm 5
    double norm = sqrt(rt_sumsq(g, 4));
    float coef = rt_clip_grad_norm(g, 4, norm, 1.0);
    CHECK_CLOSE("clip norm 5 to max_norm 1: coef 1/(5+1e-6)", coef, 1.0 / (5.0 + 1e-6), 1e-7);
    CHECK_CLOSE("clipped grad[0] = 3/(5+1e-6)", g[0], 3.0 / (5.0 + 1e-6), 1e-7);
    CHECK_CLOSE("clipped grad[1] = 4/(5+1e-6)", g[1], 4.0 / (5.0 + 1e-6), 1e-7);
    CHECK_CLOSE("norm after clipping = 1", sqrt(rt_sumsq(g, 4)), 1.0, 1e-6);
    float h[2] = {0.3f, 0.4f};
    coef = rt_clip_grad_norm(h, 2, 0.5, 1.0);
    CHECK(coef == 1.0f && h[0] == 0.3f && h[1] == 0.4f,
          "clip norm 0.5 below max_norm 1: coef %g, grads unchanged", coef);
    // at norm == max_norm the 1e-6 still makes PyTorch's coefficient < 1
    coef = rt_clip_coef(1.0, 1.0);
    CHECK(coef < 1.0f && coef > 0.999998f, "clip at norm == max_norm: coef %.9g < 1 as PyTorch", coef);
    // sharded: each rank's sumsq summed, then every shard clipped with the same norm
    float a[6] = {1, -2, 3, -4, 5, -6}, b[6];
    memcpy(b, a, sizeof a);
    double total = sqrt(rt_sumsq(b, 2) + rt_sumsq(b + 2, 4));
    rt_clip_grad_norm(b, 2, total, 2.0);
    rt_clip_grad_norm(b + 2, 4, total, 2.0);
    rt_clip_grad_norm(a, 6, sqrt(rt_sumsq(a, 6)), 2.0);
    CHECK(memcmp(a, b, sizeof a) == 0, "clip on 2 shards with the global norm equals the whole");
}

int main(void) {
    rt_kernels_init();
    tk_seed(8);
    test_hand();
    test_reference();
    test_sharded();
    test_clip();
    return check_summary();
}
