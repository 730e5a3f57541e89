// Internal to the CPU kernels: exp and erf of a float without a branch or a call, so that
// the compiler vectorises the loops that use them (libm's expf and erff are calls it
// cannot; erff took 15 ns an element on an x86-64 VM, a quarter of a GPT step on the CPU).
// Each is computed in double and rounded once: within 0.5001 ulp of the exact value over
// every float (tests/kernels/test_vmath.c; libm's erff is 0.9 ulp off at worst), NaN in,
// NaN out. Only IEEE additions, multiplications, comparisons and conversions: with the
// kernels' -ffp-contract=off the same bits at every x86-64 level RT_VEC_CLONES (kround.h)
// compiles for. -fno-trapping-math (runtime/kernels.ninja) lets the compiler turn the
// selects below into blends; it changes no value.
#ifndef FSDPGEN_KERNELS_CPU_VMATH_H
#define FSDPGEN_KERNELS_CPU_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

// Coefficients: vmath_fit.py's output (Chebyshev interpolants within 1e-12, as monomials).
// erf(x) / x in t = x * x, |x| <= 1.5
static const double rt_verf_small[] = {0x1.20dd750429a13p+0, -0x1.812746b00d2dap-2,
    0x1.ce2f219245e63p-4, -0x1.b82ce1419faeep-6, 0x1.565badbb4a9dbp-8, -0x1.c02b3381d664fp-11,
    0x1.f9828ab8cd4bdp-14, -0x1.f3b865c7973b5p-17, 0x1.b37906253f056p-20,
    -0x1.46290cfef8dcdp-23, 0x1.7972e7eca92fep-27, -0x1.ebaa1f2e0cf4cp-32};
// erf(x) in u = (x - 2.75) / 1.25, 1.5 <= x <= 4
static const double rt_verf_large[] = {0x1.fff2cfb0453d6p-1, 0x1.8039007b55da0p-11,
    -0x1.4a30fc0a3c400p-9, 0x1.6154675af3688p-8, -0x1.04a62aae5fd01p-7, 0x1.1394d037efe86p-7,
    -0x1.9e54fd95ed943p-8, 0x1.93c2c17db86bdp-9, -0x1.1626d985450d9p-11, -0x1.15f4b027fca1ap-11,
    0x1.0c7f7141af287p-11, -0x1.857d832286bcbp-13, -0x1.01e46819435e0p-16,
    0x1.aaecb286bca1cp-15, -0x1.62e40af286bccp-16, -0x1.ea0cf0d79436ep-20,
    0x1.1523faf286bcap-18, -0x1.178f6bca1af28p-21, -0x1.17def286bca1bp-22};
// exp(r), |r| <= ln(2) / 2
static const double rt_vexp_poly[] = {0x1.ffffffffffffdp-1, 0x1.ffffffffd38cbp-1,
    0x1.fffffffff7d9fp-2, 0x1.555555a26ca34p-3, 0x1.555555731ebdbp-5, 0x1.111080afbf5cep-7,
    0x1.6c164fcaf6586p-10, 0x1.a1aa7cb2a8e68p-13, 0x1.a1584b29de44ep-16};

#define RT_VPOLY(c, x) rt_vpoly_(c, (int)(sizeof c / sizeof c[0]), x)
static inline double rt_vpoly_(const double* c, int n, double x) {
    double r = c[n - 1];
#pragma GCC unroll 32
    for (int k = n - 2; k >= 0; k--) r = r * x + c[k];
    return r;
}

// exp(x) = 2^n exp(r), r = x - n ln 2. x is clamped to [-150, 89] first: beyond it the float
// result is 0 or inf whatever the clamp, and 2^n stays a normal double.
static inline float rt_vexpf(float x) {
    double d = x < -150.0f ? -150.0 : (double)x;
    d = d > 89.0 ? 89.0 : d;
    const double shifter = 0x1.8p52;  // adding it rounds to an integer, kept in the low bits
    const double t = d * 0x1.71547652b82fep0 + shifter;
    const double r = d - (t - shifter) * 0x1.62e42fefa39efp-1;
    uint64_t bits;
    memcpy(&bits, &t, sizeof bits);
    bits = (bits + 1023) << 52;  // 2^n from n in t's low bits
    double scale;
    memcpy(&scale, &bits, sizeof scale);
    return (float)(RT_VPOLY(rt_vexp_poly, r) * scale);
}

// erf(x): an odd polynomial up to |x| = 1.5, one in |x| up to 4, +-1 beyond (1 - erf(4) is
// under half a float ulp of 1); NaN takes the first (not > 1.5).
static inline float rt_verff(float x) {
    const double d = x, a = fabs(d);
    const double small = d * RT_VPOLY(rt_verf_small, d * d);
    const double u = ((a < 4.0 ? a : 4.0) - 2.75) * 0.8;
    const double large = copysign(a < 4.0 ? RT_VPOLY(rt_verf_large, u) : 1.0, d);
    return (float)(a > 1.5 ? large : small);
}

#endif
