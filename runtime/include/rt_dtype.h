// Element types of the runtime (fp32, bf16, fp16, int32, int64) and the conversions
// between them: round-to-nearest-even narrowing to bf16/fp16, exact widening back, and a
// bulk converter. The 16-bit formats are stored as raw uint16_t bit patterns so the
// library stays plain C11 (no _Float16 / __bf16 compiler extensions).
#ifndef RT_DTYPE_H
#define RT_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---- types ----------------------------------------------------------------------------

typedef enum rt_dtype {
    RT_F32 = 0,   // IEEE binary32
    RT_BF16 = 1,  // bfloat16: fp32's top 16 bits (8-bit exponent, 7-bit mantissa)
    RT_F16 = 2,   // IEEE binary16 (5-bit exponent, 10-bit mantissa)
    RT_I32 = 3,
    RT_I64 = 4,
    RT_DTYPE_COUNT
} rt_dtype;

// Bytes per element; 0 for a value outside the enum.
size_t rt_dtype_size(rt_dtype dt);
// "fp32", "bf16", "fp16", "int32", "int64"; "invalid" outside the enum.
const char* rt_dtype_name(rt_dtype dt);
// Parses the names above (also "float32", "bfloat16", "float16", "half", "float").
// Returns 0 and sets *out, or -1 for an unknown name.
int rt_dtype_parse(const char* name, rt_dtype* out);
// 1 for fp32/bf16/fp16, 0 otherwise.
int rt_dtype_is_float(rt_dtype dt);
// 1 when dt is one of the enum values.
int rt_dtype_valid(rt_dtype dt);

// ---- scalar conversions -----------------------------------------------------------------

// fp32 -> bf16, round to nearest, ties to even. NaN becomes the canonical quiet NaN 0x7FC0
// (as c10::BFloat16 does); values past bf16's range round to +-inf.
uint16_t rt_f32_to_bf16(float x);
// bf16 -> fp32, exact.
float rt_bf16_to_f32(uint16_t h);
// fp32 -> fp16, round to nearest, ties to even, with fp16 subnormals. |x| >= 65520 (the
// midpoint between 65504 and 2^16) becomes +-inf; NaN becomes sign|0x7E00 (as c10::Half).
uint16_t rt_f32_to_f16(float x);
// fp16 -> fp32, exact (subnormals included).
float rt_f16_to_f32(uint16_t h);

// Loads element i of a buffer of type dt as a float (ints are converted, possibly
// inexactly for |v| > 2^24). Stores a float into element i, rounding as above.
float rt_load_f32(const void* buf, rt_dtype dt, size_t i);
void rt_store_f32(void* buf, rt_dtype dt, size_t i, float v);

// ---- bulk conversion --------------------------------------------------------------------

// Converts n elements from src (type st) into dst (type dt). Same type: memcpy (dst and src
// may then be the same buffer; otherwise they must not overlap). Float -> float rounds to
// nearest even; int -> float rounds the same way; float -> int truncates toward zero and
// saturates at the int range (NaN -> 0), so the result is always defined.
// Returns 0, or -1 for an invalid dtype or a NULL pointer with n > 0.
int rt_convert(void* dst, rt_dtype dt, const void* src, rt_dtype st, size_t n);

#ifdef __cplusplus
}
#endif

#endif
