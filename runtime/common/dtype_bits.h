// Private inline bit-level conversions between fp32 and the 16-bit float formats, shared
// by the scalar API (core/dtype.c), the hot reduction loops (comm/reduce.c) and, compiled
// by nvcc as __host__ __device__ functions, the GPU kernels that must round exactly as the
// host does (comm/cuda_reduce.cu, cuda/step/kernels.cu). The *_sw functions define the
// bits; on the GPU the *_inl ones give the same bits with one cvt instruction where the
// integer sequence takes several (every 16-bit load, store and rounding of the element-wise
// kernels goes through them); tests/cuda/test_dtype_bits.cu compares the two for every
// input on the GPU.
#ifndef RT_DTYPE_BITS_H
#define RT_DTYPE_BITS_H

#include <stdint.h>
#include <string.h>

#include "rt_dtype.h"

#ifdef __CUDACC__
#define RT_BITS_FN static inline __host__ __device__
#else
#define RT_BITS_FN static inline
#endif

// ---- raw bit access ---------------------------------------------------------------------

RT_BITS_FN uint32_t rt_bits_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

RT_BITS_FN float rt_f32_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

RT_BITS_FN int rt_f32_is_nan(float x) { return (rt_bits_f32(x) & 0x7FFFFFFFu) > 0x7F800000u; }

// ---- bf16 -------------------------------------------------------------------------------

RT_BITS_FN uint16_t rt_bf16_from_f32_sw(float x) {
    if (rt_f32_is_nan(x)) return 0x7FC0;  // NaN: canonical quiet NaN
    uint32_t u = rt_bits_f32(x);
    // Round to nearest even: add 0x7FFF plus the lowest kept bit, then truncate. A carry
    // out of the mantissa bumps the exponent, which is exactly right (and gives inf past
    // the largest finite bf16).
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// cvt.rn.bf16.f32 (sm_80 on): round to nearest even, subnormals kept; a NaN takes _sw's
// bits (the instruction's is 0x7FFF).
RT_BITS_FN uint16_t rt_bf16_from_f32_inl(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint16_t h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return rt_f32_is_nan(x) ? rt_bf16_from_f32_sw(x) : h;
#else
    return rt_bf16_from_f32_sw(x);
#endif
}

RT_BITS_FN float rt_bf16_to_f32_inl(uint16_t h) { return rt_f32_bits((uint32_t)h << 16); }

// ---- fp16 -------------------------------------------------------------------------------

RT_BITS_FN uint16_t rt_f16_from_f32_sw(float x) {
    uint32_t u = rt_bits_f32(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);  // NaN
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);  // >= 65520: rounds to inf
    if (a >= 0x38800000u) {
        // Normal fp16 (>= 2^-14): rebias the exponent (127 -> 15) and drop 13 mantissa
        // bits with round-to-nearest-even; a mantissa carry correctly bumps the exponent.
        uint32_t r = a - (112u << 23);
        r += 0x0FFFu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (a <= 0x33000000u) return sign;  // <= 2^-25: half of the smallest subnormal, ties to 0
    // Subnormal fp16: the value in units of 2^-24 is m * 2^(e - 126) with the implicit bit.
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x007FFFFFu) | 0x00800000u;
    uint32_t shift = 126u - e;  // 14..24 for this range
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;  // may carry into the smallest normal
    return (uint16_t)(sign | q);
}

// cvt.rn.f16.f32: round to nearest even, subnormals kept, inf from 65520; a NaN takes
// _sw's bits.
RT_BITS_FN uint16_t rt_f16_from_f32_inl(float x) {
#if defined(__CUDA_ARCH__)
    uint16_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return rt_f32_is_nan(x) ? rt_f16_from_f32_sw(x) : h;
#else
    return rt_f16_from_f32_sw(x);
#endif
}

RT_BITS_FN float rt_f16_to_f32_sw(uint16_t h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t e = ((uint32_t)h >> 10) & 0x1Fu;
    uint32_t m = (uint32_t)h & 0x3FFu;
    if (e == 0x1F) return rt_f32_bits(sign | 0x7F800000u | (m << 13));  // inf / NaN
    if (e != 0) return rt_f32_bits(sign | ((e + 112u) << 23) | (m << 13));
    if (m == 0) return rt_f32_bits(sign);
    // Subnormal: m * 2^-24 is exact in fp32; build it by normalising the mantissa.
    uint32_t shift = 0;
    while (!(m & 0x400u)) {
        m <<= 1;
        shift++;
    }
    return rt_f32_bits(sign | ((113u - shift) << 23) | ((m & 0x3FFu) << 13));
}

// cvt.f32.f16: exact, subnormals too; inf and NaN (payload kept) as _sw gives them.
RT_BITS_FN float rt_f16_to_f32_inl(uint16_t h) {
#if defined(__CUDA_ARCH__)
    // inf, NaN: _sw's bits, spelled out (calling _sw here inlines its subnormal loop into
    // every kernel: activation.cu's PTX grows by half)
    const uint32_t sign = ((uint32_t)h & 0x8000u) << 16, m = (uint32_t)h & 0x3FFu;
    if ((h & 0x7C00u) == 0x7C00u) return rt_f32_bits(sign | 0x7F800000u | (m << 13));
    float x;
    asm("cvt.f32.f16 %0, %1;" : "=f"(x) : "h"(h));
    return x;
#else
    return rt_f16_to_f32_sw(h);
#endif
}

// ---- by dtype ---------------------------------------------------------------------------

// The bits of v rounded to nearest even in dt's 16-bit format (dt RT_BF16 or RT_F16), and
// a 16-bit value of dt widened: the elements of packed 16-bit buffers (rt_kernels.h).
RT_BITS_FN uint16_t rt_bits16_from_f32_inl(float v, rt_dtype dt) {
    return dt == RT_BF16 ? rt_bf16_from_f32_inl(v) : rt_f16_from_f32_inl(v);
}
RT_BITS_FN float rt_bits16_to_f32_inl(uint16_t h, rt_dtype dt) {
    return dt == RT_BF16 ? rt_bf16_to_f32_inl(h) : rt_f16_to_f32_inl(h);
}

// v rounded to nearest even in dt and widened back (RT_F32, or any other dt: v): the
// rounding of every 16-bit value a kernel stores, on the host and on the GPU alike.
RT_BITS_FN float rt_round_inl(float v, rt_dtype dt) {
    if (dt != RT_BF16 && dt != RT_F16) return v;
    return rt_bits16_to_f32_inl(rt_bits16_from_f32_inl(v, dt), dt);
}

#endif
