// test_cuda_kernels: gelu, relu, silu, swiglu, and the vectorised flat kernels at each alignment.
#include "kernel_tests.h"

// ----------------------------------------------------------------------------
// activations

// dt RT_BF16: out and dinp rounded to bf16 on both backends; where the device's expf/erff
// differ from the host's in the last fp32 bit, the rounding may go the other way (one ulp).
void test_activation(const char* name, act_fwd cf, act_fwd gf, act_bwd cb, act_bwd gb,
                     rt_dtype dt) {
    char nm[128];
    const size_t n = 100003;
    const char* P = dt == RT_BF16 ? "bf16" : "fp32";
    float* x = hrand(n, 4.0f, 0.0f);
    x[0] = 0.0f;  // ReLU's gradient at 0
    float* dout = hrand(n, 1.0f, 0.0f);
    float* out = hrand(n, 1.0f, 0.0f);
    float* dx = hrand(n, 1.0f, 0.0f);
    round_to(x, n, dt), round_to(dout, n, dt), round_to(dx, n, dt);
    float *d_x = dup(x, n), *d_dout = dup(dout, n), *d_out = dup(out, n), *d_dx = dup(dx, n);
    cf(out, x, n, dt);
    gf(d_out, d_x, n, dt);
    snprintf(nm, sizeof nm, "%s %s forward n=%zu", name, P, n);
    cmp_dt(nm, d_out, out, n, TOL_ELEM, dt, 1);
    cb(dx, dout, x, n, dt, RT_ACCUMULATE);
    gb(d_dx, d_dout, d_x, n, dt, RT_ACCUMULATE);
    snprintf(nm, sizeof nm, "%s %s backward (+=) n=%zu", name, P, n);
    cmp_dt(nm, d_dx, dx, n, TOL_ELEM, dt, 1);
    gf(d_x, d_x, n, dt);  // in place
    snprintf(nm, sizeof nm, "%s %s forward in place (out == inp)", name, P);
    cmp_dt(nm, d_x, out, n, TOL_ELEM, dt, 1);
    free(x), free(dout), free(out), free(dx);
    dfree(d_x), dfree(d_dout), dfree(d_out), dfree(d_dx);
}

// dt RT_BF16 rounds the intermediates silu(a) and dout * b and the results out, da, db:
// where the device's expf differs from the host's in the last bit, a rounding can go the
// other way, one bf16 ulp in the intermediate (a relative 2^-7 at most, carried into the
// result) and one more in the result's own rounding: two ulps on top of TOL_ELEM.
void test_swiglu(rt_dtype dt) {
    const size_t n = 4099;
    const double tol = TOL_ELEM;
    const char* P = dt == RT_BF16 ? "bf16" : "fp32";
    char nm[96];
    float *a = hrand(n, 4.0f, 0.0f), *b = hrand(n, 2.0f, 0.0f), *dout = hrand(n, 1.0f, 0.0f);
    float *out = hrand(n, 1.0f, 0.0f), *da = hrand(n, 1.0f, 0.0f), *db = hrand(n, 1.0f, 0.0f);
    round_to(a, n, dt), round_to(b, n, dt), round_to(dout, n, dt);
    round_to(da, n, dt), round_to(db, n, dt);
    float *d_a = dup(a, n), *d_b = dup(b, n), *d_dout = dup(dout, n), *d_out = dup(out, n),
          *d_da = dup(da, n), *d_db = dup(db, n);
    cpu_rt_swiglu_forward(out, a, b, n, dt);
    rt_swiglu_forward(d_out, d_a, d_b, n, dt);
    snprintf(nm, sizeof nm, "swiglu %s forward n=4099", P);
    cmp_dt(nm, d_out, out, n, tol, dt, 2);
    cpu_rt_swiglu_backward(da, db, dout, a, b, n, dt, RT_ACCUMULATE);
    rt_swiglu_backward(d_da, d_db, d_dout, d_a, d_b, n, dt, RT_ACCUMULATE);
    snprintf(nm, sizeof nm, "swiglu %s backward da (+=)", P);
    cmp_dt(nm, d_da, da, n, tol, dt, 2);
    cmp_dt("  ... db (+=)", d_db, db, n, tol, dt, 2);
    cpu_rt_swiglu_backward(NULL, db, dout, a, b, n, dt, RT_ACCUMULATE);
    rt_swiglu_backward(NULL, d_db, d_dout, d_a, d_b, n, dt, RT_ACCUMULATE);
    snprintf(nm, sizeof nm, "swiglu %s backward da NULL: db (+=)", P);
    cmp_dt(nm, d_db, db, n, tol, dt, 4);  // two roundings, each of which may go either way
    cmp_dt("  ... da untouched", d_da, da, n, tol, dt, 2);
    // swiglu(x, x): da == db gets both contributions and one rounding
    RT_CHECK_CUDA(cudaMemcpy(d_da, da, n * sizeof(float), cudaMemcpyHostToDevice));
    cpu_rt_swiglu_backward(da, da, dout, a, a, n, dt, RT_ACCUMULATE);
    rt_swiglu_backward(d_da, d_da, d_dout, d_a, d_a, n, dt, RT_ACCUMULATE);
    snprintf(nm, sizeof nm, "swiglu %s backward da == db (swiglu(x, x))", P);
    cmp_dt(nm, d_da, da, n, tol, dt, 2);
    free(a), free(b), free(dout), free(out), free(da), free(db);
    dfree(d_a), dfree(d_b), dfree(d_dout), dfree(d_out), dfree(d_da), dfree(d_db);
}

// ----------------------------------------------------------------------------
// vectorised flat kernels (cuda_common.cuh rtc_flat): groups of 8 elements with 16-byte
// accesses when every pointer is 16-byte aligned, one element at a time otherwise

typedef void (*act_packed_fwd)(void*, const void*, size_t, int, rt_dtype);
typedef void (*act_packed_bwd)(void*, const void*, const void*, size_t, int, rt_dtype, int);

// Each swiglu / residual / accumulate / gelu / relu / silu call on buffers at a
// 16-byte-aligned address (groups of 8 and a tail of 3: n = 4099) and one element further
// (each element alone): the same bits, in fp32 storage and (dt 16-bit) with every operand
// packed. Gradients accumulated, assigned (each assign bit), one of them NULL, and da == db
// (fp32 storage).
void test_vec_offsets(rt_dtype dt) {
    const act_fwd af[3] = {rt_gelu_forward, rt_relu_forward, rt_silu_forward};
    const act_bwd ab[3] = {rt_gelu_backward, rt_relu_backward, rt_silu_backward};
    const act_packed_fwd paf[3] = {rt_gelu_packed_forward, rt_relu_packed_forward,
                                   rt_silu_packed_forward};
    const act_packed_bwd pab[3] = {rt_gelu_packed_backward, rt_relu_packed_backward,
                                   rt_silu_packed_backward};
    const char* P = dt == RT_BF16 ? "bf16" : dt == RT_F16 ? "fp16" : "fp32";
    const size_t n = 4099;
    float* h[5] = {hrand(n, 1.0f, 0.0f), hrand(n, 1.0f, 0.0f), hrand(n, 1.0f, 0.0f),
                   hrand(n, 4.0f, 0.0f), hrand(n, 2.0f, 0.0f)};  // da (out), db, dout, a, b
    void* buf[2][5];
    for (int k = 0; k < 5; k++) {
        round_to(h[k], n, dt);
        for (int off = 0; off < 2; off++) buf[off][k] = dalloc((n + 1) * sizeof(float));
    }
    int same = 1, calls = 0;
    for (int pk = 0; pk < (dt == RT_F32 ? 1 : 2); pk++) {
        const int fwd = RT_PACKED_OUT | RT_PACKED_INP | RT_PACKED_INP2,
                  grads = RT_PACKED_DINP | RT_PACKED_DINP2;
        for (int call = 0; call < 21; call++) {
            if (pk && call >= 9 && call <= 11) continue;  // da == db, rt_accumulate: fp32 only
            void* got[2][2] = {{NULL, NULL}, {NULL, NULL}};
            for (int off = 0; off < 2; off++) {
                void* p[5];
                int es[5];
                for (int k = 0; k < 5; k++) {
                    es[k] = pk ? 2 : 4;
                    p[k] = (char*)buf[off][k] + off * es[k];
                    put_vals(p[k], h[k], n, es[k], dt);
                }
                const int as = call >= 2 && call <= 5 ? call - 2 : call == 7 ? RT_ASSIGN_1 : 0;
                if (call == 0 && pk) rt_swiglu_packed_forward(p[0], p[3], p[4], n, fwd, dt);
                if (call == 0 && !pk) rt_swiglu_forward(p[0], p[3], p[4], n, dt);
                if (call == 1 && pk) rt_residual_packed_forward(p[0], p[3], p[4], n, fwd, dt);
                if (call == 1 && !pk) rt_residual_forward(p[0], p[3], p[4], n, dt);
                if (call >= 2 && call <= 6) {
                    void* da = call == 6 ? NULL : p[0];
                    if (pk)  // one row of n: its gradients' rows of RT_LD16(n) are dense
                        rt_swiglu_packed_backward(da, p[1], p[2], p[3], p[4], n, fwd | grads, dt,
                                                  as, (int)n, RT_LD16((int)n), RT_LD16((int)n));
                    else rt_swiglu_backward(da, p[1], p[2], p[3], p[4], n, dt, as);
                }
                if ((call == 7 || call == 8) && pk)
                    rt_residual_packed_backward(p[0], p[1], p[2], n, grads | RT_PACKED_OUT, dt, as);
                if ((call == 7 || call == 8) && !pk) rt_residual_backward(p[0], p[1], p[2], n, dt, as);
                if (call == 9) rt_swiglu_backward(p[0], p[0], p[2], p[3], p[3], n, dt, 0);
                if (call == 10) rt_residual_backward(p[0], p[0], p[2], n, dt, 0);
                if (call == 11) rt_accumulate(p[0], p[2], n);
                if (call >= 12) {  // activation (call - 12) / 3: forward, backward +=, backward =
                    const int a = (call - 12) / 3, kind = (call - 12) % 3;
                    const int bits = RT_PACKED_OUT | RT_PACKED_INP;
                    if (kind == 0 && pk) paf[a](p[0], p[3], n, bits, dt);
                    if (kind == 0 && !pk) af[a](p[0], p[3], n, dt);
                    if (kind > 0 && pk)
                        pab[a](p[0], p[2], p[3], n, bits | RT_PACKED_DINP, dt, kind - 1);
                    if (kind > 0 && !pk) ab[a](p[0], p[2], p[3], n, dt, kind - 1);
                }
                for (int k = 0; k < 2; k++) {
                    got[off][k] = malloc(n * es[k]);
                    if (!got[off][k]) abort();
                    RT_CHECK_CUDA(cudaMemcpy(got[off][k], p[k], n * es[k], cudaMemcpyDeviceToHost));
                }
                if (off == 1)
                    for (int k = 0; k < 2; k++) same &= memcmp(got[0][k], got[1][k], n * es[k]) == 0;
            }
            for (int off = 0; off < 2; off++) free(got[off][0]), free(got[off][1]);
            calls++;
        }
    }
    CHECK(same, "%s swiglu, residual, accumulate, gelu, relu, silu n=%zu: 16-byte-aligned "
          "(groups of 8) == one element further (each alone), bit for bit: %d calls (fp32 and "
          "packed storage; accumulated, assigned, da NULL, da == db)", P, n, calls);
    for (int k = 0; k < 5; k++) free(h[k]), dfree(buf[0][k]), dfree(buf[1][k]);
}
