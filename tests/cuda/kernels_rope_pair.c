// test_cuda_kernels: two rotary embeddings in one call (rt_rope_pair_packed_*, an attention's
// q and k) against the two single calls, bit for bit.
#include "kernel_tests.h"

// h's n values on the device in a storage: packed 16-bit rows, or fp32
static void* dev_operand(const float* h, size_t n, int packed, rt_dtype dt) {
    return packed ? dev_packed(h, 1, (int)n, dt) : (void*)dup(h, n);
}

// Whether two device buffers of n values in one storage hold the same bits.
static int same_bits(const void* x, const void* y, size_t n, int packed) {
    return packed ? dev_same16(x, y, n) : dev_same(x, y, n);
}

// Forward: every storage of each rotation's operands (both packed, both fp32, mixed: the
// GPU's two launches), out apart from inp and in place; backward: each rotation's dout and
// dinp packed or fp32, assigned or added to, and where both are packed, q's and k's
// gradients as column slices of one [B*T, ld] matrix (at 0 and NHa*HD, a sentinel in the
// rest of each row; ld a multiple of 8), as Llama's stacked q, k, v gradients.
void test_rope_pair(rt_dtype dt, int B, int T, int NHa, int NHb, int HD) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    const int ca = NHa * HD, cb = NHb * HD, rows = B * T, ld = (ca + cb + 15) / 8 * 8;
    const size_t na = (size_t)rows * ca, nb = (size_t)rows * cb, nw = (size_t)rows * ld;
    const float theta = 500000.0f;
    float *xa = hrand(na, 1.0f, 0.0f), *xb = hrand(nb, 1.0f, 0.0f);
    float *ga = hrand(na, 1.0f, 0.0f), *gb = hrand(nb, 1.0f, 0.0f);
    round_to(xa, na, dt), round_to(xb, nb, dt), round_to(ga, na, dt), round_to(gb, nb, dt);
    static const int fwd[4][2] = {{RT_PACKED_OUT | RT_PACKED_INP, RT_PACKED_OUT | RT_PACKED_INP},
                                  {0, 0},
                                  {RT_PACKED_OUT, RT_PACKED_OUT},
                                  {RT_PACKED_OUT | RT_PACKED_INP, RT_PACKED_INP}};
    int ok_fwd = 1, ok_inplace = 1;
    for (int c = 0; c < 4; c++) {
        const int pa = fwd[c][0], pb = fwd[c][1];
        const int oa = !!(pa & RT_PACKED_OUT), ob = !!(pb & RT_PACKED_OUT);
        void *ia = dev_operand(xa, na, pa & RT_PACKED_INP, dt), *ib = dev_operand(xb, nb, pb & RT_PACKED_INP, dt);
        void *ya = dalloc(na * 4), *yb = dalloc(nb * 4), *wa = dalloc(na * 4), *wb = dalloc(nb * 4);
        rt_rope_pair_packed_forward(ya, ia, NHa, pa, yb, ib, NHb, pb, B, T, HD, theta, dt);
        rt_rope_packed_forward(wa, ia, B, T, NHa, HD, theta, pa, dt);
        rt_rope_packed_forward(wb, ib, B, T, NHb, HD, theta, pb, dt);
        ok_fwd &= same_bits(ya, wa, na, oa) && same_bits(yb, wb, nb, ob);
        if (oa == !!(pa & RT_PACKED_INP) && ob == !!(pb & RT_PACKED_INP)) {  // one storage each
            rt_rope_pair_packed_forward(ia, ia, NHa, pa, ib, ib, NHb, pb, B, T, HD, theta, dt);
            ok_inplace &= same_bits(ia, wa, na, oa) && same_bits(ib, wb, nb, ob);
        }
        dfree(ia), dfree(ib), dfree(ya), dfree(yb), dfree(wa), dfree(wb);
    }
    CHECK(ok_fwd, "%s rope pair forward (every storage) == the two calls' bits, B=%d T=%d NH %d "
          "and %d HD=%d", nm, B, T, NHa, NHb, HD);
    CHECK(ok_inplace, "%s rope pair forward in place == the two calls' bits, HD=%d", nm, HD);

    // backward: storage s of both (0 fp32, 1 packed dense, 2 packed slices of the wide
    // matrix), a's and b's assign bits
    const uint16_t sentinel = 0x7E57;
    int ok_bwd = 1;
    for (int s = 0; s < 3; s++) {
        for (int as = 0; as < 4; as++) {
            const int packed = s ? RT_PACKED_OUT | RT_PACKED_DINP : 0;
            const int asa = as & 1 ? RT_ASSIGN_1 : RT_ACCUMULATE, asb = as & 2 ? RT_ASSIGN_1 : RT_ACCUMULATE;
            const int la = s == 2 ? ld : 0;
            void *da = dev_operand(ga, na, s, dt), *db = dev_operand(gb, nb, s, dt);
            void *g[2][2];  // [pair, singles][a, b]
            uint16_t* wide[2] = {NULL, NULL};
            for (int k = 0; k < 2; k++) {
                if (s == 2) {
                    uint16_t* h = malloc(nw * 2);
                    uint16_t *ha = bits16(xa, na, dt), *hb = bits16(xb, nb, dt);
                    for (int r = 0; r < rows; r++) {
                        memcpy(h + (size_t)r * ld, ha + (size_t)r * ca, (size_t)ca * 2);
                        memcpy(h + (size_t)r * ld + ca, hb + (size_t)r * cb, (size_t)cb * 2);
                        for (int j = ca + cb; j < ld; j++) h[(size_t)r * ld + j] = sentinel;
                    }
                    wide[k] = dalloc(nw * 2);
                    RT_CHECK_CUDA(cudaMemcpy(wide[k], h, nw * 2, cudaMemcpyHostToDevice));
                    free(h), free(ha), free(hb);
                    g[k][0] = wide[k], g[k][1] = wide[k] + ca;
                } else {
                    g[k][0] = dev_operand(xa, na, s, dt), g[k][1] = dev_operand(xb, nb, s, dt);
                }
            }
            rt_rope_pair_packed_backward(g[0][0], da, NHa, packed, asa, la, g[0][1], db, NHb, packed,
                                         asb, la, B, T, HD, theta, dt);
            rt_rope_packed_backward(g[1][0], da, B, T, NHa, HD, theta, packed, dt, asa, la);
            rt_rope_packed_backward(g[1][1], db, B, T, NHb, HD, theta, packed, dt, asb, la);
            if (s == 2) {
                ok_bwd &= same_bits(wide[0], wide[1], nw, 1);
                dfree(wide[0]), dfree(wide[1]);
            } else {
                ok_bwd &= same_bits(g[0][0], g[1][0], na, s) && same_bits(g[0][1], g[1][1], nb, s);
                for (int k = 0; k < 2; k++) dfree(g[k][0]), dfree(g[k][1]);
            }
            dfree(da), dfree(db);
        }
    }
    CHECK(ok_bwd, "%s rope pair backward (fp32, packed, slices of rows of %d; each assigned or "
          "added to) == the two calls' bits, B=%d T=%d NH %d and %d HD=%d", nm, ld, B, T, NHa,
          NHb, HD);
    free(xa), free(xb), free(ga), free(gb);
}
