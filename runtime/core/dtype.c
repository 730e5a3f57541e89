// Element types: sizes, names, scalar fp32 <-> bf16/fp16 conversions and the bulk
// converter used for casts (param_dtype all-gather inputs, reduce_dtype gradients).
#include "rt_dtype.h"

#include <math.h>
#include <string.h>

#include "../common/dtype_bits.h"

// ---- names and sizes --------------------------------------------------------------------

int rt_dtype_valid(rt_dtype dt) { return (int)dt >= 0 && dt < RT_DTYPE_COUNT; }

size_t rt_dtype_size(rt_dtype dt) {
    switch (dt) {
        case RT_F32: return 4;
        case RT_BF16: return 2;
        case RT_F16: return 2;
        case RT_I32: return 4;
        case RT_I64: return 8;
        default: return 0;
    }
}

const char* rt_dtype_name(rt_dtype dt) {
    switch (dt) {
        case RT_F32: return "fp32";
        case RT_BF16: return "bf16";
        case RT_F16: return "fp16";
        case RT_I32: return "int32";
        case RT_I64: return "int64";
        default: return "invalid";
    }
}

int rt_dtype_parse(const char* name, rt_dtype* out) {
    static const struct {
        const char* name;
        rt_dtype dt;
    } names[] = {
        {"fp32", RT_F32},  {"float32", RT_F32}, {"float", RT_F32},   {"f32", RT_F32},
        {"bf16", RT_BF16}, {"bfloat16", RT_BF16}, {"fp16", RT_F16},  {"float16", RT_F16},
        {"half", RT_F16},  {"f16", RT_F16},     {"int32", RT_I32},   {"i32", RT_I32},
        {"int64", RT_I64}, {"i64", RT_I64},
    };
    if (!name || !out) return -1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(name, names[i].name) == 0) {
            *out = names[i].dt;
            return 0;
        }
    }
    return -1;
}

int rt_dtype_is_float(rt_dtype dt) { return dt == RT_F32 || dt == RT_BF16 || dt == RT_F16; }

// ---- scalar conversions -----------------------------------------------------------------

uint16_t rt_f32_to_bf16(float x) { return rt_bf16_from_f32_inl(x); }
float rt_bf16_to_f32(uint16_t h) { return rt_bf16_to_f32_inl(h); }
uint16_t rt_f32_to_f16(float x) { return rt_f16_from_f32_inl(x); }
float rt_f16_to_f32(uint16_t h) { return rt_f16_to_f32_inl(h); }

float rt_load_f32(const void* buf, rt_dtype dt, size_t i) {
    switch (dt) {
        case RT_F32: return ((const float*)buf)[i];
        case RT_BF16: return rt_bf16_to_f32_inl(((const uint16_t*)buf)[i]);
        case RT_F16: return rt_f16_to_f32_inl(((const uint16_t*)buf)[i]);
        case RT_I32: return (float)((const int32_t*)buf)[i];
        case RT_I64: return (float)((const int64_t*)buf)[i];
        default: return NAN;
    }
}

// Float -> int with truncation and saturation, so every input has a defined result (a
// plain C cast of an out-of-range float is undefined behaviour).
static int64_t sat_i64(double v, int64_t lo, int64_t hi) {
    if (v != v) return 0;
    if (v <= (double)lo) return lo;
    if (v >= (double)hi) return hi;
    return (int64_t)v;
}

void rt_store_f32(void* buf, rt_dtype dt, size_t i, float v) {
    switch (dt) {
        case RT_F32: ((float*)buf)[i] = v; break;
        case RT_BF16: ((uint16_t*)buf)[i] = rt_bf16_from_f32_inl(v); break;
        case RT_F16: ((uint16_t*)buf)[i] = rt_f16_from_f32_inl(v); break;
        case RT_I32: ((int32_t*)buf)[i] = (int32_t)sat_i64(v, INT32_MIN, INT32_MAX); break;
        case RT_I64: ((int64_t*)buf)[i] = sat_i64(v, INT64_MIN, INT64_MAX); break;
        default: break;
    }
}

// ---- bulk conversion --------------------------------------------------------------------

// Loads element i as a double, exactly for every float type and int32 (the source of
// the float -> int path; int64 -> int64/int32 never comes through here).
static double load_f64(const void* buf, rt_dtype dt, size_t i) {
    switch (dt) {
        case RT_I32: return (double)((const int32_t*)buf)[i];
        case RT_I64: return (double)((const int64_t*)buf)[i];
        default: return (double)rt_load_f32(buf, dt, i);
    }
}

int rt_convert(void* dst, rt_dtype dt, const void* src, rt_dtype st, size_t n) {
    if (!rt_dtype_valid(dt) || !rt_dtype_valid(st)) return -1;
    if (n == 0) return 0;
    if (!dst || !src) return -1;
    if (dt == st) {
        if (dst != src) memcpy(dst, src, n * rt_dtype_size(dt));
        return 0;
    }
    // Fast paths for the float casts FSDP does every step.
    if (st == RT_F32 && dt == RT_BF16) {
        const float* s = src;
        uint16_t* d = dst;
        for (size_t i = 0; i < n; i++) d[i] = rt_bf16_from_f32_inl(s[i]);
        return 0;
    }
    if (st == RT_F32 && dt == RT_F16) {
        const float* s = src;
        uint16_t* d = dst;
        for (size_t i = 0; i < n; i++) d[i] = rt_f16_from_f32_inl(s[i]);
        return 0;
    }
    if (dt == RT_F32 && st == RT_BF16) {  // a loop of its own vectorises (core.ninja: -O3)
        const uint16_t* s = src;
        float* d = dst;
        for (size_t i = 0; i < n; i++) d[i] = rt_bf16_to_f32_inl(s[i]);
        return 0;
    }
    if (dt == RT_F32 && rt_dtype_is_float(st)) {
        float* d = dst;
        for (size_t i = 0; i < n; i++) d[i] = rt_load_f32(src, st, i);
        return 0;
    }
    if (rt_dtype_is_float(dt)) {
        // bf16 <-> fp16 goes through fp32 exactly (both widen exactly), then rounds once.
        // int -> float: (float) of an int32 rounds to nearest even already.
        for (size_t i = 0; i < n; i++) {
            float v = (st == RT_I64) ? (float)((const int64_t*)src)[i] : rt_load_f32(src, st, i);
            rt_store_f32(dst, dt, i, v);
        }
        return 0;
    }
    // Destination is an int type.
    for (size_t i = 0; i < n; i++) {
        if (st == RT_I64 && dt == RT_I32) {
            int64_t v = ((const int64_t*)src)[i];
            ((int32_t*)dst)[i] = v < INT32_MIN ? INT32_MIN : v > INT32_MAX ? INT32_MAX : (int32_t)v;
        } else if (st == RT_I32 && dt == RT_I64) {
            ((int64_t*)dst)[i] = ((const int32_t*)src)[i];
        } else if (dt == RT_I32) {
            ((int32_t*)dst)[i] = (int32_t)sat_i64(load_f64(src, st, i), INT32_MIN, INT32_MAX);
        } else {
            ((int64_t*)dst)[i] = sat_i64(load_f64(src, st, i), INT64_MIN, INT64_MAX);
        }
    }
    return 0;
}
