// Tests of vmath.h's exp and erf (runtime/cpu/kernels): the error of each against libm's
// double exp and erf, in float ulps, over every 97th float and every float near the places
// where the method changes (FSDPGEN_SLOW=1: every float); special values; the same bits
// when compiled for each x86-64 level; and the vectorised activation kernels' bits against
// the same formulas computed one element at a time.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rt_kernels.h"

#include "../../runtime/cpu/kernels/kround.h"
#include "../../runtime/cpu/kernels/vmath.h"

// |got - want| in ulps of the float grid at want (want in double, rounded once from the
// exact value); an infinity counts 0 where want rounds to it, else 1e9.
static double ulps(float got, double want) {
    if (isnan(want)) return isnan(got) ? 0.0 : 1e9;
    if (isinf(got) || isinf(want)) return got == (float)want ? 0.0 : 1e9;
    int e;
    frexp(fabs(want), &e);  // |want| in [2^(e-1), 2^e)
    const double ulp = ldexp(1.0, e - 1 < -126 ? -149 : e - 24);
    return fabs((double)got - want) / ulp;
}

typedef struct {
    const char* name;
    float (*fn)(float);
    double (*ref)(double);
    double worst;
    float at;
} accuracy;

static float vexp(float x) { return rt_vexpf(x); }
static float verf(float x) { return rt_verff(x); }

static void measure(accuracy* a, float x) {
    const double e = ulps(a->fn(x), a->ref((double)x));
    if (e > a->worst) a->worst = e, a->at = x;
}

// Every float of [lo, hi] and of [-hi, -lo] (0 <= lo < hi, finite).
static void window(accuracy* a, float lo, float hi) {
    for (uint32_t u = rt_bits_f32(lo); u <= rt_bits_f32(hi); u++) {
        measure(a, rt_f32_bits(u));
        measure(a, rt_f32_bits(u | 0x80000000u));
    }
}

static void test_accuracy(void) {
#ifdef __SANITIZE_ADDRESS__
    const uint64_t stride = 9973;  // the sanitizer build (-O1, instrumented): fewer floats
#else
    const char* slow = getenv("FSDPGEN_SLOW");
    const uint64_t stride = slow && strcmp(slow, "1") == 0 ? 1 : 97;
#endif
    accuracy fs[2] = {{"rt_vexpf", vexp, exp, 0, 0}, {"rt_verff", verf, erf, 0, 0}};
    for (int k = 0; k < 2; k++) {
        accuracy* a = &fs[k];
        for (uint64_t u = 0; u < 0x100000000ull; u += stride) measure(a, rt_f32_bits((uint32_t)u));
        if (k == 0) {
            window(a, 0.34f, 0.35f);         // |r| up to ln(2)/2: n steps by one
            window(a, 87.3f, 87.4f);         // exp(-x): the smallest normal floats
            window(a, 88.7f, 88.75f);        // exp(x): the largest floats, then inf
            window(a, 103.8f, 104.0f);       // exp(-x): the smallest subnormals, then 0
            window(a, 149.9f, 150.1f);       // the clamp
        } else {
            window(a, 1.49f, 1.51f);         // the two polynomials meet
            window(a, 3.9f, 4.1f);           // the last float below 1, then +-1
        }
        CHECK(a->worst <= 0.5001, "%s within 0.5001 ulp of libm's double %s over 1 in %llu "
              "floats and the windows: worst %.6f ulp at %a", a->name, k ? "erf" : "exp",
              (unsigned long long)stride, a->worst, (double)a->at);
    }
}

static void test_specials(void) {
    const float inf = INFINITY, nan = NAN;
    CHECK(isnan(rt_vexpf(nan)) && isnan(rt_verff(nan)), "exp(NaN) and erf(NaN) are NaN");
    CHECK(rt_vexpf(inf) == inf && rt_vexpf(-inf) == 0.0f && rt_vexpf(1000.0f) == inf &&
              rt_vexpf(-1000.0f) == 0.0f,
          "exp(inf) = exp(1000) = inf, exp(-inf) = exp(-1000) = 0");
    CHECK(rt_vexpf(0.0f) == 1.0f && rt_vexpf(-0.0f) == 1.0f && rt_vexpf(1.0f) == 2.71828183f,
          "exp(+-0) = 1, exp(1) = e");
    CHECK(rt_verff(inf) == 1.0f && rt_verff(-inf) == -1.0f && rt_verff(5.0f) == 1.0f &&
              rt_verff(-5.0f) == -1.0f,
          "erf(+-inf) = erf(+-5) = +-1");
    CHECK(rt_bits_f32(rt_verff(-0.0f)) == 0x80000000u && rt_bits_f32(rt_verff(0.0f)) == 0,
          "erf keeps the sign of zero");
    CHECK(rt_verff(1.0f) == 0.842700793f && rt_verff(-0.5f) == -0.520499878f,
          "erf(1) = 0.842700793, erf(-0.5) = -0.520499878");
}

// Whether a and b hold the same floats: the same bits, or NaN in both (a NaN's sign and
// payload depend on the instructions that made it).
static int same(const float* a, const float* b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (rt_bits_f32(a[i]) != rt_bits_f32(b[i]) && !(isnan(a[i]) && isnan(b[i]))) return 0;
    return 1;
}

// ---- the same bits at every x86-64 level ---------------------------------------------

#define LOOP(name, attr)                                                           \
    attr static void name(float* e, float* f, const float* x, size_t n) {          \
        for (size_t i = 0; i < n; i++) e[i] = rt_vexpf(x[i]), f[i] = rt_verff(x[i]); \
    }
LOOP(loop_default, )
#ifdef __x86_64__
LOOP(loop_v3, __attribute__((target("arch=x86-64-v3"))))
LOOP(loop_v4, __attribute__((target("arch=x86-64-v4"))))
#endif

// n inputs: every sign and exponent, random mantissas, and the specials.
static float* inputs(size_t n) {
    float* x = malloc(n * sizeof *x);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = rt_f32_bits((uint32_t)(s >> 32));
    }
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.5f, 4.0f, 89.0f, -150.0f};
    memcpy(x, specials, sizeof specials);
    return x;
}

static void test_levels(void) {
#ifdef __x86_64__
    const size_t n = 1 << 20;
    float* x = inputs(n);
    float *e0 = malloc(n * 4), *f0 = malloc(n * 4), *e = malloc(n * 4), *f = malloc(n * 4);
    loop_default(e0, f0, x, n);
    __builtin_cpu_init();
    const struct {
        const char* level;
        void (*loop)(float*, float*, const float*, size_t);
    } levels[2] = {{"x86-64-v3 (AVX2)", loop_v3}, {"x86-64-v4 (AVX-512)", loop_v4}};
    for (int k = 0; k < 2; k++) {
        const int has = k == 0 ? __builtin_cpu_supports("x86-64-v3")
                               : __builtin_cpu_supports("x86-64-v4");
        if (!has) {
            printf("SKIP %s: this CPU is not of that level\n", levels[k].level);
            continue;
        }
        levels[k].loop(e, f, x, n);
        CHECK(same(e, e0, n) && same(f, f0, n),
              "exp and erf compiled for %s: the baseline's bits on %zu floats", levels[k].level, n);
    }
    free(x), free(e0), free(f0), free(e), free(f);
#else
    printf("SKIP the x86-64 levels: not an x86-64 build\n");
#endif
}

// ---- the kernels against the formulas one element at a time ------------------------------

static void test_kernels(void) {
    const size_t n = 4099;  // not a multiple of any vector width
    float* x = inputs(n);
    for (size_t i = 9; i < n; i++) x[i] = ldexpf((float)(i % 1999) / 1999.0f - 0.5f, (int)(i % 5));
    float *got = malloc(n * 4), *want = malloc(n * 4), *d = malloc(n * 4);
    for (size_t i = 0; i < n; i++) d[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
    const rt_dtype dts[3] = {RT_F32, RT_BF16, RT_F16};
    for (int k = 0; k < 3; k++) {
        const rt_dtype dt = dts[k];
        const float c = 0.70710678118654752440f;
        rt_gelu_forward(got, x, n, dt);
        for (size_t i = 0; i < n; i++)
            want[i] = rt_kround(0.5f * x[i] * (1.0f + rt_verff(x[i] * c)), dt);
        CHECK(same(got, want, n), "rt_gelu_forward (dtype %d): the scalar formula's bits",
              (int)dt);
        rt_gelu_backward(got, d, x, n, dt, RT_ASSIGN_1);
        for (size_t i = 0; i < n; i++) {
            const float cdf = 0.5f * (1.0f + rt_verff(x[i] * c));
            const float pdf = 0.39894228040143267794f * rt_vexpf(-0.5f * x[i] * x[i]);
            want[i] = rt_kround(0.0f + d[i] * (cdf + x[i] * pdf), dt);
        }
        CHECK(same(got, want, n),
              "rt_gelu_backward (dtype %d, assigned): the scalar formula's bits", (int)dt);
        rt_silu_forward(got, x, n, dt);
        for (size_t i = 0; i < n; i++)
            want[i] = rt_kround(x[i] * (1.0f / (1.0f + rt_vexpf(-x[i]))), dt);
        CHECK(same(got, want, n), "rt_silu_forward (dtype %d): the scalar formula's bits",
              (int)dt);
    }
    free(x), free(got), free(want), free(d);
}

int main(void) {
    test_specials();
    test_levels();
    test_kernels();
    test_accuracy();
    return check_summary();
}
