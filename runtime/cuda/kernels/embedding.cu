// Embedding lookup and its backward, and position ids, on the GPU. Same contracts as
// runtime/cpu/kernels/embedding.c: forward overwrites, backward accumulates in the CPU
// kernel's order (the same bits).
#include <cub/device/device_radix_sort.cuh>

#include "cuda_common.cuh"

// ----------------------------------------------------------------------------
// embedding forward: out[N,C] = weight[ids[n], :], each value rounded to dt at its store
// (rtc_stv; RT_F32: a copy), into fp32 or packed 16-bit storage (O). W columns a thread:
// W = RTC_VEC (two 16-byte loads, one or two stores) where the rows are groups of RTC_VEC
// and the pointers 16-byte aligned, else 1.

template <int W, class O>
__global__ void embedding_forward_kernel(O* __restrict__ out, const int32_t* __restrict__ ids,
                                         const float* __restrict__ weight, int N, int C, int V,
                                         rt_dtype dt) {
    const int per = C / W;
    const size_t total = (size_t)N * per;
    RTC_GRID_STRIDE(g, total) {
        const int n = (int)(g / (size_t)per), c = (int)(g % (size_t)per) * W;
        const int32_t id = ids[n];
        if (id < 0 || id >= V) {
            if (c == 0)
                RTC_DEVICE_FAIL(RT_KHINT_EMBEDDING_ID, RT_KMSG_EMBEDDING_ID,
                                (int)id, n, V);
            return;
        }
        float x[W];
        rtc_ldv(weight, (size_t)id * C + c, dt, x);
        rtc_stv(out, (size_t)n * C + c, x, dt);
    }
}

static void embedding_forward(void* out, bool packed, const int32_t* ids, const float* weight,
                              int N, int C, int V, rt_dtype dt) {
    if (N <= 0 || C <= 0) return;
    const bool vec = C % RTC_VEC == 0 && rtc_aligned16({out, weight});
    const unsigned blocks = rtc_blocks((size_t)N * (vec ? C / RTC_VEC : C), RTC_THREADS);
    rtc_with_storage(packed, out, [&](auto o) {
        if (vec)
            embedding_forward_kernel<RTC_VEC><<<blocks, RTC_THREADS, 0, rtc_stream()>>>(
                o, ids, weight, N, C, V, dt);
        else
            embedding_forward_kernel<1><<<blocks, RTC_THREADS, 0, rtc_stream()>>>(
                o, ids, weight, N, C, V, dt);
        RTC_CHECK_LAUNCH(embedding_forward_kernel);
    });
}

void rt_embedding_forward(float* out, const int32_t* ids, const float* weight, int N, int C,
                          int V) {
    embedding_forward(out, false, ids, weight, N, C, V, RT_F32);
}

void rt_embedding_packed_forward(void* out, const int32_t* ids, const float* weight, int N, int C,
                                 int V, int packed, rt_dtype dt) {
    RT_KCHECK_EMBEDDING_PACKED(C, packed, dt);
    embedding_forward(out, packed & RT_PACKED_OUT, ids, weight, N, C, V, dt);
}

// ----------------------------------------------------------------------------
// embedding backward (accumulating): dweight[ids[n], :] += dout[n, :] for n = 0..N-1, a
// repeated id summing its rows in row order, as the CPU kernel (no atomics). The row numbers
// are sorted by id (cub's radix sort is stable: equal ids keep their row order), and the
// block at the start of each run of equal ids adds the run's rows, column by column. Was:
// every thread walking all N ids for the vocabulary rows it owned, 2.8 ms for GPT-2's two
// embeddings (16384 ids) on an H100.

// Block i: nothing unless sorted position i starts a run; then dweight[id, :] += the run's
// rows in order (one fp32 sum per column, from dweight's value).
__global__ void embedding_backward_runs_kernel(float* __restrict__ dweight,
                                               const float* __restrict__ dout,
                                               const int32_t* __restrict__ ids_sorted,
                                               const int32_t* __restrict__ rows_sorted, int N,
                                               int C, int V) {
    const int i = blockIdx.x;
    const int32_t id = ids_sorted[i];
    if (i > 0 && ids_sorted[i - 1] == id) return;
    if (id < 0 || id >= V) {
        if (threadIdx.x == 0)
            RTC_DEVICE_FAIL(RT_KHINT_EMBEDDING_ID, RT_KMSG_EMBEDDING_ID,
                            (int)id, (int)rows_sorted[i], V);
        return;
    }
    int end = i + 1;
    while (end < N && ids_sorted[end] == id) end++;
    float* w = dweight + (size_t)id * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = w[c];
        for (int j = i; j < end; j++) acc += dout[(size_t)rows_sorted[j] * C + c];
        w[c] = acc;
    }
}

__global__ void rows_kernel(int32_t* rows, int n) {
    RTC_GRID_STRIDE(i, (size_t)n) rows[i] = (int32_t)i;
}

void rt_embedding_backward(float* dweight, const float* dout, const int32_t* ids, int N, int C,
                           int V) {
    if (N <= 0 || C <= 0 || V <= 0) return;
    size_t temp = 0;  // cub's size query launches nothing
    RT_CHECK_CUDA(cub::DeviceRadixSort::SortPairs(NULL, temp, ids, (int32_t*)NULL,
                                                  (const int32_t*)NULL, (int32_t*)NULL, N, 0, 32,
                                                  rtc_stream()));
    // the operand scratch (its start is cudaMalloc's, as cub wants): cub's temporaries, then
    // the row numbers, the sorted ids and the sorted row numbers
    const size_t at = (temp + 255) / 256 * 256, ints = ((size_t)N + 63) / 64 * 64;
    char* s = (char*)rtc_operand_scratch(at + 3 * ints * sizeof(int32_t));
    int32_t* rows = (int32_t*)(s + at);
    int32_t* ids_sorted = rows + ints;
    int32_t* rows_sorted = ids_sorted + ints;
    RTC_LAUNCH_FLAT(rows_kernel, (size_t)N, rows, N);
    RT_CHECK_CUDA(cub::DeviceRadixSort::SortPairs(s, temp, ids, ids_sorted, rows, rows_sorted, N,
                                                  0, 32, rtc_stream()));
    embedding_backward_runs_kernel<<<(unsigned)N, C >= 256 ? 256 : 32, 0, rtc_stream()>>>(
        dweight, dout, ids_sorted, rows_sorted, N, C, V);
    RTC_CHECK_LAUNCH(embedding_backward_runs_kernel);
}

// ----------------------------------------------------------------------------
// position ids

__global__ void arange_kernel(int32_t* ids, int n, int32_t start) {
    RTC_GRID_STRIDE(i, (size_t)n) ids[i] = start + (int32_t)i;
}

void rt_arange_i32(int32_t* ids, int n, int32_t start) {
    if (n <= 0) return;
    arange_kernel<<<rtc_blocks((size_t)n, RTC_THREADS), RTC_THREADS, 0, rtc_stream()>>>(
        ids, n, start);
    RTC_CHECK_LAUNCH(arange_kernel);
}
