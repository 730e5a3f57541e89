// Mixed-precision rounding at the store (rt_kernels.h "Mixed precision"): for every kernel
// that takes a dt and for dt in {bf16, fp16}, kernel(dt) must equal, bit for bit,
// kernel(RT_F32) (for swiglu: the kernel as it was, rounding only its intermediates)
// followed by rounding the outputs its contract names (the separate
// rt_step_round pass the generated code used to emit), and must leave the outputs it does
// not round (parameter gradients, saved statistics, broadcast_add's db) exactly as
// kernel(RT_F32) writes them. Inputs, and gradient buffers accumulated into, hold values
// exact in dt, as the contract requires. Each check prints how many values the rounding
// changed (a rounded output) or how many are not representable in dt (an unrounded one),
// so a check that could not tell rounding from no rounding shows up.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "rt_dtype.h"
#include "rt_kernels.h"

// ----------------------------------------------------------------------------
// the reference rounding: rt_step_round's converters (core/dtype.c wraps these)

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

// ----------------------------------------------------------------------------
// cases: inputs in[] (read-only) and outputs o[] (pre-filled; forward kernels overwrite,
// backward kernels accumulate), each output rounded by the kernel or not

#define MAXB 6
enum { N_ = 7, C_ = 13, OC_ = 5, RN = 6, RC = 37, B_ = 2, T_ = 5, NH_ = 3, HD_ = 8, EN = 1000 };
#define ROPE_N ((size_t)B_ * T_ * NH_ * HD_)

typedef struct {
    const char* name;
    int nin;
    size_t in_n[MAXB];
    float in_lo[MAXB], in_hi[MAXB];
    int nout;
    size_t out_n[MAXB];
    int rounded[MAXB];        // 1: the kernel rounds this output to dt
    const char* out_name[MAXB];
    int out_is_input;         // o[0] also holds the input (in place): filled like in[0]
    void (*call)(float* const* o, float* const* in, rt_dtype dt);
    int copies;               // the outputs are copies of (exact) inputs or 0: nothing to round
    // the unrounded reference when it is not call(RT_F32): swiglu's dt also rounds its
    // intermediates, so its reference is the kernel before this change (below)
    void (*ref)(float* const* o, float* const* in, rt_dtype dt);
} rcase;

// -- linear: in = inp[N,C], w[OC,C], b[OC], dout[N,OC]
static void c_linear_fwd(float* const* o, float* const* in, rt_dtype dt) {
    rt_linear_forward(o[0], in[0], in[1], in[2], N_, C_, OC_, dt);
}
static void c_linear_fwd_nobias(float* const* o, float* const* in, rt_dtype dt) {
    rt_linear_forward(o[0], in[0], in[1], NULL, N_, C_, OC_, dt);
}
static void c_linear_bwd(float* const* o, float* const* in, rt_dtype dt) {
    rt_linear_backward(o[0], o[1], o[2], in[3], in[0], in[1], N_, C_, OC_, dt, RT_ACCUMULATE);
}
// -- layernorm / rmsnorm: in = inp[RN,RC], w[RC], b[RC], dout[RN,RC]; the statistics
// come from an fp32 forward of the same inputs (as the generated code's saved ones)
static void c_layernorm_fwd(float* const* o, float* const* in, rt_dtype dt) {
    rt_layernorm_forward(o[0], o[1], o[2], in[0], in[1], in[2], RN, RC, RT_LAYERNORM_EPS, dt);
}
static void c_layernorm_bwd(float* const* o, float* const* in, rt_dtype dt) {
    float mean[RN], rstd[RN], y[RN * RC];
    rt_layernorm_forward(y, mean, rstd, in[0], in[1], in[2], RN, RC, RT_LAYERNORM_EPS, RT_F32);
    rt_layernorm_backward(o[0], o[1], o[2], in[3], in[0], in[1], mean, rstd, RN, RC, dt, RT_ACCUMULATE);
}
static void c_rmsnorm_fwd(float* const* o, float* const* in, rt_dtype dt) {
    rt_rmsnorm_forward(o[0], o[1], in[0], in[1], RN, RC, 1e-6f, dt);
}
static void c_rmsnorm_bwd(float* const* o, float* const* in, rt_dtype dt) {
    float rstd[RN], y[RN * RC];
    rt_rmsnorm_forward(y, rstd, in[0], in[1], RN, RC, 1e-6f, RT_F32);
    rt_rmsnorm_backward(o[0], o[1], in[3], in[0], in[1], rstd, RN, RC, dt, RT_ACCUMULATE);
}
// -- elementwise: in = a[EN], b[EN], dout[EN]
static void c_gelu_fwd(float* const* o, float* const* in, rt_dtype dt) { rt_gelu_forward(o[0], in[0], EN, dt); }
static void c_gelu_bwd(float* const* o, float* const* in, rt_dtype dt) { rt_gelu_backward(o[0], in[2], in[0], EN, dt, RT_ACCUMULATE); }
static void c_relu_fwd(float* const* o, float* const* in, rt_dtype dt) { rt_relu_forward(o[0], in[0], EN, dt); }
static void c_relu_bwd(float* const* o, float* const* in, rt_dtype dt) { rt_relu_backward(o[0], in[2], in[0], EN, dt, RT_ACCUMULATE); }
static void c_silu_fwd(float* const* o, float* const* in, rt_dtype dt) { rt_silu_forward(o[0], in[0], EN, dt); }
static void c_silu_bwd(float* const* o, float* const* in, rt_dtype dt) { rt_silu_backward(o[0], in[2], in[0], EN, dt, RT_ACCUMULATE); }
static void c_swiglu_fwd(float* const* o, float* const* in, rt_dtype dt) { rt_swiglu_forward(o[0], in[0], in[1], EN, dt); }
static void c_swiglu_bwd(float* const* o, float* const* in, rt_dtype dt) {
    rt_swiglu_backward(o[0], o[1], in[2], in[0], in[1], EN, dt, RT_ACCUMULATE);
}
static void c_swiglu_bwd_alias(float* const* o, float* const* in, rt_dtype dt) {
    rt_swiglu_backward(o[0], o[0], in[2], in[0], in[0], EN, dt, RT_ACCUMULATE);  // swiglu(x, x)
}
// SwiGLU as the kernel computed it before it rounded its outputs: intermediates silu(a)
// and dout * b rounded to dt, out, da, db not (da's loop, then db's).
static float sig_(float x) { return 1.0f / (1.0f + expf(-x)); }
static float silu_grad_(float x) {
    float s = sig_(x);
    return s * (1.0f + x * (1.0f - s));
}
static void r_swiglu_fwd(float* const* o, float* const* in, rt_dtype dt) {
    for (size_t i = 0; i < EN; i++) o[0][i] = tk_round(in[0][i] * sig_(in[0][i]), dt) * in[1][i];
}
static void r_swiglu_bwd_(float* da, float* db, const float* dout, const float* a, const float* b,
                          rt_dtype dt) {
    for (size_t i = 0; i < EN; i++) da[i] += tk_round(dout[i] * b[i], dt) * silu_grad_(a[i]);
    for (size_t i = 0; i < EN; i++) db[i] += dout[i] * tk_round(a[i] * sig_(a[i]), dt);
}
static void r_swiglu_bwd(float* const* o, float* const* in, rt_dtype dt) {
    r_swiglu_bwd_(o[0], o[1], in[2], in[0], in[1], dt);
}
static void r_swiglu_bwd_alias(float* const* o, float* const* in, rt_dtype dt) {
    r_swiglu_bwd_(o[0], o[0], in[2], in[0], in[0], dt);
}
static void c_residual_fwd(float* const* o, float* const* in, rt_dtype dt) { rt_residual_forward(o[0], in[0], in[1], EN, dt); }
static void c_residual_bwd(float* const* o, float* const* in, rt_dtype dt) { rt_residual_backward(o[0], o[1], in[2], EN, dt, RT_ACCUMULATE); }
static void c_residual_bwd_alias(float* const* o, float* const* in, rt_dtype dt) {
    rt_residual_backward(o[0], o[0], in[2], EN, dt, RT_ACCUMULATE);  // x + x
}
static void c_mul_fwd(float* const* o, float* const* in, rt_dtype dt) { rt_mul_forward(o[0], in[0], in[1], EN, dt); }
static void c_mul_bwd(float* const* o, float* const* in, rt_dtype dt) { rt_mul_backward(o[0], o[1], in[2], in[0], in[1], EN, dt, RT_ACCUMULATE); }
static void c_mul_bwd_alias(float* const* o, float* const* in, rt_dtype dt) {
    rt_mul_backward(o[0], o[0], in[2], in[0], in[0], EN, dt, RT_ACCUMULATE);  // x * x
}
static void c_scale_fwd(float* const* o, float* const* in, rt_dtype dt) { rt_scale_forward(o[0], in[0], EN, 0.37f, dt); }
static void c_scale_bwd(float* const* o, float* const* in, rt_dtype dt) { rt_scale_backward(o[0], in[2], EN, 0.37f, dt, RT_ACCUMULATE); }
static void c_dropout_fwd(float* const* o, float* const* in, rt_dtype dt) {
    rt_dropout_forward(o[0], in[0], EN, 0.3f, 11, 3, 5, dt);
}
static void c_dropout_bwd(float* const* o, float* const* in, rt_dtype dt) {
    rt_dropout_backward(o[0], in[2], EN, 0.3f, 11, 3, 5, dt, RT_ACCUMULATE);
}
static void c_dropout_fwd_p0(float* const* o, float* const* in, rt_dtype dt) {
    rt_dropout_forward(o[0], in[0], EN, 0.0f, 11, 3, 5, dt);
}
static void c_dropout_bwd_p0(float* const* o, float* const* in, rt_dtype dt) {
    rt_dropout_backward(o[0], in[2], EN, 0.0f, 11, 3, 5, dt, RT_ACCUMULATE);
}
// -- broadcast add: in = a[RN,RC], b[RC], dout[RN,RC]
static void c_bcast_fwd(float* const* o, float* const* in, rt_dtype dt) {
    rt_broadcast_add_forward(o[0], in[0], in[1], RN, RC, dt);
}
static void c_bcast_bwd(float* const* o, float* const* in, rt_dtype dt) {
    rt_broadcast_add_backward(o[0], o[1], in[2], RN, RC, dt, RT_ACCUMULATE);
}
// -- rope: in = x[B,T,NH,HD], dout[B,T,NH,HD]
static void c_rope_fwd(float* const* o, float* const* in, rt_dtype dt) {
    rt_rope_forward(o[0], in[0], B_, T_, NH_, HD_, RT_ROPE_THETA, dt);
}
static void c_rope_fwd_inplace(float* const* o, float* const* in, rt_dtype dt) {
    (void)in;
    rt_rope_forward(o[0], o[0], B_, T_, NH_, HD_, RT_ROPE_THETA, dt);
}
static void c_rope_bwd(float* const* o, float* const* in, rt_dtype dt) {
    rt_rope_backward(o[0], in[1], B_, T_, NH_, HD_, RT_ROPE_THETA, dt, RT_ACCUMULATE);
}

// -- lowmem attention (GQA, causal): in = q[B,T,NH*HD], k, v [B,T,HD], dout[B,T,NH*HD];
// backward from an fp32 forward
#define ATT_KV ((size_t)B_ * T_ * HD_)
#define ATT_STATS ((size_t)B_ * NH_ * T_ * 2)
static void c_attention_fwd(float* const* o, float* const* in, rt_dtype dt) {
    float scratch[2 * T_ * T_ + B_ * NH_ * T_];
    rt_attention_lowmem_forward(o[0], o[1], scratch, in[0], in[1], in[2], B_, T_, NH_, 1, HD_,
                                1, RT_F32, dt);
}
static void c_attention_bwd(float* const* o, float* const* in, rt_dtype dt) {
    float scratch[2 * T_ * T_ + B_ * NH_ * T_], out[ROPE_N], stats[ATT_STATS];
    rt_attention_lowmem_forward(out, stats, scratch, in[0], in[1], in[2], B_, T_, NH_, 1, HD_, 1,
                                RT_F32, RT_F32);
    rt_attention_lowmem_backward(o[0], o[1], o[2], scratch, in[3], out, in[0], in[1], in[2],
                                 stats, B_, T_, NH_, 1, HD_, 1, RT_F32, dt, RT_ACCUMULATE);
}

// -- cross-entropy backward: in = logits[RN,RC]; rows 1 and 4 ignored
static void c_ce_bwd(float* const* o, float* const* in, rt_dtype dt) {
    int32_t t[RN];
    for (int n = 0; n < RN; n++) t[n] = n % 3 == 1 ? RT_IGNORE_INDEX : (int32_t)(n * 7 % RC);
    rt_cross_entropy_backward(o[0], in[0], t, RN, RC, &(const float){0.75f}, dt, RT_ACCUMULATE);
}

#define LIN_IN 4, {N_ * C_, OC_ * C_, OC_, N_ * OC_}, {-2, -1, -1, -1}, {2, 1, 1, 1}
#define NORM_IN 4, {RN * RC, RC, RC, RN * RC}, {-3, 0.5f, -1, -1}, {3, 1.5f, 1, 1}
#define EW_IN 3, {EN, EN, EN}, {-6, -3, -2}, {6, 3, 2}
#define BC_IN 3, {RN * RC, RC, RN * RC}, {-3, -3, -2}, {3, 3, 2}
#define ROPE_IN 2, {ROPE_N, ROPE_N}, {-2, -2}, {2, 2}
#define CE_IN 1, {RN * RC}, {-4}, {4}
#define ATT_IN 4, {ROPE_N, ATT_KV, ATT_KV, ROPE_N}, {-2, -2, -2, -1}, {2, 2, 2, 1}

static const rcase cases[] = {
    {"linear forward", LIN_IN, 1, {N_ * OC_}, {1}, {"out"}, 0, c_linear_fwd, 0, NULL},
    {"linear forward (no bias)", LIN_IN, 1, {N_ * OC_}, {1}, {"out"}, 0, c_linear_fwd_nobias, 0, NULL},
    {"linear backward", LIN_IN, 3, {N_ * C_, OC_ * C_, OC_}, {1, 0, 0}, {"dinp", "dweight", "dbias"}, 0, c_linear_bwd, 0, NULL},
    {"layernorm forward", NORM_IN, 3, {RN * RC, RN, RN}, {1, 0, 0}, {"out", "mean", "rstd"}, 0, c_layernorm_fwd, 0, NULL},
    {"layernorm backward", NORM_IN, 3, {RN * RC, RC, RC}, {1, 0, 0}, {"dinp", "dweight", "dbias"}, 0, c_layernorm_bwd, 0, NULL},
    {"rmsnorm forward", NORM_IN, 2, {RN * RC, RN}, {1, 0}, {"out", "rstd"}, 0, c_rmsnorm_fwd, 0, NULL},
    {"rmsnorm backward", NORM_IN, 2, {RN * RC, RC}, {1, 0}, {"dinp", "dweight"}, 0, c_rmsnorm_bwd, 0, NULL},
    {"gelu forward", EW_IN, 1, {EN}, {1}, {"out"}, 0, c_gelu_fwd, 0, NULL},
    {"gelu backward", EW_IN, 1, {EN}, {1}, {"dinp"}, 0, c_gelu_bwd, 0, NULL},
    {"relu forward", EW_IN, 1, {EN}, {1}, {"out"}, 0, c_relu_fwd, 1, NULL},
    {"relu backward", EW_IN, 1, {EN}, {1}, {"dinp"}, 0, c_relu_bwd, 0, NULL},
    {"silu forward", EW_IN, 1, {EN}, {1}, {"out"}, 0, c_silu_fwd, 0, NULL},
    {"silu backward", EW_IN, 1, {EN}, {1}, {"dinp"}, 0, c_silu_bwd, 0, NULL},
    {"swiglu forward", EW_IN, 1, {EN}, {1}, {"out"}, 0, c_swiglu_fwd, 0, r_swiglu_fwd},
    {"swiglu backward", EW_IN, 2, {EN, EN}, {1, 1}, {"da", "db"}, 0, c_swiglu_bwd, 0, r_swiglu_bwd},
    {"swiglu backward da == db", EW_IN, 1, {EN}, {1}, {"da=db"}, 0, c_swiglu_bwd_alias, 0, r_swiglu_bwd_alias},
    {"residual forward", EW_IN, 1, {EN}, {1}, {"out"}, 0, c_residual_fwd, 0, NULL},
    {"residual backward", EW_IN, 2, {EN, EN}, {1, 1}, {"da", "db"}, 0, c_residual_bwd, 0, NULL},
    {"residual backward da == db", EW_IN, 1, {EN}, {1}, {"da=db"}, 0, c_residual_bwd_alias, 0, NULL},
    {"mul forward", EW_IN, 1, {EN}, {1}, {"out"}, 0, c_mul_fwd, 0, NULL},
    {"mul backward", EW_IN, 2, {EN, EN}, {1, 1}, {"da", "db"}, 0, c_mul_bwd, 0, NULL},
    {"mul backward da == db", EW_IN, 1, {EN}, {1}, {"da=db"}, 0, c_mul_bwd_alias, 0, NULL},
    {"scale forward", EW_IN, 1, {EN}, {1}, {"out"}, 0, c_scale_fwd, 0, NULL},
    {"scale backward", EW_IN, 1, {EN}, {1}, {"dinp"}, 0, c_scale_bwd, 0, NULL},
    {"broadcast_add forward", BC_IN, 1, {RN * RC}, {1}, {"out"}, 0, c_bcast_fwd, 0, NULL},
    {"broadcast_add backward", BC_IN, 2, {RN * RC, RC}, {1, 0}, {"da", "db"}, 0, c_bcast_bwd, 0, NULL},
    {"dropout forward p=0.3", EW_IN, 1, {EN}, {1}, {"out"}, 0, c_dropout_fwd, 0, NULL},
    {"dropout backward p=0.3", EW_IN, 1, {EN}, {1}, {"dinp"}, 0, c_dropout_bwd, 0, NULL},
    {"dropout forward p=0", EW_IN, 1, {EN}, {1}, {"out"}, 0, c_dropout_fwd_p0, 1, NULL},
    {"dropout backward p=0", EW_IN, 1, {EN}, {1}, {"dinp"}, 0, c_dropout_bwd_p0, 0, NULL},
    {"rope forward", ROPE_IN, 1, {ROPE_N}, {1}, {"out"}, 0, c_rope_fwd, 0, NULL},
    {"rope forward in place", ROPE_IN, 1, {ROPE_N}, {1}, {"out"}, 1, c_rope_fwd_inplace, 0, NULL},
    {"rope backward", ROPE_IN, 1, {ROPE_N}, {1}, {"dinp"}, 0, c_rope_bwd, 0, NULL},
    {"cross_entropy backward", CE_IN, 1, {RN * RC}, {1}, {"dlogits"}, 0, c_ce_bwd, 0, NULL},
    {"attention lowmem forward", ATT_IN, 2, {ROPE_N, ATT_STATS}, {1, 0}, {"out", "stats"}, 0, c_attention_fwd, 0, NULL},
    {"attention lowmem backward", ATT_IN, 3, {ROPE_N, ATT_KV, ATT_KV}, {1, 1, 1}, {"dq", "dk", "dv"}, 0, c_attention_bwd, 0, NULL},
};

// ----------------------------------------------------------------------------
// driver

static const char* dt_name(rt_dtype dt) { return dt == RT_BF16 ? "bf16" : "fp16"; }

static void run_case(const rcase* c, rt_dtype dt) {
    float *in[MAXB] = {0}, *init[MAXB] = {0}, *got[MAXB] = {0}, *want[MAXB] = {0}, *raw[MAXB] = {0};
    for (int i = 0; i < c->nin; i++) {
        in[i] = tk_alloc(c->in_n[i]);
        tk_fill(in[i], c->in_n[i], c->in_lo[i], c->in_hi[i]);
        tk_round_all(in[i], c->in_n[i], dt);
    }
    // signed zeros and the ReLU kink through both paths
    in[0][0] = 0.0f;
    in[0][1] = -0.0f;
    for (int k = 0; k < c->nout; k++) {
        const size_t n = c->out_n[k];
        init[k] = tk_alloc(n);
        if (k == 0 && c->out_is_input)
            memcpy(init[k], in[0], n * sizeof(float));
        else
            tk_fill(init[k], n, -1, 1);
        tk_round_all(init[k], n, dt);  // accumulated-into buffers hold values exact in dt
        got[k] = tk_dup(init[k], n);
        want[k] = tk_dup(init[k], n);
    }
    c->call(got, in, dt);
    if (c->ref)
        c->ref(want, in, dt);
    else
        c->call(want, in, RT_F32);
    for (int k = 0; k < c->nout; k++) {
        raw[k] = tk_dup(want[k], c->out_n[k]);
        if (c->rounded[k]) tk_round_all(want[k], c->out_n[k], dt);
    }
    for (int k = 0; k < c->nout; k++) {
        const size_t n = c->out_n[k];
        size_t diff = 0, changed = 0, inexact = 0;
        for (size_t i = 0; i < n; i++) {
            if (!same_bits(got[k][i], want[k][i])) diff++;
            if (!same_bits(raw[k][i], tk_round(raw[k][i], dt))) {
                if (c->rounded[k]) changed++;
                else inexact++;
            }
        }
        if (c->rounded[k]) {
            CHECK(diff == 0 && (changed > 0 || c->copies),
                  "%s %s %s: %zu values bit-equal to RT_F32 + rounding: %zu differ (%zu changed by "
                  "the rounding)",
                  dt_name(dt), c->name, c->out_name[k], n, diff, changed);
        } else {
            CHECK(diff == 0 && inexact > 0,
                  "%s %s %s: not rounded, %zu values bit-equal to RT_F32: %zu differ (%zu not "
                  "representable in %s)",
                  dt_name(dt), c->name, c->out_name[k], n, diff, inexact, dt_name(dt));
        }
    }
    for (int i = 0; i < MAXB; i++) free(in[i]), free(init[i]), free(got[i]), free(want[i]), free(raw[i]);
}

// fp16 overflow: a value past the largest finite fp16 rounds to inf at the store as in the
// separate pass
static void test_fp16_overflow(void) {
    float a[4] = {60000.0f, -60000.0f, 1.0f, 0.0f}, b[4] = {60000.0f, -60000.0f, 2.0f, -0.0f};
    float got[4], want[4];
    rt_residual_forward(got, a, b, 4, RT_F16);
    rt_residual_forward(want, a, b, 4, RT_F32);
    tk_round_all(want, 4, RT_F16);
    CHECK(memcmp(got, want, sizeof got) == 0 && got[0] > 65504.0f && got[1] < -65504.0f,
          "fp16 residual 60000 + 60000 = %g, -60000 - 60000 = %g (inf, as the separate rounding)",
          got[0], got[1]);
}

int main(void) {
    rt_kernels_init();
    tk_seed(17);
    const size_t ncases = sizeof cases / sizeof cases[0];
    for (size_t i = 0; i < ncases; i++) {
        run_case(&cases[i], RT_BF16);
        run_case(&cases[i], RT_F16);
    }
    test_fp16_overflow();
    printf("test_round: %zu kernel calls x {bf16, fp16}\n", ncases);
    return check_summary();
}
