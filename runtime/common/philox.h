// Private inline Philox4x32-10 (Salmon et al., SC'11) shared by the CPU dropout kernel
// (runtime/cpu/kernels/dropout.c) and the CUDA one (runtime/cuda/kernels/dropout.cu), so both
// backends draw the same masks from one definition: compiled as __host__ __device__ under
// nvcc, plain static inline in C. Element e of a dropout draws from counter block e/4,
// lane e%4, with counter (block lo, block hi, stream lo, stream hi) and key (seed lo, hi).
#ifndef FSDPGEN_COMMON_PHILOX_H
#define FSDPGEN_COMMON_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define RT_PHILOX_FN static inline __host__ __device__
#else
#define RT_PHILOX_FN static inline
#endif

#define RT_PHILOX_M0 0xD2511F53u
#define RT_PHILOX_M1 0xCD9E8D57u
#define RT_PHILOX_W0 0x9E3779B9u  // golden ratio
#define RT_PHILOX_W1 0xBB67AE85u  // sqrt(3) - 1

RT_PHILOX_FN void rt_philox_inl(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                uint32_t k1, uint32_t out[4]) {
    for (int r = 0; r < 10; r++) {
        if (r > 0) {  // key schedule: bumped between rounds
            k0 += RT_PHILOX_W0;
            k1 += RT_PHILOX_W1;
        }
        const uint64_t p0 = (uint64_t)RT_PHILOX_M0 * c0;
        const uint64_t p1 = (uint64_t)RT_PHILOX_M1 * c2;
        const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

// the 4 lanes of counter block `block`
RT_PHILOX_FN void rt_philox_block_inl(uint64_t seed, uint64_t stream, uint64_t block,
                                      uint32_t o[4]) {
    rt_philox_inl((uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream,
                  (uint32_t)(stream >> 32), (uint32_t)seed, (uint32_t)(seed >> 32), o);
}

// Top 24 bits: every value is exactly representable in float and u < 1.
RT_PHILOX_FN float rt_philox_u01_inl(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

// Dropout with probability p: a kept value's scale, 1/(1-p) rounded once to float, and the
// factor of an element whose draw is u: kept iff u >= p (every dropout kernel's rule).
RT_PHILOX_FN float rt_dropout_scale_inl(float p) { return (float)(1.0 / (1.0 - (double)p)); }
RT_PHILOX_FN float rt_dropout_factor_inl(float u, float p, float scale) {
    return u >= p ? scale : 0.0f;
}

// Element `index`'s uniform draw in [0, 1) (rt_dropout_uniform on both backends).
RT_PHILOX_FN float rt_philox_uniform_inl(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t o[4];
    rt_philox_block_inl(seed, stream, index >> 2, o);
    return rt_philox_u01_inl(o[index & 3]);
}

#endif
