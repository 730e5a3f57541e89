// Reduction kernel of the threads backend: tiles of fp32 accumulators, one pass per
// source, then one rounding per element into every destination. Compiled with -O3 (see
// runtime/core.ninja) so the fp32/bf16 inner loops vectorise.
#include "reduce.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "../common/dtype_bits.h"

// ---- fp16 widening table ----------------------------------------------------------------

// fp16 -> fp32 through a 256 KiB table: the bit-twiddling version branches on subnormals,
// which keeps the accumulation loop from vectorising.
static float f16_table[65536];
static pthread_once_t f16_once = PTHREAD_ONCE_INIT;

static void f16_table_init(void) {
    for (uint32_t h = 0; h < 65536; h++) f16_table[h] = rt_f16_to_f32_inl((uint16_t)h);
}

// ---- tile helpers -----------------------------------------------------------------------

#define TILE 2048

static void load_tile(float* acc, const void* src, rt_dtype dt, size_t n, int first,
                      int use_scale, float scale) {
    if (dt == RT_F32) {
        const float* s = src;
        if (first && !use_scale) memcpy(acc, s, n * sizeof(float));
        else if (first) for (size_t i = 0; i < n; i++) acc[i] = s[i] * scale;
        else if (!use_scale) for (size_t i = 0; i < n; i++) acc[i] += s[i];
        else for (size_t i = 0; i < n; i++) acc[i] += s[i] * scale;
    } else if (dt == RT_BF16) {
        const uint16_t* s = src;
        if (first && !use_scale) for (size_t i = 0; i < n; i++) acc[i] = rt_bf16_to_f32_inl(s[i]);
        else if (first) for (size_t i = 0; i < n; i++) acc[i] = rt_bf16_to_f32_inl(s[i]) * scale;
        else if (!use_scale) for (size_t i = 0; i < n; i++) acc[i] += rt_bf16_to_f32_inl(s[i]);
        else for (size_t i = 0; i < n; i++) acc[i] += rt_bf16_to_f32_inl(s[i]) * scale;
    } else {
        const uint16_t* s = src;
        if (first && !use_scale) for (size_t i = 0; i < n; i++) acc[i] = f16_table[s[i]];
        else if (first) for (size_t i = 0; i < n; i++) acc[i] = f16_table[s[i]] * scale;
        else if (!use_scale) for (size_t i = 0; i < n; i++) acc[i] += f16_table[s[i]];
        else for (size_t i = 0; i < n; i++) acc[i] += f16_table[s[i]] * scale;
    }
}

// ---- kernel -----------------------------------------------------------------------------

void rt_reduce_sum(void* const* dst, int ndst, const void* const* src, int nsrc, size_t count,
                   rt_dtype dtype, int use_scale, float scale) {
    if (dtype == RT_F16) pthread_once(&f16_once, f16_table_init);
    size_t es = rt_dtype_size(dtype);
    float acc[TILE];
    uint16_t out16[TILE];
    for (size_t base = 0; base < count; base += TILE) {
        size_t n = count - base < TILE ? count - base : TILE;
        for (int s = 0; s < nsrc; s++)
            load_tile(acc, (const char*)src[s] + base * es, dtype, n, s == 0, use_scale, scale);
        const void* rounded = acc;
        if (dtype == RT_BF16) {
            for (size_t i = 0; i < n; i++) out16[i] = rt_bf16_from_f32_inl(acc[i]);
            rounded = out16;
        } else if (dtype == RT_F16) {
            for (size_t i = 0; i < n; i++) out16[i] = rt_f16_from_f32_inl(acc[i]);
            rounded = out16;
        }
        for (int d = 0; d < ndst; d++) memcpy((char*)dst[d] + base * es, rounded, n * es);
    }
}
