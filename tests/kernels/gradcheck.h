// Shared helpers of the kernel tests: a deterministic RNG, buffers, error summaries,
// rounding to a 16-bit dtype, and the gradient check against central finite differences.
//
// Gradient check protocol (every op): the scalar is L = sum(proj * out) with a random
// projection proj (so every output element matters, with its own weight), computed in
// double. The analytic gradient comes from the backward kernel called with dout = proj
// into gradient buffers PRE-FILLED with random values: analytic = after - before. That
// checks the accumulate (+=) convention at the same time as the math. The numeric
// gradient perturbs each input element by +-h (the actually representable step is used)
// and differences L. Element i passes when |a - n| <= atol + rtol * max(|a|, |n|).
#ifndef FSDPGEN_TESTS_KERNELS_GRADCHECK_H
#define FSDPGEN_TESTS_KERNELS_GRADCHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/common/dtype_bits.h"
#include "check.h"
#include "rt_kernels.h"

// ----------------------------------------------------------------------------
// RNG (splitmix64): deterministic inputs, independent of libc

static uint64_t tk_rng_state_ = 0x853c49e6748fea9bULL;

static inline uint64_t tk_next(void) {
    uint64_t z = (tk_rng_state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline void tk_seed(uint64_t s) { tk_rng_state_ = s; }

// uniform in [lo, hi)
static inline float tk_uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)((double)(tk_next() >> 11) * (1.0 / 9007199254740992.0));
}

static inline void tk_fill(float* x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = tk_uniform(lo, hi);
}

// values with |x| in [lo, hi] and random sign: keeps ReLU inputs away from the kink
static inline void tk_fill_away_from_zero(float* x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) {
        float m = tk_uniform(lo, hi);
        x[i] = (tk_next() & 1) ? m : -m;
    }
}

// ----------------------------------------------------------------------------
// rounding to a tensor dtype (RT_BF16, RT_F16; RT_F32 leaves values alone), as the kernels'
// dt and rt_step_round round

static inline float tk_round(float v, rt_dtype dt) {
    if (dt == RT_BF16) return rt_bf16_to_f32_inl(rt_bf16_from_f32_inl(v));
    if (dt == RT_F16) return rt_f16_to_f32_inl(rt_f16_from_f32_inl(v));
    return v;
}

static inline void tk_round_all(float* x, size_t n, rt_dtype dt) {
    for (size_t i = 0; i < n; i++) x[i] = tk_round(x[i], dt);
}

// ----------------------------------------------------------------------------
// buffers (tests allocate; kernels take theirs from the caller, rt_kernels.h)

static inline float* tk_alloc(size_t n) {
    float* p = (float*)calloc(n ? n : 1, sizeof(float));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static inline float* tk_dup(const float* x, size_t n) {
    float* p = tk_alloc(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}

static inline double tk_dot(const float* a, const float* b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

// ----------------------------------------------------------------------------
// comparisons against a double reference

typedef struct {
    double max_abs, max_rel;
} tk_err;

// max |got - want| and max |got - want| / max(|want|, 1) (relative for large values,
// absolute near zero, as CHECK_CLOSE)
static inline tk_err tk_compare(const float* got, const double* want, size_t n) {
    tk_err e = {0, 0};
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        double s = fabs(want[i]) > 1.0 ? fabs(want[i]) : 1.0;
        if (!(d <= e.max_abs)) e.max_abs = d;  // NaN-sticky
        if (!(d / s <= e.max_rel)) e.max_rel = d / s;
    }
    return e;
}

static inline tk_err tk_compare_f(const float* got, const float* want, size_t n) {
    tk_err e = {0, 0};
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        double s = fabs((double)want[i]) > 1.0 ? fabs((double)want[i]) : 1.0;
        if (!(d <= e.max_abs)) e.max_abs = d;
        if (!(d / s <= e.max_rel)) e.max_rel = d / s;
    }
    return e;
}

// CHECK that got matches the double reference within tol (relative-or-absolute).
#define TK_CHECK_REF(name, got, want, n, tol)                                             \
    do {                                                                                  \
        tk_err e_ = tk_compare((got), (want), (n));                                       \
        CHECK(e_.max_rel <= (tol), "%s: %zu values vs reference, max abs diff %.3g, max " \
              "rel diff %.3g (tol %.1g)", (name), (size_t)(n), e_.max_abs, e_.max_rel,    \
              (double)(tol));                                                             \
    } while (0)

#define TK_CHECK_SAME(name, got, want, n, tol)                                             \
    do {                                                                                   \
        tk_err e_ = tk_compare_f((got), (want), (n));                                      \
        CHECK(e_.max_rel <= (tol), "%s: %zu values, max abs diff %.3g, max rel diff %.3g " \
              "(tol %.1g)", (name), (size_t)(n), e_.max_abs, e_.max_rel, (double)(tol));   \
    } while (0)

// ----------------------------------------------------------------------------
// gradient check

typedef double (*tk_loss_fn)(void* ctx);  // runs the forward on the current inputs, returns L

// Largest |analytic - numeric| / max(|a|,|n|) over elements with max(|a|,|n|) >= 1e-2
// (smaller gradients are reported through the absolute error only), tracked over the
// whole run for the final summary.
static double tk_worst_grad_rel_ = 0.0;

static inline void tk_gradcheck(const char* name, float* x, const float* analytic, size_t n,
                                tk_loss_fn f, void* ctx, float h, double rtol, double atol) {
    double max_abs = 0.0, max_rel = 0.0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        const float x0 = x[i];
        const float xp = x0 + h, xm = x0 - h;
        x[i] = xp;
        const double lp = f(ctx);
        x[i] = xm;
        const double lm = f(ctx);
        x[i] = x0;
        const double num = (lp - lm) / ((double)xp - (double)xm);
        const double a = analytic[i];
        const double d = fabs(a - num);
        const double s = fabs(a) > fabs(num) ? fabs(a) : fabs(num);
        if (!(d <= max_abs)) max_abs = d;
        if (s >= 1e-2 && !(d / s <= max_rel)) max_rel = d / s;
        if (!(d <= atol + rtol * s)) bad++;
    }
    if (max_rel > tk_worst_grad_rel_) tk_worst_grad_rel_ = max_rel;
    CHECK(bad == 0,
          "gradcheck %s: %zu elements vs central differences (h=%g), max abs err %.3g, "
          "max rel err %.3g, %zu outside atol %.0e + rtol %.0e",
          name, n, (double)h, max_abs, max_rel, bad, atol, rtol);
}

// Pre-fills a gradient buffer with random values and remembers them, so the analytic
// gradient is (after - before): the backward kernel must accumulate, not overwrite.
typedef struct {
    float* buf;     // the gradient buffer handed to the backward kernel
    float* before;  // its contents before the call
    float* delta;   // after - before, filled by tk_grad_delta
    size_t n;
} tk_grad;

static inline tk_grad tk_grad_new(size_t n) {
    tk_grad g;
    g.n = n;
    g.buf = tk_alloc(n);
    tk_fill(g.buf, n, -1.0f, 1.0f);
    g.before = tk_dup(g.buf, n);
    g.delta = tk_alloc(n);
    return g;
}

static inline const float* tk_grad_delta(tk_grad* g) {
    for (size_t i = 0; i < g->n; i++) g->delta[i] = g->buf[i] - g->before[i];
    return g->delta;
}

static inline void tk_grad_free(tk_grad* g) {
    free(g->buf);
    free(g->before);
    free(g->delta);
}

// Prints the worst relative gradient error of the suite, then the closing line.
static inline int tk_summary(const char* suite) {
    printf("%s: worst gradcheck max rel err %.3g\n", suite, tk_worst_grad_rel_);
    return check_summary();
}

#endif
