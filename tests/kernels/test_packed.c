// Packed 16-bit logits (rt_kernels.h): each packed call against its fp32-storage twin on
// the same values, bit for bit, for bf16 and fp16, an odd vocabulary (13: padded to 16),
// an ignored row, and the accumulate and assign variants; the padding columns written are
// zeros.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "rt_kernels.h"

enum { N = 6, C = 10, V = 13 };

// p (N rows of RT_LD16(V)) widened equals x bit for bit; counts non-zero padding in *pad.
static int packed_equals(const uint16_t* p, const float* x, int rows, int cols, rt_dtype dt,
                         int* pad) {
    const int ld = RT_LD16(cols);
    int same = 1;
    *pad = 0;
    for (int n = 0; n < rows; n++) {
        for (int j = 0; j < cols; j++) {
            const float w = rt_bits16_to_f32_inl(p[n * ld + j], dt);
            same &= memcmp(&w, &x[n * cols + j], sizeof w) == 0;
        }
        for (int j = cols; j < ld; j++) *pad += p[n * ld + j] != 0;
    }
    return same;
}

static int same(const float* a, const float* b, size_t n) { return memcmp(a, b, n * sizeof *a) == 0; }

static void test_dt(rt_dtype dt) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    const int ld = RT_LD16(V);
    float *inp = tk_alloc(N * C), *w = tk_alloc(V * C);
    tk_fill(inp, N * C, -1.0f, 1.0f), tk_fill(w, V * C, -1.0f, 1.0f);
    tk_round_all(inp, N * C, dt), tk_round_all(w, V * C, dt);
    uint16_t* logits16 = malloc(sizeof(uint16_t) * N * ld);
    memset(logits16, 0xAB, sizeof(uint16_t) * N * ld);  // padding must be overwritten
    float* logits = tk_alloc(N * V);
    rt_linear_forward(logits, inp, w, NULL, N, C, V, dt);
    rt_linear_packed_forward(logits16, inp, w, N, C, V, dt);
    int pad;
    const int fwd_ok = packed_equals(logits16, logits, N, V, dt, &pad);
    CHECK(fwd_ok && pad == 0, "%s linear forward packed == rt_linear_forward (N %d, C %d, OC %d "
          "padded to %d), %d non-zero padding values", nm, N, C, V, ld, pad);

    const int32_t targets[N] = {3, 12, RT_IGNORE_INDEX, 0, 7, 5};
    for (int as = 0; as < 2; as++) {
        const int assign = as ? RT_ASSIGN_1 : RT_ACCUMULATE;
        float* g = tk_alloc(N * V);
        if (!as) {
            tk_fill(g, N * V, -0.01f, 0.01f);
            tk_round_all(g, N * V, dt);
        }
        uint16_t* g16 = malloc(sizeof(uint16_t) * N * ld);
        for (int n = 0; n < N; n++)
            for (int j = 0; j < ld; j++)
                g16[n * ld + j] = j < V ? rt_bits16_from_f32_inl(g[n * V + j], dt) : (uint16_t)0xAB;
        float l, l16;
        rt_cross_entropy_forward_backward(g, &l, logits, targets, N, V, 0.5f, dt, assign);
        rt_cross_entropy_packed_forward_backward(g16, &l16, logits16, targets, N, V, 0.5f, dt,
                                                 assign);
        const int ok = packed_equals(g16, g, N, V, dt, &pad);
        CHECK(ok && pad == 0 && memcmp(&l, &l16, sizeof l) == 0,
              "%s cross-entropy forward_backward packed (%s) == fp32 storage: loss %g and %g, "
              "dlogits %s, %d non-zero padding values",
              nm, as ? "assigned" : "accumulated", l, l16, ok ? "equal" : "differ", pad);

        // the head's backward from those packed gradients
        float *dinp = tk_alloc(N * C), *dw = tk_alloc(V * C);
        tk_fill(dinp, N * C, -1.0f, 1.0f), tk_fill(dw, V * C, -1.0f, 1.0f);
        tk_round_all(dinp, N * C, dt);
        float *dinp2 = tk_dup(dinp, N * C), *dw2 = tk_dup(dw, V * C);
        const int bits = as ? RT_ASSIGN_1 | RT_ASSIGN_DWEIGHT : RT_ACCUMULATE;
        rt_linear_backward(dinp, dw, NULL, g, inp, w, N, C, V, dt, bits);
        rt_linear_packed_backward(dinp2, dw2, g16, inp, w, N, C, V, dt, bits);
        CHECK(same(dinp, dinp2, N * C) && same(dw, dw2, V * C),
              "%s linear backward packed (%s) == rt_linear_backward: dinp and dweight, bit for bit",
              nm, as ? "assigned" : "accumulated");
        free(g), free(g16), free(dinp), free(dw), free(dinp2), free(dw2);
    }
    free(inp), free(w), free(logits16), free(logits);
}

int main(void) {
    rt_kernels_init();
    tk_seed(11);
    test_dt(RT_BF16);
    test_dt(RT_F16);
    return tk_summary("test_packed");
}
