// The tensor-core flash-attention kernels (runtime/cuda/kernels/flash_attention_tc.cuh: forward,
// dK/dV, dQ, with flash_attention.cuh's D kernel, and the launch logic that picks tiles,
// threads and grids) run on the CPU through tests/cuda/cuda_emu.h (CUDA threads as fibers,
// or pthreads under TSan; warp barriers, mma.sync rebuilt from the PTX ISA's fragment
// layouts) against the CPU attention kernel (runtime/cpu/kernels/attention.c, linked as cpu_rt_*). Needs no GPU;
// what only a GPU run can show (the tensor cores' own summation, device exp2f, speed) is
// left to test_cuda_kernels. Built twice by runtime/cuda.ninja: with AddressSanitizer and
// UBSan (shared-memory overruns, reads of unwritten shared memory through NaN poisoning,
// misaligned float4 loads) and with ThreadSanitizer (races between barriers, a missing
// __syncwarp around the shared-memory tiles included).
//
// For each shape (HD 16 to 128, T not a multiple of the tiles, MHA and GQA, causal and
// not) and each element type:
//   bf16, fp16 (q, k, v, dout rounded to it, as the generated code's compute buffers):
//     forward out against the CPU within the per-element bound of tests/cuda/
//     attention_tc_ref.h (P narrowed) plus the fp32 kernels' tolerance, stats (m, 1/l)
//     within the fp32 tolerance (no 16-bit rounding reaches them);
//     backward from the CPU's out and stats, accumulated onto non-zero dq, dk, dv, within
//     the bound (P, dS narrowed); backward from the kernels' own forward (its out error
//     carried into D); dq, dk, dv each requested alone: the joint call's bits; dt and the
//     assign bits: the unrounded, accumulating call's values rounded, bit for bit
//     (flash_store_check.h); packed 16-bit storage (rt_kernels.h): the forward's out
//     written packed (out16) and D read from packed out and dout (out16_in, dout16) give
//     the fp32-storage calls' bits; the fp32
//     backward (flash_attention.cuh) from the tensor-core forward's out and stats (the
//     stats are interchangeable);
//   float (an emulator-only instantiation, nothing narrowed): forward and backward within
//     the fp32 flash kernels' tolerances (test_flash_emu.cc), which checks tiling,
//     masking, the online softmax and the GQA walk tightly.
// Then attention dropout (the kernels' DROP instantiations) in the float mode against the
// CPU's dropout calls with the same seed and stream, within the fp32 tolerances: each mask
// factor at its element in the forward, dK/dV and dQ kernels (the 16-bit types are checked
// against the CPU by test_cuda_kernels on the emulated library).
// Then other tile configurations than rtc_tc_cfg's (two row tiles of 16 per warp, blocks of
// 1 to 8 warps: bench/attention_sweep.sh's variants) against the default's bits, forward
// and backward, on a few shapes, with dropout and without; every configuration's shared
// memory within 99 KiB.
//
// FLASH_TC_PART picks what one build runs: 1 the configurations the runtime launches
// (rtc_tc_cfg), 2 the others (bench/attention_sweep.sh's tile variants), 3 (the default) both.
// runtime/cuda.ninja builds part 1 for the fast tier of the tests and part 2 for the slow
// one under AddressSanitizer, and both under ThreadSanitizer (slow tier).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda_emu.h"
#include "host_data.h"
#include "flash_attention_tc.cuh"
#include "attention_tc_ref.h"
#include "flash_store_check.h"
// the CPU reference: cpu_rt_*
#include "cpu_rename.h"
#include "rt_kernels.h"
#include "cpu_unrename.h"

// The fp32 flash kernels' tolerances against the CPU kernel (test_flash_emu.cc), as
// |got - want| / max(1, |want|): the fp32 part of every allowance here.
#define TOL_FWD 2e-5
#define TOL_BWD 1e-4

#ifndef FLASH_TC_PART
#define FLASH_TC_PART 3
#endif
#define RUNTIME_CONFIGS (FLASH_TC_PART & 1)
#define OTHER_CONFIGS (FLASH_TC_PART & 2)

struct emu_launcher {
    void operator()(rtc_fa_kernel kernel, dim3 grid, size_t smem, const rtc_fa_args& a) const {
        emu_launch(kernel, grid, RTC_FA_NT, smem, a);
    }
    void operator()(rtc_fa_kernel kernel, dim3 grid, unsigned threads, size_t smem,
                    const rtc_fa_args& a) const {
        emu_launch(kernel, grid, threads, smem, a);
    }
};

// ----------------------------------------------------------------------------
// helpers

enum elem { EL_BF16, EL_F16, EL_F32 };
static const char* elem_name(elem e) {
    return e == EL_BF16 ? "bf16" : e == EL_F16 ? "fp16" : "float (unrounded)";
}

static void round_to(float* x, size_t n, elem e) {
    for (size_t i = 0; i < n; i++) {
        if (e == EL_BF16) x[i] = rt_bf16_to_f32_inl(rt_bf16_from_f32_inl(x[i]));
        if (e == EL_F16) x[i] = rt_f16_to_f32_inl(rt_f16_from_f32_inl(x[i]));
    }
}

// x[0..n) narrowed to e (as attention.cu's rtc_narrow): 16-bit bits, or floats for the
// unrounded mode; NULL for NULL.
static void* narrow_copy(const float* x, size_t n, elem e) {
    if (!x) return NULL;
    if (e == EL_F32) return hcopy(x, n);
    uint16_t* c = (uint16_t*)malloc(n * sizeof(uint16_t) + 1);
    for (size_t i = 0; i < n; i++)
        c[i] = e == EL_BF16 ? rt_bf16_from_f32_inl(x[i]) : rt_f16_from_f32_inl(x[i]);
    return c;
}

// The kernels' 16-bit operand copies of a call's q, k, v (and dout), freed on return.
struct narrowed {
    rtc_fa_args a;
    narrowed(elem e, const rtc_fa_args& x) : a(x) {
        const size_t nq = (size_t)x.B * x.T * x.NH * x.HD, nk = (size_t)x.B * x.T * x.NKV * x.HD;
        a.q16 = narrow_copy(x.q, nq, e), a.k16 = narrow_copy(x.k, nk, e);
        a.v16 = narrow_copy(x.v, nk, e), a.dout16 = narrow_copy(x.dout, nq, e);
    }
    narrowed(const narrowed&) = delete;
    ~narrowed() {
        free((void*)a.q16), free((void*)a.k16), free((void*)a.v16), free((void*)a.dout16);
    }
};

// The kernels of the configurations C64, C128 (rtc_tc_cfg's by default) on x.
template <class C64 = rtc_tc_cfg<64>, class C128 = rtc_tc_cfg<128>>
static void tc_forward(elem e, const rtc_fa_args& x) {
    emu_launcher launch;
    const narrowed n(e, x);
    if (e == EL_BF16) rtc_fa_tc_forward<__nv_bfloat16, C64, C128>(launch, n.a);
    if (e == EL_F16) rtc_fa_tc_forward<__half, C64, C128>(launch, n.a);
    if (e == EL_F32) rtc_fa_tc_forward<float, C64, C128>(launch, n.a);
}

template <class C64 = rtc_tc_cfg<64>, class C128 = rtc_tc_cfg<128>>
static void tc_backward(elem e, const rtc_fa_args& x) {
    emu_launcher launch;
    const narrowed n(e, x);
    if (e == EL_BF16) rtc_fa_tc_backward<__nv_bfloat16, C64, C128>(launch, n.a);
    if (e == EL_F16) rtc_fa_tc_backward<__half, C64, C128>(launch, n.a);
    if (e == EL_F32) rtc_fa_tc_backward<float, C64, C128>(launch, n.a);
}

// Largest |got - want| / max(1, |want|) over every `stride`-th value from `first`.
static double maxdiff(const float* got, const float* want, size_t n, size_t first,
                      size_t stride) {
    double worst = 0.0;
    for (size_t i = first; i < n; i += stride) {
        const double g = got[i], w = want[i];
        const double e = (isnan(g) || isnan(w)) ? INFINITY : fabs(g - w) / fmax(1.0, fabs(w));
        if (e > worst) worst = e;
    }
    return worst;
}

static int same_bits(const float* a, const float* b, size_t n) {
    return memcmp(a, b, n * sizeof(float)) == 0;
}

// One gradient's comparison against its allowance; prints and returns pass/fail.
static bool grad_ok(const char* what, const float* got, const float* want, const double* bound,
                    const double* bound2, size_t n, double* worst_ratio) {
    const attn_tc_cmp_result r = attn_tc_compare(got, want, bound, bound2, n, TOL_BWD);
    printf("    %s: max diff %.3g, max diff/allowance %.3f (allowance up to %.3g)\n", what,
           r.diff, r.ratio, r.allow);
    if (r.ratio > *worst_ratio) *worst_ratio = r.ratio;
    return r.ratio <= 1.0;
}

// Packed 16-bit storage of dt (rt_kernels.h): the forward writing out16 gives the bits of
// its rounded fp32 out, and the backward reading out and dout packed (D's operands) gives
// the bits of the call reading them as floats.
template <class C64, class C128>
static void check_packed(elem e, rt_dtype dt, const rtc_fa_args& fa, const rtc_fa_args& ga,
                         const float* dq0, const float* dk0, const float* dv0, const char* nm) {
    const size_t nq = (size_t)fa.B * fa.T * fa.NH * fa.HD, nk = (size_t)fa.B * fa.T * fa.NKV * fa.HD;
    const size_t ns = (size_t)fa.B * fa.NH * fa.T * 2;
    float *out = hrand(nq, 1.0f, 0.0f), *st = hrand(ns, 1.0f, 0.0f), *st16 = hrand(ns, 1.0f, 0.0f);
    uint16_t* out16 = (uint16_t*)malloc(nq * sizeof(uint16_t));
    memset(out16, 0xAB, nq * sizeof(uint16_t));
    rtc_fa_args f = fa;
    f.dt = dt, f.out = out, f.stats = st;
    tc_forward<C64, C128>(e, f);
    f.out = NULL, f.out16 = out16, f.stats = st16;
    tc_forward<C64, C128>(e, f);
    bool fwd_ok = same_bits(st, st16, ns);
    for (size_t i = 0; i < nq; i++) {
        const float w = rt_bits16_to_f32_inl(out16[i], dt);
        fwd_ok = fwd_ok && memcmp(&w, &out[i], sizeof w) == 0;
    }

    float *dq = hcopy(dq0, nq), *dk = hcopy(dk0, nk), *dv = hcopy(dv0, nk);
    float *pdq = hcopy(dq0, nq), *pdk = hcopy(dk0, nk), *pdv = hcopy(dv0, nk);
    rtc_fa_args b = ga;
    b.dt = dt, b.out_in = out, b.stats_in = st, b.dq = dq, b.dk = dk, b.dv = dv;
    tc_backward<C64, C128>(e, b);
    b.dq = pdq, b.dk = pdk, b.dv = pdv;
    narrowed n(e, b);  // dout16: dout's packed values
    n.a.dout = NULL, n.a.out_in = NULL, n.a.out16_in = out16;
    emu_launcher launch;
    if (e == EL_BF16) rtc_fa_tc_backward<__nv_bfloat16, C64, C128>(launch, n.a);
    else rtc_fa_tc_backward<__half, C64, C128>(launch, n.a);
    const bool bwd_ok = same_bits(dq, pdq, nq) && same_bits(dk, pdk, nk) && same_bits(dv, pdv, nk);
    CHECK(fwd_ok && bwd_ok, "tc %s, dt %s, packed: forward into out16 == the rounded fp32 out and "
          "stats (%s); backward with D from packed out and dout == from floats (%s), bit for bit",
          nm, elem_name(e), fwd_ok ? "equal" : "differ", bwd_ok ? "equal" : "differ");
    free(out), free(st), free(st16), free(out16), free(dq), free(dk), free(dv), free(pdq),
        free(pdk), free(pdv);
}

// Per family of checks: the largest diff/allowance seen (printed at the end).
static double worst_fwd[3], worst_bwd[3], worst_e2e[3], worst_interop[3];
static double worst_f32_fwd, worst_f32_bwd;

// ----------------------------------------------------------------------------
// one shape, one element type, the kernels of configurations C64, C128 (cfg: their name)

template <class C64 = rtc_tc_cfg<64>, class C128 = rtc_tc_cfg<128>>
static void test_shape(int B, int T, int NH, int NKV, int HD, int causal, elem e,
                       const char* cfg = "default tiles") {
    const size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    const size_t ns = cpu_rt_attention_stats_floats(B, NH, T);
    const size_t nsc = cpu_rt_attention_lowmem_scratch_floats(B, NH, T);
    float *q = hrand(nq, 1.5f, 0.0f), *k = hrand(nk, 1.5f, 0.0f), *v = hrand(nk, 1.0f, 0.0f);
    float* dout = hrand(nq, 1.0f, 0.0f);
    round_to(q, nq, e), round_to(k, nk, e), round_to(v, nk, e), round_to(dout, nq, e);
    float *dq0 = hrand(nq, 1.0f, 0.0f), *dk0 = hrand(nk, 1.0f, 0.0f), *dv0 = hrand(nk, 1.0f, 0.0f);
    float *out = hrand(nq, 1.0f, 0.0f), *stats = hrand(ns, 1.0f, 0.0f),
          *scratch = hrand(nsc, 1.0f, 0.0f);
    float *eout = hrand(nq, 1.0f, 0.0f), *estats = hrand(ns, 1.0f, 0.0f),
          *escratch = hrand(nsc, 1.0f, 0.0f);
    char nm[200];
    snprintf(nm, sizeof nm, "%s B=%d T=%d NH=%d NKV=%d HD=%d (%s of HD %d) %s", elem_name(e), B,
             T, NH, NKV, HD, cfg, rtc_fa_tc_hdp(HD), causal ? "causal" : "full");
    const bool exact = e == EL_F32;
    attn_tc_bound bd;
    attn_tc_bound_compute(&bd, q, k, v, dout, B, T, NH, NKV, HD, causal,
                          exact ? 0.0 : attn_tc_u(e == EL_BF16),
                          exact ? 0.0 : attn_tc_eta(e == EL_BF16));
    if (exact) emu_smem_limit = 227 * 1024;  // float tiles are twice as large; never on a GPU
    printf("== %s\n", nm);

    // forward
    cpu_rt_attention_lowmem_forward(out, stats, scratch, q, k, v, B, T, NH, NKV, HD, causal,
                                    RT_F32, RT_F32);
    rtc_fa_args a = rtc_fa_make_args(B, T, NH, NKV, HD, causal, 0.0f, 0, 0);
    a.q = q, a.k = k, a.v = v;
    rtc_fa_args fa = a;
    fa.out = eout;
    fa.stats = estats;
    tc_forward<C64, C128>(e, fa);
    const attn_tc_cmp_result ro = attn_tc_compare(eout, out, bd.out, NULL, nq, TOL_FWD);
    const double e_m = maxdiff(estats, stats, ns, 0, 2), e_inv = maxdiff(estats, stats, ns, 1, 2);
    CHECK(ro.ratio <= 1.0 && e_m <= TOL_FWD && e_inv <= TOL_FWD,
          "tc forward %s: out max diff %.3g, max diff/allowance %.3f (allowance up to %.3g); "
          "stats m %.3g, 1/l %.3g (tol %.3g)",
          nm, ro.diff, ro.ratio, ro.allow, e_m, e_inv, TOL_FWD);
    if (exact) {
        if (ro.ratio > worst_f32_fwd) worst_f32_fwd = ro.ratio;
    } else if (ro.ratio > worst_fwd[e]) {
        worst_fwd[e] = ro.ratio;
    }

    // backward from the CPU's out and stats, all three gradients, onto dq0/dk0/dv0
    float *dq = hcopy(dq0, nq), *dk = hcopy(dk0, nk), *dv = hcopy(dv0, nk);
    cpu_rt_attention_lowmem_backward(dq, dk, dv, scratch, dout, out, q, k, v, stats, B, T, NH,
                                     NKV, HD, causal, RT_F32, RT_F32, RT_ACCUMULATE);
    float *edq = hcopy(dq0, nq), *edk = hcopy(dk0, nk), *edv = hcopy(dv0, nk);
    rtc_fa_args ba = a;
    ba.dout = dout, ba.out_in = out, ba.stats_in = stats, ba.D = escratch;
    ba.dq = edq, ba.dk = edk, ba.dv = edv;
    tc_backward<C64, C128>(e, ba);
    {
        printf("  tc backward from the CPU's out and stats (+=):\n");
        double* w = exact ? &worst_f32_bwd : &worst_bwd[e];
        bool ok = grad_ok("dq", edq, dq, bd.dq, NULL, nq, w);
        ok = grad_ok("dk", edk, dk, bd.dk, NULL, nk, w) && ok;
        ok = grad_ok("dv", edv, dv, bd.dv, NULL, nk, w) && ok;
        CHECK(ok, "tc backward %s from the CPU's out and stats: dq, dk, dv within allowance", nm);
    }
    if (exact) {
        emu_smem_limit = EMU_MAX_SMEM;
        free(edq), free(edk), free(edv), free(dq), free(dk), free(dv);
        free(q), free(k), free(v), free(dout), free(dq0), free(dk0), free(dv0);
        free(out), free(stats), free(scratch), free(eout), free(estats), free(escratch);
        attn_tc_bound_free(&bd);
        return;
    }

    // backward from the tensor-core forward's out and stats (its out error reaches D)
    float *gdq = hcopy(dq0, nq), *gdk = hcopy(dk0, nk), *gdv = hcopy(dv0, nk);
    rtc_fa_args ga = ba;
    ga.out_in = eout, ga.stats_in = estats;
    ga.dq = gdq, ga.dk = gdk, ga.dv = gdv;
    tc_backward<C64, C128>(e, ga);
    {
        printf("  tc backward from the tc forward's out and stats (+=):\n");
        bool ok = grad_ok("dq", gdq, dq, bd.dq, bd.dq_D, nq, &worst_e2e[e]);
        ok = grad_ok("dk", gdk, dk, bd.dk, bd.dk_D, nk, &worst_e2e[e]) && ok;
        ok = grad_ok("dv", gdv, dv, bd.dv, NULL, nk, &worst_e2e[e]) && ok;
        CHECK(ok, "tc forward then tc backward %s: dq, dk, dv within allowance", nm);
    }

    // each gradient alone (the others NULL) gives the joint call's bits
    float *sdq = hcopy(dq0, nq), *sdk = hcopy(dk0, nk), *sdv = hcopy(dv0, nk);
    rtc_fa_args s1 = ga;
    s1.dk = s1.dv = NULL, s1.dq = sdq;
    tc_backward<C64, C128>(e, s1);
    rtc_fa_args s2 = ga;
    s2.dq = s2.dv = NULL, s2.dk = sdk;
    tc_backward<C64, C128>(e, s2);
    rtc_fa_args s3 = ga;
    s3.dq = s3.dk = NULL, s3.dv = sdv;
    tc_backward<C64, C128>(e, s3);
    CHECK(same_bits(sdq, gdq, nq) && same_bits(sdk, gdk, nk) && same_bits(sdv, gdv, nk),
          "tc backward %s: dq, dk, dv each alone == the joint call, bit for bit", nm);
    {
        const rt_dtype dt = e == EL_BF16 ? RT_BF16 : RT_F16;
        auto fwd = [e](const rtc_fa_args& x) { tc_forward<C64, C128>(e, x); };
        auto bwd = [e](const rtc_fa_args& x) { tc_backward<C64, C128>(e, x); };
        char what[240];
        snprintf(what, sizeof what, "tc %s, dt %s", nm, elem_name(e));
        check_round_assign(fwd, bwd, dt, fa, eout, estats, ga, gdq, gdk, gdv, dq0, dk0, dv0, what);
        check_packed<C64, C128>(e, dt, fa, ga, dq0, dk0, dv0, nm);
    }

    // the fp32 backward accepts the tensor-core forward's stats (P exact, D from its out)
    float *fdq = hcopy(dq0, nq), *fdk = hcopy(dk0, nk), *fdv = hcopy(dv0, nk);
    rtc_fa_args fb = ga;
    fb.dq = fdq, fb.dk = fdk, fb.dv = fdv;
    {
        emu_launcher launch;
        rtc_fa_backward(launch, fb);
        printf("  fp32 backward (flash_attention.cuh) from the tc forward's out and stats:\n");
        double* zero = attn_tc_zeros(nk);
        bool ok = grad_ok("dq", fdq, dq, bd.dq_D, NULL, nq, &worst_interop[e]);
        ok = grad_ok("dk", fdk, dk, bd.dk_D, NULL, nk, &worst_interop[e]) && ok;
        ok = grad_ok("dv", fdv, dv, zero, NULL, nk, &worst_interop[e]) && ok;
        free(zero);
        CHECK(ok, "tc forward then fp32 backward %s: dq, dk, dv within allowance (D only)", nm);
    }

    free(q), free(k), free(v), free(dout), free(dq0), free(dk0), free(dv0);
    free(out), free(stats), free(scratch), free(eout), free(estats), free(escratch);
    free(dq), free(dk), free(dv), free(edq), free(edk), free(edv), free(gdq), free(gdk),
        free(gdv);
    free(sdq), free(sdk), free(sdv), free(fdq), free(fdk), free(fdv);
    attn_tc_bound_free(&bd);
}

#if RUNTIME_CONFIGS
// ----------------------------------------------------------------------------
// attention dropout, float mode: forward out and stats, and backward from the CPU's out and
// stats (accumulated), against the CPU drawing the same masks

static void test_dropout(int B, int T, int NH, int NKV, int HD, int causal, float p) {
    const uint64_t seed = 0x5DEECE66Dull, stream = 11;
    const size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    const size_t ns = cpu_rt_attention_stats_floats(B, NH, T);
    const size_t nsc = cpu_rt_attention_lowmem_scratch_floats(B, NH, T);
    float *q = hrand(nq, 1.5f, 0.0f), *k = hrand(nk, 1.5f, 0.0f), *v = hrand(nk, 1.0f, 0.0f);
    float *dout = hrand(nq, 1.0f, 0.0f), *dq0 = hrand(nq, 1.0f, 0.0f);
    float *out = hrand(nq, 1.0f, 0.0f), *stats = hrand(ns, 1.0f, 0.0f);
    float *scratch = hrand(nsc, 1.0f, 0.0f), *escratch = hrand(nsc, 1.0f, 0.0f);
    float *eout = hrand(nq, 1.0f, 0.0f), *estats = hrand(ns, 1.0f, 0.0f);
    char nm[200];
    snprintf(nm, sizeof nm, "%s p=%g B=%d T=%d NH=%d NKV=%d HD=%d (HD %d) %s",
             elem_name(EL_F32), p, B, T, NH, NKV, HD, rtc_fa_tc_hdp(HD),
             causal ? "causal" : "full");
    emu_smem_limit = 227 * 1024;  // float tiles are twice as large; never on a GPU

    cpu_rt_attention_lowmem_dropout_forward(out, stats, scratch, q, k, v, B, T, NH, NKV, HD,
                                            causal, RT_F32, RT_F32, p, seed, stream);
    rtc_fa_args a = rtc_fa_make_args(B, T, NH, NKV, HD, causal, p, seed, stream);
    a.q = q, a.k = k, a.v = v;
    rtc_fa_args fa = a;
    fa.out = eout, fa.stats = estats;
    tc_forward<>(EL_F32, fa);
    const double e_out = maxdiff(eout, out, nq, 0, 1), e_st = maxdiff(estats, stats, ns, 0, 1);
    CHECK(e_out <= TOL_FWD && e_st <= TOL_FWD,
          "tc dropout forward %s: out max diff %.3g, stats %.3g (tol %.3g)", nm, e_out, e_st,
          TOL_FWD);

    float *dq = hcopy(dq0, nq), *dk = hcopy(dq0, nk), *dv = hcopy(dq0, nk);
    float *edq = hcopy(dq0, nq), *edk = hcopy(dq0, nk), *edv = hcopy(dq0, nk);
    cpu_rt_attention_lowmem_dropout_backward(dq, dk, dv, scratch, dout, out, q, k, v, stats, B, T,
                                             NH, NKV, HD, causal, RT_F32, RT_F32, RT_ACCUMULATE,
                                             p, seed, stream);
    rtc_fa_args ba = a;
    ba.dout = dout, ba.out_in = out, ba.stats_in = stats, ba.D = escratch;
    ba.dq = edq, ba.dk = edk, ba.dv = edv;
    tc_backward<>(EL_F32, ba);
    const double e_dq = maxdiff(edq, dq, nq, 0, 1), e_dk = maxdiff(edk, dk, nk, 0, 1),
                 e_dv = maxdiff(edv, dv, nk, 0, 1);
    CHECK(e_dq <= TOL_BWD && e_dk <= TOL_BWD && e_dv <= TOL_BWD,
          "tc dropout backward %s (+=): dq max diff %.3g, dk %.3g, dv %.3g (tol %.3g)", nm, e_dq,
          e_dk, e_dv, TOL_BWD);

    emu_smem_limit = EMU_MAX_SMEM;
    free(q), free(k), free(v), free(dout), free(dq0), free(out), free(stats), free(scratch);
    free(escratch), free(eout), free(estats);
    free(dq), free(dk), free(dv), free(edq), free(edk), free(edv);
}
#endif  // RUNTIME_CONFIGS

#if OTHER_CONFIGS
// ----------------------------------------------------------------------------
// other tile configurations (rtc_tc_tiles: HDP, then per kernel tile rows and columns, row
// tiles of 16 per warp, blocks per SM): bench/attention_sweep.sh's variants, where a warp
// owns 32 rows (FMT, KMT, QMT 2: each B fragment feeds two row tiles' products) in blocks of
// 1 to 8 warps. Every output element sees the same products in the same order as with the
// default configuration (same FBC: the online softmax's steps), so each must give its bits.

typedef rtc_tc_tiles<64, 128, 64, 2, 2, 128, 32, 2, 2, 128, 32, 2, 2> cfg64_mt2;
typedef rtc_tc_tiles<64, 256, 64, 2, 1, 256, 32, 2, 1, 256, 32, 2, 1> cfg64_mt2_big;
typedef rtc_tc_tiles<64, 64, 64, 2, 4, 64, 32, 2, 4, 64, 32, 2, 4> cfg64_mt2_small;
typedef rtc_tc_tiles<128, 64, 64, 2, 3, 64, 32, 2, 2, 64, 32, 2, 2> cfg128_mt2;
typedef rtc_tc_tiles<128, 128, 64, 2, 1, 128, 16, 2, 1, 128, 16, 2, 1> cfg128_mt2_big;
typedef rtc_tc_tiles<128, 32, 64, 2, 2, 32, 32, 2, 2, 32, 32, 2, 2> cfg128_mt2_small;

struct alt_cfg {
    const char* name;
    void (*fwd)(elem, const rtc_fa_args&);
    void (*bwd)(elem, const rtc_fa_args&);
};
static const alt_cfg alt_cfgs[] = {
    {"2 row tiles per warp, 4-warp blocks (HD <= 64; HD 128: 2-warp)",
     tc_forward<cfg64_mt2, cfg128_mt2>, tc_backward<cfg64_mt2, cfg128_mt2>},
    {"2 row tiles per warp, 8-warp blocks (HD 128: 4-warp)",
     tc_forward<cfg64_mt2_big, cfg128_mt2_big>, tc_backward<cfg64_mt2_big, cfg128_mt2_big>},
    {"2 row tiles per warp, 2-warp blocks (HD 128: 1-warp)",
     tc_forward<cfg64_mt2_small, cfg128_mt2_small>,
     tc_backward<cfg64_mt2_small, cfg128_mt2_small>},
};
static const int n_alt = (int)(sizeof alt_cfgs / sizeof alt_cfgs[0]);

// Forward, then backward of all three gradients (accumulated, fp32), of dq and dk, and of
// dv alone (assigned, rounded to E), with the default configuration and with every alt_cfgs
// entry: bit for bit the same out, stats, dq, dk, dv. p > 0: with attention dropout.
static void test_configs(int B, int T, int NH, int NKV, int HD, int causal, elem e,
                         float p = 0.0f) {
    const size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    const size_t ns = (size_t)B * NH * T * 2, nsc = (size_t)B * NH * T;
    float *q = hrand(nq, 1.5f, 0.0f), *k = hrand(nk, 1.5f, 0.0f), *v = hrand(nk, 1.0f, 0.0f);
    float* dout = hrand(nq, 1.0f, 0.0f);
    round_to(q, nq, e), round_to(k, nk, e), round_to(v, nk, e), round_to(dout, nq, e);
    float *dq0 = hrand(nq, 1.0f, 0.0f), *dk0 = hrand(nk, 1.0f, 0.0f), *dv0 = hrand(nk, 1.0f, 0.0f);
    float* scratch = hrand(nsc, 1.0f, 0.0f);
    rtc_fa_args a = rtc_fa_make_args(B, T, NH, NKV, HD, causal, p, 0x5DEECE66Dull, 11);
    a.q = q, a.k = k, a.v = v, a.dout = dout, a.D = scratch;
    const rt_dtype dt = e == EL_BF16 ? RT_BF16 : e == EL_F16 ? RT_F16 : RT_F32;
    if (e == EL_F32) emu_smem_limit = 227 * 1024;  // float tiles are twice as large
    // results [cfg][out, stats, dq, dk, dv, dq and dk, dv alone]; out and stats start
    // random, so an element a configuration leaves unwritten differs
    const size_t len[8] = {nq, ns, nq, nk, nk, nq, nk, nk};
    const float* init[8] = {NULL, NULL, dq0, dk0, dv0, dq0, dk0, dv0};
    float* r[1 + n_alt][8];
    for (int c = 0; c <= n_alt; c++) {
        for (int i = 0; i < 8; i++)
            r[c][i] = init[i] ? hcopy(init[i], len[i]) : hrand(len[i], 1.0f, 0.0f);
        void (*fwd)(elem, const rtc_fa_args&) = c ? alt_cfgs[c - 1].fwd : tc_forward<>;
        void (*bwd)(elem, const rtc_fa_args&) = c ? alt_cfgs[c - 1].bwd : tc_backward<>;
        rtc_fa_args f = a;
        f.out = r[c][0], f.stats = r[c][1];
        fwd(e, f);
        rtc_fa_args g = a;
        g.out_in = r[c][0], g.stats_in = r[c][1];
        g.dq = r[c][2], g.dk = r[c][3], g.dv = r[c][4];
        bwd(e, g);
        for (int i = 0; i < 2; i++) {
            rtc_fa_args s = g;
            s.dq = i == 0 ? r[c][5] : NULL, s.dk = i == 0 ? r[c][6] : NULL;
            s.dv = i == 1 ? r[c][7] : NULL;
            s.assign = RTC_FA_ASSIGN_DQ | RTC_FA_ASSIGN_DK | RTC_FA_ASSIGN_DV, s.dt = dt;
            bwd(e, s);
        }
    }
    emu_smem_limit = EMU_MAX_SMEM;
    for (int c = 1; c <= n_alt; c++) {
        int differ = 0;
        for (int i = 0; i < 8; i++) differ += !same_bits(r[c][i], r[0][i], len[i]);
        CHECK(differ == 0,
              "tc %s B=%d T=%d NH=%d NKV=%d HD=%d %s, dropout p=%g, %s: forward (out, stats), "
              "backward (dq, dk, dv accumulated; dq and dk, dv alone, assigned and rounded) == "
              "the default configuration's, bit for bit (%d of 8 differ)",
              elem_name(e), B, T, NH, NKV, HD, causal ? "causal" : "full", p,
              alt_cfgs[c - 1].name, differ);
    }
    for (int c = 0; c <= n_alt; c++)
        for (int i = 0; i < 8; i++) free(r[c][i]);
    free(q), free(k), free(v), free(dout), free(dq0), free(dk0), free(dv0), free(scratch);
}
#endif  // OTHER_CONFIGS

// ----------------------------------------------------------------------------

struct shape {
    int B, T, NH, NKV, HD, causal;
};

int main(void) {
    rng_state = 0x2545F4914F6CDD1Dull;  // this test's own random stream
    cpu_rt_kernels_init();
#if RUNTIME_CONFIGS
    // B, T, NH, NKV, HD, causal: HD 16..128 (both tile configurations), T below, at and
    // across the tiles (forward 128/64 rows, backward 64/32), MHA and GQA
    static const shape shapes[] = {
        {1, 1, 1, 1, 16, 1},   {2, 37, 4, 2, 16, 1}, {2, 33, 4, 4, 32, 0},
        {1, 70, 2, 1, 32, 1},  {1, 45, 3, 3, 48, 1}, {1, 150, 2, 1, 64, 1},
        {1, 64, 2, 2, 64, 0},  {1, 40, 2, 1, 80, 0}, {1, 97, 2, 1, 128, 1},
        {1, 33, 2, 2, 128, 0},
    };
    const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    for (int i = 0; i < nshapes; i++) {
        const shape& s = shapes[i];
        for (int e = EL_BF16; e <= EL_F32; e++)
            test_shape(s.B, s.T, s.NH, s.NKV, s.HD, s.causal, (elem)e);
    }
    // dropout: both tile configurations, the causal diagonal, partial tiles (odd T: a row's
    // pairs of keys straddle Philox blocks), GQA
    test_dropout(2, 37, 4, 2, 16, 1, 0.1f);
    test_dropout(1, 70, 2, 2, 64, 0, 0.5f);
    test_dropout(1, 33, 3, 1, 48, 0, 0.3f);
    test_dropout(1, 97, 2, 1, 128, 1, 0.5f);
#endif
#if OTHER_CONFIGS
    // the other configurations against the default, bit for bit: HD 16..128, T below one row
    // tile, across the 16-row tiles of a warp, the blocks and (causal) the diagonal, GQA;
    // bf16, and fp16 or float (the same kernels but for the conversions) for the shorter
    static const shape cfg_shapes[] = {
        {2, 45, 4, 2, 32, 1}, {1, 40, 2, 2, 112, 0}, {1, 9, 2, 1, 16, 1},   {1, 150, 2, 1, 64, 1},
        {1, 300, 1, 1, 64, 1}, {1, 83, 3, 3, 64, 0}, {1, 97, 2, 1, 128, 1},
    };
    static const elem cfg_second[] = {EL_F16, EL_F16, EL_F32, EL_BF16, EL_BF16, EL_F16, EL_F32};
#ifdef EMU_FIBERS
    const int ncfg_shapes = (int)(sizeof cfg_shapes / sizeof cfg_shapes[0]);
#else  // ThreadSanitizer (a pthread per CUDA thread, slow): races of the blocks, 2 shapes
    const int ncfg_shapes = 2;
#endif
    for (int i = 0; i < ncfg_shapes; i++) {
        const shape& s = cfg_shapes[i];
        test_configs(s.B, s.T, s.NH, s.NKV, s.HD, s.causal, EL_BF16);
        if (cfg_second[i] != EL_BF16)
            test_configs(s.B, s.T, s.NH, s.NKV, s.HD, s.causal, cfg_second[i]);
    }
    // with dropout: the mask factors drawn where each row tile's accumulators hold them
    test_configs(2, 45, 4, 2, 32, 1, EL_BF16, 0.2f);
    test_configs(1, 97, 2, 1, 128, 1, EL_F16, 0.5f);
#endif

    // every kernel configuration, launched above or not, fits the smallest opt-in limit
    struct smem_check {
        size_t worst = 0;
        int n = 0;
        void operator()(rtc_fa_kernel, size_t smem) {
            if (smem > worst) worst = smem;
            n++;
        }
    } all;
    rtc_fa_tc_each_kernel<__nv_bfloat16>(all);
    rtc_fa_tc_each_kernel<__half>(all);
#if OTHER_CONFIGS
    rtc_fa_tc_each_kernel<__nv_bfloat16, cfg64_mt2, cfg128_mt2>(all);
    rtc_fa_tc_each_kernel<__half, cfg64_mt2, cfg128_mt2>(all);
    rtc_fa_tc_each_kernel<__nv_bfloat16, cfg64_mt2_big, cfg128_mt2_big>(all);
    rtc_fa_tc_each_kernel<__half, cfg64_mt2_big, cfg128_mt2_big>(all);
    rtc_fa_tc_each_kernel<__nv_bfloat16, cfg64_mt2_small, cfg128_mt2_small>(all);
    rtc_fa_tc_each_kernel<__half, cfg64_mt2_small, cfg128_mt2_small>(all);
#endif
    CHECK(all.worst <= EMU_MAX_SMEM,
          "all %d tensor-core flash kernel configurations: largest shared memory %zu bytes "
          "(limit %d)",
          all.n, all.worst, EMU_MAX_SMEM);
    CHECK(emu_limit_errors == 0,
          "every launch within the GPU limits, no divergent warp-collective calls (%ld blocks emulated; "
          "largest shared memory %zu bytes, limit %d)",
          emu_blocks_run, emu_max_smem_seen, EMU_MAX_SMEM);
    printf("largest max diff/allowance per family (<= 1 passes):\n");
    for (int e = EL_BF16; e <= EL_F16; e++)
        printf("  %s: forward %.3f, backward %.3f, forward+backward %.3f, fp32 backward from tc "
               "forward %.3f\n",
               elem_name((elem)e), worst_fwd[e], worst_bwd[e], worst_e2e[e], worst_interop[e]);
    printf("  float (unrounded, fp32 tolerances): forward %.3f, backward %.3f\n", worst_f32_fwd,
           worst_f32_bwd);
    return check_summary();
}
