// Tests of scaled-dot-product attention: forward vs a naive double implementation
// (causal and not, MHA and GQA), the causal mask (future keys/values cannot change
// earlier outputs), GQA == MHA with repeated kv heads (forward and backward), saved
// probabilities, gradcheck of q, k, v, and the lowmem variant (what the generated code
// calls) bit for bit against the probs variant over a sweep of shapes.
#include "gradcheck.h"

typedef struct {
    float *out, *probs, *q, *k, *v, *proj;
    int B, T, NH, NKV, HD, causal;
} att_ctx;

static double att_loss(void* p) {
    att_ctx* c = (att_ctx*)p;
    rt_attention_forward(c->out, c->probs, c->q, c->k, c->v, c->B, c->T, c->NH, c->NKV, c->HD,
                         c->causal);
    return tk_dot(c->out, c->proj, (size_t)c->B * c->T * c->NH * c->HD);
}

static att_ctx att_new(int B, int T, int NH, int NKV, int HD, int causal) {
    att_ctx c = {tk_alloc((size_t)B * T * NH * HD), tk_alloc(rt_attention_probs_floats(B, NH, T)),
                 tk_alloc((size_t)B * T * NH * HD), tk_alloc((size_t)B * T * NKV * HD),
                 tk_alloc((size_t)B * T * NKV * HD), tk_alloc((size_t)B * T * NH * HD),
                 B, T, NH, NKV, HD, causal};
    tk_fill(c.q, (size_t)B * T * NH * HD, -1.5f, 1.5f);
    tk_fill(c.k, (size_t)B * T * NKV * HD, -1.5f, 1.5f);
    tk_fill(c.v, (size_t)B * T * NKV * HD, -1, 1);
    tk_fill(c.proj, (size_t)B * T * NH * HD, -1, 1);
    return c;
}

static void att_free(att_ctx* c) {
    free(c->out), free(c->probs), free(c->q), free(c->k), free(c->v), free(c->proj);
}

// naive: for each (b, h, t) softmax over s of q.k * scale, masked, then weighted sum of v
static void naive_attention(double* out, const att_ctx* c) {
    const int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, HD = c->HD, G = NH / NKV;
    double* w = (double*)calloc((size_t)T, sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float* qv = c->q + ((size_t)b * T + t) * NH * HD + h * HD;
                double mx = -1e300, sum = 0.0;
                for (int s = 0; s < T; s++) {
                    const float* kv = c->k + ((size_t)b * T + s) * NKV * HD + (h / G) * HD;
                    double d = 0;
                    for (int i = 0; i < HD; i++) d += (double)qv[i] * kv[i];
                    w[s] = (c->causal && s > t) ? -INFINITY : d / sqrt((double)HD);
                    mx = fmax(mx, w[s]);
                }
                for (int s = 0; s < T; s++) sum += (w[s] = exp(w[s] - mx));
                double* o = out + ((size_t)b * T + t) * NH * HD + h * HD;
                for (int i = 0; i < HD; i++) {
                    double acc = 0;
                    for (int s = 0; s < T; s++)
                        acc += w[s] / sum * c->v[((size_t)b * T + s) * NKV * HD + (h / G) * HD + i];
                    o[i] = acc;
                }
            }
    free(w);
}

// ----------------------------------------------------------------------------
// forward against the naive reference, probabilities, causal mask

static void test_forward(int B, int T, int NH, int NKV, int HD, int causal) {
    att_ctx c = att_new(B, T, NH, NKV, HD, causal);
    const size_t n = (size_t)B * T * NH * HD;
    att_loss(&c);
    double* ref = (double*)calloc(n, sizeof(double));
    naive_attention(ref, &c);
    char name[128];
    snprintf(name, sizeof name, "attention forward B=%d T=%d NH=%d NKV=%d HD=%d %s vs naive", B, T,
             NH, NKV, HD, causal ? "causal" : "full");
    TK_CHECK_REF(name, c.out, ref, n, 2e-6);
    // probabilities: rows sum to 1, masked entries exactly 0
    double worst = 0.0;
    int masked_zero = 1;
    for (size_t r = 0; r < (size_t)B * NH * T; r++) {
        const float* row = c.probs + r * T;
        const int t = (int)(r % T);
        double s = 0;
        for (int j = 0; j < T; j++) {
            s += row[j];
            if (causal && j > t) masked_zero &= row[j] == 0.0f;
        }
        worst = fmax(worst, fabs(s - 1.0));
    }
    snprintf(name, sizeof name, "attention %s probs: %d rows sum to 1 within %.2g%s",
             causal ? "causal" : "full", B * NH * T, worst,
             causal ? ", future entries exactly 0" : "");
    CHECK(worst < 1e-6 && masked_zero, "%s", name);
    if (causal && T >= 2) {
        // changing keys/values at positions > t0 must not change outputs at positions <= t0
        const int t0 = T / 2;
        float* before = tk_dup(c.out, n);
        for (int b = 0; b < B; b++)
            for (int s = t0 + 1; s < T; s++)
                for (int i = 0; i < NKV * HD; i++) {
                    c.k[((size_t)b * T + s) * NKV * HD + i] += 3.0f;
                    c.v[((size_t)b * T + s) * NKV * HD + i] -= 5.0f;
                }
        att_loss(&c);
        int same = 1, changed = 0;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int i = 0; i < NH * HD; i++) {
                    size_t k = ((size_t)b * T + t) * NH * HD + i;
                    if (t <= t0) same &= c.out[k] == before[k];
                    else changed |= c.out[k] != before[k];
                }
        CHECK(same && changed,
              "causal mask: changing k,v after t=%d leaves outputs at t<=%d bit-identical "
              "(later outputs change: %s)", t0, t0, changed ? "yes" : "no");
        free(before);
    }
    free(ref);
    att_free(&c);
}

// ----------------------------------------------------------------------------
// gradcheck

static void test_gradcheck(int B, int T, int NH, int NKV, int HD, int causal) {
    att_ctx c = att_new(B, T, NH, NKV, HD, causal);
    const size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    att_loss(&c);
    tk_grad dq = tk_grad_new(nq), dk = tk_grad_new(nk), dv = tk_grad_new(nk);
    float* scratch = tk_alloc(rt_attention_scratch_floats(T));
    rt_attention_backward(dq.buf, dk.buf, dv.buf, scratch, c.proj, c.q, c.k, c.v, c.probs, B, T,
                          NH, NKV, HD, causal);
    char name[128];
    const char* tag = causal ? "causal" : "full";
    snprintf(name, sizeof name, "attention dq (%s, NH=%d NKV=%d)", tag, NH, NKV);
    tk_gradcheck(name, c.q, tk_grad_delta(&dq), nq, att_loss, &c, 1e-2f, 1e-2, 1e-3);
    snprintf(name, sizeof name, "attention dk (%s, NH=%d NKV=%d)", tag, NH, NKV);
    tk_gradcheck(name, c.k, tk_grad_delta(&dk), nk, att_loss, &c, 1e-2f, 1e-2, 1e-3);
    snprintf(name, sizeof name, "attention dv (%s, NH=%d NKV=%d)", tag, NH, NKV);
    tk_gradcheck(name, c.v, tk_grad_delta(&dv), nk, att_loss, &c, 1e-2f, 1e-2, 1e-3);

    // nullable gradients: each alone equals the full call
    att_loss(&c);
    tk_grad dq2 = tk_grad_new(nq), dk2 = tk_grad_new(nk), dv2 = tk_grad_new(nk);
    rt_attention_backward(dq2.buf, NULL, NULL, scratch, c.proj, c.q, c.k, c.v, c.probs, B, T, NH,
                          NKV, HD, causal);
    rt_attention_backward(NULL, dk2.buf, NULL, scratch, c.proj, c.q, c.k, c.v, c.probs, B, T, NH,
                          NKV, HD, causal);
    rt_attention_backward(NULL, NULL, dv2.buf, scratch, c.proj, c.q, c.k, c.v, c.probs, B, T, NH,
                          NKV, HD, causal);
    snprintf(name, sizeof name, "attention (%s) dq, dk, dv computed alone equal the joint call", tag);
    tk_err e1 = tk_compare_f(tk_grad_delta(&dq2), dq.delta, nq);
    tk_err e2 = tk_compare_f(tk_grad_delta(&dk2), dk.delta, nk);
    tk_err e3 = tk_compare_f(tk_grad_delta(&dv2), dv.delta, nk);
    CHECK(e1.max_rel < 1e-6 && e2.max_rel < 1e-6 && e3.max_rel < 1e-6,
          "%s: max diffs %.2g %.2g %.2g", name, e1.max_rel, e2.max_rel, e3.max_rel);
    tk_grad_free(&dq), tk_grad_free(&dk), tk_grad_free(&dv);
    tk_grad_free(&dq2), tk_grad_free(&dk2), tk_grad_free(&dv2);
    free(scratch);
    att_free(&c);
}

// ----------------------------------------------------------------------------
// GQA == MHA with each kv head repeated NH/NKV times (repeat_interleave)

static void test_gqa_equals_mha(int causal) {
    const int B = 2, T = 6, NH = 6, NKV = 2, HD = 4, G = NH / NKV;
    att_ctx g = att_new(B, T, NH, NKV, HD, causal);
    att_ctx m = att_new(B, T, NH, NH, HD, causal);
    memcpy(m.q, g.q, (size_t)B * T * NH * HD * sizeof(float));
    memcpy(m.proj, g.proj, (size_t)B * T * NH * HD * sizeof(float));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < HD; i++) {
                    size_t src = ((size_t)b * T + t) * NKV * HD + (h / G) * HD + i;
                    size_t dst = ((size_t)b * T + t) * NH * HD + h * HD + i;
                    m.k[dst] = g.k[src];
                    m.v[dst] = g.v[src];
                }
    att_loss(&g);
    att_loss(&m);
    const size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    CHECK(memcmp(g.out, m.out, nq * sizeof(float)) == 0,
          "GQA (NH=6, NKV=2, %s) forward is bit-identical to MHA with repeated kv heads",
          causal ? "causal" : "full");
    float *gdq = tk_alloc(nq), *gdk = tk_alloc(nk), *gdv = tk_alloc(nk);
    float *mdq = tk_alloc(nq), *mdk = tk_alloc(nq), *mdv = tk_alloc(nq);
    float* scratch = tk_alloc(rt_attention_scratch_floats(T));
    rt_attention_backward(gdq, gdk, gdv, scratch, g.proj, g.q, g.k, g.v, g.probs, B, T, NH, NKV,
                          HD, causal);
    rt_attention_backward(mdq, mdk, mdv, scratch, m.proj, m.q, m.k, m.v, m.probs, B, T, NH, NH, HD,
                          causal);
    // MHA's dk/dv summed over the repeated copies of each kv head
    double *sdk = (double*)calloc(nk, sizeof(double)), *sdv = (double*)calloc(nk, sizeof(double));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < HD; i++) {
                    size_t dst = ((size_t)b * T + t) * NKV * HD + (h / G) * HD + i;
                    size_t src = ((size_t)b * T + t) * NH * HD + h * HD + i;
                    sdk[dst] += mdk[src];
                    sdv[dst] += mdv[src];
                }
    CHECK(memcmp(gdq, mdq, nq * sizeof(float)) == 0, "GQA dq bit-identical to MHA dq (%s)",
          causal ? "causal" : "full");
    TK_CHECK_REF("GQA dk == sum of MHA dk over each kv head's query heads", gdk, sdk, nk, 1e-6);
    TK_CHECK_REF("GQA dv == sum of MHA dv over each kv head's query heads", gdv, sdv, nk, 1e-6);
    free(sdk), free(sdv), free(gdq), free(gdk), free(gdv), free(mdq), free(mdk), free(mdv);
    free(scratch);
    att_free(&g), att_free(&m);
}

// ----------------------------------------------------------------------------
// lowmem variant: same numbers as the probs variant, bit for bit, and its own gradcheck

typedef struct {
    att_ctx* c;
    float *stats, *scratch;
} low_ctx;

static double low_loss(void* p) {
    low_ctx* l = (low_ctx*)p;
    att_ctx* c = l->c;
    rt_attention_lowmem_forward(c->out, l->stats, l->scratch, c->q, c->k, c->v, c->B, c->T, c->NH,
                                c->NKV, c->HD, c->causal, RT_F32, RT_F32);
    return tk_dot(c->out, c->proj, (size_t)c->B * c->T * c->NH * c->HD);
}

static void test_lowmem(int B, int T, int NH, int NKV, int HD, int causal) {
    att_ctx c = att_new(B, T, NH, NKV, HD, causal);
    const size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    low_ctx l = {&c, tk_alloc(rt_attention_stats_floats(B, NH, T)),
                 tk_alloc(rt_attention_lowmem_scratch_floats(B, NH, T))};
    att_loss(&c);
    float* out_probs = tk_dup(c.out, nq);
    low_loss(&l);
    char name[160];
    const char* tag = causal ? "causal" : "full";
    snprintf(name, sizeof name, "attention lowmem forward (%s, NH=%d NKV=%d, T=%d) bit-identical to "
             "the probs variant", tag, NH, NKV, T);
    CHECK(memcmp(out_probs, c.out, nq * sizeof(float)) == 0, "%s", name);
    float *aq = tk_alloc(nq), *ak = tk_alloc(nk), *av = tk_alloc(nk);
    float *bq = tk_alloc(nq), *bk = tk_alloc(nk), *bv = tk_alloc(nk);
    float* scratch = tk_alloc(rt_attention_scratch_floats(T));
    rt_attention_backward(aq, ak, av, scratch, c.proj, c.q, c.k, c.v, c.probs, B, T, NH, NKV, HD,
                          causal);
    rt_attention_lowmem_backward(bq, bk, bv, l.scratch, c.proj, c.out, c.q, c.k, c.v, l.stats, B,
                                 T, NH, NKV, HD, causal, RT_F32, RT_F32, RT_ACCUMULATE);
    snprintf(name, sizeof name, "attention lowmem backward (%s, NH=%d NKV=%d) dq, dk, dv "
             "bit-identical to the probs variant", tag, NH, NKV);
    CHECK(memcmp(aq, bq, nq * sizeof(float)) == 0 && memcmp(ak, bk, nk * sizeof(float)) == 0 &&
              memcmp(av, bv, nk * sizeof(float)) == 0, "%s", name);
    tk_grad dq = tk_grad_new(nq), dk = tk_grad_new(nk), dv = tk_grad_new(nk);
    rt_attention_lowmem_backward(dq.buf, dk.buf, dv.buf, l.scratch, c.proj, c.out, c.q, c.k, c.v,
                                 l.stats, B, T, NH, NKV, HD, causal, RT_F32, RT_F32, RT_ACCUMULATE);
    snprintf(name, sizeof name, "attention lowmem dq (%s, NH=%d NKV=%d)", tag, NH, NKV);
    tk_gradcheck(name, c.q, tk_grad_delta(&dq), nq, low_loss, &l, 1e-2f, 1e-2, 1e-3);
    snprintf(name, sizeof name, "attention lowmem dk (%s, NH=%d NKV=%d)", tag, NH, NKV);
    tk_gradcheck(name, c.k, tk_grad_delta(&dk), nk, low_loss, &l, 1e-2f, 1e-2, 1e-3);
    snprintf(name, sizeof name, "attention lowmem dv (%s, NH=%d NKV=%d)", tag, NH, NKV);
    tk_gradcheck(name, c.v, tk_grad_delta(&dv), nk, low_loss, &l, 1e-2f, 1e-2, 1e-3);
    tk_grad_free(&dq), tk_grad_free(&dk), tk_grad_free(&dv);
    free(aq), free(ak), free(av), free(bq), free(bk), free(bv), free(scratch), free(out_probs);
    free(l.stats), free(l.scratch);
    att_free(&c);
}

// The generated code calls the lowmem variant; the probs variant is the straightforward
// one. Over a sweep of shapes (odd T, the examples' and test specs' shapes, MHA and GQA,
// causal and not) both must give the same bits: forward out, and backward dq, dk, dv
// accumulated onto the same non-zero buffers.
static void test_lowmem_sweep(void) {
    static const int shapes[][5] = {
        // B, T, NH, NKV, HD
        {1, 1, 1, 1, 1},   {1, 2, 2, 1, 4},  {2, 3, 4, 4, 8},  {1, 7, 3, 1, 5},
        {2, 16, 4, 4, 4},  {2, 17, 6, 2, 7}, {1, 31, 2, 2, 33}, {2, 32, 8, 2, 8},
        {2, 64, 4, 4, 32}, {8, 64, 4, 4, 32}, {1, 65, 4, 2, 16}, {1, 100, 2, 1, 64},
        {1, 129, 2, 2, 24},
    };
    const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    int same = 0, cases = 0;
    char first_bad[96] = "none";
    for (int si = 0; si < nshapes; si++)
        for (int causal = 0; causal < 2; causal++) {
            const int B = shapes[si][0], T = shapes[si][1], NH = shapes[si][2];
            const int NKV = shapes[si][3], HD = shapes[si][4];
            const size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
            att_ctx c = att_new(B, T, NH, NKV, HD, causal);
            float* stats = tk_alloc(rt_attention_stats_floats(B, NH, T));
            float* scratch = tk_alloc(rt_attention_lowmem_scratch_floats(B, NH, T));
            float* pscratch = tk_alloc(rt_attention_scratch_floats(T));
            float* out2 = tk_alloc(nq);
            float *aq = tk_alloc(nq), *ak = tk_alloc(nk), *av = tk_alloc(nk);
            tk_fill(aq, nq, -1, 1), tk_fill(ak, nk, -1, 1), tk_fill(av, nk, -1, 1);
            float *bq = tk_dup(aq, nq), *bk = tk_dup(ak, nk), *bv = tk_dup(av, nk);
            rt_attention_forward(c.out, c.probs, c.q, c.k, c.v, B, T, NH, NKV, HD, causal);
            rt_attention_lowmem_forward(out2, stats, scratch, c.q, c.k, c.v, B, T, NH, NKV, HD,
                                        causal, RT_F32, RT_F32);
            rt_attention_backward(aq, ak, av, pscratch, c.proj, c.q, c.k, c.v, c.probs, B, T, NH,
                                  NKV, HD, causal);
            rt_attention_lowmem_backward(bq, bk, bv, scratch, c.proj, out2, c.q, c.k, c.v, stats,
                                         B, T, NH, NKV, HD, causal, RT_F32, RT_F32, RT_ACCUMULATE);
            const int ok = memcmp(c.out, out2, nq * sizeof(float)) == 0 &&
                           memcmp(aq, bq, nq * sizeof(float)) == 0 &&
                           memcmp(ak, bk, nk * sizeof(float)) == 0 &&
                           memcmp(av, bv, nk * sizeof(float)) == 0;
            same += ok;
            cases++;
            if (!ok && !strcmp(first_bad, "none"))
                snprintf(first_bad, sizeof first_bad, "B=%d T=%d NH=%d NKV=%d HD=%d causal=%d", B,
                         T, NH, NKV, HD, causal);
            free(stats), free(scratch), free(pscratch), free(out2);
            free(aq), free(ak), free(av), free(bq), free(bk), free(bv);
            att_free(&c);
        }
    CHECK(same == cases,
          "attention lowmem == probs bit for bit (out, dq, dk, dv) in %d of %d shape cases "
          "(T 1..129, HD 1..64, MHA and GQA, causal and not; first difference: %s)",
          same, cases, first_bad);
}

int main(void) {
    rt_kernels_init();
    tk_seed(5);
    test_forward(2, 5, 4, 4, 3, 0);
    test_forward(2, 5, 4, 4, 3, 1);
    test_forward(2, 7, 4, 2, 3, 1);
    test_forward(1, 33, 4, 1, 16, 1);
    test_forward(1, 33, 2, 2, 16, 0);
    test_forward(1, 1, 2, 1, 8, 1);  // a single position: output = v
    test_gradcheck(2, 5, 2, 2, 3, 0);
    test_gradcheck(2, 5, 2, 2, 3, 1);
    test_gradcheck(2, 5, 4, 2, 3, 1);
    test_gradcheck(1, 4, 4, 1, 2, 0);
    test_gqa_equals_mha(1);
    test_gqa_equals_mha(0);
    test_lowmem(2, 5, 4, 2, 3, 1);
    test_lowmem(2, 5, 2, 2, 3, 0);
    test_lowmem(1, 40, 4, 1, 16, 1);
    test_lowmem_sweep();
    return tk_summary("test_attention");
}
