// Tests of rotary position embeddings: known rotations, position 0 is the identity, pair
// norms are preserved, forward vs a double reference of Meta's formula, backward is the
// inverse rotation (gradcheck, and backward(forward(x)) == x), in-place forward.
#include "gradcheck.h"

typedef struct {
    float *out, *inp, *proj;
    int B, T, NH, HD;
    float theta;
} rope_ctx;

static double rope_loss(void* p) {
    rope_ctx* c = (rope_ctx*)p;
    rt_rope_forward(c->out, c->inp, c->B, c->T, c->NH, c->HD, c->theta, RT_F32);
    return tk_dot(c->out, c->proj, (size_t)c->B * c->T * c->NH * c->HD);
}

static void test_known(void) {
    // HD = 2: one pair, freq 1, angle = t. (1, 0) at t -> (cos t, sin t)
    float x[3 * 2] = {1, 0, 1, 0, 1, 0}, o[6];
    rt_rope_forward(o, x, 1, 3, 1, 2, RT_ROPE_THETA, RT_F32);
    CHECK(o[0] == 1.0f && o[1] == 0.0f, "rope t=0 (1,0) -> (%g,%g): identity", o[0], o[1]);
    CHECK_CLOSE("rope t=1 (1,0) -> cos(1)", o[2], cos(1.0), 1e-7);
    CHECK_CLOSE("rope t=1 (1,0) -> sin(1)", o[3], sin(1.0), 1e-7);
    CHECK_CLOSE("rope t=2 (1,0) -> cos(2)", o[4], cos(2.0), 1e-7);
    CHECK_CLOSE("rope t=2 (1,0) -> sin(2)", o[5], sin(2.0), 1e-7);
    // HD = 4, theta = 100: second pair has freq 100^(-2/4) = 0.1; (0, 1) at t=3 is rotated
    // by 0.3 -> (-sin 0.3, cos 0.3)
    float y[4 * 4] = {0}, oy[16];
    y[12 + 2] = 0.0f, y[12 + 3] = 1.0f;
    rt_rope_forward(oy, y, 1, 4, 1, 4, 100.0f, RT_F32);
    CHECK_CLOSE("rope HD=4 theta=100 t=3 pair 1 (0,1) -> -sin(0.3)", oy[14], -sin(0.3), 1e-6);
    CHECK_CLOSE("rope HD=4 theta=100 t=3 pair 1 (0,1) -> cos(0.3)", oy[15], cos(0.3), 1e-6);
}

static void test_rope(void) {
    const int B = 2, T = 5, NH = 3, HD = 8;
    const size_t n = (size_t)B * T * NH * HD;
    rope_ctx c = {tk_alloc(n), tk_alloc(n), tk_alloc(n), B, T, NH, HD, RT_ROPE_THETA};
    tk_fill(c.inp, n, -1, 1), tk_fill(c.proj, n, -1, 1);
    rope_loss(&c);
    double* ref = (double*)calloc(n, sizeof(double));
    double worst_norm = 0.0;
    int pos0_same = 1;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < HD / 2; i++) {
                    size_t k = (((size_t)b * T + t) * NH + h) * HD + 2 * i;
                    double ang = t * pow(10000.0, -2.0 * i / HD);
                    double x0 = c.inp[k], x1 = c.inp[k + 1];
                    ref[k] = x0 * cos(ang) - x1 * sin(ang);
                    ref[k + 1] = x0 * sin(ang) + x1 * cos(ang);
                    double n0 = hypot(x0, x1), n1 = hypot(c.out[k], c.out[k + 1]);
                    worst_norm = fmax(worst_norm, fabs(n0 - n1));
                    if (t == 0) pos0_same &= c.out[k] == c.inp[k] && c.out[k + 1] == c.inp[k + 1];
                }
    TK_CHECK_REF("rope forward [2,5,3,8] vs double reference", c.out, ref, n, 1e-6);
    CHECK(worst_norm < 1e-6, "rope preserves every pair's norm: max change %.2g", worst_norm);
    CHECK(pos0_same, "rope leaves position 0 exactly unchanged");

    tk_grad di = tk_grad_new(n);
    rt_rope_backward(di.buf, c.proj, B, T, NH, HD, c.theta, RT_F32, RT_ACCUMULATE);
    tk_gradcheck("rope dinp", c.inp, tk_grad_delta(&di), n, rope_loss, &c, 1e-2f, 1e-2, 1e-3);

    rope_loss(&c);  // out of the unperturbed input again (gradcheck left the last probe)
    // backward is the inverse rotation: rotating the output back gives the input
    float* back = tk_alloc(n);
    rt_rope_backward(back, c.out, B, T, NH, HD, c.theta, RT_F32, RT_ACCUMULATE);
    TK_CHECK_SAME("rope backward(forward(x)) == x", back, c.inp, n, 1e-6);

    float* inplace = tk_dup(c.inp, n);
    rt_rope_forward(inplace, inplace, B, T, NH, HD, c.theta, RT_F32);
    CHECK(memcmp(inplace, c.out, n * sizeof(float)) == 0, "rope forward in place equals out of place");
    tk_grad_free(&di);
    free(ref), free(back), free(inplace), free(c.out), free(c.inp), free(c.proj);
}

int main(void) {
    rt_kernels_init();
    tk_seed(4);
    test_known();
    test_rope();
    return tk_summary("test_rope");
}
