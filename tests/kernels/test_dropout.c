// Tests of dropout and its Philox4x32-10 RNG: Random123's known-answer vectors, p = 0 is
// an exact copy, p = 1 zeroes, the kept fraction, scale 1/(1-p), sharded pieces with
// offsets reproduce the unsharded mask bit for bit, streams and seeds decorrelate, and
// backward applies the same mask (gradcheck).
#include "gradcheck.h"

// ----------------------------------------------------------------------------
// Philox known answers (Random123 tests/kat_vectors, philox4x32 10 rounds)

static void test_philox_kat(void) {
    const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
    const uint32_t key[3][2] = {{0, 0}, {0xffffffffu, 0xffffffffu}, {0xa4093822u, 0x299f31d0u}};
    const uint32_t want[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                 {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                 {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
    for (int i = 0; i < 3; i++) {
        uint32_t o[4];
        rt_philox4x32_10(ctr[i], key[i], o);
        CHECK(memcmp(o, want[i], sizeof o) == 0,
              "philox4x32-10 known answer %d: %08x %08x %08x %08x (want %08x %08x %08x %08x)", i,
              o[0], o[1], o[2], o[3], want[i][0], want[i][1], want[i][2], want[i][3]);
    }
    // the element draw is lane e%4 of counter block e/4: element 6 of (seed 0, stream 0)
    // is lane 2 of counter (1,0,0,0)
    uint32_t o[4];
    const uint32_t c1[4] = {1, 0, 0, 0}, k0[2] = {0, 0};
    rt_philox4x32_10(c1, k0, o);
    float u = rt_dropout_uniform(0, 0, 6);
    CHECK(u == (float)(o[2] >> 8) / 16777216.0f, "dropout_uniform(seed 0, stream 0, index 6) = %.9g "
          "is lane 2 of Philox block 1, top 24 bits", u);
}

// ----------------------------------------------------------------------------
// forward semantics

static void test_forward(void) {
    const size_t n = 100000;
    float *x = tk_alloc(n), *y = tk_alloc(n);
    tk_fill(x, n, 0.5f, 2.0f);  // nonzero, so a zero output means dropped

    rt_dropout_forward(y, x, n, 0.0f, 42, 7, 0, RT_F32);
    CHECK(memcmp(x, y, n * sizeof(float)) == 0, "dropout p=0: %zu values are an exact copy", n);
    float* z = tk_dup(x, n);
    rt_dropout_forward(z, z, n, 0.0f, 42, 7, 0, RT_F32);
    CHECK(memcmp(x, z, n * sizeof(float)) == 0, "dropout p=0 in place leaves the values unchanged");

    rt_dropout_forward(y, x, n, 1.0f, 42, 7, 0, RT_F32);
    size_t nz = 0;
    for (size_t i = 0; i < n; i++) nz += y[i] != 0.0f;
    CHECK(nz == 0, "dropout p=1 zeroes everything: %zu nonzero", nz);

    const float ps[3] = {0.1f, 0.3f, 0.5f};
    for (int k = 0; k < 3; k++) {
        const float p = ps[k];
        const float scale = (float)(1.0 / (1.0 - (double)p));
        rt_dropout_forward(y, x, n, p, 1234, 0, 0, RT_F32);
        size_t dropped = 0, bad = 0;
        for (size_t i = 0; i < n; i++) {
            if (y[i] == 0.0f) dropped++;
            else if (y[i] != x[i] * scale) bad++;
        }
        const double frac = (double)dropped / n, sigma = sqrt(p * (1.0 - p) / n);
        CHECK(fabs(frac - p) < 5 * sigma && bad == 0,
              "dropout p=%.1f: dropped fraction %.4f (|diff| %.4f < 5 sigma = %.4f), kept values "
              "exactly x/(1-p): %zu mismatches", p, frac, fabs(frac - p), 5 * sigma, bad);
        // the same call again is bit-identical (pure function of seed, stream, index)
        rt_dropout_forward(z, x, n, p, 1234, 0, 0, RT_F32);
        CHECK(memcmp(y, z, n * sizeof(float)) == 0, "dropout p=%.1f is deterministic", p);
    }

    // streams and seeds give different masks; count agreement of the drop decisions
    rt_dropout_forward(y, x, n, 0.5f, 1234, 0, 0, RT_F32);
    rt_dropout_forward(z, x, n, 0.5f, 1234, 1, 0, RT_F32);
    size_t agree = 0;
    for (size_t i = 0; i < n; i++) agree += (y[i] == 0.0f) == (z[i] == 0.0f);
    CHECK(fabs((double)agree / n - 0.5) < 0.01,
          "dropout stream 0 vs stream 1 (p=0.5): masks agree on %.4f of elements (independent: 0.5)",
          (double)agree / n);
    rt_dropout_forward(z, x, n, 0.5f, 1235, 0, 0, RT_F32);
    agree = 0;
    for (size_t i = 0; i < n; i++) agree += (y[i] == 0.0f) == (z[i] == 0.0f);
    CHECK(fabs((double)agree / n - 0.5) < 0.01,
          "dropout seed 1234 vs 1235 (p=0.5): masks agree on %.4f of elements", (double)agree / n);

    // uniform draws: mean 1/2, all in [0, 1)
    double mean = 0.0;
    int in_range = 1;
    for (size_t i = 0; i < n; i++) {
        float u = rt_dropout_uniform(99, 3, i);
        mean += u;
        in_range &= u >= 0.0f && u < 1.0f;
    }
    mean /= n;
    CHECK(in_range && fabs(mean - 0.5) < 0.005, "dropout uniforms: %zu draws in [0,1), mean %.4f", n,
          mean);
    free(x), free(y), free(z);
}

// ----------------------------------------------------------------------------
// sharded == unsharded: pieces at offsets (not multiples of 4) reproduce the full mask

static void test_sharded(void) {
    const size_t n = 1003;
    float *x = tk_alloc(n), *full = tk_alloc(n), *pieces = tk_alloc(n);
    tk_fill(x, n, -1, 1);
    rt_dropout_forward(full, x, n, 0.25f, 77, 5, 0, RT_F32);
    const size_t cut[5] = {0, 1, 250, 601, n};
    for (int r = 0; r < 4; r++)
        rt_dropout_forward(pieces + cut[r], x + cut[r], cut[r + 1] - cut[r], 0.25f, 77, 5, cut[r], RT_F32);
    CHECK(memcmp(full, pieces, n * sizeof(float)) == 0,
          "dropout: 4 pieces at offsets 0,1,250,601 are bit-identical to the unsharded %zu", n);
    // a global offset shifts the mask: the tensor's second half drawn alone
    rt_dropout_forward(pieces, x + 500, n - 500, 0.25f, 77, 5, 500, RT_F32);
    CHECK(memcmp(full + 500, pieces, (n - 500) * sizeof(float)) == 0,
          "dropout: elements [500, %zu) drawn with offset 500 match the full draw", n);
    free(x), free(full), free(pieces);
}

// ----------------------------------------------------------------------------
// backward: same mask and scale, gradcheck

typedef struct {
    float *out, *inp, *proj;
    size_t n;
    float p;
} drop_ctx;

static double drop_loss(void* q) {
    drop_ctx* c = (drop_ctx*)q;
    rt_dropout_forward(c->out, c->inp, c->n, c->p, 5, 9, 13, RT_F32);
    return tk_dot(c->out, c->proj, c->n);
}

static void test_backward(void) {
    const size_t n = 203;
    drop_ctx c = {tk_alloc(n), tk_alloc(n), tk_alloc(n), n, 0.4f};
    tk_fill(c.inp, n, 0.5f, 1.5f), tk_fill(c.proj, n, -1, 1);
    drop_loss(&c);
    tk_grad di = tk_grad_new(n);
    rt_dropout_backward(di.buf, c.proj, n, c.p, 5, 9, 13, RT_F32, RT_ACCUMULATE);
    const float* d = tk_grad_delta(&di);
    size_t same_mask = 0;
    for (size_t i = 0; i < n; i++) same_mask += (c.out[i] == 0.0f) == (d[i] == 0.0f);
    CHECK(same_mask == n, "dropout backward zeroes exactly the dropped elements: %zu/%zu agree",
          same_mask, n);
    tk_gradcheck("dropout p=0.4 dinp", c.inp, d, n, drop_loss, &c, 1e-2f, 1e-2, 1e-3);
    // p = 0 backward: exact accumulate of dout
    float g[3] = {1, 2, 3};
    const float dd[3] = {0.5f, 0.25f, -1};
    rt_dropout_backward(g, dd, 3, 0.0f, 1, 1, 0, RT_F32, RT_ACCUMULATE);
    CHECK(g[0] == 1.5f && g[1] == 2.25f && g[2] == 2.0f, "dropout p=0 backward adds dout exactly");
    tk_grad_free(&di);
    free(c.out), free(c.inp), free(c.proj);
}

int main(void) {
    rt_kernels_init();
    tk_seed(6);
    test_philox_kat();
    test_forward();
    test_sharded();
    test_backward();
    return tk_summary("test_dropout");
}
