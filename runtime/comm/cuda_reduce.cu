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
#include "dtype_bits.h"  // the host's rounding, as __host__ __device__ functions

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
    if (DT == RT_BF16) return rt_bf16_to_f32_inl(((const uint16_t*)p)[i]);
    return rt_f16_to_f32_inl(((const uint16_t*)p)[i]);
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
            uint16_t r = DT == RT_BF16 ? rt_bf16_from_f32_inl(acc) : rt_f16_from_f32_inl(acc);
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
    void (*fn)(const reduce_args) = dtype == RT_F32    ? reduce_kernel<RT_F32>
                                    : dtype == RT_BF16 ? reduce_kernel<RT_BF16>
                                                       : reduce_kernel<RT_F16>;
    void* args[1] = {&a};
    return (int)cudaLaunchKernel(fn, dim3(blocks), dim3(threads), args, 0, (cudaStream_t)stream);
}
