// Host-only test of runtime/cuda/kernels/optim_math.cuh, the optimizer and clipping math that every
// CUDA optimizer kernel runs (rt_sgd_step, rt_adam_step, rt_adamw_step, the rt_cuda_*_dev
// steps, clipping). The __host__ __device__ functions are compiled here for the host and
// compared with the CPU optimizers (runtime/cpu/optim, linked as cpu_rt_*), so the shared
// math is checked on every machine, GPU or not:
//   * the per-step Adam scalars (from the double-double integer power) against adam.c's
//     glibc pow, for every step 1..STEPS of several betas: the fp32 scalars must be equal;
//     the count of steps whose double 1 - beta^step differs in the last bit is printed;
//   * SGD, Adam and AdamW element updates over three steps against the CPU steps, bit for
//     bit; the clipping coefficient against rt_clip_coef.
// The device compile of the same functions is checked against the CPU by
// test_cuda_kernels where a GPU is present.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
// the CPU reference: cpu_rt_*
#include "cpu_rename.h"
#include "rt_optim.h"
#include "cpu_unrename.h"
// the shared CUDA math, compiled for the host
#include "optim_math.cuh"

#define STEPS 1000000

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static float frand(void) {  // uniform in [-1, 1)
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static float* hrand(size_t n, float scale) {
    float* h = (float*)malloc(n * sizeof(float));
    if (!h) abort();
    for (size_t i = 0; i < n; i++) h[i] = frand() * scale;
    return h;
}

static float* hcopy(const float* src, size_t n) {
    float* h = (float*)malloc(n * sizeof(float));
    if (!h) abort();
    memcpy(h, src, n * sizeof(float));
    return h;
}

// ----------------------------------------------------------------------------
// integer power and per-step scalars

static void test_pow_int(void) {
    int exact = rtc_pow_int(0.5, 10) == 1.0 / 1024.0 && rtc_pow_int(3.0, 0) == 1.0 &&
                rtc_pow_int(2.0, 62) == 4611686018427387904.0 && rtc_pow_int(0.0, 5) == 0.0 &&
                rtc_pow_int(1.0, 1000000007) == 1.0 && rtc_pow_int(0.9, 1) == 0.9;
    CHECK(exact, "rtc_pow_int: exact powers (0.5^10, 3^0, 2^62, 0^5, 1^1e9, 0.9^1)");
}

static void test_adam_scalars(double beta1, double beta2) {
    const double lr = 1e-3;
    const rtc_adam_hyper h = {lr, beta1, beta2, 1e-8, 0.0, 0.0};
    long dbl_diff = 0, flt_diff = 0;
    int64_t first_bad = 0;
    for (int64_t step = 1; step <= STEPS; step++) {
        const rtc_adam_scalars s = rtc_adam_scalars_at(h, step);
        // runtime/cpu/optim/adam.c's scalars
        const double bc1 = 1.0 - pow(beta1, (double)step);
        const double bc2 = 1.0 - pow(beta2, (double)step);
        const float neg_step_size = (float)(-(lr / bc1));
        const float bc2_sqrt = (float)sqrt(bc2);
        if (bc1 != 1.0 - rtc_pow_int(beta1, step) || bc2 != 1.0 - rtc_pow_int(beta2, step))
            dbl_diff++;
        if (s.neg_step_size != neg_step_size || s.bc2_sqrt != bc2_sqrt) {
            if (!flt_diff) first_bad = step;
            flt_diff++;
        }
    }
    CHECK(flt_diff == 0,
          "adam step scalars (betas %g, %g), steps 1..%d: fp32 step size and sqrt(bc2) equal "
          "adam.c's in every step (%ld fp32 differences, first at step %lld; the double "
          "1 - beta^step differs from glibc pow's in the last bit in %ld steps)",
          beta1, beta2, STEPS, flt_diff, (long long)first_bad, dbl_diff);
}

// ----------------------------------------------------------------------------
// element updates over whole buffers, three steps, against the CPU optimizers

static int same_bits(const float* a, const float* b, size_t n) {
    return memcmp(a, b, n * sizeof(float)) == 0;
}

static void test_updates(void) {
    const size_t n = 10007;
    float* g[3] = {hrand(n, 1.0f), hrand(n, 0.1f), hrand(n, 3.0f)};
    static const char* names[5] = {"sgd", "sgd momentum+dampening+wd", "sgd nesterov+wd",
                                   "adam wd=0.01", "adamw"};
    for (int kind = 0; kind < 5; kind++) {
        float *p = hrand(n, 1.0f), *m = (float*)calloc(n, sizeof(float)),
              *v = (float*)calloc(n, sizeof(float));
        float *p2 = hcopy(p, n), *m2 = hcopy(m, n), *v2 = hcopy(v, n);
        for (int64_t step = 1; step <= 3; step++) {
            const float* gs = g[step - 1];
            if (kind < 3) {
                static const double lr[3] = {0.1, 0.1, 0.05}, mom[3] = {0.0, 0.9, 0.9},
                                    damp[3] = {0.0, 0.1, 0.0}, wd[3] = {0.0, 0.01, 0.01};
                const int nest = kind == 2;
                cpu_rt_sgd_step(p, gs, kind ? m : NULL, n, step, lr[kind], mom[kind], damp[kind],
                                wd[kind], nest);
                const rtc_sgd_scalars s =
                    rtc_sgd_scalars_of(lr[kind], mom[kind], damp[kind], wd[kind], nest);
                for (size_t i = 0; i < n; i++)
                    p2[i] = rtc_sgd_elem(s, step <= 1, p2[i], gs[i], m2 + i);
            } else {
                const int adamw = kind == 4;
                const double beta2 = adamw ? 0.95 : 0.999, wd = adamw ? 0.1 : 0.01;
                if (adamw)
                    cpu_rt_adamw_step(p, gs, m, v, n, step, 1e-2, 0.9, beta2, 1e-8, wd);
                else
                    cpu_rt_adam_step(p, gs, m, v, n, step, 1e-2, 0.9, beta2, 1e-8, wd);
                const rtc_adam_hyper h = {1e-2, 0.9, beta2, 1e-8, adamw ? 0.0 : wd,
                                          adamw ? wd : 0.0};
                const rtc_adam_scalars s = rtc_adam_scalars_at(h, step);
                for (size_t i = 0; i < n; i++)
                    p2[i] = rtc_adam_elem(s, p2[i], gs[i], m2 + i, v2 + i);
            }
        }
        CHECK(same_bits(p, p2, n) && same_bits(m, m2, n) && same_bits(v, v2, n),
              "%s: shared element math == CPU step after 3 steps (n=%zu, params and state bit "
              "for bit)",
              names[kind], n);
        free(p), free(m), free(v), free(p2), free(m2), free(v2);
    }
    for (int i = 0; i < 3; i++) free(g[i]);
}

static void test_clip_coef(void) {
    int bad = 0, count = 0;
    for (double norm = 0.0; norm < 20.0; norm += 0.01234567, count++)
        for (double mx = 0.25; mx <= 4.0; mx *= 2.0)
            bad += rtc_clip_coef(norm, mx) != cpu_rt_clip_coef(norm, mx);
    const int nan_ok = isnan(rtc_clip_coef(NAN, 1.0)) && isnan(cpu_rt_clip_coef(NAN, 1.0));
    CHECK(bad == 0 && nan_ok,
          "clip coefficient == rt_clip_coef for %d norms x 5 max_norms (%d differences), NaN "
          "norm propagates",
          count, bad);
}

// ----------------------------------------------------------------------------

int main(void) {
    test_pow_int();
    test_adam_scalars(0.9, 0.999);
    test_adam_scalars(0.9, 0.95);
    test_adam_scalars(0.8, 0.9999);
    test_adam_scalars(0.99, 0.98);
    test_updates();
    test_clip_coef();
    return check_summary();
}
