// runtime/common/dtype_bits.h on the GPU: the cvt instructions its *_inl conversions use
// in device code against the integer sequences that define the bits (*_sw), for every
// input: all 2^32 fp32 bit patterns narrowed to bf16 and to fp16, all 2^16 fp16 ones
// widened. Each kernel counts the inputs whose bits differ and keeps the smallest. Built by
// nvcc only (runtime/cuda.ninja; on the emulator *_inl is *_sw); skips without a GPU.
#include "cuda_helpers.h"
#include "dtype_bits.h"

struct mismatches {
    unsigned long long count;
    unsigned int first;  // the smallest input that differs (0xFFFFFFFF: none)
};

__device__ void differs(mismatches* m, unsigned int in) {
    atomicAdd(&m->count, 1ull);
    atomicMin(&m->first, in);
}

// which: 0 fp32 -> bf16, 1 fp32 -> fp16 (inputs 0 .. n - 1); 2 fp16 -> fp32
__global__ void compare_kernel(mismatches* m, int which, unsigned long long n) {
    for (unsigned long long k = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; k < n;
         k += (unsigned long long)gridDim.x * blockDim.x) {
        const unsigned int in = (unsigned int)k;
        if (which == 0) {
            const float x = rt_f32_bits(in);
            if (rt_bf16_from_f32_inl(x) != rt_bf16_from_f32_sw(x)) differs(m, in);
        } else if (which == 1) {
            const float x = rt_f32_bits(in);
            if (rt_f16_from_f32_inl(x) != rt_f16_from_f32_sw(x)) differs(m, in);
        } else if (rt_bits_f32(rt_f16_to_f32_inl((uint16_t)in)) !=
                   rt_bits_f32(rt_f16_to_f32_sw((uint16_t)in))) {
            differs(m, in);
        }
    }
}

static void compare(mismatches* d, int which, const char* what) {
    const mismatches none = {0, 0xFFFFFFFFu};
    mismatches got = none;
    const unsigned long long n = which == 2 ? 1ull << 16 : 1ull << 32;
    cudaError_t e = cudaMemcpy(d, &none, sizeof none, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
        compare_kernel<<<4096, 256>>>(d, which, n);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpy(&got, d, sizeof got, cudaMemcpyDeviceToHost);
    CHECK(e == cudaSuccess && got.count == 0,
          "%s: the cvt instruction gives the integer sequence's bits for all %llu inputs (%llu "
          "differ, the first 0x%08x; %s)", what, n, got.count, got.first, cudaGetErrorString(e));
}

int main(void) {
    if (skip_without_gpu("dtype bits on the GPU")) return 0;
    mismatches* d = NULL;
    CHECK(cudaMalloc((void**)&d, sizeof *d) == cudaSuccess, "device memory for the counts");
    if (!d) return check_summary();
    compare(d, 0, "fp32 -> bf16 (cvt.rn.bf16.f32)");
    compare(d, 1, "fp32 -> fp16 (cvt.rn.f16.f32)");
    compare(d, 2, "fp16 -> fp32 (cvt.f32.f16)");
    cudaFree(d);
    return check_summary();
}
