// Tests of rt_dtype: fp32 -> bf16/fp16 round-to-nearest-even at the edges (ties,
// subnormals, overflow to inf, NaN), exact widening of every 16-bit pattern, an
// independent nearest-value reference on random inputs, and the bulk converter.
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "rt_dtype.h"

// ---- helpers ----------------------------------------------------------------------------

static float f32_of(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static uint32_t rng_state = 12345;
static uint32_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

#define CHECK_BITS(name, got, want) \
    CHECK((got) == (want), "%s: got 0x%04X want 0x%04X", name, (unsigned)(got), (unsigned)(want))

// ---- bf16 -------------------------------------------------------------------------------

static void test_bf16_edges(void) {
    CHECK_BITS("bf16(1.0)", rt_f32_to_bf16(1.0f), 0x3F80);
    CHECK_BITS("bf16(-2.0)", rt_f32_to_bf16(-2.0f), 0xC000);
    CHECK_BITS("bf16(+0)", rt_f32_to_bf16(0.0f), 0x0000);
    CHECK_BITS("bf16(-0)", rt_f32_to_bf16(-0.0f), 0x8000);
    // 1 + 2^-8 is halfway between 1 (even) and 1 + 2^-7: ties to even keeps 1.
    CHECK_BITS("bf16(1+2^-8) tie -> even down", rt_f32_to_bf16(1.0f + 0x1p-8f), 0x3F80);
    // 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: rounds up to even.
    CHECK_BITS("bf16(1+3*2^-8) tie -> even up", rt_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);
    CHECK_BITS("bf16(1+2^-8+2^-20) above tie", rt_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
    CHECK_BITS("bf16(inf)", rt_f32_to_bf16(INFINITY), 0x7F80);
    CHECK_BITS("bf16(-inf)", rt_f32_to_bf16(-INFINITY), 0xFF80);
    CHECK_BITS("bf16(FLT_MAX) overflows to inf", rt_f32_to_bf16(FLT_MAX), 0x7F80);
    CHECK_BITS("bf16(-FLT_MAX) overflows to -inf", rt_f32_to_bf16(-FLT_MAX), 0xFF80);
    CHECK_BITS("bf16(0x7F7F7FFF) below the overflow tie", rt_f32_to_bf16(f32_of(0x7F7F7FFFu)), 0x7F7F);
    CHECK_BITS("bf16(0x7F7F8000) overflow tie -> inf", rt_f32_to_bf16(f32_of(0x7F7F8000u)), 0x7F80);
    CHECK_BITS("bf16(NaN) canonical", rt_f32_to_bf16(NAN), 0x7FC0);
    CHECK_BITS("bf16(-NaN payload) canonical", rt_f32_to_bf16(f32_of(0xFF800001u)), 0x7FC0);
    CHECK_BITS("bf16(f32 min subnormal) -> 0", rt_f32_to_bf16(f32_of(0x00000001u)), 0x0000);
    CHECK_BITS("bf16(0x00008000) subnormal tie -> even 0", rt_f32_to_bf16(f32_of(0x00008000u)), 0x0000);
    CHECK_BITS("bf16(0x00018000) subnormal tie -> even 2", rt_f32_to_bf16(f32_of(0x00018000u)), 0x0002);
    CHECK_BITS("bf16(0x00010000) subnormal exact", rt_f32_to_bf16(f32_of(0x00010000u)), 0x0001);
    CHECK(bits_of(rt_bf16_to_f32(0x0001)) == 0x00010000u, "bf16 0x0001 widens to f32 0x%08X",
          bits_of(rt_bf16_to_f32(0x0001)));
    CHECK(isnan(rt_bf16_to_f32(0x7FC0)), "bf16 0x7FC0 widens to NaN");
    CHECK(rt_bf16_to_f32(0xFF80) == -INFINITY, "bf16 0xFF80 widens to -inf");
}

static void test_bf16_all_patterns(void) {
    int bad = 0, nans = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float x = rt_bf16_to_f32((uint16_t)h);
        if (bits_of(x) != h << 16) bad++;
        if (isnan(x)) {
            nans++;
            if (rt_f32_to_bf16(x) != 0x7FC0) bad++;
        } else if (rt_f32_to_bf16(x) != h) {
            bad++;
        }
    }
    CHECK(bad == 0, "bf16: all 65536 patterns widen exactly and round-trip (%d NaN patterns -> 0x7FC0): %d bad",
          nans, bad);
}

// Independent reference: the nearer of the two bf16 neighbours in double arithmetic.
static uint16_t bf16_reference(float x) {
    if (isnan(x)) return 0x7FC0;
    uint32_t u = bits_of(x), sign = u & 0x80000000u, a = u & 0x7FFFFFFFu;
    uint32_t lo = a & 0xFFFF0000u, hi = lo + 0x10000u;
    if (lo == a) return (uint16_t)((sign | lo) >> 16);
    double dx = fabs((double)x), dlo = (double)f32_of(lo);
    double dhi = hi >= 0x7F800000u ? ldexp(1.0, 128) : (double)f32_of(hi);
    uint32_t pick = (dx - dlo < dhi - dx) ? lo : (dx - dlo > dhi - dx) ? hi : ((lo >> 16) & 1u) ? hi : lo;
    return (uint16_t)((sign | pick) >> 16);
}

static void test_bf16_random(void) {
    int bad = 0, n = 300000;
    for (int i = 0; i < n; i++) {
        float x = f32_of(rng());
        if (rt_f32_to_bf16(x) != bf16_reference(x)) bad++;
    }
    CHECK(bad == 0, "bf16: %d random fp32 bit patterns vs nearest-even reference: %d differ", n, bad);
}

// ---- fp16 -------------------------------------------------------------------------------

static void test_f16_edges(void) {
    CHECK_BITS("f16(1.0)", rt_f32_to_f16(1.0f), 0x3C00);
    CHECK_BITS("f16(-2.0)", rt_f32_to_f16(-2.0f), 0xC000);
    CHECK_BITS("f16(-0)", rt_f32_to_f16(-0.0f), 0x8000);
    CHECK_BITS("f16(65504) max", rt_f32_to_f16(65504.0f), 0x7BFF);
    CHECK_BITS("f16(65519.996) below the overflow tie", rt_f32_to_f16(nextafterf(65520.0f, 0.0f)), 0x7BFF);
    CHECK_BITS("f16(65520) overflow tie -> inf", rt_f32_to_f16(65520.0f), 0x7C00);
    CHECK_BITS("f16(1e6) overflow", rt_f32_to_f16(1e6f), 0x7C00);
    CHECK_BITS("f16(-1e6) overflow", rt_f32_to_f16(-1e6f), 0xFC00);
    CHECK_BITS("f16(inf)", rt_f32_to_f16(INFINITY), 0x7C00);
    CHECK_BITS("f16(NaN)", rt_f32_to_f16(NAN), 0x7E00);
    CHECK_BITS("f16(-NaN) keeps sign", rt_f32_to_f16(-NAN), 0xFE00);
    CHECK_BITS("f16(1+2^-11) tie -> even down", rt_f32_to_f16(1.0f + 0x1p-11f), 0x3C00);
    CHECK_BITS("f16(1+3*2^-11) tie -> even up", rt_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);
    CHECK_BITS("f16(2^-14) min normal", rt_f32_to_f16(0x1p-14f), 0x0400);
    CHECK_BITS("f16(2^-24) min subnormal", rt_f32_to_f16(0x1p-24f), 0x0001);
    CHECK_BITS("f16(2^-25) tie -> 0", rt_f32_to_f16(0x1p-25f), 0x0000);
    CHECK_BITS("f16(-2^-25) tie -> -0", rt_f32_to_f16(-0x1p-25f), 0x8000);
    CHECK_BITS("f16(2^-25 * (1+2^-23)) just above -> min subnormal", rt_f32_to_f16(nextafterf(0x1p-25f, 1.0f)), 0x0001);
    CHECK_BITS("f16(3*2^-25) subnormal tie -> even 2", rt_f32_to_f16(3 * 0x1p-25f), 0x0002);
    CHECK_BITS("f16(5*2^-25) subnormal tie -> even 2", rt_f32_to_f16(5 * 0x1p-25f), 0x0002);
    CHECK_BITS("f16(1023*2^-24) max subnormal", rt_f32_to_f16(1023 * 0x1p-24f), 0x03FF);
    CHECK_BITS("f16(1023.5*2^-24) tie -> min normal", rt_f32_to_f16(1023.5f * 0x1p-24f), 0x0400);
    CHECK_BITS("f16(1e-10) underflow -> 0", rt_f32_to_f16(1e-10f), 0x0000);
    CHECK(rt_f16_to_f32(0x0001) == 0x1p-24f, "f16 0x0001 widens to 2^-24 (got %g)", rt_f16_to_f32(0x0001));
    CHECK(rt_f16_to_f32(0x03FF) == 1023 * 0x1p-24f, "f16 0x03FF widens to 1023*2^-24");
    CHECK(rt_f16_to_f32(0x8000) == 0.0f && signbit(rt_f16_to_f32(0x8000)), "f16 0x8000 widens to -0");
    CHECK(rt_f16_to_f32(0x7C00) == INFINITY, "f16 0x7C00 widens to inf");
    CHECK(isnan(rt_f16_to_f32(0x7E00)), "f16 0x7E00 widens to NaN");
}

static void test_f16_all_patterns(void) {
    int bad = 0, nans = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float x = rt_f16_to_f32((uint16_t)h);
        if (isnan(x)) {
            nans++;
            if (!isnan(rt_f16_to_f32(rt_f32_to_f16(x)))) bad++;
        } else if (rt_f32_to_f16(x) != h) {
            bad++;
        }
    }
    CHECK(bad == 0, "fp16: all 65536 patterns round-trip exactly (%d NaN patterns stay NaN): %d bad",
          nans, bad);
}

// Independent reference: binary search over the sorted positive finite fp16 values.
static uint16_t f16_reference(float x) {
    if (isnan(x)) return signbit(x) ? 0xFE00 : 0x7E00;
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double dx = fabs((double)x);
    if (dx >= 65520.0) return sign | 0x7C00;
    int lo = 0, hi = 0x7BFF;  // largest h with value(h) <= dx
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if ((double)rt_f16_to_f32((uint16_t)mid) <= dx) lo = mid;
        else hi = mid - 1;
    }
    double vlo = rt_f16_to_f32((uint16_t)lo);
    if (vlo == dx) return sign | (uint16_t)lo;
    double vhi = lo == 0x7BFF ? 65536.0 : (double)rt_f16_to_f32((uint16_t)(lo + 1));
    int up = (dx - vlo > vhi - dx) || (dx - vlo == vhi - dx && (lo & 1));
    return sign | (uint16_t)(lo + up);
}

static void test_f16_random(void) {
    int bad = 0, n = 200000;
    for (int i = 0; i < n; i++) {
        // Half the samples near fp16's range (exponents 2^-27 .. 2^17), half anywhere.
        uint32_t u = rng();
        if (i & 1) u = (u & 0x807FFFFFu) | ((100u + rng() % 44u) << 23);
        float x = f32_of(u);
        if (rt_f32_to_f16(x) != f16_reference(x)) bad++;
    }
    CHECK(bad == 0, "fp16: %d random fp32 values vs nearest-even reference: %d differ", n, bad);
}

// ---- bulk conversion and names ----------------------------------------------------------

static void test_convert(void) {
    float src[6] = {1.0f, -2.5f, 1.0f + 0x1p-8f, 65520.0f, 0x1p-25f, NAN};
    uint16_t h[6];
    float back[6];
    CHECK(rt_convert(h, RT_BF16, src, RT_F32, 6) == 0, "rt_convert fp32 -> bf16 returns 0");
    int same = 1;
    for (int i = 0; i < 6; i++) same &= h[i] == rt_f32_to_bf16(src[i]);
    CHECK(same, "bulk fp32 -> bf16 equals the scalar conversion on 6 edge values");
    CHECK(rt_convert(h, RT_F16, src, RT_F32, 6) == 0, "rt_convert fp32 -> fp16 returns 0");
    same = 1;
    for (int i = 0; i < 6; i++) same &= h[i] == rt_f32_to_f16(src[i]);
    CHECK(same, "bulk fp32 -> fp16 equals the scalar conversion on 6 edge values");
    rt_convert(back, RT_F32, h, RT_F16, 6);
    CHECK(back[0] == 1.0f && back[1] == -2.5f && back[3] == INFINITY && back[4] == 0.0f && isnan(back[5]),
          "bulk fp16 -> fp32: 1, -2.5, inf, 0, NaN (got %g %g %g %g %g)", back[0], back[1], back[3],
          back[4], back[5]);
    // bf16 -> fp16 goes through fp32 exactly and rounds once.
    uint16_t b = rt_f32_to_bf16(3.140625f), f;
    rt_convert(&f, RT_F16, &b, RT_BF16, 1);
    CHECK(f == rt_f32_to_f16(3.140625f), "bf16 -> fp16 of 3.140625: 0x%04X", f);

    float fl[5] = {3.9f, -3.9f, 3e9f, -3e9f, NAN};
    int32_t i32[5];
    rt_convert(i32, RT_I32, fl, RT_F32, 5);
    CHECK(i32[0] == 3 && i32[1] == -3 && i32[2] == INT32_MAX && i32[3] == INT32_MIN && i32[4] == 0,
          "fp32 -> int32 truncates and saturates: %d %d %d %d %d", i32[0], i32[1], i32[2], i32[3], i32[4]);
    int64_t i64[3] = {(int64_t)1 << 40, -((int64_t)1 << 40), 7};
    rt_convert(i32, RT_I32, i64, RT_I64, 3);
    CHECK(i32[0] == INT32_MAX && i32[1] == INT32_MIN && i32[2] == 7, "int64 -> int32 saturates: %d %d %d",
          i32[0], i32[1], i32[2]);
    int32_t big = 16777217;  // 2^24 + 1 rounds to even 2^24 in fp32
    float fb;
    rt_convert(&fb, RT_F32, &big, RT_I32, 1);
    CHECK(fb == 16777216.0f, "int32 2^24+1 -> fp32 rounds to nearest even: %.1f", fb);
    int64_t back64[3];
    rt_convert(back64, RT_I64, i32, RT_I32, 3);
    CHECK(back64[2] == 7 && back64[0] == INT32_MAX, "int32 -> int64 widens exactly");
    float copy[2] = {0, 0}, orig[2] = {1.5f, -7.0f};
    rt_convert(copy, RT_F32, orig, RT_F32, 2);
    CHECK(copy[0] == 1.5f && copy[1] == -7.0f, "same dtype copies");
    CHECK(rt_convert(copy, (rt_dtype)99, orig, RT_F32, 2) == -1, "invalid dtype is rejected");
    CHECK(rt_convert(NULL, RT_F32, orig, RT_F32, 2) == -1, "NULL destination is rejected");
    CHECK(rt_convert(NULL, RT_F32, NULL, RT_F32, 0) == 0, "zero elements with NULL is fine");
}

static void test_names(void) {
    CHECK(rt_dtype_size(RT_F32) == 4 && rt_dtype_size(RT_BF16) == 2 && rt_dtype_size(RT_F16) == 2 &&
              rt_dtype_size(RT_I32) == 4 && rt_dtype_size(RT_I64) == 8,
          "sizes fp32 4, bf16 2, fp16 2, int32 4, int64 8");
    rt_dtype dt;
    CHECK(rt_dtype_parse("bf16", &dt) == 0 && dt == RT_BF16, "parse bf16");
    CHECK(rt_dtype_parse("float16", &dt) == 0 && dt == RT_F16, "parse float16");
    CHECK(rt_dtype_parse("fp64", &dt) == -1, "parse fp64 is rejected");
    CHECK(strcmp(rt_dtype_name(RT_F16), "fp16") == 0, "name of fp16");
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);  // keep PASS lines and stderr messages in order
    test_bf16_edges();
    test_bf16_all_patterns();
    test_bf16_random();
    test_f16_edges();
    test_f16_all_patterns();
    test_f16_random();
    test_convert();
    test_names();
    return check_summary();
}
