// cp.async: global memory copied into shared memory without passing through registers or
// L1, as many copies in flight as a thread issues (the flash kernels' tiles, the fused
// cross-entropy's staged rows). The emulator has its own (tests/cuda/cuda_emu.h), which
// poisons a destination until the wait that covers its copy.
#ifndef FSDPGEN_CUDA_CP_ASYNC_CUH
#define FSDPGEN_CUDA_CP_ASYNC_CUH
#ifdef __CUDACC__

__device__ __forceinline__ unsigned rtc_smem_addr(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

// 8 elements (16 bytes, both addresses 16-byte aligned) from global src into
// shared dst, or 8 zeros when !valid (src-size 0: nothing is read; src must still be a
// valid address); and one float (4 bytes). They land by the wait that covers their group.
template <class E>
__device__ __forceinline__ void rtc_cp8(E* dst, const E* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(rtc_smem_addr(dst)),
                 "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void rtc_cp1f(float* dst, const float* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(rtc_smem_addr(dst)),
                 "l"(src), "r"(valid ? 4 : 0)
                 : "memory");
}
// Closes the group of this thread's copies issued since the last commit.
__device__ __forceinline__ void rtc_cp_commit(void) {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most N of this thread's committed groups are in flight (the newest N).
template <int N>
__device__ __forceinline__ void rtc_cp_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#endif  // __CUDACC__
#endif
