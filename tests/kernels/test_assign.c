// Assigned gradient outputs (rt_kernels.h "Assign"): for every backward kernel that takes
// `assign`, every gradient output that has a bit, and dt in {fp32, bf16, fp16} where the
// kernel takes one, and every combination of its bits:
//   * an assigned output equals the same call accumulating onto a zeroed buffer, bit for
//     bit (only -0 for +0 is allowed), and it is not read: it starts filled with NaN;
//   * an output whose bit is clear accumulates onto its old values exactly as before;
// and the special cases: relu's and dropout's unwritten elements (written as 0 when
// assigned), dropout p = 0 and p = 1, cross-entropy's ignored rows and all-ignored batch,
// aliased outputs (da == db, attention's dq == dk == dv: the bits are ignored, the
// contributions accumulate), a
// NULL output whose bit is set, and linear backward without rows.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "rt_dtype.h"
#include "rt_kernels.h"

#define MAXB 4

enum { N_ = 7, C_ = 13, OC_ = 5, RN = 6, RC = 37, EN = 1001 };
enum { B_ = 2, T_ = 3, NH_ = 2, HD_ = 8, ROPE_N = B_ * T_ * NH_ * HD_ };
enum { CN = 9, CV = 11 };

static const int32_t ce_targets[CN] = {3, RT_IGNORE_INDEX, 0, 10, 5, RT_IGNORE_INDEX, 7, 1, 2};
static const int32_t ce_ignored[CN] = {RT_IGNORE_INDEX, RT_IGNORE_INDEX, RT_IGNORE_INDEX,
                                       RT_IGNORE_INDEX, RT_IGNORE_INDEX, RT_IGNORE_INDEX,
                                       RT_IGNORE_INDEX, RT_IGNORE_INDEX, RT_IGNORE_INDEX};

// a == b bit for bit, or both zeros when zero_sign_ok
static int same(float a, float b, int zero_sign_ok) {
    if (zero_sign_ok && a == 0.0f && b == 0.0f) return 1;
    return memcmp(&a, &b, sizeof a) == 0;
}

typedef void (*call_fn)(float* const* o, float* const* in, rt_dtype dt, int assign);

typedef struct {
    const char* name;
    int nin;
    size_t in_n[MAXB];
    float in_lo[MAXB], in_hi[MAXB];
    int nout;
    size_t out_n[MAXB];
    int bit[MAXB];  // the output's RT_ASSIGN_ bit (0: a parameter gradient that always +=)
    const char* out_name[MAXB];
    int has_dt;     // takes a dt (else run with RT_F32 only)
    call_fn call;
} acase;

// -- linear: in = inp[N,C], w[OC,C], dout[N,OC]
static void c_linear(float* const* o, float* const* in, rt_dtype dt, int as) {
    rt_linear_backward(o[0], o[1], o[2], in[2], in[0], in[1], N_, C_, OC_, dt, as);
}
// -- norms: in = inp[RN,RC], w[RC], b[RC], dout[RN,RC]; statistics from an fp32 forward
static void c_layernorm(float* const* o, float* const* in, rt_dtype dt, int as) {
    float mean[RN], rstd[RN], y[RN * RC];
    rt_layernorm_forward(y, mean, rstd, in[0], in[1], in[2], RN, RC, RT_LAYERNORM_EPS, RT_F32);
    rt_layernorm_backward(o[0], o[1], o[2], in[3], in[0], in[1], mean, rstd, RN, RC, dt, as);
}
static void c_rmsnorm(float* const* o, float* const* in, rt_dtype dt, int as) {
    float rstd[RN], y[RN * RC];
    rt_rmsnorm_forward(y, rstd, in[0], in[1], RN, RC, 1e-6f, RT_F32);
    rt_rmsnorm_backward(o[0], o[1], in[3], in[0], in[1], rstd, RN, RC, dt, as);
}
// -- elementwise: in = a[EN], b[EN], dout[EN]
static void c_gelu(float* const* o, float* const* in, rt_dtype dt, int as) {
    rt_gelu_backward(o[0], in[2], in[0], EN, dt, as);
}
static void c_relu(float* const* o, float* const* in, rt_dtype dt, int as) {
    rt_relu_backward(o[0], in[2], in[0], EN, dt, as);
}
static void c_silu(float* const* o, float* const* in, rt_dtype dt, int as) {
    rt_silu_backward(o[0], in[2], in[0], EN, dt, as);
}
static void c_swiglu(float* const* o, float* const* in, rt_dtype dt, int as) {
    rt_swiglu_backward(o[0], o[1], in[2], in[0], in[1], EN, dt, as);
}
static void c_residual(float* const* o, float* const* in, rt_dtype dt, int as) {
    rt_residual_backward(o[0], o[1], in[2], EN, dt, as);
}
static void c_mul(float* const* o, float* const* in, rt_dtype dt, int as) {
    rt_mul_backward(o[0], o[1], in[2], in[0], in[1], EN, dt, as);
}
static void c_scale(float* const* o, float* const* in, rt_dtype dt, int as) {
    rt_scale_backward(o[0], in[2], EN, 0.37f, dt, as);
}
static void c_dropout(float* const* o, float* const* in, rt_dtype dt, int as) {
    rt_dropout_backward(o[0], in[2], EN, 0.3f, 11, 3, 5, dt, as);
}
static void c_dropout_p0(float* const* o, float* const* in, rt_dtype dt, int as) {
    rt_dropout_backward(o[0], in[2], EN, 0.0f, 11, 3, 5, dt, as);
}
static void c_dropout_p1(float* const* o, float* const* in, rt_dtype dt, int as) {
    rt_dropout_backward(o[0], in[2], EN, 1.0f, 11, 3, 5, dt, as);
}
// -- broadcast add: in = a[RN,RC], b[RC], dout[RN,RC]
static void c_bcast(float* const* o, float* const* in, rt_dtype dt, int as) {
    rt_broadcast_add_backward(o[0], o[1], in[2], RN, RC, dt, as);
}
// -- rope: in = x, dout
static void c_rope(float* const* o, float* const* in, rt_dtype dt, int as) {
    rt_rope_backward(o[0], in[1], B_, T_, NH_, HD_, RT_ROPE_THETA, dt, as);
}
// -- losses: in = logits[CN,CV]
static void c_sum(float* const* o, float* const* in, rt_dtype dt, int as) {
    (void)in, (void)dt;
    rt_sum_loss_backward(o[0], CN * CV, &(const float){0.75f}, as);
}
static void c_ce(float* const* o, float* const* in, rt_dtype dt, int as) {
    rt_cross_entropy_backward(o[0], in[0], ce_targets, CN, CV, &(const float){0.5f}, dt, as);
}
static void c_ce_ignored(float* const* o, float* const* in, rt_dtype dt, int as) {
    rt_cross_entropy_backward(o[0], in[0], ce_ignored, CN, CV, &(const float){0.5f}, dt, as);
}

// -- lowmem attention (GQA, causal): in = q[B,T,NH*HD], k, v [B,T,HD], dout; backward
// from an fp32 forward
#define ATT_Q (B_ * T_ * NH_ * HD_)
#define ATT_KV (B_ * T_ * HD_)
static void c_attention(float* const* o, float* const* in, rt_dtype dt, int as) {
    float scratch[2 * T_ * T_ + B_ * NH_ * T_], out[ATT_Q], stats[B_ * NH_ * T_ * 2];
    rt_attention_lowmem_forward(out, stats, scratch, in[0], in[1], in[2], B_, T_, NH_, 1, HD_, 1,
                                RT_F32, RT_F32);
    rt_attention_lowmem_backward(o[0], o[1], o[2], scratch, in[3], out, in[0], in[1], in[2],
                                 stats, B_, T_, NH_, 1, HD_, 1, RT_F32, dt, as);
}

#define LIN_IN 3, {N_ * C_, OC_ * C_, N_ * OC_}, {-2, -1, -1}, {2, 1, 1}
#define NORM_IN 4, {RN * RC, RC, RC, RN * RC}, {-3, 0.5f, -1, -1}, {3, 1.5f, 1, 1}
#define EW_IN 3, {EN, EN, EN}, {-6, -3, -2}, {6, 3, 2}
#define BC_IN 3, {RN * RC, RC, RN * RC}, {-3, -3, -2}, {3, 3, 2}
#define ROPE_IN 2, {ROPE_N, ROPE_N}, {-2, -2}, {2, 2}
#define CE_IN 1, {CN * CV}, {-4}, {4}
#define ATT_IN 4, {ATT_Q, ATT_KV, ATT_KV, ATT_Q}, {-2, -2, -2, -1}, {2, 2, 2, 1}

static const acase cases[] = {
    {"linear backward", LIN_IN, 3, {N_ * C_, OC_ * C_, OC_}, {1, RT_ASSIGN_DWEIGHT, RT_ASSIGN_DWEIGHT}, {"dinp", "dweight", "dbias"}, 1, c_linear},
    {"layernorm backward", NORM_IN, 3, {RN * RC, RC, RC}, {1, RT_ASSIGN_DWEIGHT, RT_ASSIGN_DWEIGHT}, {"dinp", "dweight", "dbias"}, 1, c_layernorm},
    {"rmsnorm backward", NORM_IN, 2, {RN * RC, RC}, {1, RT_ASSIGN_DWEIGHT}, {"dinp", "dweight"}, 1, c_rmsnorm},
    {"gelu backward", EW_IN, 1, {EN}, {1}, {"dinp"}, 1, c_gelu},
    {"relu backward", EW_IN, 1, {EN}, {1}, {"dinp"}, 1, c_relu},
    {"silu backward", EW_IN, 1, {EN}, {1}, {"dinp"}, 1, c_silu},
    {"swiglu backward", EW_IN, 2, {EN, EN}, {1, 2}, {"da", "db"}, 1, c_swiglu},
    {"residual backward", EW_IN, 2, {EN, EN}, {1, 2}, {"da", "db"}, 1, c_residual},
    {"mul backward", EW_IN, 2, {EN, EN}, {1, 2}, {"da", "db"}, 1, c_mul},
    {"scale backward", EW_IN, 1, {EN}, {1}, {"dinp"}, 1, c_scale},
    {"dropout backward p=0.3", EW_IN, 1, {EN}, {1}, {"dinp"}, 1, c_dropout},
    {"dropout backward p=0", EW_IN, 1, {EN}, {1}, {"dinp"}, 1, c_dropout_p0},
    {"dropout backward p=1", EW_IN, 1, {EN}, {1}, {"dinp"}, 1, c_dropout_p1},
    {"broadcast_add backward", BC_IN, 2, {RN * RC, RC}, {1, 0}, {"da", "db"}, 1, c_bcast},
    {"rope backward", ROPE_IN, 1, {ROPE_N}, {1}, {"dinp"}, 1, c_rope},
    {"attention lowmem backward", ATT_IN, 3, {ATT_Q, ATT_KV, ATT_KV}, {1, 2, 4}, {"dq", "dk", "dv"}, 1, c_attention},
    {"sum loss backward", CE_IN, 1, {CN * CV}, {1}, {"dlogits"}, 0, c_sum},
    {"cross_entropy backward", CE_IN, 1, {CN * CV}, {1}, {"dlogits"}, 1, c_ce},
    {"cross_entropy backward all ignored", CE_IN, 1, {CN * CV}, {1}, {"dlogits"}, 1, c_ce_ignored},
};

static const char* dt_name(rt_dtype dt) {
    return dt == RT_BF16 ? "bf16" : dt == RT_F16 ? "fp16" : "fp32";
}

// One case, one dt, one mask of assign bits: got (assigned outputs NaN-filled, called with
// mask) against want (assigned outputs zeroed, called with RT_ACCUMULATE).
static void run_mask(const acase* c, rt_dtype dt, int mask) {
    float *in[MAXB] = {0}, *got[MAXB] = {0}, *want[MAXB] = {0};
    for (int i = 0; i < c->nin; i++) {
        in[i] = tk_alloc(c->in_n[i]);
        tk_fill(in[i], c->in_n[i], c->in_lo[i], c->in_hi[i]);
        for (size_t j = 0; j < c->in_n[i]; j++) in[i][j] = tk_round(in[i][j], dt);
    }
    in[0][0] = 0.0f;  // ReLU's kink and signed zeros
    in[0][1] = -0.0f;
    for (int k = 0; k < c->nout; k++) {
        const size_t n = c->out_n[k];
        const int assigned = c->bit[k] && (mask & c->bit[k]);
        want[k] = tk_alloc(n);
        tk_fill(want[k], n, -1, 1);
        for (size_t j = 0; j < n; j++) want[k][j] = tk_round(want[k][j], dt);
        got[k] = tk_dup(want[k], n);
        if (assigned)
            for (size_t j = 0; j < n; j++) want[k][j] = 0.0f, got[k][j] = NAN;
    }
    c->call(want, in, dt, RT_ACCUMULATE);
    c->call(got, in, dt, mask);
    for (int k = 0; k < c->nout; k++) {
        const int assigned = c->bit[k] && (mask & c->bit[k]);
        size_t diff = 0, zeros = 0;
        for (size_t j = 0; j < c->out_n[k]; j++) {
            if (!same(got[k][j], want[k][j], assigned)) diff++;
            if (want[k][j] == 0.0f) zeros++;
        }
        CHECK(diff == 0, "%s %s mask %d %s (%s): %zu values bit-equal to %s: %zu differ (%zu zeros)",
              dt_name(dt), c->name, mask, c->out_name[k], assigned ? "assigned" : "accumulated",
              c->out_n[k], assigned ? "accumulating onto zeros" : "accumulating as before", diff,
              zeros);
    }
    for (int i = 0; i < MAXB; i++) free(in[i]), free(got[i]), free(want[i]);
}

// Aliased outputs (x + x, x * x, swiglu(x, x)) ignore the bits: both contributions
// accumulate onto the old values. A NULL output with its bit set is not computed.
static void test_alias_and_null(rt_dtype dt) {
    float *a = tk_alloc(EN), *dout = tk_alloc(EN), *init = tk_alloc(EN);
    tk_fill(a, EN, -3, 3), tk_fill(dout, EN, -2, 2), tk_fill(init, EN, -1, 1);
    for (size_t j = 0; j < EN; j++)
        a[j] = tk_round(a[j], dt), dout[j] = tk_round(dout[j], dt), init[j] = tk_round(init[j], dt);
    const char* names[3] = {"residual", "mul", "swiglu"};
    for (int k = 0; k < 3; k++) {
        float* got = tk_dup(init, EN);
        float* want = tk_dup(init, EN);
        if (k == 0) {
            rt_residual_backward(got, got, dout, EN, dt, RT_ASSIGN_1 | RT_ASSIGN_2);
            rt_residual_backward(want, want, dout, EN, dt, RT_ACCUMULATE);
        } else if (k == 1) {
            rt_mul_backward(got, got, dout, a, a, EN, dt, RT_ASSIGN_1 | RT_ASSIGN_2);
            rt_mul_backward(want, want, dout, a, a, EN, dt, RT_ACCUMULATE);
        } else {
            rt_swiglu_backward(got, got, dout, a, a, EN, dt, RT_ASSIGN_1 | RT_ASSIGN_2);
            rt_swiglu_backward(want, want, dout, a, a, EN, dt, RT_ACCUMULATE);
        }
        size_t diff = 0;
        for (size_t j = 0; j < EN; j++) diff += !same(got[j], want[j], 0);
        CHECK(diff == 0, "%s %s backward da == db with both bits set: %d values equal to "
              "accumulating (bits ignored): %zu differ", dt_name(dt), names[k], EN, diff);
        // db NULL with RT_ASSIGN_2 set: da accumulates as before
        memcpy(got, init, EN * sizeof(float));
        memcpy(want, init, EN * sizeof(float));
        if (k == 0) {
            rt_residual_backward(got, NULL, dout, EN, dt, RT_ASSIGN_2);
            rt_residual_backward(want, NULL, dout, EN, dt, RT_ACCUMULATE);
        } else if (k == 1) {
            rt_mul_backward(got, NULL, dout, a, dout, EN, dt, RT_ASSIGN_2);
            rt_mul_backward(want, NULL, dout, a, dout, EN, dt, RT_ACCUMULATE);
        } else {
            rt_swiglu_backward(got, NULL, dout, a, dout, EN, dt, RT_ASSIGN_2);
            rt_swiglu_backward(want, NULL, dout, a, dout, EN, dt, RT_ACCUMULATE);
        }
        diff = 0;
        for (size_t j = 0; j < EN; j++) diff += !same(got[j], want[j], 0);
        CHECK(diff == 0, "%s %s backward db NULL with RT_ASSIGN_2: da (+=) %d values as before: "
              "%zu differ", dt_name(dt), names[k], EN, diff);
        free(got), free(want);
    }
    free(a), free(dout), free(init);
}

// Lowmem attention with dq, dk, dv one buffer (attention(x, x, x); NH = NKV, dt fp32): the
// bits are ignored, all three contributions accumulate.
static void test_attention_alias(void) {
    enum { N1 = B_ * T_ * HD_ };
    float x[N1], dout[N1], out[N1], stats[B_ * T_ * 2], scratch[2 * T_ * T_ + B_ * T_];
    float got[N1], want[N1];
    tk_fill(x, N1, -2, 2), tk_fill(dout, N1, -1, 1), tk_fill(got, N1, -1, 1);
    memcpy(want, got, sizeof got);
    rt_attention_lowmem_forward(out, stats, scratch, x, x, x, B_, T_, 1, 1, HD_, 1, RT_F32, RT_F32);
    rt_attention_lowmem_backward(got, got, got, scratch, dout, out, x, x, x, stats, B_, T_, 1, 1,
                                 HD_, 1, RT_F32, RT_F32, RT_ASSIGN_1 | RT_ASSIGN_2 | RT_ASSIGN_3);
    rt_attention_lowmem_backward(want, want, want, scratch, dout, out, x, x, x, stats, B_, T_, 1,
                                 1, HD_, 1, RT_F32, RT_F32, RT_ACCUMULATE);
    size_t diff = 0;
    for (int i = 0; i < N1; i++) diff += !same(got[i], want[i], 0);
    CHECK(diff == 0, "fp32 attention lowmem backward dq == dk == dv with all bits set: %d values "
          "equal to accumulating (bits ignored): %zu differ", N1, diff);
}

// No rows (N = 0): an assigned dinp has no elements, assigned parameter gradients are all
// zeros (the empty sum), accumulated ones keep their values: linear's dweight and dbias,
// LayerNorm's dweight and dbias, RMSNorm's dweight.
static void test_no_rows(void) {
    enum { NW = OC_ * C_ + OC_ + 2 * RC + RC };  // the five gradients, one after another
    float g[NW], keep[NW], dummy[1] = {0};
    float *dw = g, *db = dw + OC_ * C_, *lw = db + OC_, *lb = lw + RC, *rw = lb + RC;
    for (int as = 0; as < 2; as++) {
        for (int i = 0; i < NW; i++) g[i] = keep[i] = as ? NAN : 0.25f * (float)(i % 7);
        const int bits = as ? RT_ASSIGN_1 | RT_ASSIGN_DWEIGHT : RT_ACCUMULATE;
        rt_linear_backward(dummy, dw, db, dummy, dummy, dummy, 0, C_, OC_, RT_BF16, bits);
        rt_layernorm_backward(dummy, lw, lb, dummy, dummy, dummy, dummy, dummy, 0, RC, RT_BF16,
                              bits);
        rt_rmsnorm_backward(dummy, rw, dummy, dummy, dummy, dummy, 0, RC, RT_BF16, bits);
        size_t diff = 0;
        for (int i = 0; i < NW; i++) diff += !same(g[i], as ? 0.0f : keep[i], 0);
        CHECK(diff == 0, "linear, layernorm and rmsnorm backward N=0: dweight and dbias (%s), %d "
              "values %s: %zu differ", as ? "assigned" : "accumulated", NW,
              as ? "zero" : "unchanged", diff);
    }
}

int main(void) {
    rt_kernels_init();
    tk_seed(23);
    const rt_dtype dts[3] = {RT_F32, RT_BF16, RT_F16};
    const size_t ncases = sizeof cases / sizeof cases[0];
    int nruns = 0;
    for (size_t i = 0; i < ncases; i++) {
        const acase* c = &cases[i];
        int bits = 0;
        for (int k = 0; k < c->nout; k++) bits |= c->bit[k];
        for (int d = 0; d < (c->has_dt ? 3 : 1); d++)
            for (int mask = 1; mask <= bits; mask++) {
                if ((mask & ~bits) != 0) continue;
                run_mask(c, dts[d], mask);
                nruns++;
            }
    }
    for (int d = 0; d < 3; d++) test_alias_and_null(dts[d]);
    test_no_rows();
    test_attention_alias();
    printf("test_assign: %zu kernel cases, %d (dt, bits) runs\n", ncases, nruns);
    return check_summary();
}
