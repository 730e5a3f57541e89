// Deterministic column sums on the GPU: out_k[c] += sum over rows r of f(r, c)_k, k < K
// (K = 1 or 2 sums per column), in double; assigned (=, with the bits of += onto zeros:
// 0 + s) where `as`. Used for the bias gradients (rtc_colsum_acc) and the LayerNorm /
// RMSNorm weight gradients.
//
// A column of a long matrix (N = batch x seq rows, often 8k-16k) is too much for one
// block: the old one-pass kernel, one block per 32 columns, ran on 24 blocks for C = 768
// and took 0.33 ms per LayerNorm on an H100 (8 ms of a GPT-2 124M step). So rows are
// split into chunks: block (bx, by) sums chunk by of columns [32 bx, 32 bx + 32) into
// partial[by], and a second kernel adds the chunks in order. The chunk count depends only
// on N, C and K, so the sums are the same every run. A single chunk adds directly.
#ifndef FSDPGEN_CUDA_COLUMN_SUMS_CUH
#define FSDPGEN_CUDA_COLUMN_SUMS_CUH

#include "cuda_common.cuh"

#define RTC_COLSUM_Y 16            // rows walked in parallel by a block (32 x this threads)
#define RTC_COLSUM_MAX_CHUNKS 128  // row chunks at most
#define RTC_COLSUM_TARGET_BLOCKS 528  // 4 blocks per SM of an H100 (132 SMs)

// Sums chunk blockIdx.y (rows [r0, r1)) of 32 columns; with one chunk, adds into out.
template <int K, class F>
__global__ void colsum_chunk_kernel(double* __restrict__ partial, float* out0, float* out1, F f,
                                    int N, int C, int rows_per_chunk, int as) {
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
    if (threadIdx.y != 0 || c >= C) return;
    for (int k = 0; k < K; k++) {
        double s = 0.0;
        for (int y = 0; y < RTC_COLSUM_Y; y++) s += sh[k][y][threadIdx.x];
        float* out = k == 0 ? out0 : out1;
        if (gridDim.y == 1) {
            if (out) out[c] = RT_KBASE(out[c], as) + (float)s;
        } else {
            partial[((size_t)blockIdx.y * K + k) * C + c] = s;
        }
    }
}

// out_k[c] (+)= sum of the chunks' partials, chunk 0 first.
template <int K>
__global__ void colsum_finish_kernel(float* out0, float* out1, const double* __restrict__ partial,
                                     int chunks, int C, int as) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int k = 0; k < K; k++) {
        float* out = k == 0 ? out0 : out1;
        if (!out) continue;
        double s = 0.0;
        for (int b = 0; b < chunks; b++) s += partial[((size_t)b * K + k) * C + c];
        out[c] = RT_KBASE(out[c], as) + (float)s;
    }
}

// Launches the column sums of f over an N x C matrix on the thread's stream. out0/out1
// may be NULL (that sum is skipped); f(r, c, acc) adds row r's terms of column c to acc[k].
// as: the sums are assigned (no rows: zeros).
template <int K, class F>
void rtc_column_sums(float* out0, float* out1, F f, int N, int C, int as) {
    if (C <= 0) return;
    if (N <= 0) {
        if (as && out0) rt_zero(out0, (size_t)C);
        if (as && out1) rt_zero(out1, (size_t)C);
        return;
    }
    rtc_ctx* ctx = rtc_get();
    const int bx = (C + 31) / 32;
    int chunks = (RTC_COLSUM_TARGET_BLOCKS + bx - 1) / bx;
    const int max_by_rows = (N + 4 * RTC_COLSUM_Y - 1) / (4 * RTC_COLSUM_Y);  // >= 4 rows/thread
    if (chunks > max_by_rows) chunks = max_by_rows;
    if (chunks > RTC_COLSUM_MAX_CHUNKS) chunks = RTC_COLSUM_MAX_CHUNKS;
    if ((size_t)chunks * K * C > RTC_COLSUM_PARTIAL_DOUBLES) chunks = (int)(RTC_COLSUM_PARTIAL_DOUBLES / ((size_t)K * C));
    if (chunks < 1) chunks = 1;
    const int rows_per_chunk = (N + chunks - 1) / chunks;
    chunks = (N + rows_per_chunk - 1) / rows_per_chunk;
    colsum_chunk_kernel<K><<<dim3((unsigned)bx, (unsigned)chunks), dim3(32, RTC_COLSUM_Y), 0, ctx->stream>>>(
        ctx->colsum_partials, out0, out1, f, N, C, rows_per_chunk, as);
    RTC_CHECK_LAUNCH(colsum_chunk_kernel);
    if (chunks == 1) return;
    colsum_finish_kernel<K><<<(unsigned)((C + 255) / 256), 256, 0, ctx->stream>>>(
        out0, out1, ctx->colsum_partials, chunks, C, as);
    RTC_CHECK_LAUNCH(colsum_finish_kernel);
}

#endif
