// Tests of attention dropout (rt_attention_lowmem_dropout_*, rt_kernels.h): the forward
// against a naive double implementation that draws each probability's mask from
// rt_dropout_uniform at ((b*NH + h)*T + i)*T + j, the statistics those of the undropped
// softmax, the mask itself (v the identity: out = P * Z) with the kept fraction near 1-p,
// p = 0 the plain calls bit for bit, same seed and stream the same bits and another stream
// others, the packed entry points the fp32 ones, and gradcheck of q, k, v (the mask fixed).
#include "gradcheck.h"

typedef struct {
    int B, T, NH, NKV, HD, causal;
    float p;
    uint64_t seed, stream;
    float *q, *k, *v, *proj, *out, *stats, *scratch;
} drop_ctx;

static drop_ctx ctx_new(int B, int T, int NH, int NKV, int HD, int causal, float p) {
    const size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    drop_ctx c = {B, T, NH, NKV, HD, causal, p, 1234, 77,
                  tk_alloc(nq), tk_alloc(nk), tk_alloc(nk), tk_alloc(nq), tk_alloc(nq),
                  tk_alloc(rt_attention_stats_floats(B, NH, T)),
                  tk_alloc(rt_attention_lowmem_scratch_floats(B, NH, T))};
    tk_fill(c.q, nq, -1.5f, 1.5f);
    tk_fill(c.k, nk, -1.5f, 1.5f);
    tk_fill(c.v, nk, -1, 1);
    tk_fill(c.proj, nq, -1, 1);
    return c;
}

static void ctx_free(drop_ctx* c) {
    free(c->q), free(c->k), free(c->v), free(c->proj), free(c->out), free(c->stats);
    free(c->scratch);
}

static void forward(drop_ctx* c) {
    rt_attention_lowmem_dropout_forward(c->out, c->stats, c->scratch, c->q, c->k, c->v, c->B,
                                        c->T, c->NH, c->NKV, c->HD, c->causal, RT_F32, RT_F32,
                                        c->p, c->seed, c->stream);
}

static double loss(void* p) {
    drop_ctx* c = (drop_ctx*)p;
    forward(c);
    return tk_dot(c->out, c->proj, (size_t)c->B * c->T * c->NH * c->HD);
}

// The mask factor of probability (b, h, i, j): 1/(1-p) kept, 0 dropped.
static double zmask(const drop_ctx* c, int b, int h, int i, int j) {
    const uint64_t e = (((uint64_t)b * c->NH + h) * c->T + i) * c->T + j;
    return rt_dropout_uniform(c->seed, c->stream, e) >= c->p ? (float)(1.0 / (1.0 - c->p)) : 0.0;
}

// naive: softmax over the visible keys in double, each probability times its mask factor
static void naive(double* out, const drop_ctx* c) {
    const int T = c->T, NH = c->NH, NKV = c->NKV, HD = c->HD, G = NH / NKV;
    double* w = (double*)calloc((size_t)T, sizeof(double));
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float* qv = c->q + ((size_t)b * T + t) * NH * HD + h * HD;
                const int len = c->causal ? t + 1 : T;
                double mx = -1e300, sum = 0.0;
                for (int s = 0; s < len; s++) {
                    const float* kv = c->k + ((size_t)b * T + s) * NKV * HD + (h / G) * HD;
                    double d = 0;
                    for (int i = 0; i < HD; i++) d += (double)qv[i] * kv[i];
                    w[s] = d / sqrt((double)HD);
                    mx = fmax(mx, w[s]);
                }
                for (int s = 0; s < len; s++) sum += (w[s] = exp(w[s] - mx));
                for (int s = 0; s < len; s++) w[s] = w[s] / sum * zmask(c, b, h, t, s);
                double* o = out + ((size_t)b * T + t) * NH * HD + h * HD;
                for (int i = 0; i < HD; i++) {
                    double acc = 0;
                    for (int s = 0; s < len; s++)
                        acc += w[s] * c->v[((size_t)b * T + s) * NKV * HD + (h / G) * HD + i];
                    o[i] = acc;
                }
            }
    free(w);
}

static void test_forward(int B, int T, int NH, int NKV, int HD, int causal, float p) {
    drop_ctx c = ctx_new(B, T, NH, NKV, HD, causal, p);
    const size_t nq = (size_t)B * T * NH * HD;
    forward(&c);
    double* want = (double*)calloc(nq, sizeof(double));
    naive(want, &c);
    tk_err e = tk_compare(c.out, want, nq);
    CHECK(e.max_rel < 1e-5, "dropout p=%g forward (B=%d T=%d NH=%d NKV=%d HD=%d causal=%d) vs "
          "naive double with rt_dropout_uniform's masks: max rel diff %.2g", p, B, T, NH, NKV,
          HD, causal, e.max_rel);
    // the statistics are the undropped softmax's; p = 0 is the plain call, bit for bit
    float* stats = tk_dup(c.stats, rt_attention_stats_floats(B, NH, T));
    float* out = tk_dup(c.out, nq);
    rt_attention_lowmem_forward(c.out, c.stats, c.scratch, c.q, c.k, c.v, B, T, NH, NKV, HD,
                                causal, RT_F32, RT_F32);
    CHECK(!memcmp(stats, c.stats, rt_attention_stats_floats(B, NH, T) * sizeof(float)),
          "dropout p=%g: the saved (max, 1/sum) rows are the plain forward's", p);
    float* plain = tk_dup(c.out, nq);
    c.p = 0.0f;
    forward(&c);
    CHECK(!memcmp(plain, c.out, nq * sizeof(float)), "dropout p=0: the plain forward's bits");
    // the same seed and stream draw the same masks; another stream others
    c.p = p;
    forward(&c);
    const int same = !memcmp(out, c.out, nq * sizeof(float));
    c.stream++;
    forward(&c);
    CHECK(same && memcmp(out, c.out, nq * sizeof(float)),
          "dropout p=%g: the same bits again with the same stream, others with the next", p);
    free(want), free(stats), free(out), free(plain);
    ctx_free(&c);
}

// v the identity (HD = T): out[b,t,h,:] is row t of P * Z, so the mask can be read off
// against the undropped forward's P.
static void test_mask(float p) {
    const int B = 2, T = 48, NH = 2, HD = T;
    drop_ctx c = ctx_new(B, T, NH, NH, HD, 1, p);
    const size_t nq = (size_t)B * T * NH * HD;
    for (int b = 0; b < B; b++)
        for (int s = 0; s < T; s++)
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < HD; i++)
                    c.v[(((size_t)b * T + s) * NH + h) * HD + i] = s == i ? 1.0f : 0.0f;
    rt_attention_lowmem_forward(c.out, c.stats, c.scratch, c.q, c.k, c.v, B, T, NH, NH, HD, 1,
                                RT_F32, RT_F32);
    float* P = tk_dup(c.out, nq);
    forward(&c);
    const float scale = (float)(1.0 / (1.0 - p));
    size_t kept = 0, visible = 0, wrong = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++)
                for (int s = 0; s <= t; s++) {
                    const size_t i = (((size_t)b * T + t) * NH + h) * HD + s;
                    const int keep = zmask(&c, b, h, t, s) != 0.0;
                    const float want = keep ? P[i] * scale : 0.0f;
                    wrong += fabsf(c.out[i] - want) > 1e-6f * fabsf(want) + 1e-30f;
                    kept += keep, visible++;
                }
    // the kept count is binomial(visible, 1-p): within 4 standard deviations
    const double mean = visible * (1.0 - p), sd = sqrt(visible * p * (1.0 - p));
    CHECK(wrong == 0 && fabs(kept - mean) < 4 * sd,
          "dropout p=%g: out = P * Z element by element (%zu of %zu wrong), %zu of %zu kept "
          "(expected %.0f +- %.0f)", p, wrong, visible, kept, visible, mean, 4 * sd);
    free(P);
    ctx_free(&c);
}

static void test_gradcheck(int B, int T, int NH, int NKV, int HD, int causal, float p) {
    drop_ctx c = ctx_new(B, T, NH, NKV, HD, causal, p);
    const size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    loss(&c);
    tk_grad dq = tk_grad_new(nq), dk = tk_grad_new(nk), dv = tk_grad_new(nk);
    rt_attention_lowmem_dropout_backward(dq.buf, dk.buf, dv.buf, c.scratch, c.proj, c.out, c.q,
                                         c.k, c.v, c.stats, B, T, NH, NKV, HD, causal, RT_F32,
                                         RT_F32, RT_ACCUMULATE, p, c.seed, c.stream);
    char name[128];
    snprintf(name, sizeof name, "attention dropout p=%g dq (causal=%d, NH=%d NKV=%d)", p, causal,
             NH, NKV);
    tk_gradcheck(name, c.q, tk_grad_delta(&dq), nq, loss, &c, 1e-2f, 1e-2, 1e-3);
    snprintf(name, sizeof name, "attention dropout p=%g dk (causal=%d, NH=%d NKV=%d)", p, causal,
             NH, NKV);
    tk_gradcheck(name, c.k, tk_grad_delta(&dk), nk, loss, &c, 1e-2f, 1e-2, 1e-3);
    snprintf(name, sizeof name, "attention dropout p=%g dv (causal=%d, NH=%d NKV=%d)", p, causal,
             NH, NKV);
    tk_gradcheck(name, c.v, tk_grad_delta(&dv), nk, loss, &c, 1e-2f, 1e-2, 1e-3);
    tk_grad_free(&dq), tk_grad_free(&dk), tk_grad_free(&dv);
    ctx_free(&c);
}

// p = 0 backward is the plain call's; the packed entry points with fp32 storage (bf16 values)
// are the fp32 ones, forward and backward.
static void test_entry_points(float p) {
    const int B = 2, T = 9, NH = 4, NKV = 2, HD = 8;
    drop_ctx c = ctx_new(B, T, NH, NKV, HD, 1, p);
    const size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    tk_round_all(c.q, nq, RT_BF16), tk_round_all(c.k, nk, RT_BF16);
    tk_round_all(c.v, nk, RT_BF16), tk_round_all(c.proj, nq, RT_BF16);
    rt_attention_lowmem_dropout_forward(c.out, c.stats, c.scratch, c.q, c.k, c.v, B, T, NH, NKV,
                                        HD, 1, RT_BF16, RT_BF16, p, c.seed, c.stream);
    float* out = tk_dup(c.out, nq);
    rt_attention_lowmem_packed_dropout_forward(c.out, c.stats, c.scratch, c.q, c.k, c.v, B, T,
                                               NH, NKV, HD, 1, RT_BF16, 0, RT_BF16, p, c.seed,
                                               c.stream);
    const int fwd = !memcmp(out, c.out, nq * sizeof(float));
    float *a[3] = {tk_alloc(nq), tk_alloc(nk), tk_alloc(nk)};
    float *b[3] = {tk_alloc(nq), tk_alloc(nk), tk_alloc(nk)};
    rt_attention_lowmem_dropout_backward(a[0], a[1], a[2], c.scratch, c.proj, c.out, c.q, c.k,
                                         c.v, c.stats, B, T, NH, NKV, HD, 1, RT_BF16, RT_BF16,
                                         RT_ASSIGN_1 | RT_ASSIGN_2 | RT_ASSIGN_3, p, c.seed,
                                         c.stream);
    rt_attention_lowmem_packed_dropout_backward(b[0], b[1], b[2], c.scratch, c.proj, c.out, c.q,
                                                c.k, c.v, c.stats, B, T, NH, NKV, HD, 1, RT_BF16,
                                                0, RT_BF16, RT_ASSIGN_1 | RT_ASSIGN_2 | RT_ASSIGN_3,
                                                0, 0, 0, p, c.seed, c.stream);
    int bwd = 1;
    for (int i = 0; i < 3; i++) bwd &= !memcmp(a[i], b[i], (i ? nk : nq) * sizeof(float));
    if (p == 0.0f) {  // and both the plain call's
        rt_attention_lowmem_backward(b[0], b[1], b[2], c.scratch, c.proj, c.out, c.q, c.k, c.v,
                                     c.stats, B, T, NH, NKV, HD, 1, RT_BF16, RT_BF16,
                                     RT_ASSIGN_1 | RT_ASSIGN_2 | RT_ASSIGN_3);
        for (int i = 0; i < 3; i++) bwd &= !memcmp(a[i], b[i], (i ? nk : nq) * sizeof(float));
    }
    CHECK(fwd && bwd, "dropout p=%g: the packed entry points (bf16 values, fp32 storage) give "
          "the fp32 ones' bits%s", p, p == 0.0f ? ", and the backward the plain call's" : "");
    for (int i = 0; i < 3; i++) free(a[i]), free(b[i]);
    free(out);
    ctx_free(&c);
}

int main(void) {
    rt_kernels_init();
    tk_seed(7);
    test_forward(2, 5, 4, 2, 3, 1, 0.3f);
    test_forward(1, 9, 2, 2, 4, 0, 0.5f);
    test_forward(2, 17, 6, 3, 8, 1, 0.1f);
    test_mask(0.25f);
    test_mask(0.6f);
    test_gradcheck(2, 5, 2, 2, 3, 1, 0.3f);
    test_gradcheck(2, 6, 4, 2, 3, 0, 0.5f);
    test_entry_points(0.2f);
    test_entry_points(0.0f);
    return tk_summary("test_attention_dropout");
}
