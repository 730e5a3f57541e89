// Shared by the flash-attention emulator tests (test_flash_emu.cc, test_flash_tc_emu.cc):
// the one store of every output element (rtc_fa_args.dt, .assign). Rounding and assigning
// happen after all of a call's arithmetic, so each must give the values of the unrounded,
// accumulating call, then rounded to dt: bit for bit, whatever the kernels' accuracy.
#ifndef FSDPGEN_TESTS_FLASH_STORE_CHECK_H
#define FSDPGEN_TESTS_FLASH_STORE_CHECK_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/common/dtype_bits.h"
#include "check.h"
#include "host_data.h"

static float* fsc_nan_filled(size_t n) {
    float* x = (float*)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}

// x rounded to dt by the host's converters (rt_step_round's)
static float* fsc_rounded_copy(const float* x, size_t n, rt_dtype dt) {
    float* y = hcopy(x, n);
    for (size_t i = 0; i < n; i++) y[i] = rt_round_inl(y[i], dt);
    return y;
}

static bool fsc_same(const float* a, const float* b, size_t n) {
    return memcmp(a, b, n * sizeof(float)) == 0;
}

// fwd(args) / bwd(args) launch the kernels under test. fa, eout, estats: a forward call
// (dt RT_F32) and what it wrote; ga, gdq, gdk, gdv: a backward call (dt RT_F32, adding onto
// dq0, dk0, dv0) and what it wrote. Checks the forward with dt (out rounded, stats as
// before) and the backward with dt: dq added to and dk, dv assigned over NaN, then dq
// assigned and dk, dv added to (assigned: the call onto zeros, rounded).
template <class Fwd, class Bwd>
static void check_round_assign(Fwd fwd, Bwd bwd, rt_dtype dt, const rtc_fa_args& fa,
                               const float* eout, const float* estats, const rtc_fa_args& ga,
                               const float* gdq, const float* gdk, const float* gdv,
                               const float* dq0, const float* dk0, const float* dv0,
                               const char* what) {
    const size_t nq = (size_t)ga.B * ga.T * ga.NH * ga.HD;
    const size_t nk = (size_t)ga.B * ga.T * ga.NKV * ga.HD;
    const size_t ns = (size_t)ga.B * ga.NH * ga.T * 2;
    rtc_fa_args rf = fa;
    rf.out = fsc_nan_filled(nq), rf.stats = fsc_nan_filled(ns), rf.dt = dt;
    fwd(rf);
    float* want_out = fsc_rounded_copy(eout, nq, dt);
    CHECK(fsc_same(rf.out, want_out, nq) && fsc_same(rf.stats, estats, ns),
          "forward %s: out == the fp32 store's rounded, stats unchanged, bit for bit", what);

    rtc_fa_args z = ga;  // onto zeros, unrounded
    z.dq = (float*)calloc(nq, sizeof(float)), z.dk = (float*)calloc(nk, sizeof(float));
    z.dv = (float*)calloc(nk, sizeof(float));
    bwd(z);
    float *zq = fsc_rounded_copy(z.dq, nq, dt), *zk = fsc_rounded_copy(z.dk, nk, dt),
          *zv = fsc_rounded_copy(z.dv, nk, dt);
    float *aq = fsc_rounded_copy(gdq, nq, dt), *ak = fsc_rounded_copy(gdk, nk, dt),
          *av = fsc_rounded_copy(gdv, nk, dt);
    rtc_fa_args r1 = ga;
    r1.dt = dt, r1.assign = RTC_FA_ASSIGN_DK | RTC_FA_ASSIGN_DV;
    r1.dq = hcopy(dq0, nq), r1.dk = fsc_nan_filled(nk), r1.dv = fsc_nan_filled(nk);
    bwd(r1);
    rtc_fa_args r2 = ga;
    r2.dt = dt, r2.assign = RTC_FA_ASSIGN_DQ;
    r2.dq = fsc_nan_filled(nq), r2.dk = hcopy(dk0, nk), r2.dv = hcopy(dv0, nk);
    bwd(r2);
    CHECK(fsc_same(r1.dq, aq, nq) && fsc_same(r1.dk, zk, nk) && fsc_same(r1.dv, zv, nk) &&
              fsc_same(r2.dq, zq, nq) && fsc_same(r2.dk, ak, nk) && fsc_same(r2.dv, av, nk),
          "backward %s: dq, dk, dv each added to (== the fp32 store's, rounded) and assigned "
          "over NaN (== the fp32 store onto zeros, rounded), bit for bit", what);
    free(rf.out), free(rf.stats), free(want_out), free(z.dq), free(z.dk), free(z.dv);
    free(zq), free(zk), free(zv), free(aq), free(ak), free(av);
    free(r1.dq), free(r1.dk), free(r1.dv), free(r2.dq), free(r2.dk), free(r2.dv);
}

#endif
