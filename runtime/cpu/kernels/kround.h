// Internal to the CPU kernels: rounding of the values a kernel writes to its dt (the
// dtype of the op's activation tensors, rt_kernels.h "Mixed precision"). Round to nearest
// even through the bit-level converters that rt_step_round and the collectives use, so a
// value rounded at a kernel's store has the bits of a separate rounding pass.
#ifndef FSDPGEN_KERNELS_CPU_KROUND_H
#define FSDPGEN_KERNELS_CPU_KROUND_H

#include <stddef.h>

#include "../../common/dtype_bits.h"
#include "kcheck.h"
#include "rt_dtype.h"

// v rounded to dt (RT_F32: v).
static inline float rt_kround(float v, rt_dtype dt) { return rt_round_inl(v, dt); }

// A loop function compiled for the x86-64 baseline, AVX2 and AVX-512, the one for the
// machine chosen at load time (GCC's ifunc clones).
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__) && \
    __GNUC__ >= 12
#define RT_VEC_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define RT_VEC_CLONES
#endif

// The statements given (a loop that rounds to the enclosing function's `dt`) three times
// over: with dt the constant RT_F32, the constant RT_BF16, or as passed. In each constant
// copy the rounding's branch on the dtype folds away, so that its loop vectorises (fp16's
// rounding has a loop of its own). The copies shadow `dt` on purpose.
#define RT_KBY_DT(...)                    \
    do {                                  \
        if (dt == RT_F32) {               \
            const rt_dtype dt = RT_F32;   \
            __VA_ARGS__                   \
        } else if (dt == RT_BF16) {       \
            const rt_dtype dt = RT_BF16;  \
            __VA_ARGS__                   \
        } else {                          \
            __VA_ARGS__                   \
        }                                 \
    } while (0)

// x[0..n) rounded to dt in place: for outputs an external routine (OpenBLAS) wrote.
static inline void rt_kround_buf(float* x, size_t n, rt_dtype dt) {
    if (dt == RT_BF16)
        for (size_t i = 0; i < n; i++) x[i] = rt_bf16_to_f32_inl(rt_bf16_from_f32_inl(x[i]));
    else if (dt == RT_F16)
        for (size_t i = 0; i < n; i++) x[i] = rt_f16_to_f32_inl(rt_f16_from_f32_inl(x[i]));
}

#endif
