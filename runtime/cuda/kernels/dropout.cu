// Dropout on the GPU with the CPU backend's counter-based RNG (Philox4x32-10): element
// e = offset + i of a call draws u(e) from counter block e/4, lane e%4, so the GPU draws
// exactly the CPU kernel's masks (same seed, stream and offsets give the same bits on
// both backends, sharded or not). One thread per counter block: one Philox call serves
// the (up to) 4 elements of its block that fall inside the call's range.
// rt_philox4x32_10 and rt_dropout_uniform are host functions here too (host pointers).
// Written values are rounded to dt at their stores.
#include "../../common/philox.h"
#include "cuda_common.cuh"

// ----------------------------------------------------------------------------
// Philox4x32-10 (runtime/common/philox.h, host and device)

void rt_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    rt_philox_inl(ctr[0], ctr[1], ctr[2], ctr[3], key[0], key[1], out);
}

float rt_dropout_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return rt_philox_uniform_inl(seed, stream, index);
}

// ----------------------------------------------------------------------------
// kernels: dst = mask * scale * src (acc = 0) or dst += mask * scale * src (acc = 1) over
// [offset, offset + n), rounded to dt; thread k handles counter block offset/4 + k.
// out == inp allowed in forward (each element is read and written by one thread).

__global__ void dropout_kernel(float* dst, const float* src, size_t n, float p, float scale,
                               uint64_t seed, uint64_t stream, uint64_t offset, int acc,
                               rt_dtype dt) {
    const uint64_t first = offset >> 2;
    const uint64_t nblocks = ((offset + n - 1) >> 2) - first + 1;
    RTC_GRID_STRIDE(k, nblocks) {
        const uint64_t blk = first + k;
        uint32_t o[4];
        rt_philox_block_inl(seed, stream, blk, o);
        for (int lane = 0; lane < 4; lane++) {
            const uint64_t e = blk * 4 + (uint64_t)lane;
            if (e < offset || e - offset >= n) continue;
            const size_t i = (size_t)(e - offset);
            const float v = rt_philox_u01_inl(o[lane]) >= p ? src[i] * scale : 0.0f;
            dst[i] = rtc_round_to(acc ? RT_KBASE(dst[i], acc == 2) + v : v, dt);
        }
    }
}

__global__ void dropout_fill_kernel(float* dst, const float* src, size_t n, int mode,
                                    rt_dtype dt) {
    // mode 0: dst = 0 (p >= 1 forward, or assigned backward); mode 1: dst += src (p <= 0
    // backward); mode 2: dst = 0 + src (p <= 0 backward, assigned)
    RTC_GRID_STRIDE(i, n) {
        if (mode == 0)
            dst[i] = 0.0f;
        else
            dst[i] = rtc_round_to(RT_KBASE(dst[i], mode == 2) + src[i], dt);
    }
}

static void dropout_apply(float* dst, const float* src, size_t n, float p, uint64_t seed,
                          uint64_t stream, uint64_t offset, int acc, rt_dtype dt) {
    const float scale = rt_dropout_scale_inl(p);
    const uint64_t nblocks = ((offset + n - 1) >> 2) - (offset >> 2) + 1;
    dropout_kernel<<<rtc_blocks((size_t)nblocks, RTC_THREADS), RTC_THREADS, 0, rtc_stream()>>>(
        dst, src, n, p, scale, seed, stream, offset, acc, dt);
    RTC_CHECK_LAUNCH(dropout_kernel);
}

// ----------------------------------------------------------------------------
// forward / backward

void rt_dropout_forward(float* out, const float* inp, size_t n, float p, uint64_t seed,
                        uint64_t stream, uint64_t offset, rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_dropout_forward");
    if (n == 0) return;
    if (p <= 0.0f) {  // exact copy (of values exact in dt), no RNG work (eval mode)
        rt_copy(out, inp, n);
        return;
    }
    if (p >= 1.0f) {  // everything dropped (PyTorch returns zeros)
        dropout_fill_kernel<<<rtc_blocks(n, RTC_THREADS), RTC_THREADS, 0, rtc_stream()>>>(
            out, NULL, n, 0, dt);
        RTC_CHECK_LAUNCH(dropout_fill_kernel);
        return;
    }
    dropout_apply(out, inp, n, p, seed, stream, offset, 0, dt);
}

void rt_dropout_backward(float* dinp, const float* dout, size_t n, float p, uint64_t seed,
                         uint64_t stream, uint64_t offset, rt_dtype dt, int assign) {
    RT_KCHECK_DT(dt, "rt_dropout_backward");
    const int as = assign & RT_ASSIGN_1;
    if (n == 0 || (p >= 1.0f && !as)) return;
    if (p <= 0.0f || p >= 1.0f) {  // p >= 1 and assigned: zeros
        dropout_fill_kernel<<<rtc_blocks(n, RTC_THREADS), RTC_THREADS, 0, rtc_stream()>>>(
            dinp, dout, n, p >= 1.0f ? 0 : as ? 2 : 1, dt);
        RTC_CHECK_LAUNCH(dropout_fill_kernel);
        return;
    }
    dropout_apply(dinp, dout, n, p, seed, stream, offset, as ? 2 : 1, dt);
}
