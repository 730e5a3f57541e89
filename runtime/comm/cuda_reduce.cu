// Reduction kernel of the cuda_local backend (see cuda_reduce.h): one thread per element
// (grid-stride), fp32 accumulation in source order, one rounding into every destination.
// The pointer lists are a __grid_constant__ kernel parameter (no per-collective copy to
// device memory, nothing to keep alive after the launch). Built with -fmad=false, and with
// -fno-threadsafe-statics -fno-exceptions so the object needs no libstdc++ (users link
// -lcudart only): the launch goes through cudaLaunchKernel, never through the <<<>>> stub
// whose lazily initialised static those flags leave unguarded.
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_reduce.h"

// ---- bit-level conversions (the device twins of runtime/core/dtype_bits.h) ---------------

__device__ __forceinline__ uint16_t bf16_from_f32(float x) {
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;  // NaN: canonical quiet NaN
    u += 0x7FFFu + ((u >> 16) & 1u);                      // round to nearest even
    return (uint16_t)(u >> 16);
}

__device__ __forceinline__ float bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

__device__ __forceinline__ uint16_t f16_from_f32(float x) {
    uint32_t u = __float_as_uint(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);  // NaN
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);  // >= 65520: rounds to inf
    if (a >= 0x38800000u) {                                     // normal fp16
        uint32_t r = a - (112u << 23);
        r += 0x0FFFu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (a <= 0x33000000u) return sign;  // <= 2^-25: ties to 0
    uint32_t e = a >> 23;               // subnormal fp16, in units of 2^-24
    uint32_t m = (a & 0x007FFFFFu) | 0x00800000u;
    uint32_t shift = 126u - e;
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

__device__ __forceinline__ float f16_to_f32(uint16_t h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t e = ((uint32_t)h >> 10) & 0x1Fu;
    uint32_t m = (uint32_t)h & 0x3FFu;
    if (e == 0x1F) return __uint_as_float(sign | 0x7F800000u | (m << 13));  // inf / NaN
    if (e != 0) return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
    if (m == 0) return __uint_as_float(sign);
    uint32_t shift = 0;  // subnormal: normalise the mantissa
    while (!(m & 0x400u)) {
        m <<= 1;
        shift++;
    }
    return __uint_as_float(sign | ((113u - shift) << 23) | ((m & 0x3FFu) << 13));
}

// ---- kernel -----------------------------------------------------------------------------

struct reduce_args {
    const void* src[RT_CUDA_REDUCE_MAX];
    void* dst[RT_CUDA_REDUCE_MAX];
    int nsrc, ndst, use_scale;
    float scale;
    size_t count;
};

template <int DT>
__device__ __forceinline__ float load(const void* p, size_t i) {
    if (DT == RT_F32) return ((const float*)p)[i];
    if (DT == RT_BF16) return bf16_to_f32(((const uint16_t*)p)[i]);
    return f16_to_f32(((const uint16_t*)p)[i]);
}

template <int DT>
__global__ void reduce_kernel(const __grid_constant__ reduce_args a) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.count; i += stride) {
        // Same expression order as reduce.c's load_tile: first = v or v*scale, then +=.
        float acc = load<DT>(a.src[0], i);
        if (a.use_scale) acc = __fmul_rn(acc, a.scale);
        for (int s = 1; s < a.nsrc; s++) {
            float v = load<DT>(a.src[s], i);
            if (a.use_scale) v = __fmul_rn(v, a.scale);
            acc = __fadd_rn(acc, v);
        }
        if (DT == RT_F32) {
            for (int d = 0; d < a.ndst; d++) ((float*)a.dst[d])[i] = acc;
        } else {
            uint16_t r = DT == RT_BF16 ? bf16_from_f32(acc) : f16_from_f32(acc);
            for (int d = 0; d < a.ndst; d++) ((uint16_t*)a.dst[d])[i] = r;
        }
    }
}

// ---- launcher ---------------------------------------------------------------------------

extern "C" int rt_cuda_reduce_sum(void* const* dst, int ndst, const void* const* src, int nsrc,
                                  size_t count, rt_dtype dtype, int use_scale, float scale,
                                  void* stream) {
    if (nsrc < 1 || ndst < 1 || nsrc > RT_CUDA_REDUCE_MAX || ndst > RT_CUDA_REDUCE_MAX ||
        (dtype != RT_F32 && dtype != RT_BF16 && dtype != RT_F16))
        return (int)cudaErrorInvalidValue;
    if (count == 0) return 0;
    reduce_args a;
    for (int s = 0; s < nsrc; s++) a.src[s] = src[s];
    for (int d = 0; d < ndst; d++) a.dst[d] = dst[d];
    a.nsrc = nsrc;
    a.ndst = ndst;
    a.use_scale = use_scale;
    a.scale = scale;
    a.count = count;
    const int threads = 256;
    size_t want = (count + threads - 1) / threads;
    unsigned blocks = want < 8192 ? (unsigned)want : 8192u;  // grid-stride beyond
    const void* fn = dtype == RT_F32    ? (const void*)reduce_kernel<RT_F32>
                     : dtype == RT_BF16 ? (const void*)reduce_kernel<RT_BF16>
                                        : (const void*)reduce_kernel<RT_F16>;
    void* args[1] = {&a};
    return (int)cudaLaunchKernel(fn, dim3(blocks), dim3(threads), args, 0, (cudaStream_t)stream);
}
