// test_cuda_kernels: packed 16-bit operands of the linear, the norms, the activations, residual add.
#include "kernel_tests.h"

// device d = n zero floats
static void zero_dev(float* d, size_t n) { RT_CHECK_CUDA(cudaMemset(d, 0, n * sizeof(float))); }

// packed linear inputs (rt_kernels.h): a linear reading its input's packed rows (with a
// bias; its output fp32 or packed), its backward (fp32 or packed dout, with dbias; an
// assigned dinp packed), the packed outputs of the norms that feed it, and the activations
// with every storage of their operands: the fp32-storage calls' bits.
void test_packed_inputs(rt_dtype dt, int N, int C, int OC) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    const size_t ni = (size_t)N * C, no = (size_t)N * OC;
    float *inp = hrand(ni, 1.0f, 0.0f), *w = hrand((size_t)OC * C, 0.2f, 0.0f),
          *b = hrand((size_t)OC, 1.0f, 0.0f), *dout = hrand(no, 1.0f, 0.0f);
    round_to(inp, ni, dt), round_to(w, (size_t)OC * C, dt), round_to(b, OC, dt), round_to(dout, no, dt);
    float *d_inp = dup(inp, ni), *d_w = dup(w, (size_t)OC * C), *d_b = dup(b, OC), *d_dout = dup(dout, no);
    void *d_i16 = dev_packed(inp, N, C, dt), *d_d16 = dev_packed(dout, N, OC, dt);
    float *d_out = dalloc(no * sizeof(float)), *d_out2 = dalloc(no * sizeof(float));
    void* d_o16 = dalloc((size_t)N * RT_LD16(OC) * 2);
    RT_CHECK_CUDA(cudaMemset(d_o16, 0xAB, (size_t)N * RT_LD16(OC) * 2));
    rt_linear_forward(d_out, d_inp, d_w, d_b, N, C, OC, dt);
    rt_linear_packed_forward(d_out2, d_i16, d_w, d_b, N, C, OC, RT_PACKED_INP, dt);
    rt_linear_packed_forward(d_o16, d_i16, d_w, d_b, N, C, OC, RT_PACKED_INP | RT_PACKED_OUT, dt);
    int pad;
    const int ok = packed_same(d_o16, d_out, N, OC, dt, &pad);
    CHECK(dev_same(d_out, d_out2, no) && ok && pad == 0, "%s linear forward N=%d C=%d OC=%d, packed "
          "input (and output) == rt_linear_forward, bit for bit; %d non-zero padding", nm, N, C, OC, pad);
    float *dinp0 = hrand(ni, 1.0f, 0.0f), *dw0 = hrand((size_t)OC * C, 1.0f, 0.0f),
          *db0 = hrand(OC, 1.0f, 0.0f);
    round_to(dinp0, ni, dt);
    for (int as = 0; as < 2; as++) {
        const int bits = as ? RT_ASSIGN_1 | RT_ASSIGN_DWEIGHT : RT_ACCUMULATE;
        float *d_dinp = dup(dinp0, ni), *d_dw = dup(dw0, (size_t)OC * C), *d_db = dup(db0, OC);
        float *d_dinp2 = dup(dinp0, ni), *d_dw2 = dup(dw0, (size_t)OC * C), *d_db2 = dup(db0, OC);
        float *d_dinp3 = dup(dinp0, ni), *d_dw3 = dup(dw0, (size_t)OC * C), *d_db3 = dup(db0, OC);
        rt_linear_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC, dt, bits);
        rt_linear_packed_backward(d_dinp2, d_dw2, d_db2, d_dout, d_i16, d_w, N, C, OC, RT_PACKED_INP,
                                  dt, bits, OC, 0);
        rt_linear_packed_backward(d_dinp3, d_dw3, d_db3, d_d16, d_i16, d_w, N, C, OC,
                                  RT_PACKED_INP | RT_PACKED_OUT, dt, bits, RT_LD16(OC), 0);
        CHECK(dev_same(d_dinp, d_dinp2, ni) && dev_same(d_dw, d_dw2, (size_t)OC * C) &&
                  dev_same(d_db, d_db2, OC) && dev_same(d_dinp, d_dinp3, ni) &&
                  dev_same(d_dw, d_dw3, (size_t)OC * C) && dev_same(d_db, d_db3, OC),
              "%s linear backward (%s), packed input (and dout) == rt_linear_backward: dinp, "
              "dweight, dbias, bit for bit", nm, as ? "assigned" : "accumulated");
        {  // a packed dinp, assigned or added to (C a multiple of 8: dense rows)
            void* d_p16 = dalloc(ni * 2);
            dev_grad16(d_p16, dinp0, ni, as, dt);
            rt_linear_packed_backward(d_p16, NULL, NULL, d_d16, d_i16, d_w, N, C, OC,
                                      RT_PACKED_INP | RT_PACKED_OUT | RT_PACKED_DINP, dt, bits,
                                      RT_LD16(OC), 0);
            const int ok16 = packed_same(d_p16, d_dinp, N, C, dt, &pad);
            CHECK(ok16 && pad == 0, "%s linear backward into a packed dinp (%s) == "
                  "rt_linear_backward's, %d non-zero padding", nm, as ? "assigned" : "accumulated", pad);
            dfree(d_p16);
        }
        dfree(d_dinp), dfree(d_dw), dfree(d_db), dfree(d_dinp2), dfree(d_dw2), dfree(d_db2);
        dfree(d_dinp3), dfree(d_dw3), dfree(d_db3);
    }

    // the producers: [N, C] outputs, C a multiple of 8
    float *d_mean = dalloc(N * sizeof(float)), *d_rstd = dalloc(N * sizeof(float));
    float *d_mean2 = dalloc(N * sizeof(float)), *d_rstd2 = dalloc(N * sizeof(float));
    float* d_y = dalloc(ni * sizeof(float));
    void* d_y16 = dalloc(ni * 2);
    float* g = hrand(C, 1.0f, 0.0f);
    round_to(g, C, dt);
    float* d_g = dup(g, C);  // the norms' weight and LayerNorm's bias
    float* dy = hrand(ni, 1.0f, 0.0f);  // the [N, C] outputs' gradient
    round_to(dy, ni, dt);
    float* d_dy = dup(dy, ni);
    void *d_dy16 = dev_packed(dy, N, C, dt), *d_g16 = dalloc(ni * 2), *d_h16 = dalloc(ni * 2);
    // norms: out and inp each packed or not; backward with every storage of dout, inp and
    // dinp (dinp assigned or accumulated onto dinp0's values; dweight, dbias onto zeros)
    float *d_yn = dalloc(ni * sizeof(float)), *d_gn = dup(dinp0, ni), *d_gn2 = dup(dinp0, ni);
    float *d_dw = dalloc(C * sizeof(float)), *d_dw2 = dalloc(C * sizeof(float));
    float *d_dbn = dalloc(C * sizeof(float)), *d_dbn2 = dalloc(C * sizeof(float));
    int ok_n = 1;
    rt_layernorm_forward(d_y, d_mean, d_rstd, d_inp, d_g, d_g, N, C, RT_LAYERNORM_EPS, dt);
    for (int bits = 1; bits < 4; bits++) {
        rt_layernorm_packed_forward(bits & RT_PACKED_OUT ? d_y16 : (void*)d_yn, d_mean2, d_rstd2,
                                    bits & RT_PACKED_INP ? d_i16 : (const void*)d_inp, d_g, d_g, N, C,
                                    RT_LAYERNORM_EPS, bits, dt);
        ok_n &= (bits & RT_PACKED_OUT ? packed_same(d_y16, d_y, N, C, dt, &pad) : dev_same(d_y, d_yn, ni)) &&
                dev_same(d_mean, d_mean2, N) && dev_same(d_rstd, d_rstd2, N);
    }
    for (int bits = 0; bits < 16; bits++) {
        const int pk = (bits & 3) | (bits & 4 ? RT_PACKED_DINP : 0);
        const int as = bits & 8 ? RT_ASSIGN_1 : RT_ACCUMULATE;
        upload(d_gn, dinp0, ni), upload(d_gn2, dinp0, ni), dev_grad16(d_g16, dinp0, ni, as, dt);
        zero_dev(d_dw, C), zero_dev(d_dw2, C), zero_dev(d_dbn, C), zero_dev(d_dbn2, C);
        rt_layernorm_backward(d_gn, d_dw, d_dbn, d_dy, d_inp, d_g, d_mean, d_rstd, N, C, dt, as);
        rt_layernorm_packed_backward(pk & RT_PACKED_DINP ? d_g16 : (void*)d_gn2, d_dw2, d_dbn2,
                                     pk & RT_PACKED_OUT ? d_dy16 : (const void*)d_dy,
                                     pk & RT_PACKED_INP ? d_i16 : (const void*)d_inp, d_g, d_mean,
                                     d_rstd, N, C, pk, dt, as);
        ok_n &= (pk & RT_PACKED_DINP ? packed_same(d_g16, d_gn, N, C, dt, &pad) : dev_same(d_gn, d_gn2, ni)) &&
                dev_same(d_dw, d_dw2, C) && dev_same(d_dbn, d_dbn2, C);
    }
    CHECK(ok_n, "%s layernorm packed forward (out, inp, both) and backward (every storage of dout, inp, "
          "dinp) N=%d C=%d == the fp32-storage calls: out, mean, rstd, dinp, dweight, dbias", nm, N, C);
    ok_n = 1;
    rt_rmsnorm_forward(d_y, d_rstd, d_inp, d_g, N, C, 1e-6f, dt);
    for (int bits = 1; bits < 4; bits++) {
        rt_rmsnorm_packed_forward(bits & RT_PACKED_OUT ? d_y16 : (void*)d_yn, d_rstd2,
                                  bits & RT_PACKED_INP ? d_i16 : (const void*)d_inp, d_g, N, C, 1e-6f,
                                  bits, dt);
        ok_n &= (bits & RT_PACKED_OUT ? packed_same(d_y16, d_y, N, C, dt, &pad) : dev_same(d_y, d_yn, ni)) &&
                dev_same(d_rstd, d_rstd2, N);
    }
    for (int bits = 0; bits < 16; bits++) {
        const int pk = (bits & 3) | (bits & 4 ? RT_PACKED_DINP : 0);
        const int as = bits & 8 ? RT_ASSIGN_1 : RT_ACCUMULATE;
        upload(d_gn, dinp0, ni), upload(d_gn2, dinp0, ni), dev_grad16(d_g16, dinp0, ni, as, dt);
        zero_dev(d_dw, C), zero_dev(d_dw2, C);
        rt_rmsnorm_backward(d_gn, d_dw, d_dy, d_inp, d_g, d_rstd, N, C, dt, as);
        rt_rmsnorm_packed_backward(pk & RT_PACKED_DINP ? d_g16 : (void*)d_gn2, d_dw2,
                                   pk & RT_PACKED_OUT ? d_dy16 : (const void*)d_dy,
                                   pk & RT_PACKED_INP ? d_i16 : (const void*)d_inp, d_g, d_rstd, N, C,
                                   pk, dt, as);
        ok_n &= (pk & RT_PACKED_DINP ? packed_same(d_g16, d_gn, N, C, dt, &pad) : dev_same(d_gn, d_gn2, ni)) &&
                dev_same(d_dw, d_dw2, C);
    }
    CHECK(ok_n, "%s rmsnorm packed forward (out, inp, both) and backward (every storage of dout, inp, "
          "dinp) N=%d C=%d == the fp32-storage calls: out, rstd, dinp, dweight", nm, N, C);
    dfree(d_yn), dfree(d_gn), dfree(d_gn2), dfree(d_dw), dfree(d_dw2), dfree(d_dbn), dfree(d_dbn2);
    // activations: out, inp (swiglu's b: dinp0's values) each fp32 or packed; backward (dout:
    // dy) with every storage of dinp (assigned when packed), dout and inp
    float *d_b2 = dup(dinp0, ni), *d_y2 = dalloc(ni * sizeof(float));
    float *d_g1 = dup(dinp0, ni), *d_g2 = dup(dinp0, ni), *d_h1 = dup(dinp0, ni), *d_h2 = dup(dinp0, ni);
    void* d_b16 = dev_packed(dinp0, N, C, dt);
    for (int k = 0; k < 3; k++) {
        const packed_activation* a = &packed_activations[k];
        a->forward(d_y, d_inp, ni, dt);
        int ok = 1;
        for (int bits = 1; bits < 4; bits++) {
            a->packed_forward(bits & RT_PACKED_OUT ? d_y16 : (void*)d_y2,
                              bits & RT_PACKED_INP ? d_i16 : (const void*)d_inp, ni, bits, dt);
            ok &= bits & RT_PACKED_OUT ? packed_same(d_y16, d_y, N, C, dt, &pad)
                                       : dev_same(d_y, d_y2, ni);
        }
        for (int bits = 0; bits < 16; bits++) {
            const int pk = (bits & 3) | (bits & 4 ? RT_PACKED_DINP : 0), pg = bits & 4;
            const int as = bits & 8 ? RT_ASSIGN_1 : RT_ACCUMULATE;
            upload(d_g1, dinp0, ni), upload(d_g2, dinp0, ni);
            dev_grad16(d_g16, dinp0, ni, as, dt);
            a->backward(d_g1, d_dy, d_inp, ni, dt, as);
            a->packed_backward(pg ? d_g16 : (void*)d_g2, pk & RT_PACKED_OUT ? d_dy16 : (const void*)d_dy,
                               pk & RT_PACKED_INP ? d_i16 : (const void*)d_inp, ni, pk, dt, as);
            ok &= pg ? packed_same(d_g16, d_g1, N, C, dt, &pad) : dev_same(d_g1, d_g2, ni);
        }
        CHECK(ok, "%s %s packed forward (out, inp, both packed) and backward (every storage of "
              "dinp, dout, inp) == rt_%s_forward, rt_%s_backward", nm, a->name, a->name, a->name);
    }
    rt_swiglu_forward(d_y, d_inp, d_b2, ni, dt);
    int ok_s = 1;
    for (int bits = 1; bits < 8; bits++) {
        rt_swiglu_packed_forward(bits & RT_PACKED_OUT ? d_y16 : (void*)d_y2,
                                 bits & RT_PACKED_INP ? d_i16 : (const void*)d_inp,
                                 bits & RT_PACKED_INP2 ? d_b16 : (const void*)d_b2, ni, bits, dt);
        ok_s &= bits & RT_PACKED_OUT ? packed_same(d_y16, d_y, N, C, dt, &pad) : dev_same(d_y, d_y2, ni);
    }
    for (int bits = 0; bits < 128; bits++) {  // dout, a, b, da, db; each gradient assigned or not
        const int pk = (bits & 7) | (bits & 8 ? RT_PACKED_DINP : 0) | (bits & 16 ? RT_PACKED_DINP2 : 0);
        const int as = (bits & 32 ? RT_ASSIGN_1 : 0) | (bits & 64 ? RT_ASSIGN_2 : 0);
        upload(d_g1, dinp0, ni), upload(d_g2, dinp0, ni), upload(d_h1, dinp0, ni), upload(d_h2, dinp0, ni);
        dev_grad16(d_g16, dinp0, ni, as & RT_ASSIGN_1, dt), dev_grad16(d_h16, dinp0, ni, as & RT_ASSIGN_2, dt);
        rt_swiglu_backward(d_g1, d_h1, d_dy, d_inp, d_b2, ni, dt, as);
        rt_swiglu_packed_backward(bits & 8 ? d_g16 : (void*)d_g2, bits & 16 ? d_h16 : (void*)d_h2,
                                  pk & RT_PACKED_OUT ? d_dy16 : (const void*)d_dy,
                                  pk & RT_PACKED_INP ? d_i16 : (const void*)d_inp,
                                  pk & RT_PACKED_INP2 ? d_b16 : (const void*)d_b2, ni, pk, dt, as,
                                  C, C, C);
        ok_s &= bits & 8 ? packed_same(d_g16, d_g1, N, C, dt, &pad) : dev_same(d_g1, d_g2, ni);
        ok_s &= bits & 16 ? packed_same(d_h16, d_h1, N, C, dt, &pad) : dev_same(d_h1, d_h2, ni);
    }
    CHECK(ok_s, "%s swiglu packed forward (every storage of out, a, b) and backward (every "
          "storage of da, db, dout, a, b) == rt_swiglu_forward, rt_swiglu_backward", nm);
    int ok_r = 1;  // residual add: out, a, b packed or not; dout, da, db likewise
    rt_residual_forward(d_y, d_inp, d_b2, ni, dt);
    for (int bits = 1; bits < 8; bits++) {
        rt_residual_packed_forward(bits & RT_PACKED_OUT ? d_y16 : (void*)d_y2,
                                   bits & RT_PACKED_INP ? d_i16 : (const void*)d_inp,
                                   bits & RT_PACKED_INP2 ? d_b16 : (const void*)d_b2, ni, bits, dt);
        ok_r &= bits & RT_PACKED_OUT ? packed_same(d_y16, d_y, N, C, dt, &pad) : dev_same(d_y, d_y2, ni);
    }
    for (int bits = 0; bits < 32; bits++) {
        const int pk = (bits & 1 ? RT_PACKED_DINP : 0) | (bits & 2 ? RT_PACKED_DINP2 : 0) |
                       (bits & 16 ? RT_PACKED_OUT : 0);
        const int as = (bits & 4 ? RT_ASSIGN_1 : 0) | (bits & 8 ? RT_ASSIGN_2 : 0);
        upload(d_g1, dinp0, ni), upload(d_g2, dinp0, ni), upload(d_h1, dinp0, ni), upload(d_h2, dinp0, ni);
        dev_grad16(d_g16, dinp0, ni, as & RT_ASSIGN_1, dt), dev_grad16(d_h16, dinp0, ni, as & RT_ASSIGN_2, dt);
        rt_residual_backward(d_g1, d_h1, d_dy, ni, dt, as);
        rt_residual_packed_backward(bits & 1 ? d_g16 : (void*)d_g2, bits & 2 ? d_h16 : (void*)d_h2,
                                    pk & RT_PACKED_OUT ? d_dy16 : (const void*)d_dy, ni, pk, dt, as);
        ok_r &= bits & 1 ? packed_same(d_g16, d_g1, N, C, dt, &pad) : dev_same(d_g1, d_g2, ni);
        ok_r &= bits & 2 ? packed_same(d_h16, d_h1, N, C, dt, &pad) : dev_same(d_h1, d_h2, ni);
    }
    CHECK(ok_r, "%s residual packed forward (every storage of a, b) and backward (every storage "
          "of dout, da, db) == rt_residual_forward, rt_residual_backward", nm);
    dfree(d_b2), dfree(d_y2), dfree(d_g1), dfree(d_g2), dfree(d_h1), dfree(d_h2), dfree(d_b16);
    dfree(d_dy), free(dy), dfree(d_dy16), dfree(d_g16), dfree(d_h16);
    free(inp), free(w), free(b), free(dout), free(dinp0), free(dw0), free(db0), free(g);
    dfree(d_g), dfree(d_inp), dfree(d_w), dfree(d_b), dfree(d_dout), dfree(d_i16), dfree(d_d16), dfree(d_out);
    dfree(d_out2), dfree(d_o16), dfree(d_mean), dfree(d_rstd), dfree(d_mean2), dfree(d_rstd2);
    dfree(d_y), dfree(d_y16);
}

// A linear reading its weight's packed rows in place (an unsharded parameter: dense [OC, C],
// both multiples of 8), alone and with the input, output, dout and dinp packed too: the
// fp32-storage calls' bits, dweight and dbias included.
void test_packed_weight(rt_dtype dt, int N, int C, int OC) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    const size_t ni = (size_t)N * C, no = (size_t)N * OC, nw = (size_t)OC * C;
    float *inp = hrand(ni, 1.0f, 0.0f), *w = hrand(nw, 0.2f, 0.0f), *b = hrand((size_t)OC, 1.0f, 0.0f),
          *dout = hrand(no, 1.0f, 0.0f), *dinp0 = hrand(ni, 1.0f, 0.0f), *dw0 = hrand(nw, 1.0f, 0.0f);
    round_to(inp, ni, dt), round_to(w, nw, dt), round_to(b, OC, dt), round_to(dout, no, dt);
    round_to(dinp0, ni, dt);
    float *d_inp = dup(inp, ni), *d_w = dup(w, nw), *d_b = dup(b, OC), *d_dout = dup(dout, no);
    void *d_w16 = dev_packed(w, OC, C, dt), *d_i16 = dev_packed(inp, N, C, dt),
         *d_d16 = dev_packed(dout, N, OC, dt);
    float *d_out = dalloc(no * sizeof(float)), *d_out2 = dalloc(no * sizeof(float));
    void* d_o16 = dalloc(no * 2);
    rt_linear_forward(d_out, d_inp, d_w, d_b, N, C, OC, dt);
    rt_linear_packed_forward(d_out2, d_inp, d_w16, d_b, N, C, OC, RT_PACKED_INP2, dt);
    rt_linear_packed_forward(d_o16, d_i16, d_w16, d_b, N, C, OC,
                             RT_PACKED_INP | RT_PACKED_INP2 | RT_PACKED_OUT, dt);
    int pad;
    const int ok = packed_same(d_o16, d_out, N, OC, dt, &pad);
    CHECK(dev_same(d_out, d_out2, no) && ok, "%s linear forward N=%d C=%d OC=%d, packed weight "
          "(alone; with the input and output packed) == rt_linear_forward, bit for bit", nm, N, C, OC);
    // the bias packed too (OC a multiple of 8: cuBLASLt's epilogue reads it in place)
    void *d_b16 = dev_packed(b, 1, OC, dt), *d_o16b = dalloc(no * 2);
    float* d_out3 = dalloc(no * sizeof(float));
    rt_linear_packed_forward(d_out3, d_inp, d_w16, d_b16, N, C, OC, RT_PACKED_INP2 | RT_PACKED_INP3, dt);
    rt_linear_packed_forward(d_o16b, d_i16, d_w16, d_b16, N, C, OC,
                             RT_PACKED_INP | RT_PACKED_INP2 | RT_PACKED_INP3 | RT_PACKED_OUT, dt);
    CHECK(dev_same(d_out, d_out3, no) && packed_same(d_o16b, d_out, N, OC, dt, &pad),
          "%s linear forward N=%d C=%d OC=%d, packed weight and bias (alone; with the input and "
          "output packed) == rt_linear_forward, bit for bit", nm, N, C, OC);
    dfree(d_b16), dfree(d_o16b), dfree(d_out3);
    for (int as = 0; as < 2; as++) {
        const int bits = as ? RT_ASSIGN_1 | RT_ASSIGN_DWEIGHT : RT_ACCUMULATE;
        float *d_dinp = dup(dinp0, ni), *d_dw = dup(dw0, nw), *d_db = dalloc(OC * sizeof(float));
        float *d_dinp2 = dup(dinp0, ni), *d_dw2 = dup(dw0, nw), *d_db2 = dalloc(OC * sizeof(float));
        float *d_dw3 = dup(dw0, nw), *d_db3 = dalloc(OC * sizeof(float));
        RT_CHECK_CUDA(cudaMemset(d_db, 0, OC * sizeof(float)));
        RT_CHECK_CUDA(cudaMemset(d_db2, 0, OC * sizeof(float)));
        RT_CHECK_CUDA(cudaMemset(d_db3, 0, OC * sizeof(float)));
        void* d_p16 = dalloc(ni * 2);
        dev_grad16(d_p16, dinp0, ni, as, dt);
        rt_linear_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC, dt, bits);
        rt_linear_packed_backward(d_dinp2, d_dw2, d_db2, d_dout, d_inp, d_w16, N, C, OC,
                                  RT_PACKED_INP2, dt, bits, OC, 0);
        rt_linear_packed_backward(d_p16, d_dw3, d_db3, d_d16, d_i16, d_w16, N, C, OC,
                                  RT_PACKED_INP | RT_PACKED_INP2 | RT_PACKED_OUT | RT_PACKED_DINP,
                                  dt, bits, OC, 0);
        const int ok16 = packed_same(d_p16, d_dinp, N, C, dt, &pad);
        CHECK(dev_same(d_dinp, d_dinp2, ni) && dev_same(d_dw, d_dw2, nw) && dev_same(d_db, d_db2, OC) &&
                  ok16 && dev_same(d_dw, d_dw3, nw) && dev_same(d_db, d_db3, OC),
              "%s linear backward (%s), packed weight (alone; with everything packed) == "
              "rt_linear_backward: dinp, dweight, dbias, bit for bit", nm, as ? "assigned" : "accumulated");
        dfree(d_dinp), dfree(d_dw), dfree(d_db), dfree(d_dinp2), dfree(d_dw2), dfree(d_db2);
        dfree(d_dw3), dfree(d_db3), dfree(d_p16);
    }
    free(inp), free(w), free(b), free(dout), free(dinp0), free(dw0);
    dfree(d_inp), dfree(d_w), dfree(d_b), dfree(d_dout), dfree(d_w16), dfree(d_i16), dfree(d_d16);
    dfree(d_out), dfree(d_out2), dfree(d_o16);
}

// A linear with no input features (C = 0) and a packed bias: the bias rows, fp32 and packed
// outputs, as rt_linear_forward with the fp32 bias gives them.
void test_packed_bias_no_terms(rt_dtype dt) {
    const int N = 3, OC = 16;
    const size_t no = (size_t)N * OC;
    float* b = hrand((size_t)OC, 1.0f, 0.0f);
    round_to(b, OC, dt);
    float *d_b = dup(b, OC), *d_out = dalloc(no * sizeof(float)), *d_out2 = dalloc(no * sizeof(float));
    void *d_b16 = dev_packed(b, 1, OC, dt), *d_o16 = dalloc(no * 2);
    rt_linear_forward(d_out, NULL, NULL, d_b, N, 0, OC, dt);
    rt_linear_packed_forward(d_out2, NULL, NULL, d_b16, N, 0, OC, RT_PACKED_INP3, dt);
    rt_linear_packed_forward(d_o16, NULL, NULL, d_b16, N, 0, OC, RT_PACKED_INP3 | RT_PACKED_OUT, dt);
    int pad;
    CHECK(dev_same(d_out, d_out2, no) && packed_same(d_o16, d_out, N, OC, dt, &pad),
          "%s linear forward with C = 0 and a packed bias: the bias rows (fp32 and packed output)",
          dt == RT_BF16 ? "bf16" : "fp16");
    free(b), dfree(d_b), dfree(d_out), dfree(d_out2), dfree(d_b16), dfree(d_o16);
}

// The scaled linear on packed storage (rt_linear_scaled_packed_*; dt bf16, C and OC multiples
// of 8), for each of linear_alphas, bit for bit: the forward with every storage of out, inp
// and weight against rt_linear_packed_forward then rt_scale_packed_forward; the backward with
// every storage of dout, inp, weight, dinp and dweight (packed only assigned), accumulated or
// assigned, and a packed dout as columns [off, off + OC) of rows of ld (ld > OC), against
// rt_scale_packed_backward (or rt_scale_backward) of dout into a temporary then
// rt_linear_packed_backward. A failing storage prints its line before the check's.
void test_packed_linear_scaled(rt_dtype dt, int N, int C, int OC, int off, int ld) {
    const char* nm = dt == RT_BF16 ? "bf16" : "fp16";
    const size_t ni = (size_t)N * C, no = (size_t)N * OC, nw = (size_t)OC * C,
                 nwide = (size_t)N * ld;
    float *inp = hrand(ni, 1.0f, 0.0f), *w = hrand(nw, 0.2f, 0.0f),
          *wide = hrand(nwide, 1.0f, 0.0f), *dout = malloc(no * sizeof(float)),
          *dinp0 = hrand(ni, 1.0f, 0.0f), *dw0 = hrand(nw, 1.0f, 0.0f);
    if (!dout) abort();
    round_to(inp, ni, dt), round_to(w, nw, dt), round_to(wide, nwide, dt), round_to(dinp0, ni, dt);
    for (int n = 0; n < N; n++)  // dout: the slice's columns
        memcpy(dout + (size_t)n * OC, wide + (size_t)n * ld + off, (size_t)OC * sizeof(float));
    float *d_inp = dup(inp, ni), *d_w = dup(w, nw), *d_dout = dup(dout, no);
    void *d_i16 = dev_packed(inp, N, C, dt), *d_w16 = dev_packed(w, OC, C, dt),
         *d_d16 = dev_packed(dout, N, OC, dt), *d_wide16 = dev_packed(wide, N, ld, dt);
    // forward outputs (fp32 or packed) and the backward's scaled douts, gradients
    float *d_lin = dalloc(no * sizeof(float)), *d_want = dalloc(no * sizeof(float)),
          *d_got = dalloc(no * sizeof(float)), *d_ds = dalloc(no * sizeof(float));
    void *d_lin16 = dalloc(no * 2), *d_want16 = dalloc(no * 2), *d_got16 = dalloc(no * 2),
         *d_ds16 = dalloc(no * 2), *d_dswide16 = dalloc(nwide * 2);
    float *d_g = dalloc(ni * sizeof(float)), *d_g2 = dalloc(ni * sizeof(float)),
          *d_dw = dalloc(nw * sizeof(float)), *d_dw2 = dalloc(nw * sizeof(float));
    void *d_g16 = dalloc(ni * 2), *d_g16b = dalloc(ni * 2), *d_dw16 = dalloc(nw * 2),
         *d_dw16b = dalloc(nw * 2);
    float* nan = malloc((ni > nw ? ni : nw) * sizeof(float));
    if (!nan) abort();
    for (size_t i = 0; i < (ni > nw ? ni : nw); i++) nan[i] = NAN;
    for (int a = 0; a < 4; a++) {
        const float alpha = linear_alphas[a];
        double m, m2;
        int fails = 0, combos = 0;
        for (int pk = 0; pk < 8; pk++) {  // RT_PACKED_OUT, _INP, _INP2
            const int po = pk & RT_PACKED_OUT;
            const void* x = pk & RT_PACKED_INP ? d_i16 : (const void*)d_inp;
            const void* wt = pk & RT_PACKED_INP2 ? d_w16 : (const void*)d_w;
            void *lin = po ? d_lin16 : (void*)d_lin, *want = po ? d_want16 : (void*)d_want,
                 *got = po ? d_got16 : (void*)d_got;
            rt_linear_packed_forward(lin, x, wt, NULL, N, C, OC, pk, dt);
            rt_scale_packed_forward(want, lin, no, alpha, po ? RT_PACKED_OUT | RT_PACKED_INP : 0,
                                    dt);
            rt_linear_scaled_packed_forward(got, x, wt, N, C, OC, alpha, pk, dt);
            const size_t nd = bits_differ(got, want, no, po ? 2 : 4, dt, &m);
            combos++;
            if (nd) {
                fails++;
                printf("  packed %d: out %zu of %zu differ, max diff %.3g\n", pk, nd, no, m);
            }
        }
        CHECK(fails == 0, "%s linear scaled packed forward alpha %g N=%d C=%d OC=%d (every "
              "storage of out, inp, weight) == rt_linear_packed_forward then "
              "rt_scale_packed_forward, bit for bit: %d of %d storages differ", nm,
              (double)alpha, N, C, OC, fails, combos);
        // the scaled douts: fp32, packed, and the wide packed rows (the slice's temporary)
        rt_scale_backward(d_ds, d_dout, no, alpha, dt, RT_ASSIGN_1);
        rt_scale_packed_backward(d_ds16, d_d16, no, alpha, RT_PACKED_OUT | RT_PACKED_DINP, dt,
                                 RT_ASSIGN_1);
        rt_scale_packed_backward(d_dswide16, d_wide16, nwide, alpha,
                                 RT_PACKED_OUT | RT_PACKED_DINP, dt, RT_ASSIGN_1);
        fails = combos = 0;
        for (int bits = 0; bits < 128; bits++) {
            // dout, inp, weight, dinp, dweight packed; assigned; dout a slice
            const int pk = (bits & 15) | (bits & 16 ? RT_PACKED_DWEIGHT : 0);
            const int as = bits & 32, slice = bits & 64;
            const int pd = pk & RT_PACKED_OUT, pg = pk & RT_PACKED_DINP,
                      pdw = pk & RT_PACKED_DWEIGHT;
            if ((pdw && !as) || (slice && !pd)) continue;
            const int assign = as ? RT_ASSIGN_1 | RT_ASSIGN_DWEIGHT : RT_ACCUMULATE;
            const void* x = pk & RT_PACKED_INP ? d_i16 : (const void*)d_inp;
            const void* wt = pk & RT_PACKED_INP2 ? d_w16 : (const void*)d_w;
            const uint16_t *wide16 = d_wide16, *dswide16 = d_dswide16;
            const void* d = slice ? (const void*)(wide16 + off) : pd ? d_d16 : (const void*)d_dout;
            const void* ds =
                slice ? (const void*)(dswide16 + off) : pd ? d_ds16 : (const void*)d_ds;
            const int ldd = slice ? ld : pd ? RT_LD16(OC) : OC;
            void *g = pg ? d_g16 : (void*)d_g, *g2 = pg ? d_g16b : (void*)d_g2;
            void *dwt = pdw ? d_dw16 : (void*)d_dw, *dwt2 = pdw ? d_dw16b : (void*)d_dw2;
            if (pg) {
                dev_grad16(g, dinp0, ni, as, dt), dev_grad16(g2, dinp0, ni, as, dt);
            } else {
                upload(g, as ? nan : dinp0, ni), upload(g2, as ? nan : dinp0, ni);
            }
            if (pdw) {
                dev_grad16(dwt, dw0, nw, 1, dt), dev_grad16(dwt2, dw0, nw, 1, dt);
            } else {
                upload(dwt, as ? nan : dw0, nw), upload(dwt2, as ? nan : dw0, nw);
            }
            rt_linear_packed_backward(g, dwt, NULL, ds, x, wt, N, C, OC, pk, dt, assign, ldd, 0);
            rt_linear_scaled_packed_backward(g2, dwt2, d, x, wt, N, C, OC,
                                             alpha, pk, dt, assign, ldd, 0);
            const size_t nd = bits_differ(g2, g, ni, pg ? 2 : 4, dt, &m),
                         nd2 = bits_differ(dwt2, dwt, nw, pdw ? 2 : 4, dt, &m2);
            combos++;
            if (nd || nd2) {
                fails++;
                printf("  packed %d, %s%s: dinp %zu of %zu differ (max diff %.3g), dweight %zu "
                       "of %zu (max diff %.3g)\n", pk, as ? "assigned" : "accumulated",
                       slice ? ", dout a slice" : "", nd, ni, m, nd2, nw, m2);
            }
        }
        CHECK(fails == 0, "%s linear scaled packed backward alpha %g N=%d C=%d OC=%d (every "
              "storage of dout, inp, weight, dinp, dweight; accumulated and assigned; dout "
              "columns [%d, %d) of rows of %d) == rt_scale_packed_backward then "
              "rt_linear_packed_backward: dinp, dweight bit for bit; %d of %d differ", nm,
              (double)alpha, N, C, OC, off, off + OC, ld, fails, combos);
    }
    free(inp), free(w), free(wide), free(dout), free(dinp0), free(dw0), free(nan);
    dfree(d_inp), dfree(d_w), dfree(d_dout), dfree(d_i16), dfree(d_w16), dfree(d_d16);
    dfree(d_wide16), dfree(d_lin), dfree(d_want), dfree(d_got), dfree(d_ds), dfree(d_lin16);
    dfree(d_want16), dfree(d_got16), dfree(d_ds16), dfree(d_dswide16), dfree(d_g), dfree(d_g2);
    dfree(d_dw), dfree(d_dw2), dfree(d_g16), dfree(d_g16b), dfree(d_dw16), dfree(d_dw16b);
}
