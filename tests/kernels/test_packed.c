// Packed 16-bit storage (rt_kernels.h): each packed call against its fp32-storage twin on
// the same values, bit for bit, for bf16 and fp16: the logits (an odd vocabulary, 13:
// padded to 16; an ignored row; accumulated and assigned), linears with a packed input
// (odd C, padded; with a bias; with the output packed too; backward from a packed dout
// with dbias, into a packed dinp) or a packed weight (an unsharded parameter), the norms',
// activations', residual adds', scales', rotary embeddings' and attention's packed
// operands, forward and backward (every storage of each), and an embedding lookup's
// output. The padding columns written are zeros. Rotary
// embeddings' and attention's gradients in rows of a given length (column slices of one
// wider matrix) hold the dense calls' bits and leave the other columns alone, as do swiglu's
// da and db written as column slices, a linear's backward from a dout that is a column
// slice (stacked linears: dinp alone, dweight and dbias alone, all three) and a linear's
// packed dinp written as a column slice (plain and scaled); row lengths they cannot take
// stop the call with one line (in a child process). Packed parameter gradients
// (RT_PACKED_DWEIGHT) are the twins' assigned ones rounded; unassigned, or a linear's of a
// shape not a multiple of 8, they stop the call, as a scaled linear's alpha that is not a
// power of two and an fp16 one do (their bits: test_scaled_linear.c).
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bad_calls.h"
#include "gradcheck.h"
#include "packed_activations.h"
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

// x[rows, cols] (values of dt) as packed rows of RT_LD16(cols), zero padding.
static uint16_t* packed_copy(const float* x, int rows, int cols, rt_dtype dt) {
    const int ld = RT_LD16(cols);
    uint16_t* p = calloc((size_t)rows * ld, sizeof *p);
    for (int n = 0; n < rows; n++)
        for (int j = 0; j < cols; j++) p[n * ld + j] = rt_bits16_from_f32_inl(x[n * cols + j], dt);
    return p;
}

static uint16_t* poisoned16(size_t n) {
    uint16_t* p = malloc(n * sizeof *p);
    memset(p, 0xAB, n * sizeof *p);  // what a packed call writes must overwrite it
    return p;
}

// A packed gradient before a backward call: poisoned when the call assigns it, else g0's n
// dense values packed (what the call adds to).
static void grad16_start(uint16_t* g16, const float* g0, size_t n, int assigned, rt_dtype dt) {
    for (size_t i = 0; i < n; i++) g16[i] = assigned ? 0xABAB : rt_bits16_from_f32_inl(g0[i], dt);
}

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
    rt_linear_packed_forward(logits16, inp, w, NULL, N, C, V, RT_PACKED_OUT, dt);
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
        const float dloss = 0.5f;
        rt_cross_entropy_forward_backward(g, &l, logits, targets, N, V, &dloss, dt, assign);
        rt_cross_entropy_packed_forward_backward(g16, &l16, logits16, targets, N, V, &dloss, dt,
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
        rt_linear_packed_backward(dinp2, dw2, NULL, g16, inp, w, N, C, V, RT_PACKED_OUT, dt, bits,
                                  ld, 0);
        CHECK(same(dinp, dinp2, N * C) && same(dw, dw2, V * C),
              "%s linear backward packed (%s) == rt_linear_backward: dinp and dweight, bit for bit",
              nm, as ? "assigned" : "accumulated");
        free(g), free(g16), free(dinp), free(dw), free(dinp2), free(dw2);
    }
    free(inp), free(w), free(logits16), free(logits);
}

// A linear whose input is packed (rows of RT_LD16(C)), with a bias, its output fp32 storage
// or packed too; the backward from an fp32 dout and from a packed dout, with dbias; an
// assigned dinp packed.
static void test_packed_input(rt_dtype dt) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    enum { OC = 12 };
    float *inp = tk_alloc(N * C), *w = tk_alloc(OC * C), *b = tk_alloc(OC);
    tk_fill(inp, N * C, -1.0f, 1.0f), tk_fill(w, OC * C, -1.0f, 1.0f), tk_fill(b, OC, -1.0f, 1.0f);
    tk_round_all(inp, N * C, dt), tk_round_all(w, OC * C, dt), tk_round_all(b, OC, dt);
    uint16_t* inp16 = packed_copy(inp, N, C, dt);
    float *out = tk_alloc(N * OC), *out2 = tk_alloc(N * OC);
    rt_linear_forward(out, inp, w, b, N, C, OC, dt);
    rt_linear_packed_forward(out2, inp16, w, b, N, C, OC, RT_PACKED_INP, dt);
    CHECK(same(out, out2, N * OC), "%s linear forward, packed input (C %d padded to %d) == "
          "rt_linear_forward, bit for bit", nm, C, RT_LD16(C));
    uint16_t* out16 = poisoned16((size_t)N * RT_LD16(OC));
    rt_linear_packed_forward(out16, inp16, w, b, N, C, OC, RT_PACKED_INP | RT_PACKED_OUT, dt);
    int pad;
    const int ok = packed_equals(out16, out, N, OC, dt, &pad);
    CHECK(ok && pad == 0, "%s linear forward, input and output packed == rt_linear_forward, "
          "%d non-zero padding values", nm, pad);

    float* dout = tk_alloc(N * OC);
    tk_fill(dout, N * OC, -1.0f, 1.0f), tk_round_all(dout, N * OC, dt);
    uint16_t* dout16 = packed_copy(dout, N, OC, dt);
    for (int as = 0; as < 2; as++) {
        const int bits = as ? RT_ASSIGN_1 | RT_ASSIGN_DWEIGHT : RT_ACCUMULATE;
        const char* how = as ? "assigned" : "accumulated";
        float *dinp = tk_alloc(N * C), *dw = tk_alloc(OC * C), *db = tk_alloc(OC);
        tk_fill(dinp, N * C, -1.0f, 1.0f), tk_fill(dw, OC * C, -1.0f, 1.0f), tk_fill(db, OC, -1.0f, 1.0f);
        tk_round_all(dinp, N * C, dt);
        float *dinp2 = tk_dup(dinp, N * C), *dw2 = tk_dup(dw, OC * C), *db2 = tk_dup(db, OC);
        float *dinp3 = tk_dup(dinp, N * C), *dw3 = tk_dup(dw, OC * C), *db3 = tk_dup(db, OC);
        uint16_t* dinp16 = as ? poisoned16((size_t)N * RT_LD16(C)) : packed_copy(dinp, N, C, dt);
        rt_linear_packed_backward(dinp2, dw2, db2, dout, inp16, w, N, C, OC, RT_PACKED_INP, dt, bits,
                                  OC, 0);
        rt_linear_packed_backward(dinp3, dw3, db3, dout16, inp16, w, N, C, OC,
                                  RT_PACKED_INP | RT_PACKED_OUT, dt, bits, RT_LD16(OC), 0);
        rt_linear_backward(dinp, dw, db, dout, inp, w, N, C, OC, dt, bits);
        CHECK(same(dinp, dinp2, N * C) && same(dw, dw2, OC * C) && same(db, db2, OC),
              "%s linear backward, packed input (%s) == rt_linear_backward: dinp, dweight, dbias",
              nm, how);
        CHECK(same(dinp, dinp3, N * C) && same(dw, dw3, OC * C) && same(db, db3, OC),
              "%s linear backward, packed input and dout (%s) == rt_linear_backward: dinp, "
              "dweight, dbias", nm, how);
        rt_linear_packed_backward(dinp16, NULL, NULL, dout16, inp16, w, N, C, OC,
                                  RT_PACKED_INP | RT_PACKED_OUT | RT_PACKED_DINP, dt, bits,
                                  RT_LD16(OC), 0);
        const int ok16 = packed_equals(dinp16, dinp, N, C, dt, &pad);
        CHECK(ok16 && pad == 0, "%s linear backward into a packed dinp (%s; C %d padded to %d) == "
              "rt_linear_backward's, %d non-zero padding values", nm, how, C, RT_LD16(C), pad);
        free(dinp16);
        free(dinp), free(dw), free(db), free(dinp2), free(dw2), free(db2), free(dinp3), free(dw3),
            free(db3);
    }
    free(inp), free(w), free(b), free(inp16), free(out), free(out2), free(out16), free(dout), free(dout16);
}

// A linear whose weight is packed (an unsharded parameter: dense [OC, C], both multiples of
// 8), alone and with the input, the output, dout and dinp packed too; dweight and dbias from
// the same call, assigned and accumulated.
static void test_packed_weight(rt_dtype dt) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    enum { OC = 16, CW = 24 };
    float *inp = tk_alloc(N * CW), *w = tk_alloc(OC * CW), *b = tk_alloc(OC), *dout = tk_alloc(N * OC);
    tk_fill(inp, N * CW, -1.0f, 1.0f), tk_fill(w, OC * CW, -1.0f, 1.0f), tk_fill(b, OC, -1.0f, 1.0f);
    tk_fill(dout, N * OC, -1.0f, 1.0f);
    tk_round_all(inp, N * CW, dt), tk_round_all(w, OC * CW, dt), tk_round_all(b, OC, dt);
    tk_round_all(dout, N * OC, dt);
    uint16_t *w16 = packed_copy(w, OC, CW, dt), *inp16 = packed_copy(inp, N, CW, dt),
             *dout16 = packed_copy(dout, N, OC, dt);
    float *out = tk_alloc(N * OC), *out2 = tk_alloc(N * OC);
    uint16_t* out16 = poisoned16((size_t)N * OC);
    rt_linear_forward(out, inp, w, b, N, CW, OC, dt);
    rt_linear_packed_forward(out2, inp, w16, b, N, CW, OC, RT_PACKED_INP2, dt);
    rt_linear_packed_forward(out16, inp16, w16, b, N, CW, OC,
                             RT_PACKED_INP | RT_PACKED_INP2 | RT_PACKED_OUT, dt);
    int pad;
    const int ok = packed_equals(out16, out, N, OC, dt, &pad);
    CHECK(same(out, out2, N * OC) && ok, "%s linear forward, packed weight [%d, %d] (alone; with "
          "the input and output packed) == rt_linear_forward, bit for bit", nm, OC, CW);
    for (int as = 0; as < 2; as++) {
        const int bits = as ? RT_ASSIGN_1 | RT_ASSIGN_DWEIGHT : RT_ACCUMULATE;
        const char* how = as ? "assigned" : "accumulated";
        float *dinp = tk_alloc(N * CW), *dw = tk_alloc(OC * CW), *db = tk_alloc(OC);
        tk_fill(dinp, N * CW, -1.0f, 1.0f), tk_fill(dw, OC * CW, -1.0f, 1.0f), tk_fill(db, OC, -1.0f, 1.0f);
        tk_round_all(dinp, N * CW, dt);
        float *dinp2 = tk_dup(dinp, N * CW), *dw2 = tk_dup(dw, OC * CW), *db2 = tk_dup(db, OC);
        float *dw3 = tk_dup(dw, OC * CW), *db3 = tk_dup(db, OC);
        uint16_t* dinp16 = as ? poisoned16((size_t)N * CW) : packed_copy(dinp, N, CW, dt);
        rt_linear_packed_backward(dinp2, dw2, db2, dout, inp, w16, N, CW, OC, RT_PACKED_INP2, dt,
                                  bits, OC, 0);
        rt_linear_packed_backward(dinp16, dw3, db3, dout16, inp16, w16, N, CW, OC,
                                  RT_PACKED_INP | RT_PACKED_INP2 | RT_PACKED_OUT | RT_PACKED_DINP,
                                  dt, bits, OC, 0);
        rt_linear_backward(dinp, dw, db, dout, inp, w, N, CW, OC, dt, bits);
        CHECK(same(dinp, dinp2, N * CW) && same(dw, dw2, OC * CW) && same(db, db2, OC),
              "%s linear backward, packed weight (%s) == rt_linear_backward: dinp, dweight, dbias",
              nm, how);
        const int ok16 = packed_equals(dinp16, dinp, N, CW, dt, &pad);
        CHECK(ok16 && same(dw, dw3, OC * CW) && same(db, db3, OC),
              "%s linear backward, everything packed (%s) == rt_linear_backward: dinp, dweight, "
              "dbias", nm, how);
        free(dinp), free(dw), free(db), free(dinp2), free(dw2), free(db2), free(dw3), free(db3),
            free(dinp16);
    }
    free(inp), free(w), free(b), free(dout), free(w16), free(inp16), free(dout16), free(out),
        free(out2), free(out16);
}

// The packed outputs of the norms and activations (dense rows: C a multiple of 8).
static void test_packed_outputs(rt_dtype dt) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    enum { R = 5, D = 24, NE = R * D };
    float *x = tk_alloc(NE), *x2 = tk_alloc(NE), *w = tk_alloc(D), *b = tk_alloc(D);
    tk_fill(x, NE, -3.0f, 3.0f), tk_fill(x2, NE, -3.0f, 3.0f), tk_fill(w, D, 0.5f, 1.5f),
        tk_fill(b, D, -1.0f, 1.0f);
    tk_round_all(x, NE, dt), tk_round_all(x2, NE, dt), tk_round_all(w, D, dt), tk_round_all(b, D, dt);
    float *y = tk_alloc(NE), *s1 = tk_alloc(R), *s2 = tk_alloc(R), *t1 = tk_alloc(R), *t2 = tk_alloc(R);
    uint16_t* y16 = poisoned16(NE);
    int pad;

    // norms: every storage of out and inp forward, of dout, inp and dinp backward (dinp
    // assigned and accumulated)
    uint16_t* xn16 = packed_copy(x, R, D, dt);
    float *yn = tk_alloc(NE), *dn = tk_alloc(NE), *gn0 = tk_alloc(NE), *gn = tk_alloc(NE),
          *gn2 = tk_alloc(NE), *dw = tk_alloc(D), *dw2 = tk_alloc(D), *dbn = tk_alloc(D),
          *dbn2 = tk_alloc(D);
    uint16_t* gn16 = poisoned16(NE);
    tk_fill(dn, NE, -1.0f, 1.0f), tk_fill(gn0, NE, -1.0f, 1.0f), tk_round_all(dn, NE, dt),
        tk_round_all(gn0, NE, dt);
    int ok_ln = 1, ok_rms = 1;
    rt_layernorm_forward(y, s1, s2, x, w, b, R, D, RT_LAYERNORM_EPS, dt);
    for (int bits = 1; bits < 4; bits++) {
        memset(y16, 0xAB, NE * sizeof *y16);
        rt_layernorm_packed_forward(bits & RT_PACKED_OUT ? (void*)y16 : (void*)yn, t1, t2,
                                    bits & RT_PACKED_INP ? (const void*)xn16 : x, w, b, R, D,
                                    RT_LAYERNORM_EPS, bits, dt);
        ok_ln &= (bits & RT_PACKED_OUT ? packed_equals(y16, y, R, D, dt, &pad) : same(y, yn, NE)) &&
                 same(s1, t1, R) && same(s2, t2, R);
    }
    uint16_t* dn16 = packed_copy(dn, R, D, dt);
    for (int bits = 0; bits < 16; bits++) {  // backward: dout, inp, dinp each packed or not
        const int pk = (bits & 3) | (bits & 4 ? RT_PACKED_DINP : 0);
        const int as = bits & 8 ? RT_ASSIGN_1 : RT_ACCUMULATE;
        memcpy(gn, gn0, sizeof(float) * NE), memcpy(gn2, gn0, sizeof(float) * NE);
        grad16_start(gn16, gn0, NE, as, dt);
        memset(dw, 0, sizeof(float) * D), memset(dw2, 0, sizeof(float) * D);
        memset(dbn, 0, sizeof(float) * D), memset(dbn2, 0, sizeof(float) * D);
        rt_layernorm_backward(gn, dw, dbn, dn, x, w, s1, s2, R, D, dt, as);
        rt_layernorm_packed_backward(pk & RT_PACKED_DINP ? (void*)gn16 : (void*)gn2, dw2, dbn2,
                                     pk & RT_PACKED_OUT ? (const void*)dn16 : dn,
                                     pk & RT_PACKED_INP ? (const void*)xn16 : x, w, s1, s2, R, D,
                                     pk, dt, as);
        ok_ln &= (pk & RT_PACKED_DINP ? packed_equals(gn16, gn, R, D, dt, &pad) : same(gn, gn2, NE)) &&
                 same(dw, dw2, D) && same(dbn, dbn2, D);
    }
    CHECK(ok_ln, "%s layernorm packed forward (out, inp, both) and backward (every storage of "
          "dout, inp, dinp; dinp assigned and accumulated) == "
          "rt_layernorm_forward, rt_layernorm_backward: out, mean, rstd, dinp, dweight, dbias", nm);
    rt_rmsnorm_forward(y, s1, x, w, R, D, 1e-6f, dt);
    for (int bits = 1; bits < 4; bits++) {
        memset(y16, 0xAB, NE * sizeof *y16);
        rt_rmsnorm_packed_forward(bits & RT_PACKED_OUT ? (void*)y16 : (void*)yn, t1,
                                  bits & RT_PACKED_INP ? (const void*)xn16 : x, w, R, D, 1e-6f, bits, dt);
        ok_rms &= (bits & RT_PACKED_OUT ? packed_equals(y16, y, R, D, dt, &pad) : same(y, yn, NE)) &&
                  same(s1, t1, R);
    }
    for (int bits = 0; bits < 16; bits++) {
        const int pk = (bits & 3) | (bits & 4 ? RT_PACKED_DINP : 0);
        const int as = bits & 8 ? RT_ASSIGN_1 : RT_ACCUMULATE;
        memcpy(gn, gn0, sizeof(float) * NE), memcpy(gn2, gn0, sizeof(float) * NE);
        grad16_start(gn16, gn0, NE, as, dt);
        memset(dw, 0, sizeof(float) * D), memset(dw2, 0, sizeof(float) * D);
        rt_rmsnorm_backward(gn, dw, dn, x, w, s1, R, D, dt, as);
        rt_rmsnorm_packed_backward(pk & RT_PACKED_DINP ? (void*)gn16 : (void*)gn2, dw2,
                                   pk & RT_PACKED_OUT ? (const void*)dn16 : dn,
                                   pk & RT_PACKED_INP ? (const void*)xn16 : x, w, s1, R, D, pk, dt,
                                   as);
        ok_rms &= (pk & RT_PACKED_DINP ? packed_equals(gn16, gn, R, D, dt, &pad) : same(gn, gn2, NE)) &&
                  same(dw, dw2, D);
    }
    CHECK(ok_rms, "%s rmsnorm packed forward (out, inp, both) and backward (every storage of dout, "
          "inp, dinp; dinp assigned and accumulated) == "
          "rt_rmsnorm_forward, rt_rmsnorm_backward: out, rstd, dinp, dweight", nm);
    free(xn16), free(dn16), free(gn16), free(yn), free(dn), free(gn0), free(gn), free(gn2), free(dw), free(dw2),
        free(dbn), free(dbn2);

    // activations: every storage of out and inp (and b), forward and backward
    uint16_t *x16 = packed_copy(x, 1, NE, dt), *x216 = packed_copy(x2, 1, NE, dt);
    float *dy = tk_alloc(NE), *g0 = tk_alloc(NE), *g = tk_alloc(NE), *g2 = tk_alloc(NE),
          *h = tk_alloc(NE), *h2 = tk_alloc(NE);
    tk_fill(dy, NE, -1.0f, 1.0f), tk_fill(g0, NE, -1.0f, 1.0f);
    tk_round_all(dy, NE, dt), tk_round_all(g0, NE, dt);
    uint16_t *dy16 = packed_copy(dy, 1, NE, dt), *g16 = poisoned16(NE), *h16 = poisoned16(NE);
    float* y2 = tk_alloc(NE);
    for (int k = 0; k < 3; k++) {
        const packed_activation* a = &packed_activations[k];
        a->forward(y, x, NE, dt);
        int ok = 1;
        // backward: every storage of dout (RT_PACKED_OUT), inp and dinp, each assigned and
        // accumulated
        for (int bits = 0; bits < 16; bits++) {
            const int pk = (bits & 3) | (bits & 4 ? RT_PACKED_DINP : 0), pg = pk & RT_PACKED_DINP;
            const int as = bits & 8 ? RT_ASSIGN_1 : RT_ACCUMULATE;
            memcpy(g, g0, sizeof(float) * NE), memcpy(g2, g0, sizeof(float) * NE);
            grad16_start(g16, g0, NE, as, dt);
            a->backward(g, dy, x, NE, dt, as);
            a->packed_backward(pg ? (void*)g16 : (void*)g2,
                               pk & RT_PACKED_OUT ? (const void*)dy16 : dy,
                               pk & RT_PACKED_INP ? (const void*)x16 : x, NE, pk, dt, as);
            ok &= pg ? packed_equals(g16, g, 1, NE, dt, &pad) : same(g, g2, NE);
        }
        for (int bits = 1; bits < 4; bits++) {
            memset(y16, 0xAB, NE * sizeof *y16);
            a->packed_forward(bits & RT_PACKED_OUT ? (void*)y16 : (void*)y2,
                              bits & RT_PACKED_INP ? (const void*)x16 : x, NE, bits, dt);
            ok &= bits & RT_PACKED_OUT ? packed_equals(y16, y, 1, NE, dt, &pad) : same(y, y2, NE);
        }
        CHECK(ok, "%s %s packed forward (out, inp, both packed) == rt_%s_forward, and backward "
              "(every storage of dinp, dout, inp) == rt_%s_backward", nm, a->name, a->name, a->name);
    }
    rt_swiglu_forward(y, x, x2, NE, dt);
    // backward: every storage of dout, a, b, da and db, each gradient assigned or accumulated
    int ok = 1;
    for (int bits = 0; bits < 128; bits++) {
        const int pk = (bits & 7) | (bits & 8 ? RT_PACKED_DINP : 0) | (bits & 16 ? RT_PACKED_DINP2 : 0);
        const int as = (bits & 32 ? RT_ASSIGN_1 : 0) | (bits & 64 ? RT_ASSIGN_2 : 0);
        memcpy(g, g0, sizeof(float) * NE), memcpy(g2, g0, sizeof(float) * NE);
        memcpy(h, g0, sizeof(float) * NE), memcpy(h2, g0, sizeof(float) * NE);
        grad16_start(g16, g0, NE, as & RT_ASSIGN_1, dt), grad16_start(h16, g0, NE, as & RT_ASSIGN_2, dt);
        rt_swiglu_backward(g, h, dy, x, x2, NE, dt, as);
        rt_swiglu_packed_backward(pk & RT_PACKED_DINP ? (void*)g16 : (void*)g2,
                                  pk & RT_PACKED_DINP2 ? (void*)h16 : (void*)h2,
                                  pk & RT_PACKED_OUT ? (const void*)dy16 : dy,
                                  pk & RT_PACKED_INP ? (const void*)x16 : x,
                                  pk & RT_PACKED_INP2 ? (const void*)x216 : x2, NE, pk, dt, as,
                                  D, D, D);
        ok &= pk & RT_PACKED_DINP ? packed_equals(g16, g, 1, NE, dt, &pad) : same(g, g2, NE);
        ok &= pk & RT_PACKED_DINP2 ? packed_equals(h16, h, 1, NE, dt, &pad) : same(h, h2, NE);
    }
    for (int bits = 1; bits < 8; bits++) {
        memset(y16, 0xAB, NE * sizeof *y16);
        rt_swiglu_packed_forward(bits & RT_PACKED_OUT ? (void*)y16 : (void*)y2,
                                 bits & RT_PACKED_INP ? (const void*)x16 : x,
                                 bits & RT_PACKED_INP2 ? (const void*)x216 : x2, NE, bits, dt);
        ok &= bits & RT_PACKED_OUT ? packed_equals(y16, y, 1, NE, dt, &pad) : same(y, y2, NE);
    }
    CHECK(ok, "%s swiglu packed forward (every storage of out, a, b) == rt_swiglu_forward, and "
          "backward (every storage of da, db, dout, a, b) == rt_swiglu_backward", nm);
    // residual add: out, a and b each fp32 or packed; dout, da and db likewise, da and db
    // each assigned or accumulated
    ok = 1;
    rt_residual_forward(y, x, x2, NE, dt);
    for (int bits = 1; bits < 8; bits++) {
        memset(y16, 0xAB, NE * sizeof *y16);
        rt_residual_packed_forward(bits & RT_PACKED_OUT ? (void*)y16 : (void*)y2,
                                   bits & RT_PACKED_INP ? (const void*)x16 : x,
                                   bits & RT_PACKED_INP2 ? (const void*)x216 : x2, NE, bits, dt);
        ok &= bits & RT_PACKED_OUT ? packed_equals(y16, y, 1, NE, dt, &pad) : same(y, y2, NE);
    }
    for (int bits = 0; bits < 32; bits++) {
        const int pk = (bits & 1 ? RT_PACKED_DINP : 0) | (bits & 2 ? RT_PACKED_DINP2 : 0) |
                       (bits & 16 ? RT_PACKED_OUT : 0);
        const int as = (bits & 4 ? RT_ASSIGN_1 : 0) | (bits & 8 ? RT_ASSIGN_2 : 0);
        memcpy(g, g0, sizeof(float) * NE), memcpy(g2, g0, sizeof(float) * NE);
        memcpy(h, g0, sizeof(float) * NE), memcpy(h2, g0, sizeof(float) * NE);
        grad16_start(g16, g0, NE, as & RT_ASSIGN_1, dt), grad16_start(h16, g0, NE, as & RT_ASSIGN_2, dt);
        rt_residual_backward(g, h, dy, NE, dt, as);
        rt_residual_packed_backward(pk & RT_PACKED_DINP ? (void*)g16 : (void*)g2,
                                    pk & RT_PACKED_DINP2 ? (void*)h16 : (void*)h2,
                                    pk & RT_PACKED_OUT ? (const void*)dy16 : dy, NE, pk, dt, as);
        ok &= pk & RT_PACKED_DINP ? packed_equals(g16, g, 1, NE, dt, &pad) : same(g, g2, NE);
        ok &= pk & RT_PACKED_DINP2 ? packed_equals(h16, h, 1, NE, dt, &pad) : same(h, h2, NE);
    }
    CHECK(ok, "%s residual packed forward (every storage of out, a, b) == rt_residual_forward, and "
          "backward (every storage of dout, da, db) == rt_residual_backward", nm);
    // a tensor times a number: out and inp each fp32 or packed (in place too); dout and dinp
    // likewise, dinp assigned or accumulated; a NULL dinp writes nothing
    ok = 1;
    const float ss[2] = {0.37f, -3.0f};
    for (int k = 0; k < 2; k++) {
        rt_scale_forward(y, x, NE, ss[k], dt);
        for (int bits = 1; bits < 4; bits++) {
            memset(y16, 0xAB, NE * sizeof *y16);
            rt_scale_packed_forward(bits & RT_PACKED_OUT ? (void*)y16 : (void*)y2,
                                    bits & RT_PACKED_INP ? (const void*)x16 : x, NE, ss[k], bits, dt);
            ok &= bits & RT_PACKED_OUT ? packed_equals(y16, y, 1, NE, dt, &pad) : same(y, y2, NE);
        }
        memcpy(y16, x16, NE * sizeof *y16);
        rt_scale_packed_forward(y16, y16, NE, ss[k], RT_PACKED_OUT | RT_PACKED_INP, dt);
        ok &= packed_equals(y16, y, 1, NE, dt, &pad);
        for (int bits = 0; bits < 8; bits++) {
            const int pk = (bits & 1 ? RT_PACKED_OUT : 0) | (bits & 2 ? RT_PACKED_DINP : 0);
            const int as = bits & 4 ? RT_ASSIGN_1 : RT_ACCUMULATE;
            memcpy(g, g0, sizeof(float) * NE), memcpy(g2, g0, sizeof(float) * NE);
            grad16_start(g16, g0, NE, as, dt);
            rt_scale_backward(g, dy, NE, ss[k], dt, as);
            rt_scale_packed_backward(pk & RT_PACKED_DINP ? (void*)g16 : (void*)g2,
                                     pk & RT_PACKED_OUT ? (const void*)dy16 : dy, NE, ss[k], pk, dt,
                                     as);
            ok &= pk & RT_PACKED_DINP ? packed_equals(g16, g, 1, NE, dt, &pad) : same(g, g2, NE);
        }
        rt_scale_packed_backward(NULL, dy16, NE, ss[k], RT_PACKED_OUT | RT_PACKED_DINP, dt,
                                 RT_ASSIGN_1);
    }
    CHECK(ok, "%s scale packed forward (every storage of out, inp; in place) == rt_scale_forward, and "
          "backward (every storage of dout, dinp) == rt_scale_backward, s = 0.37 and -3", nm);
    free(x16), free(x216), free(dy), free(g0), free(g), free(g2), free(h), free(h2), free(y2);
    free(dy16), free(g16), free(h16);
    free(x), free(x2), free(w), free(b), free(y), free(s1), free(s2), free(t1), free(t2), free(y16);
}

// Rotary embeddings and lowmem attention (GQA, causal) with every storage of their operands.
static void test_packed_attention(rt_dtype dt) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    enum { B = 2, T = 5, NH = 4, NKV = 2, HD = 8, NQ = B * T * NH * HD, NK = B * T * NKV * HD };
    float *q = tk_alloc(NQ), *k = tk_alloc(NK), *v = tk_alloc(NK), *dy = tk_alloc(NQ);
    tk_fill(q, NQ, -1.0f, 1.0f), tk_fill(k, NK, -1.0f, 1.0f), tk_fill(v, NK, -1.0f, 1.0f),
        tk_fill(dy, NQ, -1.0f, 1.0f);
    tk_round_all(q, NQ, dt), tk_round_all(k, NK, dt), tk_round_all(v, NK, dt), tk_round_all(dy, NQ, dt);
    uint16_t *q16 = packed_copy(q, 1, NQ, dt), *k16 = packed_copy(k, 1, NK, dt),
             *v16 = packed_copy(v, 1, NK, dt), *dy16 = packed_copy(dy, 1, NQ, dt);
    uint16_t *y16 = poisoned16(NQ), *g16 = poisoned16(NQ);
    float *y = tk_alloc(NQ), *y2 = tk_alloc(NQ), *g0 = tk_alloc(NQ), *g = tk_alloc(NQ), *g2 = tk_alloc(NQ);
    tk_fill(g0, NQ, -1.0f, 1.0f), tk_round_all(g0, NQ, dt);
    int pad, ok = 1;

    // rope: forward over every storage of out and inp; backward over dout and dinp, each dinp
    // assigned or accumulated
    rt_rope_forward(y, q, B, T, NH, HD, RT_ROPE_THETA, dt);
    for (int bits = 1; bits < 4; bits++) {
        memset(y16, 0xAB, NQ * sizeof *y16);
        rt_rope_packed_forward(bits & RT_PACKED_OUT ? (void*)y16 : (void*)y2,
                               bits & RT_PACKED_INP ? (const void*)q16 : q, B, T, NH, HD,
                               RT_ROPE_THETA, bits, dt);
        ok &= bits & RT_PACKED_OUT ? packed_equals(y16, y, 1, NQ, dt, &pad) : same(y, y2, NQ);
    }
    for (int bits = 0; bits < 8; bits++) {
        const int pk = (bits & 1) | (bits & 2 ? RT_PACKED_DINP : 0);
        const int as = bits & 4 ? RT_ASSIGN_1 : RT_ACCUMULATE;
        memcpy(g, g0, sizeof(float) * NQ), memcpy(g2, g0, sizeof(float) * NQ);
        grad16_start(g16, g0, NQ, as, dt);
        rt_rope_backward(g, dy, B, T, NH, HD, RT_ROPE_THETA, dt, as);
        rt_rope_packed_backward(pk & RT_PACKED_DINP ? (void*)g16 : (void*)g2,
                                pk & RT_PACKED_OUT ? (const void*)dy16 : dy, B, T, NH, HD,
                                RT_ROPE_THETA, pk, dt, as, 0);
        ok &= pk & RT_PACKED_DINP ? packed_equals(g16, g, 1, NQ, dt, &pad) : same(g, g2, NQ);
    }
    CHECK(ok, "%s rope packed forward (out, inp, both) and backward (every storage of dout, "
          "dinp) == rt_rope_forward, rt_rope_backward", nm);

    // attention: q, k, v each fp32 or packed, out packed or not; backward with out and dout
    // packed together (RT_PACKED_OUT) or not, onto accumulated fp32 dq, dk, dv
    const size_t ns = rt_attention_stats_floats(B, NH, T), nsc = rt_attention_lowmem_scratch_floats(B, NH, T);
    float *st = tk_alloc(ns), *st2 = tk_alloc(ns), *sc = tk_alloc(nsc);
    float *dq = tk_alloc(NQ), *dk = tk_alloc(NK), *dv = tk_alloc(NK);
    float *dq2 = tk_alloc(NQ), *dk2 = tk_alloc(NK), *dv2 = tk_alloc(NK);
    rt_attention_lowmem_forward(y, st, sc, q, k, v, B, T, NH, NKV, HD, 1, dt, dt);
    rt_attention_lowmem_backward(dq, dk, dv, sc, dy, y, q, k, v, st, B, T, NH, NKV, HD, 1, dt, dt,
                                 RT_ASSIGN_1 | RT_ASSIGN_3);
    uint16_t* ya16 = packed_copy(y, 1, NQ, dt);
    ok = 1;
    for (int bits = 1; bits < 16; bits++) {
        const int pk = (bits & 1 ? RT_PACKED_OUT : 0) | (bits & 2 ? RT_PACKED_INP : 0) |
                       (bits & 4 ? RT_PACKED_INP2 : 0) | (bits & 8 ? RT_PACKED_INP3 : 0);
        const void *x = pk & RT_PACKED_INP ? (const void*)q16 : q,
                   *xk = pk & RT_PACKED_INP2 ? (const void*)k16 : k,
                   *xv = pk & RT_PACKED_INP3 ? (const void*)v16 : v;
        memset(y16, 0xAB, NQ * sizeof *y16);
        rt_attention_lowmem_packed_forward(pk & RT_PACKED_OUT ? (void*)y16 : (void*)y2, st2, sc, x, xk,
                                           xv, B, T, NH, NKV, HD, 1, dt, pk, dt);
        ok &= (pk & RT_PACKED_OUT ? packed_equals(y16, y, 1, NQ, dt, &pad) : same(y, y2, NQ)) &&
              same(st, st2, ns);
        memset(dq2, 0xFF, sizeof(float) * NQ), memset(dv2, 0xFF, sizeof(float) * NK);
        memset(dk2, 0, sizeof(float) * NK);
        memset(dk, 0, sizeof(float) * NK);
        rt_attention_lowmem_backward(dq, dk, dv, sc, dy, y, q, k, v, st, B, T, NH, NKV, HD, 1, dt, dt,
                                     RT_ASSIGN_1 | RT_ASSIGN_3);
        rt_attention_lowmem_packed_backward(dq2, dk2, dv2, sc, pk & RT_PACKED_OUT ? (const void*)dy16 : dy,
                                            pk & RT_PACKED_OUT ? (const void*)ya16 : y, x, xk, xv, st,
                                            B, T, NH, NKV, HD, 1, dt, pk, dt,
                                            RT_ASSIGN_1 | RT_ASSIGN_3, 0, 0, 0);
        ok &= same(dq, dq2, NQ) && same(dk, dk2, NK) && same(dv, dv2, NK);
    }
    CHECK(ok, "%s attention packed forward (every storage of out, q, k, v) == "
          "rt_attention_lowmem_forward: out, stats; backward (out and dout, q, k, v) == "
          "rt_attention_lowmem_backward: dq, dv assigned, dk accumulated", nm);
    // backward into every storage of dq, dk, dv, assigned, or added to g0's values
    ok = 1;
    uint16_t *dq16 = poisoned16(NQ), *dk16 = poisoned16(NK), *dv16 = poisoned16(NK);
    const int ops = RT_PACKED_OUT | RT_PACKED_INP | RT_PACKED_INP2 | RT_PACKED_INP3;
    for (int bits = 0; bits < 16; bits++) {
        const int pk = ops | (bits & 1 ? RT_PACKED_DINP : 0) | (bits & 2 ? RT_PACKED_DINP2 : 0) |
                       (bits & 4 ? RT_PACKED_DINP3 : 0);
        const int as = bits & 8 ? RT_ASSIGN_1 | RT_ASSIGN_2 | RT_ASSIGN_3 : RT_ACCUMULATE;
        memcpy(dq, g0, sizeof(float) * NQ), memcpy(dk, g0, sizeof(float) * NK), memcpy(dv, g0, sizeof(float) * NK);
        memcpy(dq2, g0, sizeof(float) * NQ), memcpy(dk2, g0, sizeof(float) * NK), memcpy(dv2, g0, sizeof(float) * NK);
        grad16_start(dq16, g0, NQ, as, dt), grad16_start(dk16, g0, NK, as, dt), grad16_start(dv16, g0, NK, as, dt);
        rt_attention_lowmem_backward(dq, dk, dv, sc, dy, y, q, k, v, st, B, T, NH, NKV, HD, 1, dt, dt, as);
        rt_attention_lowmem_packed_backward(bits & 1 ? (void*)dq16 : (void*)dq2, bits & 2 ? (void*)dk16 : (void*)dk2,
                                            bits & 4 ? (void*)dv16 : (void*)dv2, sc, dy16, ya16, q16, k16, v16,
                                            st, B, T, NH, NKV, HD, 1, dt, pk, dt, as, 0, 0, 0);
        ok &= (bits & 1 ? packed_equals(dq16, dq, 1, NQ, dt, &pad) : same(dq, dq2, NQ)) &&
              (bits & 2 ? packed_equals(dk16, dk, 1, NK, dt, &pad) : same(dk, dk2, NK)) &&
              (bits & 4 ? packed_equals(dv16, dv, 1, NK, dt, &pad) : same(dv, dv2, NK));
    }
    CHECK(ok, "%s attention packed backward into every storage of dq, dk, dv (assigned, accumulated) "
          "== rt_attention_lowmem_backward", nm);
    free(dq16), free(dk16), free(dv16);
    free(q), free(k), free(v), free(dy), free(q16), free(k16), free(v16), free(dy16), free(y16),
        free(g16), free(y), free(y2), free(g0), free(g), free(g2), free(st), free(st2), free(sc),
        free(dq), free(dk), free(dv), free(dq2), free(dk2), free(dv2), free(ya16);
}

// rows x ld 16-bit values: `sentinel` everywhere but the n column slices (slice i from
// column off[i], cols[i] wide), which hold the dense rows of src[i].
static void wide_rows(uint16_t* w, int rows, int ld, int n, const int* off, const int* cols,
                      uint16_t* const* src, uint16_t sentinel) {
    for (size_t i = 0; i < (size_t)rows * ld; i++) w[i] = sentinel;
    for (int i = 0; i < n; i++)
        for (int r = 0; r < rows; r++)
            memcpy(w + (size_t)r * ld + off[i], src[i] + (size_t)r * cols[i],
                   (size_t)cols[i] * sizeof *w);
}

// Rotary embeddings' and attention's packed gradients as column slices of one [B*T, LD]
// matrix (dq, dk, dv side by side and 8 columns more, a sentinel where no slice is), each
// assigned or added to: the dense calls' bits in the slices, the sentinel elsewhere.
static void test_packed_grad_rows(rt_dtype dt) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    enum { B = 2, T = 5, NH = 4, NKV = 2, HD = 8, ROWS = B * T, CQ = NH * HD, CK = NKV * HD };
    enum { LD = CQ + 2 * CK + 8, NQ = ROWS * CQ, NK = ROWS * CK };
    const int off[3] = {0, CQ, CQ + CK}, cols[3] = {CQ, CK, CK};
    const uint16_t sentinel = 0x7E57;
    float *q = tk_alloc(NQ), *k = tk_alloc(NK), *v = tk_alloc(NK), *dy = tk_alloc(NQ);
    float* g0 = tk_alloc(NQ);
    tk_fill(q, NQ, -1.0f, 1.0f), tk_fill(k, NK, -1.0f, 1.0f), tk_fill(v, NK, -1.0f, 1.0f);
    tk_fill(dy, NQ, -1.0f, 1.0f), tk_fill(g0, NQ, -1.0f, 1.0f);
    tk_round_all(q, NQ, dt), tk_round_all(k, NK, dt), tk_round_all(v, NK, dt);
    tk_round_all(dy, NQ, dt), tk_round_all(g0, NQ, dt);
    uint16_t *q16 = packed_copy(q, 1, NQ, dt), *k16 = packed_copy(k, 1, NK, dt),
             *v16 = packed_copy(v, 1, NK, dt), *dy16 = packed_copy(dy, 1, NQ, dt);
    uint16_t* y16 = poisoned16(NQ);
    const size_t ns = rt_attention_stats_floats(B, NH, T);
    float *st = tk_alloc(ns), *sc = tk_alloc(rt_attention_lowmem_scratch_floats(B, NH, T));
    const int ops = RT_PACKED_OUT | RT_PACKED_INP | RT_PACKED_INP2 | RT_PACKED_INP3;
    rt_attention_lowmem_packed_forward(y16, st, sc, q16, k16, v16, B, T, NH, NKV, HD, 1, dt, ops,
                                       dt);
    uint16_t* g16[3] = {poisoned16(NQ), poisoned16(NK), poisoned16(NK)};
    uint16_t *wide = poisoned16((size_t)ROWS * LD), *want = poisoned16((size_t)ROWS * LD);
    int ok_rope = 1, ok_attn = 1;
    for (int a = 0; a < 2; a++) {
        const int as = a ? RT_ASSIGN_1 | RT_ASSIGN_2 | RT_ASSIGN_3 : RT_ACCUMULATE;
        // rope: q's gradient (dout packed) into slice 0, k's (dout fp32) into slice 1
        grad16_start(g16[0], g0, NQ, as, dt), grad16_start(g16[1], g0, NK, as, dt);
        wide_rows(wide, ROWS, LD, 2, off, cols, g16, sentinel);
        rt_rope_packed_backward(g16[0], dy16, B, T, NH, HD, RT_ROPE_THETA,
                                RT_PACKED_OUT | RT_PACKED_DINP, dt, as, 0);
        rt_rope_packed_backward(g16[1], dy, B, T, NKV, HD, RT_ROPE_THETA, RT_PACKED_DINP, dt,
                                as, 0);
        rt_rope_packed_backward(wide + off[0], dy16, B, T, NH, HD, RT_ROPE_THETA,
                                RT_PACKED_OUT | RT_PACKED_DINP, dt, as, LD);
        rt_rope_packed_backward(wide + off[1], dy, B, T, NKV, HD, RT_ROPE_THETA, RT_PACKED_DINP,
                                dt, as, LD);
        wide_rows(want, ROWS, LD, 2, off, cols, g16, sentinel);
        ok_rope &= memcmp(wide, want, sizeof(uint16_t) * ROWS * LD) == 0;
        // attention: dq, dk, dv into the three slices
        for (int i = 0; i < 3; i++) grad16_start(g16[i], g0, i ? NK : NQ, as, dt);
        wide_rows(wide, ROWS, LD, 3, off, cols, g16, sentinel);
        const int pk = ops | RT_PACKED_DINP | RT_PACKED_DINP2 | RT_PACKED_DINP3;
        rt_attention_lowmem_packed_backward(g16[0], g16[1], g16[2], sc, dy16, y16, q16, k16, v16,
                                            st, B, T, NH, NKV, HD, 1, dt, pk, dt, as, 0, 0, 0);
        rt_attention_lowmem_packed_backward(wide + off[0], wide + off[1], wide + off[2], sc, dy16,
                                            y16, q16, k16, v16, st, B, T, NH, NKV, HD, 1, dt, pk,
                                            dt, as, LD, LD, LD);
        wide_rows(want, ROWS, LD, 3, off, cols, g16, sentinel);
        ok_attn &= memcmp(wide, want, sizeof(uint16_t) * ROWS * LD) == 0;
    }
    CHECK(ok_rope, "%s rope packed backward into rows of %d (q's and k's gradients at columns "
          "0 and %d; assigned, accumulated) == the dense calls' bits, other columns untouched",
          nm, LD, CQ);
    CHECK(ok_attn, "%s attention packed backward into rows of %d (dq, dk, dv at columns 0, %d, "
          "%d; assigned, accumulated) == the dense call's bits, other columns untouched", nm, LD,
          CQ, CQ + CK);
    free(q), free(k), free(v), free(dy), free(g0), free(q16), free(k16), free(v16), free(dy16);
    free(y16), free(st), free(sc), free(g16[0]), free(g16[1]), free(g16[2]), free(wide);
    free(want);
}

// Stacked linears (rt_kernels.h "Gradient row lengths"): two linears of one input whose
// output gradients are column slices of one packed [N, LD] matrix (at columns 8 and 8 + OC1,
// a sentinel in the other columns), as Llama's w1 and w3: the stack's input gradient in one
// call on both slices (dweight, dbias NULL), each linear's weight and bias gradients in one
// call on its slice (dinp NULL), and all three from the second slice, each with the input and
// weights in fp32 storage or packed, assigned and accumulated: the dense calls' bits, dinp
// fp32 or packed; the matrix unchanged.
static void test_linear_dout_slices(rt_dtype dt) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    enum { OC1 = 16, OC2 = 8, OCS = OC1 + OC2, CL = 24, LD = OCS + 16, COL = 8 };
    const int off[2] = {COL, COL + OC1}, cols[2] = {OC1, OC2};
    const uint16_t sentinel = 0x7E57;  // fp16 NaN, bf16 ~7e37: any read of it shows
    float *inp = tk_alloc(N * CL), *w = tk_alloc(OCS * CL), *dS = tk_alloc(N * OCS);
    float *dm[2] = {tk_alloc(N * OC1), tk_alloc(N * OC2)};
    float *dinp0 = tk_alloc(N * CL), *dw0 = tk_alloc(OCS * CL), *db0 = tk_alloc(OCS);
    tk_fill(inp, N * CL, -1.0f, 1.0f), tk_fill(w, OCS * CL, -1.0f, 1.0f);
    tk_fill(dS, N * OCS, -1.0f, 1.0f), tk_fill(dinp0, N * CL, -1.0f, 1.0f);
    tk_fill(dw0, OCS * CL, -1.0f, 1.0f), tk_fill(db0, OCS, -1.0f, 1.0f);
    tk_round_all(inp, N * CL, dt), tk_round_all(w, OCS * CL, dt), tk_round_all(dS, N * OCS, dt);
    tk_round_all(dinp0, N * CL, dt);
    for (int n = 0; n < N; n++)  // the members' gradients: the stack's columns
        for (int j = 0; j < OCS; j++) {
            if (j < OC1) dm[0][n * OC1 + j] = dS[n * OCS + j];
            else dm[1][n * OC2 + j - OC1] = dS[n * OCS + j];
        }
    uint16_t *inp16 = packed_copy(inp, N, CL, dt), *w16 = packed_copy(w, OCS, CL, dt);
    uint16_t* d16[2] = {packed_copy(dm[0], N, OC1, dt), packed_copy(dm[1], N, OC2, dt)};
    uint16_t *wide = poisoned16((size_t)N * LD), *wide0 = poisoned16((size_t)N * LD);
    wide_rows(wide, N, LD, 2, off, cols, d16, sentinel);
    memcpy(wide0, wide, sizeof(uint16_t) * N * LD);
    const float* wm[2] = {w, w + OC1 * CL};
    const uint16_t* wm16[2] = {w16, w16 + OC1 * CL};
    int ok_in = 1, ok_w = 1, ok_all = 1, pad;
    for (int k = 0; k < 4; k++) {
        const int as = k & 1, ops = k & 2 ? RT_PACKED_INP | RT_PACKED_INP2 : 0;
        const int bits = as ? RT_ASSIGN_1 | RT_ASSIGN_DWEIGHT : RT_ACCUMULATE;
        const void* x = ops ? (const void*)inp16 : inp;
        // the input's gradient over the stack: fp32 storage, then packed
        float *g = tk_dup(dinp0, N * CL), *g2 = tk_dup(dinp0, N * CL);
        uint16_t* g16 = as ? poisoned16(N * CL) : packed_copy(dinp0, N, CL, dt);
        rt_linear_backward(g, NULL, NULL, dS, inp, w, N, CL, OCS, dt, bits);
        rt_linear_packed_backward(g2, NULL, NULL, wide + COL, x, ops ? (const void*)w16 : w, N, CL,
                                  OCS, ops | RT_PACKED_OUT, dt, bits, LD, 0);
        rt_linear_packed_backward(g16, NULL, NULL, wide + COL, x, ops ? (const void*)w16 : w, N,
                                  CL, OCS, ops | RT_PACKED_OUT | RT_PACKED_DINP, dt, bits, LD, 0);
        ok_in &= same(g, g2, N * CL) && packed_equals(g16, g, N, CL, dt, &pad);
        // each member's weight and bias gradients from its slice
        for (int m = 0; m < 2; m++) {
            const int oc = cols[m];
            float *dw = tk_dup(dw0, oc * CL), *db = tk_dup(db0, oc);
            float *dw2 = tk_dup(dw0, oc * CL), *db2 = tk_dup(db0, oc);
            rt_linear_backward(NULL, dw, db, dm[m], inp, wm[m], N, CL, oc, dt, bits);
            rt_linear_packed_backward(NULL, dw2, db2, wide + off[m], x,
                                      ops ? (const void*)wm16[m] : wm[m], N, CL, oc,
                                      ops | RT_PACKED_OUT, dt, bits, LD, 0);
            ok_w &= same(dw, dw2, oc * CL) && same(db, db2, oc);
            free(dw), free(db), free(dw2), free(db2);
        }
        // all three from the second slice, dinp packed
        float *gd = tk_dup(dinp0, N * CL), *dw = tk_dup(dw0, OC2 * CL), *db = tk_dup(db0, OC2);
        float *dw2 = tk_dup(dw0, OC2 * CL), *db2 = tk_dup(db0, OC2);
        uint16_t* gd16 = as ? poisoned16(N * CL) : packed_copy(dinp0, N, CL, dt);
        rt_linear_backward(gd, dw, db, dm[1], inp, wm[1], N, CL, OC2, dt, bits);
        rt_linear_packed_backward(gd16, dw2, db2, wide + off[1], x,
                                  ops ? (const void*)wm16[1] : wm[1], N, CL, OC2,
                                  ops | RT_PACKED_OUT | RT_PACKED_DINP, dt, bits, LD, 0);
        ok_all &= packed_equals(gd16, gd, N, CL, dt, &pad) && same(dw, dw2, OC2 * CL) &&
                  same(db, db2, OC2);
        free(g), free(g2), free(g16), free(gd), free(dw), free(db), free(dw2), free(db2), free(gd16);
    }
    const int untouched = memcmp(wide, wide0, sizeof(uint16_t) * N * LD) == 0;
    CHECK(ok_in && untouched, "%s linear backward, dinp only, dout the columns %d..%d of rows of "
          "%d (OC %d; input and weight fp32 or packed; dinp fp32 and packed; assigned, "
          "accumulated) == rt_linear_backward on the dense dout, dout unchanged", nm, COL,
          COL + OCS, LD, OCS);
    CHECK(ok_w, "%s linear backward, dweight and dbias only, dout the column slices at %d (OC "
          "%d) and %d (OC %d) of rows of %d == rt_linear_backward on each dense dout", nm, off[0],
          OC1, off[1], OC2, LD);
    CHECK(ok_all, "%s linear backward, dinp (packed), dweight and dbias from the column slice "
          "at %d of rows of %d == rt_linear_backward", nm, off[1], LD);
    free(inp), free(w), free(dS), free(dm[0]), free(dm[1]), free(dinp0), free(dw0), free(db0);
    free(inp16), free(w16), free(d16[0]), free(d16[1]), free(wide), free(wide0);
}

// A linear's packed input gradient written as a column slice of a packed [N, LD] matrix (C
// columns at column 8, a sentinel in the others: rt_kernels.h "Gradient row lengths",
// ld_dinp), assigned, with dweight and dbias, dout fp32 or packed, the input and weight fp32
// or packed, OC 24 and 0 (no terms: zeros); rt_linear_packed_backward and (bf16, a scaled
// linear's dt) rt_linear_scaled_packed_backward with alpha 2: the slice holds the dense
// call's dinp bit for bit, the sentinel is left elsewhere, dweight and dbias are the dense
// call's.
static void test_linear_dinp_slices(rt_dtype dt) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    enum { CS = 16, OCS = 24, LD = 40, COL = 8, NW = N * LD };
    const int off[1] = {COL}, cols[1] = {CS};
    const uint16_t sentinel = 0x7E57;
    float *inp = tk_alloc(N * CS), *w = tk_alloc(OCS * CS), *dy = tk_alloc(N * OCS);
    tk_fill(inp, N * CS, -1.0f, 1.0f), tk_fill(w, OCS * CS, -1.0f, 1.0f);
    tk_fill(dy, N * OCS, -1.0f, 1.0f);
    tk_round_all(inp, N * CS, dt), tk_round_all(w, OCS * CS, dt), tk_round_all(dy, N * OCS, dt);
    uint16_t *inp16 = packed_copy(inp, N, CS, dt), *w16 = packed_copy(w, OCS, CS, dt),
             *dy16 = packed_copy(dy, N, OCS, dt);
    uint16_t *g16 = poisoned16(N * CS), *wide = poisoned16(NW), *want = poisoned16(NW);
    int ok = 1, calls = 0;
    for (int k = 0; k < 12; k++) {
        const int ops = k & 1 ? RT_PACKED_INP | RT_PACKED_INP2 : 0;
        const int pk = ops | (k & 2 ? RT_PACKED_OUT : 0) | RT_PACKED_DINP;
        const int scaled = k >> 2 == 1, oc = k >> 2 == 2 ? 0 : OCS;
        if (scaled && dt != RT_BF16) continue;
        const void *x = ops ? (const void*)inp16 : inp, *wt = ops ? (const void*)w16 : w;
        const void* d = pk & RT_PACKED_OUT ? (const void*)dy16 : dy;
        const int bits = RT_ASSIGN_1 | RT_ASSIGN_DWEIGHT;
        float *dw[2] = {tk_alloc(OCS * CS), tk_alloc(OCS * CS)}, *db[2] = {tk_alloc(OCS),
                                                                           tk_alloc(OCS)};
        wide_rows(wide, N, LD, 0, off, cols, NULL, sentinel);
        for (int sl = 0; sl < 2; sl++) {  // dense rows, then the slice
            void* g = sl ? (void*)(wide + COL) : (void*)g16;
            if (scaled)
                rt_linear_scaled_packed_backward(g, dw[sl], d, x, wt, N, CS, oc, 2.0f, pk, dt,
                                                 bits, 0, sl ? LD : 0);
            else
                rt_linear_packed_backward(g, dw[sl], db[sl], d, x, wt, N, CS, oc, pk, dt, bits, 0,
                                          sl ? LD : 0);
        }
        wide_rows(want, N, LD, 1, off, cols, &g16, sentinel);
        ok &= memcmp(wide, want, sizeof(uint16_t) * NW) == 0 && same(dw[0], dw[1], OCS * CS) &&
              same(db[0], db[1], OCS);
        calls++;
        free(dw[0]), free(dw[1]), free(db[0]), free(db[1]);
    }
    CHECK(ok, "%s linear backward%s, dinp packed and assigned into the columns %d..%d of rows of "
          "%d (dout, input and weight fp32 or packed; OC %d and 0; %d calls) == the dense "
          "call's dinp bit for bit, other columns untouched; dweight, dbias the dense call's",
          nm, dt == RT_BF16 ? " and scaled backward (alpha 2)" : "", COL, COL + CS - 1, LD, OCS,
          calls);
    free(inp), free(w), free(dy), free(inp16), free(w16), free(dy16), free(g16), free(wide);
    free(want);
}

// swiglu's backward writing da and db as column slices of one packed [R, LDW] matrix (at
// columns 8 and 8 + D, as w1's and w3's output gradients in their stack, a sentinel in the
// other columns), or one of them in fp32 storage (dense rows) or NULL, each assigned or
// added to, dout, a and b fp32 or packed: the dense call's bits in the slices, the sentinel
// untouched.
static void test_swiglu_grad_slices(rt_dtype dt) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    enum { R = 5, D = 24, NE = R * D, LDW = 2 * D + 16, COL = 8 };
    const int off[2] = {COL, COL + D}, cols[2] = {D, D};
    const uint16_t sentinel = 0x7E57;
    float *x = tk_alloc(NE), *z = tk_alloc(NE), *dy = tk_alloc(NE), *g0 = tk_alloc(NE),
          *h0 = tk_alloc(NE);
    tk_fill(x, NE, -3.0f, 3.0f), tk_fill(z, NE, -3.0f, 3.0f), tk_fill(dy, NE, -1.0f, 1.0f);
    tk_fill(g0, NE, -1.0f, 1.0f), tk_fill(h0, NE, -1.0f, 1.0f);
    tk_round_all(x, NE, dt), tk_round_all(z, NE, dt), tk_round_all(dy, NE, dt);
    tk_round_all(g0, NE, dt), tk_round_all(h0, NE, dt);
    uint16_t *x16 = packed_copy(x, R, D, dt), *z16 = packed_copy(z, R, D, dt),
             *dy16 = packed_copy(dy, R, D, dt);
    uint16_t *wide = poisoned16((size_t)R * LDW), *want = poisoned16((size_t)R * LDW);
    int ok = 1, checked = 0;
    // mode: da, db as slices (0); da a slice, db fp32 (1); da NULL, db a slice (2); da fp32,
    // db a slice (3)
    for (int k = 0; k < 32; k++) {
        const int mode = k & 3, as = (k >> 2) & 3, inpk = k & 16;
        const int assign = (as & 1 ? RT_ASSIGN_1 : 0) | (as & 2 ? RT_ASSIGN_2 : 0);
        const int sa = mode == 0 || mode == 1, sb = mode != 1;  // slices
        float *g = tk_dup(g0, NE), *h = tk_dup(h0, NE), *g2 = tk_dup(g0, NE), *h2 = tk_dup(h0, NE);
        uint16_t* start[2] = {as & 1 ? poisoned16(NE) : packed_copy(g0, R, D, dt),
                              as & 2 ? poisoned16(NE) : packed_copy(h0, R, D, dt)};
        wide_rows(wide, R, LDW, 2, off, cols, start, sentinel);
        rt_swiglu_backward(mode == 2 ? NULL : g, h, dy, x, z, NE, dt, assign);
        const int pk = (inpk ? RT_PACKED_OUT | RT_PACKED_INP | RT_PACKED_INP2 : 0) |
                       (sa ? RT_PACKED_DINP : 0) | (sb ? RT_PACKED_DINP2 : 0);
        rt_swiglu_packed_backward(mode == 2 ? NULL : sa ? (void*)(wide + off[0]) : (void*)g2,
                                  sb ? (void*)(wide + off[1]) : (void*)h2,
                                  inpk ? (const void*)dy16 : dy, inpk ? (const void*)x16 : x,
                                  inpk ? (const void*)z16 : z, NE, pk, dt, assign, D,
                                  sa ? LDW : D, sb ? LDW : D);
        uint16_t* res[2] = {sa ? packed_copy(g, R, D, dt) : start[0],
                            sb ? packed_copy(h, R, D, dt) : start[1]};
        wide_rows(want, R, LDW, 2, off, cols, res, sentinel);
        ok &= memcmp(wide, want, sizeof(uint16_t) * R * LDW) == 0;
        ok &= (sa || mode == 2 || same(g, g2, NE)) && (sb || same(h, h2, NE));
        checked++;
        if (sa) free(res[0]);
        if (sb) free(res[1]);
        free(g), free(h), free(g2), free(h2), free(start[0]), free(start[1]);
    }
    CHECK(ok, "%s swiglu packed backward, da and db the columns at %d and %d of rows of %d (or "
          "one fp32 storage or NULL; dout, a, b fp32 or packed; each assigned, accumulated; %d "
          "calls) == rt_swiglu_backward's bits, other columns untouched", nm, off[0], off[1], LDW,
          checked);
    free(x), free(z), free(dy), free(g0), free(h0), free(x16), free(z16), free(dy16), free(wide);
    free(want);
}

// Packed parameter gradients (RT_PACKED_DWEIGHT): n 16-bit values at got against the fp32
// twin's want rounded to dt: the values whose bits differ (*maxd: the largest |got - want
// rounded|; NaN where one is NaN).
static size_t dweight_diffs(const uint16_t* got, const float* want, size_t n, rt_dtype dt,
                            double* maxd) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        const uint16_t w = rt_bits16_from_f32_inl(want[i], dt);
        if (got[i] == w) continue;
        bad++;
        const double d = fabs((double)rt_bits16_to_f32_inl(got[i], dt) -
                              (double)rt_bits16_to_f32_inl(w, dt));
        if (!(d <= *maxd)) *maxd = d;  // NaN-sticky
    }
    return bad;
}

// The linear's packed parameter gradients (assigned, RT_PACKED_DWEIGHT): dweight [OC, C]
// and dbias 16-bit, the fp32 twin's assigned ones rounded bit for bit, with every storage of
// the input, weight and dout, dinp fp32 or packed (assigned or accumulated: the twin's
// bits, the bit changes nothing else), dbias NULL; a stack's weight gradients over two
// linears in one call (dinp NULL, OC the stack's width, dout a column slice of rows of LD);
// no rows (N = 0): zeros.
static void test_packed_dweight_linear(rt_dtype dt) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    enum { OC = 16, CW = 24, OCS = 24, LD = OCS + 16, COL = 8 };
    const size_t ni = N * CW, nw = OC * CW;
    float *inp = tk_alloc(ni), *w = tk_alloc(nw), *dout = tk_alloc(N * OC), *g0 = tk_alloc(ni);
    tk_fill(inp, ni, -1.0f, 1.0f), tk_fill(w, nw, -1.0f, 1.0f), tk_fill(dout, N * OC, -1.0f, 1.0f);
    tk_fill(g0, ni, -1.0f, 1.0f);
    tk_round_all(inp, ni, dt), tk_round_all(w, nw, dt), tk_round_all(dout, N * OC, dt);
    tk_round_all(g0, ni, dt);
    uint16_t *inp16 = packed_copy(inp, N, CW, dt), *w16 = packed_copy(w, OC, CW, dt),
             *dout16 = packed_copy(dout, N, OC, dt), *g16 = poisoned16(ni);
    uint16_t *dw16 = poisoned16(nw), *db16 = poisoned16(OC);
    float *g = tk_alloc(ni), *g2 = tk_alloc(ni), *dw = tk_alloc(nw), *db = tk_alloc(OC);
    size_t bad = 0, calls = 0;
    double maxd = 0.0;
    int ok_dinp = 1, pad;
    for (int k = 0; k < 64; k++) {
        const int pk = (k & 1 ? RT_PACKED_INP : 0) | (k & 2 ? RT_PACKED_INP2 : 0) |
                       (k & 4 ? RT_PACKED_OUT : 0) | (k & 8 ? RT_PACKED_DINP : 0);
        const int bits = RT_ASSIGN_DWEIGHT | (k & 16 ? RT_ASSIGN_1 : 0), no_bias = k & 32;
        memcpy(g, g0, sizeof(float) * ni), memcpy(g2, g0, sizeof(float) * ni);
        grad16_start(g16, g0, ni, bits & RT_ASSIGN_1, dt);
        for (size_t i = 0; i < nw; i++) dw[i] = NAN;  // assigned: not read
        for (int i = 0; i < OC; i++) db[i] = NAN;
        memset(dw16, 0xAB, nw * 2), memset(db16, 0xAB, OC * 2);
        rt_linear_backward(g, dw, no_bias ? NULL : db, dout, inp, w, N, CW, OC, dt, bits);
        rt_linear_packed_backward(pk & RT_PACKED_DINP ? (void*)g16 : (void*)g2, dw16,
                                  no_bias ? NULL : db16,
                                  pk & RT_PACKED_OUT ? (const void*)dout16 : dout,
                                  pk & RT_PACKED_INP ? (const void*)inp16 : inp,
                                  pk & RT_PACKED_INP2 ? (const void*)w16 : w, N, CW, OC,
                                  pk | RT_PACKED_DWEIGHT, dt, bits, 0, 0);
        bad += dweight_diffs(dw16, dw, nw, dt, &maxd);
        if (!no_bias) bad += dweight_diffs(db16, db, OC, dt, &maxd);
        else bad += db16[0] != 0xABAB;  // NULL: not written
        ok_dinp &= pk & RT_PACKED_DINP ? packed_equals(g16, g, N, CW, dt, &pad) : same(g, g2, ni);
        calls++;
    }
    CHECK(bad == 0 && ok_dinp, "%s linear backward, dweight [%d, %d] and dbias packed "
          "(RT_PACKED_DWEIGHT; every storage of inp, weight, dout, dinp; dinp assigned and "
          "accumulated; dbias NULL; %zu calls) == rt_linear_backward's assigned ones rounded: "
          "%zu values differ, max diff %.3g; dinp %s", nm, OC, CW, calls, bad, maxd,
          ok_dinp ? "the twin's" : "differs");

    // a stack's weight gradients in one call: dout the columns COL.. of rows of LD
    float *dS = tk_alloc(N * OCS), *ws = tk_alloc(OCS * CW), *dws = tk_alloc(OCS * CW);
    float* dbs = tk_alloc(OCS);
    tk_fill(dS, N * OCS, -1.0f, 1.0f), tk_fill(ws, OCS * CW, -1.0f, 1.0f);
    tk_round_all(dS, N * OCS, dt), tk_round_all(ws, OCS * CW, dt);
    uint16_t *dS16 = packed_copy(dS, N, OCS, dt), *wide = poisoned16((size_t)N * LD);
    uint16_t *dws16 = poisoned16(OCS * CW), *dbs16 = poisoned16(OCS);
    const int off[1] = {COL}, cols[1] = {OCS};
    wide_rows(wide, N, LD, 1, off, cols, &dS16, 0x7E57);
    bad = 0, maxd = 0.0;
    for (int ops = 0; ops < 2; ops++) {
        const int pk = ops ? RT_PACKED_INP : 0;
        memset(dws16, 0xAB, OCS * CW * 2), memset(dbs16, 0xAB, OCS * 2);
        rt_linear_backward(NULL, dws, dbs, dS, inp, ws, N, CW, OCS, dt, RT_ASSIGN_DWEIGHT);
        rt_linear_packed_backward(NULL, dws16, dbs16, wide + COL, ops ? (const void*)inp16 : inp,
                                  ws, N, CW, OCS, pk | RT_PACKED_OUT | RT_PACKED_DWEIGHT, dt,
                                  RT_ASSIGN_DWEIGHT, LD, 0);
        bad += dweight_diffs(dws16, dws, OCS * CW, dt, &maxd);
        bad += dweight_diffs(dbs16, dbs, OCS, dt, &maxd);
    }
    CHECK(bad == 0, "%s linear backward, a stack's weight gradients in one call (dinp NULL, OC "
          "%d, dout the columns %d..%d of rows of %d; input fp32 and packed), dweight and dbias "
          "packed == rt_linear_backward's rounded: %zu values differ, max diff %.3g", nm, OCS,
          COL, COL + OCS, LD, bad, maxd);

    // no rows: the assigned gradients are zeros
    memset(dw16, 0xAB, nw * 2), memset(db16, 0xAB, OC * 2);
    rt_linear_packed_backward(NULL, dw16, db16, dout16, inp16, w16, 0, CW, OC,
                              RT_PACKED_INP | RT_PACKED_INP2 | RT_PACKED_OUT | RT_PACKED_DWEIGHT,
                              dt, RT_ASSIGN_DWEIGHT, 0, 0);
    size_t nonzero = 0;
    for (size_t i = 0; i < nw; i++) nonzero += dw16[i] != 0;
    for (int i = 0; i < OC; i++) nonzero += db16[i] != 0;
    CHECK(nonzero == 0, "%s linear backward over no rows, dweight and dbias packed: zeros, %zu "
          "values not", nm, nonzero);
    free(inp), free(w), free(dout), free(g0), free(inp16), free(w16), free(dout16), free(g16);
    free(dw16), free(db16), free(g), free(g2), free(dw), free(db);
    free(dS), free(ws), free(dws), free(dbs), free(dS16), free(wide), free(dws16), free(dbs16);
}

// The norms' packed parameter gradients (assigned, RT_PACKED_DWEIGHT): LayerNorm's dweight
// and dbias (or one of them NULL) and RMSNorm's dweight, 16-bit, the fp32 twin's assigned
// ones rounded bit for bit, with every storage of dout, inp and dinp (dinp assigned,
// accumulated or NULL; the twin's bits).
static void test_packed_dweight_norms(rt_dtype dt) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    enum { R = 5, D = 24, NE = R * D };
    float *x = tk_alloc(NE), *dy = tk_alloc(NE), *w = tk_alloc(D), *b = tk_alloc(D),
          *g0 = tk_alloc(NE);
    tk_fill(x, NE, -3.0f, 3.0f), tk_fill(dy, NE, -1.0f, 1.0f), tk_fill(w, D, 0.5f, 1.5f);
    tk_fill(b, D, -1.0f, 1.0f), tk_fill(g0, NE, -1.0f, 1.0f);
    tk_round_all(x, NE, dt), tk_round_all(dy, NE, dt), tk_round_all(w, D, dt);
    tk_round_all(b, D, dt), tk_round_all(g0, NE, dt);
    float *y = tk_alloc(NE), *mean = tk_alloc(R), *rstd = tk_alloc(R);
    uint16_t *x16 = packed_copy(x, R, D, dt), *dy16 = packed_copy(dy, R, D, dt),
             *g16 = poisoned16(NE), *dw16 = poisoned16(D), *db16 = poisoned16(D);
    float *g = tk_alloc(NE), *g2 = tk_alloc(NE), *dw = tk_alloc(D), *db = tk_alloc(D);
    int ok_dinp = 1, pad;
    for (int ln = 1; ln >= 0; ln--) {
        size_t bad = 0, calls = 0;
        double maxd = 0.0;
        if (ln) rt_layernorm_forward(y, mean, rstd, x, w, b, R, D, RT_LAYERNORM_EPS, dt);
        else rt_rmsnorm_forward(y, rstd, x, w, R, D, 1e-6f, dt);
        for (int k = 0; k < (ln ? 48 : 16); k++) {
            const int pk = (k & 1 ? RT_PACKED_OUT : 0) | (k & 2 ? RT_PACKED_INP : 0) |
                           (k & 4 ? RT_PACKED_DINP : 0);
            const int no_dinp = (k & 12) == 12, which = k >> 4;  // which: both, dweight, dbias
            const int bits = RT_ASSIGN_DWEIGHT | (k & 8 ? RT_ASSIGN_1 : 0);
            void* wg = which == 2 ? NULL : dw16;
            void* bg = which == 1 ? NULL : db16;
            memcpy(g, g0, sizeof(float) * NE), memcpy(g2, g0, sizeof(float) * NE);
            grad16_start(g16, g0, NE, bits & RT_ASSIGN_1, dt);
            for (int i = 0; i < D; i++) dw[i] = db[i] = NAN;
            memset(dw16, 0xAB, D * 2), memset(db16, 0xAB, D * 2);
            void* gp = no_dinp ? NULL : pk & RT_PACKED_DINP ? (void*)g16 : (void*)g2;
            const void* dp = pk & RT_PACKED_OUT ? (const void*)dy16 : dy;
            const void* xp = pk & RT_PACKED_INP ? (const void*)x16 : x;
            if (ln) {
                rt_layernorm_backward(no_dinp ? NULL : g, wg ? dw : NULL, bg ? db : NULL, dy, x,
                                      w, mean, rstd, R, D, dt, bits);
                rt_layernorm_packed_backward(gp, wg, bg, dp, xp, w, mean, rstd, R, D,
                                             pk | RT_PACKED_DWEIGHT, dt, bits);
            } else {
                rt_rmsnorm_backward(no_dinp ? NULL : g, dw, dy, x, w, rstd, R, D, dt, bits);
                rt_rmsnorm_packed_backward(gp, dw16, dp, xp, w, rstd, R, D,
                                           pk | RT_PACKED_DWEIGHT, dt, bits);
            }
            bad += wg || !ln ? dweight_diffs(dw16, dw, D, dt, &maxd) : dw16[0] != 0xABAB;
            if (ln) bad += bg ? dweight_diffs(db16, db, D, dt, &maxd) : db16[0] != 0xABAB;
            if (!no_dinp)
                ok_dinp &= pk & RT_PACKED_DINP ? packed_equals(g16, g, R, D, dt, &pad)
                                               : same(g, g2, NE);
            calls++;
        }
        CHECK(bad == 0 && ok_dinp, "%s %s backward, %s packed (RT_PACKED_DWEIGHT; every storage "
              "of dout, inp, dinp; dinp assigned, accumulated, NULL%s; %zu calls) == the fp32 "
              "call's assigned ones rounded: %zu values differ, max diff %.3g; dinp %s", nm,
              ln ? "layernorm" : "rmsnorm", ln ? "dweight and dbias" : "dweight",
              ln ? "; one of them NULL" : "", calls, bad, maxd,
              ok_dinp ? "the twin's" : "differs");
    }
    free(x), free(dy), free(w), free(b), free(g0), free(y), free(mean), free(rstd), free(x16);
    free(dy16), free(g16), free(dw16), free(db16), free(g), free(g2), free(dw), free(db);
}

// Runs fn in a child with stderr captured into out: 1 when it aborted (SIGABRT) with one
// line that contains `want`.
static int aborts_with(void (*fn)(void), const char* want, char* out, size_t cap) {
    int fd[2];
    if (pipe(fd) != 0) return 0;
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        fn();
        _exit(0);
    }
    close(fd[1]);
    size_t len = 0;
    ssize_t n;
    while (len + 1 < cap && (n = read(fd[0], out + len, cap - 1 - len)) > 0) len += (size_t)n;
    out[len] = 0;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    const char* nl = strchr(out, '\n');
    const int one_line = nl && nl[1] == 0;
    if (one_line) out[len - 1] = 0;  // printed inline by the check
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(out, want) && one_line;
}

static void rope_ld_fp32(void) {
    rt_rope_packed_backward(bad_buf[0], bad_buf[1], 1, 1, 4, 8, RT_ROPE_THETA, RT_PACKED_OUT,
                            RT_BF16, RT_ASSIGN_1, 32);
}

static void attention_ld_odd(void) {
    rt_attention_lowmem_packed_backward(bad_buf[0], bad_buf[1], bad_buf[2], NULL, bad_buf[0],
                                        bad_buf[0], bad_buf[0], bad_buf[0], bad_buf[0], NULL, 1, 1,
                                        4, 2, 8, 1, RT_F16, RT_PACKED_DINP | RT_PACKED_DINP2,
                                        RT_F16, RT_ACCUMULATE, 0, 20, 0);
}

static void linear_ld_short(void) {
    rt_linear_packed_backward(bad_buf[0], NULL, NULL, bad_buf[1], bad_buf[2], bad_buf[2], 1, 8, 16,
                              RT_PACKED_OUT, RT_BF16, RT_ASSIGN_1, 8, 0);
}

static void swiglu_ld_fp32(void) {
    rt_swiglu_packed_backward(bad_buf[0], bad_buf[1], bad_buf[2], bad_buf[2], bad_buf[2], 16,
                              RT_PACKED_DINP2, RT_BF16, 0, 8, 16, 16);
}

static void swiglu_ld_odd(void) {
    rt_swiglu_packed_backward(bad_buf[0], bad_buf[1], bad_buf[2], bad_buf[2], bad_buf[2], 16,
                              RT_PACKED_DINP | RT_PACKED_DINP2, RT_F16, 0, 8, 16, 12);
}

static void linear_dweight_odd_oc(void) {
    rt_linear_packed_backward(NULL, bad_buf[0], NULL, bad_buf[1], bad_buf[2], bad_buf[2], 1, 8, 12,
                              RT_PACKED_DWEIGHT, RT_BF16, RT_ASSIGN_DWEIGHT, 0, 0);
}

static void rmsnorm_dweight_accumulated(void) {
    rt_rmsnorm_packed_backward(NULL, bad_buf[0], bad_buf[1], bad_buf[2], NULL, NULL, 1, 8,
                               RT_PACKED_DWEIGHT, RT_F16, RT_ASSIGN_1);
}

static void layernorm_dweight_accumulated(void) {
    rt_layernorm_packed_backward(NULL, bad_buf[0], NULL, bad_buf[1], bad_buf[2], NULL, NULL, NULL,
                                 1, 8, RT_PACKED_DWEIGHT, RT_F16, RT_ACCUMULATE);
}

// Row lengths a gradient cannot take (too short, not a multiple of 8, fp32 storage) stop the
// call with one line naming it.
static void linear_alpha_three(void) {
    rt_linear_scaled_packed_forward(bad_buf[0], bad_buf[1], bad_buf[2], 2, 8, 8, 3.0f,
                                    RT_PACKED_OUT | RT_PACKED_INP, RT_BF16);
}

static void linear_alpha_fp16(void) {
    rt_linear_scaled_packed_backward(bad_buf[0], NULL, bad_buf[1], bad_buf[2], bad_buf[2], 2, 8,
                                     8, 2.0f, RT_PACKED_OUT | RT_PACKED_DINP, RT_F16, RT_ASSIGN_1,
                                     8, 0);
}

static void test_grad_rows_checked(void) {
    char out[1024];
    int ok = aborts_with(rope_ld_short, "dinp with row length 24, width 32, packed", out,
                         sizeof out);
    CHECK(ok, "rope backward with dinp in rows of 24 (width 32) stops: %s", out);
    ok = aborts_with(rope_ld_fp32, "dinp with row length 32, width 32, fp32 storage", out,
                     sizeof out);
    CHECK(ok, "rope backward with an fp32-storage dinp in rows of 32 stops: %s", out);
    ok = aborts_with(attention_ld_odd, "dk with row length 20, width 16, packed", out, sizeof out);
    CHECK(ok, "attention backward with dk in rows of 20 (not a multiple of 8) stops: %s", out);
    ok = aborts_with(linear_ld_fp32, "dout with row length 16, width 8, fp32 storage", out,
                     sizeof out);
    CHECK(ok, "linear backward with an fp32-storage dout in rows of 16 (OC 8) stops: %s", out);
    ok = aborts_with(linear_ld_short, "dout with row length 8, width 16, packed", out, sizeof out);
    CHECK(ok, "linear backward with a packed dout in rows of 8 (OC 16) stops: %s", out);
    ok = aborts_with(linear_ld_odd_oc, "packed dout with row length 24, width 12", out, sizeof out);
    CHECK(ok, "linear backward with a packed dout of OC 12 in rows of 24 (a slice of OC not a "
          "multiple of 8) stops: %s", out);
    void (*dinp_ld_call[6])(void) = {linear_dinp_ld_odd,  linear_dinp_ld_short,
                                     linear_dinp_ld_fp32, linear_dinp_ld_added,
                                     linear_dinp_ld_null, linear_dinp_ld_odd_c};
    const char* dinp_ld[6][2] = {
        {"rt_linear_packed_backward: dinp with row length 20, width 16, packed",
         "packed, in rows of 20 (not a multiple of 8)"},
        {"rt_linear_packed_backward: dinp with row length 8, width 16, packed",
         "packed, in rows of 8 (C 16)"},
        {"rt_linear_packed_backward: dinp with row length 16, width 16, fp32 storage",
         "in fp32 storage, in rows of 16"},
        {"rt_linear_scaled_packed_backward: dinp with row length 16 and assign 0",
         "packed and added to (a scaled linear's), in rows of 16"},
        {"rt_linear_packed_backward: dinp NULL with row length 16 and assign 9",
         "NULL, in rows of 16"},
        {"rt_linear_packed_backward: packed dinp with row length 16, width 12",
         "packed of C 12, in rows of 16 (a slice of C not a multiple of 8)"}};
    for (int i = 0; i < 6; i++) {
        ok = aborts_with(dinp_ld_call[i], dinp_ld[i][0], out, sizeof out);
        CHECK(ok, "linear backward with ld_dinp for a dinp %s stops: %s", dinp_ld[i][1], out);
    }
    ok = aborts_with(swiglu_rows_bad, "rt_swiglu_packed_backward with n = 20, C = 8", out,
                     sizeof out);
    CHECK(ok, "swiglu backward with n = 20 in rows of 8 stops: %s", out);
    ok = aborts_with(swiglu_ld_fp32, "da with row length 16, width 8, fp32 storage", out,
                     sizeof out);
    CHECK(ok, "swiglu backward with an fp32-storage da in rows of 16 (C 8) stops: %s", out);
    ok = aborts_with(swiglu_ld_odd, "db with row length 12, width 8, packed", out, sizeof out);
    CHECK(ok, "swiglu backward with a packed db in rows of 12 (not a multiple of 8) stops: %s",
          out);
    ok = aborts_with(linear_dweight_accumulated,
                     "rt_linear_packed_backward with RT_PACKED_DWEIGHT and assign 0", out,
                     sizeof out);
    CHECK(ok, "linear backward adding to a packed dweight (no RT_ASSIGN_DWEIGHT) stops: %s", out);
    ok = aborts_with(linear_dweight_odd_oc, "with a packed [12, 8] dweight", out, sizeof out);
    CHECK(ok, "linear backward with a packed [12, 8] dweight (OC not a multiple of 8) stops: %s",
          out);
    ok = aborts_with(linear_alpha_three, "rt_linear_scaled_packed_forward with alpha 3", out,
                     sizeof out);
    CHECK(ok, "a scaled linear with alpha 3 (not a power of two) stops: %s", out);
    ok = aborts_with(linear_alpha_fp16, "rt_linear_scaled_packed_backward with dtype", out,
                     sizeof out);
    CHECK(ok, "a scaled fp16 linear (its subnormals would not scale exactly) stops: %s", out);
    ok = aborts_with(rmsnorm_dweight_accumulated,
                     "rt_rmsnorm_packed_backward with RT_PACKED_DWEIGHT and assign 1", out,
                     sizeof out);
    CHECK(ok, "rmsnorm backward adding to a packed dweight stops: %s", out);
    ok = aborts_with(layernorm_dweight_accumulated,
                     "rt_layernorm_packed_backward with RT_PACKED_DWEIGHT and assign 0", out,
                     sizeof out);
    CHECK(ok, "layernorm backward adding to a packed dweight stops: %s", out);
}

// The embedding lookup into a 16-bit output: rt_embedding_forward's rows rounded to dt, bit
// for bit, packed (padding none: rows of a multiple of 8) and in fp32 storage.
static void test_packed_embedding(rt_dtype dt) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    enum { R = 7, D = 16, NV = 5 };
    const int32_t ids[R] = {4, 0, 4, 2, 1, 3, 0};
    float *w = tk_alloc(NV * D), *y = tk_alloc(R * D), *y2 = tk_alloc(R * D);
    tk_fill(w, NV * D, -3.0f, 3.0f);  // not rounded: the lookup rounds
    rt_embedding_forward(y, ids, w, R, D, NV);
    tk_round_all(y, R * D, dt);
    uint16_t* y16 = poisoned16(R * D);
    int pad;
    rt_embedding_packed_forward(y16, ids, w, R, D, NV, RT_PACKED_OUT, dt);
    rt_embedding_packed_forward(y2, ids, w, R, D, NV, 0, dt);
    CHECK(packed_equals(y16, y, R, D, dt, &pad) && pad == 0 && same(y2, y, R * D),
          "%s embedding lookup into a packed output and into fp32 storage == rt_embedding_forward "
          "rounded", nm);
    free(w), free(y), free(y2), free(y16);
}

int main(void) {
    rt_kernels_init();
    tk_seed(11);
    for (int k = 0; k < 2; k++) {
        const rt_dtype dt = k ? RT_F16 : RT_BF16;
        test_dt(dt);
        test_packed_input(dt);
        test_packed_weight(dt);
        test_packed_outputs(dt);
        test_packed_attention(dt);
        test_packed_grad_rows(dt);
        test_linear_dout_slices(dt);
        test_linear_dinp_slices(dt);
        test_swiglu_grad_slices(dt);
        test_packed_dweight_linear(dt);
        test_packed_dweight_norms(dt);
        test_packed_embedding(dt);
    }
    test_grad_rows_checked();
    return tk_summary("test_packed");
}
