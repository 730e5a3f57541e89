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

// x[0..n) rounded to dt in place: for outputs an external routine (OpenBLAS) wrote.
static inline void rt_kround_buf(float* x, size_t n, rt_dtype dt) {
    if (dt == RT_BF16)
        for (size_t i = 0; i < n; i++) x[i] = rt_bf16_to_f32_inl(rt_bf16_from_f32_inl(x[i]));
    else if (dt == RT_F16)
        for (size_t i = 0; i < n; i++) x[i] = rt_f16_to_f32_inl(rt_f16_from_f32_inl(x[i]));
}

#endif
