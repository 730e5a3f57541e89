// The CUDA step backend's kernels (kernels.h): one launch per FSDP copy of a whole group,
// driven by its copy plan (rt_fsdp_copy.h: each thread finds its run by binary search over the
// plan's end offsets, so runs of any length share one grid), plus the element-wise
// kernels around the reduce-scatter.
//
// Casts round exactly as the host's rt_convert does (runtime/common/dtype_bits.h).
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtype_bits.h"
#include "kernels.h"
#include "rt_check.h"

// ---- launch helpers -----------------------------------------------------------------------

static const int THREADS = 256;

static unsigned blocks_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    if (b > 8192) b = 8192;  // grid-stride beyond: enough to fill any GPU
    return (unsigned)(b > 0 ? b : 1);
}

#define CHECK_LAUNCH(name)                                                              \
    do {                                                                                \
        cudaError_t e_ = cudaGetLastError();                                            \
        if (e_ != cudaSuccess)                                                          \
            rt_check_fail(__FILE__, __LINE__, "launch of " name, cudaGetErrorString(e_), \
                          rt_check_cuda_hint((int)e_));                                 \
    } while (0)

// ---- dtypes -------------------------------------------------------------------------------

__device__ __forceinline__ float load(const void* b, int dt, int64_t i) {
    if (dt == RT_BF16) return rt_bf16_to_f32_inl(((const uint16_t*)b)[i]);
    if (dt == RT_F16) return rt_f16_to_f32_inl(((const uint16_t*)b)[i]);
    return ((const float*)b)[i];
}

__device__ __forceinline__ void store(void* b, int dt, int64_t i, float v) {
    if (dt == RT_BF16) ((uint16_t*)b)[i] = rt_bf16_from_f32_inl(v);
    else if (dt == RT_F16) ((uint16_t*)b)[i] = rt_f16_from_f32_inl(v);
    else ((float*)b)[i] = v;
}

// ---- plans --------------------------------------------------------------------------------

extern "C" int rtcs_plan_upload(rtcs_plan* out, const rt_copy_plan* p) {
    memset(out, 0, sizeof *out);
    out->nruns = p->nruns;
    out->total = p->total;
    if (p->nruns == 0) return 0;
    int64_t* ends = (int64_t*)malloc((size_t)p->nruns * sizeof *ends);
    if (!ends) return (int)cudaErrorMemoryAllocation;
    int64_t acc = 0;
    for (int k = 0; k < p->nruns; k++) ends[k] = acc += p->runs[k].n;
    cudaError_t e = cudaMalloc((void**)&out->runs, (size_t)p->nruns * sizeof(rt_copy_run));
    if (e == cudaSuccess) e = cudaMalloc((void**)&out->ends, (size_t)p->nruns * sizeof(int64_t));
    if (e == cudaSuccess)
        e = cudaMemcpy(out->runs, p->runs, (size_t)p->nruns * sizeof(rt_copy_run), cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(out->ends, ends, (size_t)p->nruns * sizeof(int64_t), cudaMemcpyHostToDevice);
    free(ends);
    if (e != cudaSuccess) rtcs_plan_free(out);
    return (int)e;
}

extern "C" void rtcs_plan_free(rtcs_plan* p) {
    cudaFree(p->runs);
    cudaFree(p->ends);
    memset(p, 0, sizeof *p);
}

// ---- copy ---------------------------------------------------------------------------------

// A thread copies ELEMS consecutive elements per pass, their loads issued together when
// they lie in one run (the usual case: runs are whole parameters): with one load in flight
// per thread the copies ran at about 60% of the H100's memory bandwidth (Llama 1B). Where
// both sides of the chunk are 16-byte aligned (runs of parameters at offsets that are
// multiples of 8 elements), by 16-byte accesses: one per 8 values of 16-bit storage, two of
// fp32 (runtime/cuda's flat kernels ran at a third of the bandwidth with 2-byte accesses).
static const int ELEMS = 8;

struct alignas(16) u16x8 {
    uint16_t h[ELEMS];
};

__device__ __forceinline__ bool aligned16(const void* b, int dt, int64_t i) {
    return ((uintptr_t)b + (uintptr_t)i * (dt == RT_F32 ? 4u : 2u)) % 16 == 0;
}

// v = elements i .. i + ELEMS - 1 of b (aligned16), as load() reads each.
__device__ __forceinline__ void load_chunk(const void* b, int dt, int64_t i, float (&v)[ELEMS]) {
    if (dt == RT_F32) {
        const float4* p = (const float4*)((const float*)b + i);
        const float4 q0 = p[0], q1 = p[1];
        v[0] = q0.x, v[1] = q0.y, v[2] = q0.z, v[3] = q0.w;
        v[4] = q1.x, v[5] = q1.y, v[6] = q1.z, v[7] = q1.w;
        return;
    }
    const u16x8 q = *(const u16x8*)((const uint16_t*)b + i);
    for (int u = 0; u < ELEMS; u++)
        v[u] = dt == RT_BF16 ? rt_bf16_to_f32_inl(q.h[u]) : rt_f16_to_f32_inl(q.h[u]);
}

// Elements i .. i + ELEMS - 1 of b (aligned16) = v, as store() writes each.
__device__ __forceinline__ void store_chunk(void* b, int dt, int64_t i, const float (&v)[ELEMS]) {
    if (dt == RT_F32) {
        float4* p = (float4*)((float*)b + i);
        p[0] = make_float4(v[0], v[1], v[2], v[3]);
        p[1] = make_float4(v[4], v[5], v[6], v[7]);
        return;
    }
    u16x8 q;
    for (int u = 0; u < ELEMS; u++)
        q.h[u] = dt == RT_BF16 ? rt_bf16_from_f32_inl(v[u]) : rt_f16_from_f32_inl(v[u]);
    *(u16x8*)((uint16_t*)b + i) = q;
}

// The run holding element e, found again only once e is past the current one: a thread's
// elements only increase and runs are long (the search per element took half the copy's
// time on an H100, Llama 1B).
struct run_cursor {
    int lo = 0;
    int64_t start = 0, end = -1;
    rt_copy_run s = {0, 0, 0, 0};
    __device__ void seek(int64_t e, const rt_copy_run* runs, const int64_t* ends, int nruns) {
        if (e < end) return;
        int hi = nruns - 1;  // the first run whose end is past e, at or after lo
        while (lo < hi) {
            const int mid = (lo + hi) / 2;
            if (ends[mid] > e) hi = mid;
            else lo = mid + 1;
        }
        s = runs[lo];
        end = ends[lo];
        start = end - s.n;
    }
};

// Element k of run s: src (0 for a padding run) rounded to round_dt, then stored to dst in
// dst_dt, or added to dst's value (rounded to dst_dt first) when accumulating.
__device__ __forceinline__ float run_value(const void* src, int src_dt, int round_dt,
                                           const rt_copy_run& s, int64_t k) {
    return s.src < 0 ? 0.0f : rt_round_inl(load(src, src_dt, s.src + k), (rt_dtype)round_dt);
}
__device__ __forceinline__ void run_store(void* dst, int dst_dt, const rt_copy_run& s, int64_t k,
                                          float v, int accumulate) {
    if (accumulate) v = load(dst, dst_dt, s.dst + k) + rt_round_inl(v, (rt_dtype)dst_dt);
    store(dst, dst_dt, s.dst + k, v);
}

// run_value and run_store of elements k .. k + ELEMS - 1 of run s, both sides aligned16.
__device__ __forceinline__ void run_chunk(void* dst, int dst_dt, const void* src, int src_dt,
                                          int round_dt, const rt_copy_run& s, int64_t k,
                                          int accumulate) {
    float v[ELEMS] = {};  // a zero-fill run's values
    if (s.src >= 0) {
        load_chunk(src, src_dt, s.src + k, v);
        for (int i = 0; i < ELEMS; i++) v[i] = rt_round_inl(v[i], (rt_dtype)round_dt);
    }
    if (accumulate) {
        float d[ELEMS];
        load_chunk(dst, dst_dt, s.dst + k, d);
        for (int i = 0; i < ELEMS; i++) v[i] = d[i] + rt_round_inl(v[i], (rt_dtype)dst_dt);
    }
    store_chunk(dst, dst_dt, s.dst + k, v);
}

// (Named seg_copy_kernel in every profile so far; tests/gpu/kernel_times.py files the FSDP
// copies under that name.)
__global__ void seg_copy_kernel(void* dst, int dst_dt, const void* src, int src_dt, int round_dt,
                                const rt_copy_run* runs, const int64_t* ends, int nruns,
                                int64_t total, int accumulate) {
    run_cursor c;
    for (int64_t e0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * ELEMS; e0 < total;
         e0 += (int64_t)gridDim.x * blockDim.x * ELEMS) {
        c.seek(e0, runs, ends, nruns);
        if (e0 + ELEMS <= c.end) {  // one run: every load, then every store
            const int64_t k = e0 - c.start;
            if (aligned16(dst, dst_dt, c.s.dst + k) &&
                (c.s.src < 0 || aligned16(src, src_dt, c.s.src + k))) {
                run_chunk(dst, dst_dt, src, src_dt, round_dt, c.s, k, accumulate);
                continue;
            }
            float v[ELEMS];
#pragma unroll
            for (int i = 0; i < ELEMS; i++) v[i] = run_value(src, src_dt, round_dt, c.s, k + i);
#pragma unroll
            for (int i = 0; i < ELEMS; i++) run_store(dst, dst_dt, c.s, k + i, v[i], accumulate);
            continue;
        }
        for (int64_t e = e0; e < e0 + ELEMS && e < total; e++) {  // across runs
            c.seek(e, runs, ends, nruns);
            run_store(dst, dst_dt, c.s, e - c.start,
                      run_value(src, src_dt, round_dt, c.s, e - c.start), accumulate);
        }
    }
}

static void copy(const rtcs_plan* p, void* dst, rt_dtype dst_dt, const void* src, rt_dtype src_dt,
                 rt_dtype round_dt, int accumulate, void* stream) {
    if (p->total == 0) return;
    const unsigned blocks = blocks_for((p->total + ELEMS - 1) / ELEMS);
    seg_copy_kernel<<<blocks, THREADS, 0, (cudaStream_t)stream>>>(
        dst, (int)dst_dt, src, (int)src_dt, (int)round_dt, p->runs, p->ends, p->nruns, p->total,
        accumulate);
    CHECK_LAUNCH("seg_copy_kernel");
}

extern "C" void rtcs_copy(const rtcs_plan* p, void* dst, rt_dtype dst_dt, const void* src,
                          rt_dtype src_dt, int accumulate, void* stream) {
    copy(p, dst, dst_dt, src, src_dt, RT_F32, accumulate, stream);
}

extern "C" void rtcs_copy_rounded(const rtcs_plan* p, void* dst, rt_dtype dst_dt, const float* src,
                                  rt_dtype round_dt, int accumulate, void* stream) {
    copy(p, dst, dst_dt, src, RT_F32, round_dt, accumulate, stream);
}

// ---- element-wise ---------------------------------------------------------------------------

__global__ void divide_kernel(void* buf, int64_t n, int dt, float f) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        store(buf, dt, i, load(buf, dt, i) / f);
}

extern "C" void rtcs_divide(void* buf, int64_t n, rt_dtype dt, double factor, void* stream) {
    if (factor == 1.0 || n <= 0) return;
    divide_kernel<<<blocks_for(n), THREADS, 0, (cudaStream_t)stream>>>(buf, n, (int)dt, (float)factor);
    CHECK_LAUNCH("divide_kernel");
}

__global__ void round_kernel(float* x, int64_t n, int dt) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = rt_round_inl(x[i], (rt_dtype)dt);
}

extern "C" void rtcs_round(float* x, size_t n, rt_dtype dt, void* stream) {
    if (dt == RT_F32 || n == 0) return;
    round_kernel<<<blocks_for((int64_t)n), THREADS, 0, (cudaStream_t)stream>>>(x, (int64_t)n, (int)dt);
    CHECK_LAUNCH("round_kernel");
}
