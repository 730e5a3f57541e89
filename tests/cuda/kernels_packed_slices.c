// test_cuda_kernels: packed gradients as column slices of wider rows (rope, attention, linear's
// dout and dinp, swiglu).
#include "kernel_tests.h"

// Rope's and attention's packed gradients as column slices of one [B*T, ld] matrix (dq, dk,
// dv side by side and 8 columns more, a sentinel where no slice is: rt_kernels.h "Gradient
// row lengths"), assigned and added to: the dense calls' bits in the slices, the sentinel
// elsewhere. HD a multiple of 16 up to 128 runs the tensor-core kernels, which write the
// rows in place; other head dims the fp32 kernels, through dense copies.
void test_packed_grad_rows(rt_dtype dt, int B, int T, int NH, int NKV, int HD) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    const int rows = B * T, cq = NH * HD, ck = NKV * HD, ld = cq + 2 * ck + 8;
    const size_t nq = (size_t)rows * cq, nk = (size_t)rows * ck, nw = (size_t)rows * ld;
    const int off[3] = {0, cq, cq + ck}, cols[3] = {cq, ck, ck};
    const size_t n[3] = {nq, nk, nk};
    const uint16_t sentinel = 0x7E57;
    float *q = hrand(nq, 1.0f, 0.0f), *k = hrand(nk, 1.0f, 0.0f), *v = hrand(nk, 1.0f, 0.0f),
          *dy = hrand(nq, 1.0f, 0.0f), *g0 = hrand(nq, 1.0f, 0.0f);
    round_to(q, nq, dt), round_to(k, nk, dt), round_to(v, nk, dt), round_to(dy, nq, dt);
    round_to(g0, nq, dt);
    void *q16 = dev_packed(q, 1, (int)nq, dt), *k16 = dev_packed(k, 1, (int)nk, dt),
         *v16 = dev_packed(v, 1, (int)nk, dt), *dy16 = dev_packed(dy, 1, (int)nq, dt);
    float* d_dy = dup(dy, nq);
    void* y16 = dalloc(nq * 2);
    float* d_st = dalloc(rt_attention_stats_floats(B, NH, T) * sizeof(float));
    float* d_sc = dalloc(rt_attention_lowmem_scratch_floats(B, NH, T) * sizeof(float));
    const int ops = RT_PACKED_OUT | RT_PACKED_INP | RT_PACKED_INP2 | RT_PACKED_INP3;
    const int pk = ops | RT_PACKED_DINP | RT_PACKED_DINP2 | RT_PACKED_DINP3;
    rt_attention_lowmem_packed_forward(y16, d_st, d_sc, q16, k16, v16, B, T, NH, NKV, HD, 1, dt,
                                       ops, dt);
    void* d_g[3] = {dalloc(nq * 2), dalloc(nk * 2), dalloc(nk * 2)};
    uint16_t* d_wide = dalloc(nw * 2);
    uint16_t *start = malloc(nw * 2), *want = malloc(nw * 2), *got = NULL;
    int ok_rope = 1, ok_attn = 1;
    for (int a = 0; a < 2; a++) {
        const int as = a ? RT_ASSIGN_1 | RT_ASSIGN_2 | RT_ASSIGN_3 : RT_ACCUMULATE;
        for (int part = 0; part < 2; part++) {  // rope (dq, dk slices), then attention (all)
            const int ns = part ? 3 : 2;
            uint16_t* g[3];
            for (int i = 0; i < ns; i++) {
                dev_grad16(d_g[i], g0, n[i], as, dt);
                g[i] = down16(d_g[i], n[i]);
            }
            wide_rows(start, rows, ld, ns, off, cols, g, sentinel);
            RT_CHECK_CUDA(cudaMemcpy(d_wide, start, nw * 2, cudaMemcpyHostToDevice));
            for (int i = 0; i < ns; i++) free(g[i]);
            if (part == 0) {  // q's gradient from a packed dout, k's from an fp32 one
                rt_rope_packed_backward(d_g[0], dy16, B, T, NH, HD, RT_ROPE_THETA,
                                        RT_PACKED_OUT | RT_PACKED_DINP, dt, as, 0);
                rt_rope_packed_backward(d_g[1], d_dy, B, T, NKV, HD, RT_ROPE_THETA,
                                        RT_PACKED_DINP, dt, as, 0);
                rt_rope_packed_backward(d_wide + off[0], dy16, B, T, NH, HD, RT_ROPE_THETA,
                                        RT_PACKED_OUT | RT_PACKED_DINP, dt, as, ld);
                rt_rope_packed_backward(d_wide + off[1], d_dy, B, T, NKV, HD, RT_ROPE_THETA,
                                        RT_PACKED_DINP, dt, as, ld);
            } else {
                rt_attention_lowmem_packed_backward(d_g[0], d_g[1], d_g[2], d_sc, dy16, y16, q16,
                                                    k16, v16, d_st, B, T, NH, NKV, HD, 1, dt, pk,
                                                    dt, as, 0, 0, 0);
                rt_attention_lowmem_packed_backward(d_wide + off[0], d_wide + off[1],
                                                    d_wide + off[2], d_sc, dy16, y16, q16, k16,
                                                    v16, d_st, B, T, NH, NKV, HD, 1, dt, pk, dt,
                                                    as, ld, ld, ld);
            }
            for (int i = 0; i < ns; i++) g[i] = down16(d_g[i], n[i]);
            wide_rows(want, rows, ld, ns, off, cols, g, sentinel);
            for (int i = 0; i < ns; i++) free(g[i]);
            got = down16(d_wide, nw);
            const int same = memcmp(got, want, nw * 2) == 0 && memcmp(got, start, nw * 2) != 0;
            if (part) ok_attn &= same;
            else ok_rope &= same;
            free(got);
        }
    }
    CHECK(ok_rope, "%s rope packed backward into rows of %d (q's and k's gradients at columns 0 "
          "and %d; assigned, accumulated) == the dense calls' bits, other columns untouched, "
          "B=%d T=%d NH=%d NKV=%d HD=%d", nm, ld, cq, B, T, NH, NKV, HD);
    CHECK(ok_attn, "%s attention packed backward into rows of %d (dq, dk, dv at columns 0, %d, "
          "%d; assigned, accumulated) == the dense call's bits, other columns untouched, B=%d "
          "T=%d NH=%d NKV=%d HD=%d (%s kernels)", nm, ld, cq, cq + ck, B, T, NH, NKV, HD,
          HD % 16 == 0 && HD <= 128 ? "tensor-core" : "fp32");
    free(q), free(k), free(v), free(dy), free(g0), free(start), free(want);
    dfree(q16), dfree(k16), dfree(v16), dfree(dy16), dfree(d_dy), dfree(y16), dfree(d_st);
    dfree(d_sc), dfree(d_g[0]), dfree(d_g[1]), dfree(d_g[2]), dfree(d_wide);
}

// Stacked linears (rt_kernels.h "Gradient row lengths"): two linears of one input whose
// output gradients are column slices of one packed [N, ld] matrix (at columns 8 and
// 8 + OC1, a sentinel in the other columns), as Llama's w1 and w3: the stack's input
// gradient in one call on both slices (dweight, dbias NULL; dinp fp32 and packed), each
// linear's weight and bias gradients in one call on its slice (dinp NULL), and all three from
// the second slice, the input and weights fp32 or packed, assigned and accumulated: the
// bits of rt_linear_backward on the dense gradients, the matrix unchanged.
void test_linear_dout_slices(rt_dtype dt, int N, int C, int OC1, int OC2) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    const int OCS = OC1 + OC2, ld = OCS + 16, col = 8;
    const int off[2] = {col, col + OC1}, cols[2] = {OC1, OC2};
    const size_t ni = (size_t)N * C, nw = (size_t)OCS * C, nwide = (size_t)N * ld;
    const uint16_t sentinel = 0x7E57;  // fp16 NaN, bf16 ~7e37: any read of it shows
    float *inp = hrand(ni, 1.0f, 0.0f), *w = hrand(nw, 0.2f, 0.0f), *dS = hrand((size_t)N * OCS, 1.0f, 0.0f);
    float *dinp0 = hrand(ni, 1.0f, 0.0f), *dw0 = hrand(nw, 1.0f, 0.0f), *db0 = hrand(OCS, 1.0f, 0.0f);
    round_to(inp, ni, dt), round_to(w, nw, dt), round_to(dS, (size_t)N * OCS, dt), round_to(dinp0, ni, dt);
    float* dm[2] = {malloc((size_t)N * OC1 * sizeof(float)), malloc((size_t)N * OC2 * sizeof(float))};
    if (!dm[0] || !dm[1]) abort();
    for (int n = 0; n < N; n++)  // the members' gradients: the stack's columns
        for (int j = 0; j < OCS; j++) {
            if (j < OC1) dm[0][(size_t)n * OC1 + j] = dS[(size_t)n * OCS + j];
            else dm[1][(size_t)n * OC2 + j - OC1] = dS[(size_t)n * OCS + j];
        }
    float *d_inp = dup(inp, ni), *d_w = dup(w, nw), *d_dS = dup(dS, (size_t)N * OCS);
    float* d_dm[2] = {dup(dm[0], (size_t)N * OC1), dup(dm[1], (size_t)N * OC2)};
    void *d_i16 = dev_packed(inp, N, C, dt), *d_w16 = dev_packed(w, OCS, C, dt);
    uint16_t* h16[2] = {bits16(dm[0], (size_t)N * OC1, dt), bits16(dm[1], (size_t)N * OC2, dt)};
    uint16_t *start = malloc(nwide * 2), *got = NULL;
    if (!start) abort();
    wide_rows(start, N, ld, 2, off, cols, h16, sentinel);
    uint16_t* d_wide = dalloc(nwide * 2);
    RT_CHECK_CUDA(cudaMemcpy(d_wide, start, nwide * 2, cudaMemcpyHostToDevice));
    float *d_g = dalloc(ni * sizeof(float)), *d_g2 = dalloc(ni * sizeof(float));
    float *d_dw = dalloc(nw * sizeof(float)), *d_dw2 = dalloc(nw * sizeof(float));
    float *d_db = dalloc(OCS * sizeof(float)), *d_db2 = dalloc(OCS * sizeof(float));
    void* d_p16 = dalloc(ni * 2);
    int ok_in = 1, ok_w = 1, ok_all = 1, pad;
    for (int k = 0; k < 4; k++) {
        const int as = k & 1, ops = k & 2 ? RT_PACKED_INP | RT_PACKED_INP2 : 0;
        const int bits = as ? RT_ASSIGN_1 | RT_ASSIGN_DWEIGHT : RT_ACCUMULATE;
        const void* x = ops ? d_i16 : (const void*)d_inp;
        // the input's gradient over the stack: fp32 storage, then packed
        upload(d_g, dinp0, ni), upload(d_g2, dinp0, ni), dev_grad16(d_p16, dinp0, ni, as, dt);
        rt_linear_backward(d_g, NULL, NULL, d_dS, d_inp, d_w, N, C, OCS, dt, bits);
        rt_linear_packed_backward(d_g2, NULL, NULL, d_wide + col, x, ops ? d_w16 : (const void*)d_w,
                                  N, C, OCS, ops | RT_PACKED_OUT, dt, bits, ld, 0);
        rt_linear_packed_backward(d_p16, NULL, NULL, d_wide + col, x, ops ? d_w16 : (const void*)d_w,
                                  N, C, OCS, ops | RT_PACKED_OUT | RT_PACKED_DINP, dt, bits, ld, 0);
        ok_in &= dev_same(d_g, d_g2, ni) && packed_same(d_p16, d_g, N, C, dt, &pad);
        // each member's weight and bias gradients from its slice
        for (int m = 0; m < 2; m++) {
            const int oc = cols[m];
            const size_t wo = (size_t)(m ? OC1 : 0) * C;
            upload(d_dw, dw0, (size_t)oc * C), upload(d_dw2, dw0, (size_t)oc * C);
            upload(d_db, db0, oc), upload(d_db2, db0, oc);
            rt_linear_backward(NULL, d_dw, d_db, d_dm[m], d_inp, d_w + wo, N, C, oc, dt, bits);
            rt_linear_packed_backward(NULL, d_dw2, d_db2, d_wide + off[m], x,
                                      ops ? (const void*)((uint16_t*)d_w16 + wo)
                                          : (const void*)(d_w + wo),
                                      N, C, oc, ops | RT_PACKED_OUT, dt, bits, ld, 0);
            ok_w &= dev_same(d_dw, d_dw2, (size_t)oc * C) && dev_same(d_db, d_db2, oc);
        }
        // all three from the second slice, dinp packed
        const size_t wo = (size_t)OC1 * C;
        upload(d_g, dinp0, ni), dev_grad16(d_p16, dinp0, ni, as, dt);
        upload(d_dw, dw0, (size_t)OC2 * C), upload(d_dw2, dw0, (size_t)OC2 * C);
        upload(d_db, db0, OC2), upload(d_db2, db0, OC2);
        rt_linear_backward(d_g, d_dw, d_db, d_dm[1], d_inp, d_w + wo, N, C, OC2, dt, bits);
        rt_linear_packed_backward(d_p16, d_dw2, d_db2, d_wide + off[1], x,
                                  ops ? (const void*)((uint16_t*)d_w16 + wo) : (const void*)(d_w + wo),
                                  N, C, OC2, ops | RT_PACKED_OUT | RT_PACKED_DINP, dt, bits, ld, 0);
        ok_all &= packed_same(d_p16, d_g, N, C, dt, &pad) && dev_same(d_dw, d_dw2, (size_t)OC2 * C) &&
                  dev_same(d_db, d_db2, OC2);
    }
    got = down16(d_wide, nwide);
    const int untouched = memcmp(got, start, nwide * 2) == 0;
    CHECK(ok_in && untouched, "%s linear backward N=%d C=%d, dinp only, dout the columns %d..%d of "
          "rows of %d (OC %d; input and weight fp32 or packed; dinp fp32 and packed; assigned, "
          "accumulated) == rt_linear_backward on the dense dout, bit for bit; dout unchanged", nm,
          N, C, col, col + OCS, ld, OCS);
    CHECK(ok_w, "%s linear backward N=%d C=%d, dweight and dbias only, dout the column slices at "
          "%d (OC %d) and %d (OC %d) of rows of %d == rt_linear_backward on each dense dout", nm,
          N, C, off[0], OC1, off[1], OC2, ld);
    CHECK(ok_all, "%s linear backward N=%d C=%d, dinp (packed), dweight and dbias from the column "
          "slice at %d of rows of %d == rt_linear_backward", nm, N, C, off[1], ld);
    free(inp), free(w), free(dS), free(dinp0), free(dw0), free(db0), free(dm[0]), free(dm[1]);
    free(h16[0]), free(h16[1]), free(start), free(got);
    dfree(d_inp), dfree(d_w), dfree(d_dS), dfree(d_dm[0]), dfree(d_dm[1]), dfree(d_i16), dfree(d_w16);
    dfree(d_wide), dfree(d_g), dfree(d_g2), dfree(d_dw), dfree(d_dw2), dfree(d_db), dfree(d_db2);
    dfree(d_p16);
}

// A linear's packed input gradient written as a column slice of a packed [N, ld] matrix (C
// columns at column 8, a sentinel in the others: rt_kernels.h "Gradient row lengths",
// ld_dinp), assigned, with dweight and dbias, dout, input and weight fp32 or packed, OC and 0
// (no terms: the slice's columns zeroed, not whole rows); rt_linear_packed_backward and
// (bf16, a scaled linear's dt) rt_linear_scaled_packed_backward with alpha 2: the slice
// holds the dense call's dinp bit for bit (its GEMM's rounded rows written in place), the
// sentinel is left elsewhere, dweight and dbias are the dense call's.
void test_linear_dinp_slices(rt_dtype dt, int N, int C, int OC) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    const int ld = C + 24, col = 8;
    const int off[1] = {col}, cols[1] = {C};
    const size_t ni = (size_t)N * C, nw = (size_t)OC * C, nd = (size_t)N * OC;
    const size_t nwide = (size_t)N * ld;
    const uint16_t sentinel = 0x7E57;
    float *inp = hrand(ni, 1.0f, 0.0f), *w = hrand(nw, 0.2f, 0.0f), *dy = hrand(nd, 1.0f, 0.0f);
    float *dw0 = hrand(nw, 1.0f, 0.0f), *db0 = hrand(OC, 1.0f, 0.0f);
    round_to(inp, ni, dt), round_to(w, nw, dt), round_to(dy, nd, dt);
    float *d_inp = dup(inp, ni), *d_w = dup(w, nw), *d_dy = dup(dy, nd);
    void *d_i16 = dev_packed(inp, N, C, dt), *d_w16 = dev_packed(w, OC, C, dt),
         *d_dy16 = dev_packed(dy, N, OC, dt), *d_g16 = dalloc(ni * 2);
    float *d_dw[2] = {dup(dw0, nw), dup(dw0, nw)}, *d_db[2] = {dup(db0, OC), dup(db0, OC)};
    uint16_t* d_wide = dalloc(nwide * 2);
    uint16_t *start = malloc(nwide * 2), *want = malloc(nwide * 2);
    if (!start || !want) abort();
    wide_rows(start, N, ld, 0, off, cols, NULL, sentinel);
    int ok = 1, zeros = 1, calls = 0;
    for (int k = 0; k < 12; k++) {
        const int ops = k & 1 ? RT_PACKED_INP | RT_PACKED_INP2 : 0;
        const int pk = ops | (k & 2 ? RT_PACKED_OUT : 0) | RT_PACKED_DINP;
        const int scaled = k >> 2 == 1, oc = k >> 2 == 2 ? 0 : OC;
        if (scaled && dt != RT_BF16) continue;
        const void *x = ops ? d_i16 : (const void*)d_inp, *wt = ops ? d_w16 : (const void*)d_w;
        const void* d = pk & RT_PACKED_OUT ? d_dy16 : (const void*)d_dy;
        const int bits = RT_ASSIGN_1 | RT_ASSIGN_DWEIGHT;
        dev_grad16(d_g16, NULL, ni, 1, dt);
        RT_CHECK_CUDA(cudaMemcpy(d_wide, start, nwide * 2, cudaMemcpyHostToDevice));
        for (int sl = 0; sl < 2; sl++) {  // dense rows, then the slice
            void* g = sl ? (void*)(d_wide + col) : d_g16;
            if (scaled)
                rt_linear_scaled_packed_backward(g, d_dw[sl], d, x, wt, N, C, oc, 2.0f, pk, dt,
                                                 bits, 0, sl ? ld : 0);
            else
                rt_linear_packed_backward(g, d_dw[sl], d_db[sl], d, x, wt, N, C, oc, pk, dt, bits,
                                          0, sl ? ld : 0);
        }
        uint16_t *g = down16(d_g16, ni), *got = down16(d_wide, nwide);
        wide_rows(want, N, ld, 1, off, cols, &g, sentinel);
        ok &= memcmp(got, want, nwide * 2) == 0 && dev_same(d_dw[0], d_dw[1], nw) &&
              dev_same(d_db[0], d_db[1], OC);
        for (size_t i = 0; i < ni && !oc; i++) zeros &= g[i] == 0;
        calls++;
        free(g), free(got);
    }
    CHECK(ok && zeros, "%s linear backward%s N=%d C=%d OC=%d, dinp packed and assigned into the "
          "columns %d..%d of rows of %d (dout, input and weight fp32 or packed; OC 0 too: %s; "
          "%d calls) == the dense call's dinp bit for bit, other columns untouched; dweight, "
          "dbias the dense call's", nm, dt == RT_BF16 ? " and scaled backward (alpha 2)" : "",
          N, C, OC, col, col + C - 1, ld, zeros ? "zeros" : "not zeros", calls);
    free(inp), free(w), free(dy), free(dw0), free(db0), free(start), free(want);
    dfree(d_inp), dfree(d_w), dfree(d_dy), dfree(d_i16), dfree(d_w16), dfree(d_dy16);
    dfree(d_g16), dfree(d_dw[0]), dfree(d_dw[1]), dfree(d_db[0]), dfree(d_db[1]), dfree(d_wide);
}

// swiglu's backward writing da and db as column slices of one packed [R, ld] matrix (at
// columns 8 and 8 + D, as w1's and w3's output gradients in their stack, a sentinel in the
// other columns), or one of them fp32 storage (dense rows) or NULL, each assigned or added
// to, dout, a and b fp32 or packed: rt_swiglu_backward's bits in the slices, the sentinel
// untouched. D a multiple of 8: groups of 8 (16-byte accesses) in each row; else one at a
// time.
void test_swiglu_grad_slices(rt_dtype dt, int R, int D) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    const int ld = RT_LD16(2 * D) + 16, col = 8;
    const int off[2] = {col, col + RT_LD16(D)}, cols[2] = {D, D};
    const size_t n = (size_t)R * D, nwide = (size_t)R * ld;
    const uint16_t sentinel = 0x7E57;
    float *x = hrand(n, 3.0f, 0.0f), *z = hrand(n, 3.0f, 0.0f), *dy = hrand(n, 1.0f, 0.0f),
          *g0 = hrand(n, 1.0f, 0.0f), *h0 = hrand(n, 1.0f, 0.0f);
    round_to(x, n, dt), round_to(z, n, dt), round_to(dy, n, dt), round_to(g0, n, dt), round_to(h0, n, dt);
    float *d_x = dup(x, n), *d_z = dup(z, n), *d_dy = dup(dy, n);
    void *d_x16 = dalloc(n * 2), *d_z16 = dalloc(n * 2), *d_dy16 = dalloc(n * 2);
    put_vals(d_x16, x, n, 2, dt), put_vals(d_z16, z, n, 2, dt), put_vals(d_dy16, dy, n, 2, dt);
    float *d_g = dalloc(n * sizeof(float)), *d_h = dalloc(n * sizeof(float));
    float *d_g2 = dalloc(n * sizeof(float)), *d_h2 = dalloc(n * sizeof(float));
    uint16_t* d_wide = dalloc(nwide * 2);
    uint16_t *start = malloc(nwide * 2), *want = malloc(nwide * 2);
    float *g = malloc(n * sizeof(float)), *h = malloc(n * sizeof(float));
    if (!start || !want || !g || !h) abort();
    int ok = 1, calls = 0;
    // mode: da, db slices (0); da a slice, db fp32 (1); da NULL, db a slice (2); da fp32, db a
    // slice (3)
    for (int k = 0; k < 32; k++) {
        const int mode = k & 3, as = (k >> 2) & 3, inpk = k & 16;
        const int assign = (as & 1 ? RT_ASSIGN_1 : 0) | (as & 2 ? RT_ASSIGN_2 : 0);
        const int sa = mode == 0 || mode == 1, sb = mode != 1;
        uint16_t* st[2] = {bits16(g0, n, dt), bits16(h0, n, dt)};
        for (size_t i = 0; i < n; i++) {  // an assigned slice's old values: never read
            if (as & 1) st[0][i] = 0xABAB;
            if (as & 2) st[1][i] = 0xABAB;
        }
        wide_rows(start, R, ld, 2, off, cols, st, sentinel);
        RT_CHECK_CUDA(cudaMemcpy(d_wide, start, nwide * 2, cudaMemcpyHostToDevice));
        upload(d_g, g0, n), upload(d_h, h0, n), upload(d_g2, g0, n), upload(d_h2, h0, n);
        rt_swiglu_backward(mode == 2 ? NULL : d_g, d_h, d_dy, d_x, d_z, n, dt, assign);
        const int pk = (inpk ? RT_PACKED_OUT | RT_PACKED_INP | RT_PACKED_INP2 : 0) |
                       (sa ? RT_PACKED_DINP : 0) | (sb ? RT_PACKED_DINP2 : 0);
        rt_swiglu_packed_backward(mode == 2 ? NULL : sa ? (void*)(d_wide + off[0]) : (void*)d_g2,
                                  sb ? (void*)(d_wide + off[1]) : (void*)d_h2,
                                  inpk ? d_dy16 : (const void*)d_dy, inpk ? d_x16 : (const void*)d_x,
                                  inpk ? d_z16 : (const void*)d_z, n, pk, dt, assign, D,
                                  sa ? ld : D, sb ? ld : D);
        RT_CHECK_CUDA(cudaMemcpy(g, d_g, n * sizeof(float), cudaMemcpyDeviceToHost));
        RT_CHECK_CUDA(cudaMemcpy(h, d_h, n * sizeof(float), cudaMemcpyDeviceToHost));
        uint16_t* res[2] = {sa ? bits16(g, n, dt) : st[0], sb ? bits16(h, n, dt) : st[1]};
        wide_rows(want, R, ld, 2, off, cols, res, sentinel);
        uint16_t* got = down16(d_wide, nwide);
        ok &= memcmp(got, want, nwide * 2) == 0;
        ok &= (sa || mode == 2 || dev_same(d_g, d_g2, n)) && (sb || dev_same(d_h, d_h2, n));
        calls++;
        if (sa) free(res[0]);
        if (sb) free(res[1]);
        free(got), free(st[0]), free(st[1]);
    }
    CHECK(ok, "%s swiglu packed backward R=%d C=%d, da and db the columns at %d and %d of rows of "
          "%d (or one fp32 storage or NULL; dout, a, b fp32 or packed; each assigned, "
          "accumulated; %d calls) == rt_swiglu_backward's bits, other columns untouched (%s)",
          nm, R, D, off[0], off[1], ld, calls, D % 8 ? "one element at a time" : "groups of 8");
    free(x), free(z), free(dy), free(g0), free(h0), free(start), free(want), free(g), free(h);
    dfree(d_x), dfree(d_z), dfree(d_dy), dfree(d_x16), dfree(d_z16), dfree(d_dy16);
    dfree(d_g), dfree(d_h), dfree(d_g2), dfree(d_h2), dfree(d_wide);
}
