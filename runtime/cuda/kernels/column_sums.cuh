// Deterministic column sums on the GPU: out_k[c] += sum over rows r of f(r, c)_k, k < K
// (K = 1 or 2 sums per column), in double; assigned (=, with the bits of += onto zeros:
// 0 + s) where `as`. The outputs are fp32 (gdt RT_F32) or, packed parameter gradients
// (rt_kernels.h RT_PACKED_DWEIGHT), 16-bit values of gdt, rounded at the store
// (rtc_colsum_store). Used for the bias gradients (rtc_colsum_acc) and the LayerNorm /
// RMSNorm weight gradients.
//
// A column of a long matrix (N = batch x seq rows, often 8k-16k) is too much for one
// block: the old one-pass kernel, one block per 32 columns, ran on 24 blocks for C = 768
// and took 0.33 ms per LayerNorm on an H100 (8 ms of a GPT-2 124M step). So rows are
// split into chunks: block (bx, by) sums chunk by of columns [32 bx, 32 bx + 32) into
// partial[by]. The chunk count depends only on N, C and K, so the sums are the same every
// run. A single chunk adds directly.
//
// One launch, not a second kernel to add the chunks (a launch and its tail each, ~49 of
// them in a GPT-2 step's graph): the last block of a column stripe to store its partial
// (rtc_last_block: a count per stripe) adds the stripe's chunks, chunk 0 first, as the
// second kernel did. Which block is last varies from run to run; the order of the sum
// does not, so neither do its bits.
#ifndef FSDPGEN_CUDA_COLUMN_SUMS_CUH
#define FSDPGEN_CUDA_COLUMN_SUMS_CUH

#include "cuda_common.cuh"

#define RTC_COLSUM_Y 16            // rows walked in parallel by a block (32 x this threads)
#define RTC_COLSUM_MAX_CHUNKS 128  // row chunks at most
#define RTC_COLSUM_TARGET_BLOCKS 528  // 4 blocks per SM of an H100 (132 SMs)

// Called by every thread of a block of `blocks` sharing *count, after its stores of the
// block's partials: whether this block is the last to get here. The last one sees every
// block's stores (each thread fences before the count, the counting thread after it) and
// sets *count back to 0, so that the next kernel (and a CUDA graph's next replay) counts
// from 0 again: kernels on a stream run one after another, so one count serves every call
// on it, as ctx->colsum_partials does. Partials are then read with __ldcg (from L2: this
// SM's L1 may hold lines of them read before they were stored).
__device__ __forceinline__ bool rtc_last_block(unsigned* count, unsigned blocks) {
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        last = atomicAdd(count, 1u) == blocks - 1;
        if (last) *count = 0;
        __threadfence();
    }
    __syncthreads();
    return last;
}

// out[c] (+)= s, the float of a column's double sum: fp32 storage (gdt RT_F32), or 16-bit
// values of gdt (packed parameter gradients, assigned: round(0 + s)). Also the norms' dw
// sums (norm.cu).
__device__ __forceinline__ void rtc_colsum_store(void* out, int c, double s, int as,
                                                 rt_dtype gdt) {
    if (gdt == RT_F32) {
        float* o = (float*)out;
        o[c] = RT_KBASE(o[c], as) + (float)s;
    } else {
        uint16_t* o = (uint16_t*)out;
        o[c] = rt_bits16_from_f32_inl(RT_KBASE(rt_bits16_to_f32_inl(o[c], gdt), as) + (float)s,
                                      gdt);
    }
}

// Sums chunk blockIdx.y (rows [r0, r1)) of 32 columns: with one chunk, into out; with
// more, into partial[blockIdx.y], and the stripe's last block (count[blockIdx.x]) adds the
// chunks' partials, chunk 0 first, into out. gdt: the outputs' storage (rtc_colsum_store).
template <int K, class F>
__global__ void colsum_chunk_kernel(double* partial, unsigned* count, void* out0, void* out1,
                                    F f, int N, int C, int rows_per_chunk, int as,
                                    rt_dtype gdt) {
    __shared__ double sh[K][RTC_COLSUM_Y][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    const int r0 = blockIdx.y * rows_per_chunk;
    const int r1 = min(N, r0 + rows_per_chunk);
    double acc[K];
    for (int k = 0; k < K; k++) acc[k] = 0.0;
    // four rows' loads in flight per thread, not one (a block keeps too few bytes in flight
    // for the memory bandwidth otherwise); the sum's order, and so its bits, are the loop's
    if (c < C)
#pragma unroll 4
        for (int r = r0 + threadIdx.y; r < r1; r += RTC_COLSUM_Y) f(r, c, acc);
    for (int k = 0; k < K; k++) sh[k][threadIdx.y][threadIdx.x] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0 && c < C)
        for (int k = 0; k < K; k++) {
            double s = 0.0;
            for (int y = 0; y < RTC_COLSUM_Y; y++) s += sh[k][y][threadIdx.x];
            void* out = k == 0 ? out0 : out1;
            if (gridDim.y == 1) {
                if (out) rtc_colsum_store(out, c, s, as, gdt);
            } else {
                partial[((size_t)blockIdx.y * K + k) * C + c] = s;
            }
        }
    if (gridDim.y == 1 || !rtc_last_block(&count[blockIdx.x], gridDim.y)) return;
    // the stripe's last block: thread (c, k) adds sum k of column c over the chunks
    void* out = threadIdx.y == 0 ? out0 : out1;
    if (threadIdx.y >= K || c >= C || !out) return;
    double s = 0.0;
    for (int b = 0; b < (int)gridDim.y; b++)
        s += __ldcg(&partial[((size_t)b * K + threadIdx.y) * C + c]);
    rtc_colsum_store(out, c, s, as, gdt);
}

// Zeros C outputs of gdt's storage (rtc_colsum_store): an assigned sum over no rows.
static inline void rtc_colsum_zero(void* out, int C, rt_dtype gdt) {
    const size_t bytes = (size_t)C * (gdt == RT_F32 ? sizeof(float) : sizeof(uint16_t));
    if (out && C > 0) RT_CHECK_CUDA(cudaMemsetAsync(out, 0, bytes, rtc_stream()));
}

// Launches the column sums of f over an N x C matrix on the thread's stream. out0/out1
// may be NULL (that sum is skipped); f(r, c, acc) adds row r's terms of column c to acc[k].
// as: the sums are assigned (no rows: zeros). gdt: the outputs' storage (rtc_colsum_store).
template <int K, class F>
void rtc_column_sums(void* out0, void* out1, F f, int N, int C, int as, rt_dtype gdt) {
    if (C <= 0) return;
    if (N <= 0) {
        if (as) rtc_colsum_zero(out0, C, gdt);
        if (as) rtc_colsum_zero(out1, C, gdt);
        return;
    }
    rtc_ctx* ctx = rtc_get();
    const int bx = (C + 31) / 32;
    int chunks = (RTC_COLSUM_TARGET_BLOCKS + bx - 1) / bx;
    const int max_by_rows = (N + 4 * RTC_COLSUM_Y - 1) / (4 * RTC_COLSUM_Y);  // >= 4 rows/thread
    if (chunks > max_by_rows) chunks = max_by_rows;
    if (chunks > RTC_COLSUM_MAX_CHUNKS) chunks = RTC_COLSUM_MAX_CHUNKS;
    if ((size_t)chunks * K * C > RTC_COLSUM_PARTIAL_DOUBLES)
        chunks = (int)(RTC_COLSUM_PARTIAL_DOUBLES / ((size_t)K * C));
    if (chunks < 1) chunks = 1;
    const int rows_per_chunk = (N + chunks - 1) / chunks;
    chunks = (N + rows_per_chunk - 1) / rows_per_chunk;
    // two chunks' partials fit only where bx <= RTC_COLSUM_COUNTS (cuda_common.cuh)
    RT_KCHECK(chunks == 1 || bx <= RTC_COLSUM_COUNTS, "raise RTC_COLSUM_COUNTS",
              "column sums of %d columns need %d stripe counts, the context has %d", C, bx,
              RTC_COLSUM_COUNTS);
    const dim3 grid((unsigned)bx, (unsigned)chunks), block(32, RTC_COLSUM_Y);
    colsum_chunk_kernel<K><<<grid, block, 0, ctx->stream>>>(
        ctx->colsum_partials, ctx->colsum_counts, out0, out1, f, N, C, rows_per_chunk, as, gdt);
    RTC_CHECK_LAUNCH(colsum_chunk_kernel);
}

#endif
