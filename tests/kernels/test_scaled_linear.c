// The scaled linear (rt_kernels.h rt_linear_scaled_forward and _backward, fp32 and packed
// storage): a power of two folded into the GEMM's alpha gives the bits of the linear and
// then the scale's kernel, forward, and of the scale's backward and then the linear's,
// backward (dinp and dweight assigned and added to; a packed dinp, a packed dweight, a dout
// that is a column slice of wider rows), for alphas 2, 0.5, 4 and 1 in fp32 and bf16; shapes
// not multiples of 8 in fp32 storage. The arguments it refuses are in test_packed.c.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "rt_kernels.h"

static const float ALPHAS[] = {2.0f, 0.5f, 4.0f, 1.0f};

static int same(const void* a, const void* b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

static float* random_values(size_t n, rt_dtype dt) {
    float* x = tk_alloc(n);
    tk_fill(x, n, -1.0f, 1.0f);
    tk_round_all(x, n, dt);
    return x;
}

static uint16_t* packed_values(const float* x, size_t n, rt_dtype dt) {
    uint16_t* p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = rt_bits16_from_f32_inl(x[i], dt);
    return p;
}

// fp32 storage: N x C inputs, OC outputs (any sizes).
static void test_fp32_storage(rt_dtype dt, float alpha, int N, int C, int OC) {
    const char* nm = dt == RT_F32 ? "fp32" : "bf16";
    float *x = random_values((size_t)N * C, dt), *w = random_values((size_t)OC * C, dt);
    float *d = random_values((size_t)N * OC, dt), *y = tk_alloc((size_t)N * OC);
    float* y2 = tk_alloc((size_t)N * OC);
    rt_linear_forward(y, x, w, NULL, N, C, OC, dt);
    rt_scale_forward(y, y, (size_t)N * OC, alpha, dt);
    rt_linear_scaled_forward(y2, x, w, N, C, OC, alpha, dt);
    CHECK(same(y, y2, (size_t)N * OC * 4),
          "%s scaled linear forward, alpha %g, [%d, %d] x [%d, %d]^T == linear then scale, bit for "
          "bit", nm, alpha, N, C, OC, C);
    float* ds = tk_alloc((size_t)N * OC);
    rt_scale_backward(ds, d, (size_t)N * OC, alpha, dt, RT_ASSIGN_1);
    for (int k = 0; k < 2; k++) {
        const int as = k ? RT_ACCUMULATE : RT_ASSIGN_1 | RT_ASSIGN_DWEIGHT;
        float *gi = random_values((size_t)N * C, dt), *gw = random_values((size_t)OC * C, RT_F32);
        float *gi2 = tk_dup(gi, (size_t)N * C), *gw2 = tk_dup(gw, (size_t)OC * C);
        rt_linear_backward(gi, gw, NULL, ds, x, w, N, C, OC, dt, as);
        rt_linear_scaled_backward(gi2, gw2, d, x, w, N, C, OC, alpha, dt, as);
        CHECK(same(gi, gi2, (size_t)N * C * 4) && same(gw, gw2, (size_t)OC * C * 4),
              "%s scaled linear backward (%s), alpha %g == scale's backward then the linear's: "
              "dinp and dweight, bit for bit", nm, k ? "added to" : "assigned", alpha);
        free(gi), free(gw), free(gi2), free(gw2);
    }
    free(x), free(w), free(d), free(y), free(y2), free(ds);
}

// Packed storage (bf16): input, weight and output packed; backward from a packed dout that is
// the columns [OFF, OFF + OC) of rows of LD into a packed dinp (assigned, added to) and a
// packed dweight (assigned).
enum { PN = 4, PC = 16, POC = 8, LD = 24, OFF = 8 };

static void test_packed_storage(float alpha) {
    const rt_dtype dt = RT_BF16;
    const int io = RT_PACKED_INP | RT_PACKED_INP2 | RT_PACKED_OUT;
    float *x = random_values(PN * PC, dt), *w = random_values(POC * PC, dt);
    uint16_t *x16 = packed_values(x, PN * PC, dt), *w16 = packed_values(w, POC * PC, dt);
    uint16_t y16[PN * POC], y16b[PN * POC];
    rt_linear_packed_forward(y16, x16, w16, NULL, PN, PC, POC, io, dt);
    rt_scale_packed_forward(y16, y16, PN * POC, alpha, RT_PACKED_OUT | RT_PACKED_INP, dt);
    rt_linear_scaled_packed_forward(y16b, x16, w16, PN, PC, POC, alpha, io, dt);
    CHECK(same(y16, y16b, sizeof y16), "bf16 scaled linear forward, alpha %g, input, weight and "
          "output packed == linear then scale, bit for bit", alpha);

    // dout: a column slice of rows of LD; the scale's backward of it, as dense rows of POC
    float* wide = random_values(PN * LD, dt);
    uint16_t* wide16 = packed_values(wide, PN * LD, dt);
    uint16_t slice16[PN * POC], ds16[PN * POC];
    for (int n = 0; n < PN; n++) memcpy(slice16 + n * POC, wide16 + n * LD + OFF, POC * 2);
    rt_scale_packed_backward(ds16, slice16, PN * POC, alpha, RT_PACKED_OUT | RT_PACKED_DINP, dt,
                             RT_ASSIGN_1);
    const int bits = io | RT_PACKED_DINP | RT_PACKED_DWEIGHT;
    for (int k = 0; k < 2; k++) {
        const int as = (k ? RT_ACCUMULATE : RT_ASSIGN_1) | RT_ASSIGN_DWEIGHT;
        float* g0 = random_values(PN * PC, dt);
        uint16_t *gi = packed_values(g0, PN * PC, dt), *gi2 = packed_values(g0, PN * PC, dt);
        uint16_t gw[POC * PC], gw2[POC * PC];
        rt_linear_packed_backward(gi, gw, NULL, ds16, x16, w16, PN, PC, POC, bits, dt, as, POC, 0);
        rt_linear_scaled_packed_backward(gi2, gw2, wide16 + OFF, x16, w16, PN, PC, POC, alpha,
                                         bits, dt, as, LD, 0);
        CHECK(same(gi, gi2, PN * PC * 2) && same(gw, gw2, sizeof gw),
              "bf16 scaled linear backward, alpha %g, dout the columns %d..%d of rows of %d, into "
              "a packed dinp (%s) and a packed dweight == scale's backward then the linear's, "
              "bit for bit", alpha, OFF, OFF + POC - 1, LD, k ? "added to" : "assigned");
        free(g0), free(gi), free(gi2);
    }
    free(x), free(w), free(x16), free(w16), free(wide), free(wide16);
}

int main(void) {
    rt_kernels_init();
    tk_seed(23);
    for (size_t a = 0; a < sizeof ALPHAS / sizeof *ALPHAS; a++) {
        test_fp32_storage(RT_F32, ALPHAS[a], 6, 13, 5);
        test_fp32_storage(RT_BF16, ALPHAS[a], 6, 13, 5);
        test_fp32_storage(RT_BF16, ALPHAS[a], 5, 16, 8);
        test_packed_storage(ALPHAS[a]);
    }
    return tk_summary("test_scaled_linear");
}
