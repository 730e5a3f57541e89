// LayerNorm and RMSNorm over the last dimension on the GPU (same contracts as
// runtime/cpu/kernels/layernorm.c and rmsnorm.c). Fused: one block per row computes the
// statistics (in double, two passes as the CPU kernel) and writes the normalised row in
// the same kernel; backward computes a row's input gradient in one kernel and the
// weight/bias gradients (column reductions over rows, in double, in row chunks:
// column_sums.cuh) in one or two more.
// out and dinp are rounded to dt at their stores; mean, rstd, dweight, dbias stay fp32
// (16-bit with RT_PACKED_DWEIGHT: the sums' stores round them, rtc_colsum_store). The
// kernels also read and write packed 16-bit rows (rt_kernels.h "packed 16-bit storage"): O,
// I, D and G below, the storage of out, inp, dout and dinp, are float or uint16_t (rtc_ld,
// rtc_st).
// Rows of 256 V elements (V <= 8) go one per warp with 16-byte loads instead (the "row per
// warp" section), and their backward adds the weight/bias gradients' terms from the rows
// it holds, with no second read (the "dw" section: per-block partials, llm.c style, then
// one short kernel).
#include "column_sums.cuh"

// ----------------------------------------------------------------------------
// a row's values in registers (the LayerNorm and RMSNorm row kernels)

// Values a thread keeps of a row: rtc_row_threads gives it at most 4 up to rows of 4096
// (GPT-2's 768, Llama's 2048 and 4096); longer rows are read again where used.
#define RTC_ROW_REGS 4

// A thread's values of a row of len elements of S: those at c = threadIdx.x + k * blockDim.x,
// k = 0, 1, ... (RTC_ROW_FOR's order). R > 0 (len <= R * blockDim.x): all loaded at
// construction, every load issued before the first is used, and kept for a second pass;
// R == 0: each read where used. A loop widening each value as its load came kept one load
// of a thread in flight: RMSNorm at a third (forward) to a half (backward) of an H100's
// bandwidth. Each pass keeps its per-thread order, so the double sums keep their bits.
template <int R, class S>
struct rtc_row_vals {
    const S* p;
    rt_dtype dt;
    float v[R > 0 ? R : 1];
    __device__ rtc_row_vals(const S* p_, int len, rt_dtype dt_) : p(p_), dt(dt_) {
        if constexpr (R > 0) {
            S raw[R];
            for (int k = 0; k < R; k++) {
                const int c = threadIdx.x + k * blockDim.x;
                raw[k] = c < len ? p[c] : S(0);
            }
            for (int k = 0; k < R; k++) v[k] = rtc_val(raw[k], dt);
        }
    }
    __device__ float operator[](int k) const {  // column threadIdx.x + k * blockDim.x
        if constexpr (R > 0) return v[k];
        else return rtc_ld(p, threadIdx.x + (size_t)k * blockDim.x, dt);
    }
};

// The thread's columns c of a row of len, k counting them (rtc_row_vals<R>).
#define RTC_ROW_FOR(k, c, R, len) \
    for (int k = 0, c = threadIdx.x; (R == 0 || k < R) && c < (len); k++, c += blockDim.x)

// A row kernel (kernel<R>: one block of rtc_row_threads(len) threads per row) over `rows`
// rows on the thread's stream: R = RTC_ROW_REGS when a thread's values of a row fit in
// registers, else 0.
#define RTC_LAUNCH_ROWS(kernel, rows, len, ...)                                            \
    do {                                                                                   \
        const unsigned rtc_t_ = rtc_row_threads(len);                                      \
        if ((len) <= RTC_ROW_REGS * (int)rtc_t_)                                           \
            kernel<RTC_ROW_REGS><<<(unsigned)(rows), rtc_t_, 0, rtc_stream()>>>(__VA_ARGS__); \
        else                                                                               \
            kernel<0><<<(unsigned)(rows), rtc_t_, 0, rtc_stream()>>>(__VA_ARGS__);          \
        RTC_CHECK_LAUNCH(kernel);                                                          \
    } while (0)

// ----------------------------------------------------------------------------
// a row per warp (the row kernels below where rows allow: rtc_wrow_ok)

// Block-per-row kernels with a 2-byte load per element and thread ran Llama 1B's RMSNorms
// at about a third of an H100's bandwidth (5.7 ms a step; bench/RESULTS.md, 2026-11-24): a
// block keeps few bytes in flight and waits at barriers for each row's sums. Where a row is
// C = 256 V elements, V <= RTC_WROW_MAX (GPT-2's 768, Llama 1B's 2048), and every row
// starts 16-byte aligned, one warp takes a row instead: lane l keeps elements
// 8 (32 j + l) .. 8 (32 j + l) + 7 of every step j < V in registers, loaded 16 bytes at a
// time (rtc_ldv), and the row's sums go across the warp in double with no barrier. Their
// order is fixed by C, so a row gives the same bits every run and in every storage (not
// the block kernels'). The storage of each operand (fp32 or packed 16-bit) is a run-time
// flag here, not a type as in the block kernels: one kernel per norm and pass instead of
// one per combination, whose fully unrolled rows took nvcc 115 s for the 24.
#define RTC_WROW (32 * RTC_VEC)  // a warp's elements per step: 256
#define RTC_WROW_MAX 8           // steps a lane keeps: rows up to 2048
#define RTC_WROW_WARPS 4         // rows (warps) per block
#define RTC_WROW_THREADS (32 * RTC_WROW_WARPS)

// The first of lane's 8 elements of step j.
__device__ __forceinline__ size_t rtc_wcol(int j) {
    return ((size_t)j * 32 + (threadIdx.x & 31)) * RTC_VEC;
}

// The steps j < V, unrolled so that the arrays they index stay in registers.
#define RTC_WROW_FOR(j, V) \
    _Pragma("unroll") for (int j = 0; j < RTC_WROW_MAX; j++) if (j < (V))

// Row n of C elements at p, fp32 or (p16) packed 16-bit storage.
__device__ __forceinline__ const void* rtc_wrow_at(const void* p, bool p16, long n, int C) {
    return (const char*)p + (size_t)n * C * (p16 ? 2 : 4);
}
__device__ __forceinline__ void* rtc_wrow_at(void* p, bool p16, long n, int C) {
    return (char*)p + (size_t)n * C * (p16 ? 2 : 4);
}

// Elements i .. i + 7 of a row of either storage (rtc_ldv, rtc_stv).
__device__ __forceinline__ void rtc_wld(const void* row, bool p16, size_t i, rt_dtype dt,
                                        float (&v)[RTC_VEC]) {
    if (p16) rtc_ldv<RTC_VEC>((const uint16_t*)row, i, dt, v);
    else rtc_ldv<RTC_VEC>((const float*)row, i, dt, v);
}
__device__ __forceinline__ void rtc_wst(void* row, bool p16, size_t i, const float (&v)[RTC_VEC],
                                        rt_dtype dt) {
    if (p16) rtc_stv<RTC_VEC>((uint16_t*)row, i, v, dt);
    else rtc_stv<RTC_VEC>((float*)row, i, v, dt);
}

// A lane's values of a row, every load issued before the first is used.
struct rtc_wrow {
    float v[RTC_WROW_MAX][RTC_VEC];
    __device__ rtc_wrow(const void* row, bool p16, int V, rt_dtype dt) {
        if (p16) {  // the 16-byte loads first, then the widening
            rtc_u16x8 raw[RTC_WROW_MAX];
            RTC_WROW_FOR(j, V) raw[j] = *(const rtc_u16x8*)((const uint16_t*)row + rtc_wcol(j));
            RTC_WROW_FOR(j, V) for (int u = 0; u < RTC_VEC; u++) v[j][u] = rtc_val(raw[j].h[u], dt);
        } else {
            RTC_WROW_FOR(j, V) rtc_ldv<RTC_VEC>((const float*)row, rtc_wcol(j), dt, v[j]);
        }
    }
};

// The row this warp takes of N, or -1 past the last.
__device__ __forceinline__ long rtc_wrow_index(int N) {
    const long n = (long)blockIdx.x * RTC_WROW_WARPS + (long)(threadIdx.x >> 5);
    return n < N ? n : -1;
}

// Whether rows of C elements go one per warp: C = 256 V, V <= RTC_WROW_MAX, and every
// pointer given 16-byte aligned (or NULL), so that every row is.
static inline bool rtc_wrow_ok(int C, std::initializer_list<const void*> ps) {
    if (C % RTC_WROW != 0 || C > RTC_WROW_MAX * RTC_WROW) return false;
    for (const void* p : ps)
        if ((uintptr_t)p % 16 != 0) return false;
    return true;
}

// Stores a row of dinp, a warp per row: element (j, u) of the lane's is its value (0 when
// assigning) + f(j, u, g), g = dout * weight (dout without a weight), rounded to dt.
template <class F>
__device__ __forceinline__ void rtc_wrow_store_dinp(void* dx, bool p16, const rtc_wrow& d,
                                                    const float* weight, int V, int as,
                                                    rt_dtype dt, F f) {
    RTC_WROW_FOR(j, V) {
        float w[RTC_VEC], base[RTC_VEC] = {}, r[RTC_VEC];
        if (weight) rtc_ldv<RTC_VEC>(weight, rtc_wcol(j), dt, w);
        if (!as) rtc_wld(dx, p16, rtc_wcol(j), dt, base);  // not read when assigning
        for (int u = 0; u < RTC_VEC; u++)
            r[u] = base[u] + f(j, u, weight ? d.v[j][u] * w[u] : d.v[j][u]);
        rtc_wst(dx, p16, rtc_wcol(j), r, dt);
    }
}

// kernel over `rows` rows, a warp each, on the thread's stream.
#define RTC_LAUNCH_WROWS(kernel, rows, ...)                                                   \
    do {                                                                                      \
        const unsigned rtc_b_ = (unsigned)(((rows) + RTC_WROW_WARPS - 1) / RTC_WROW_WARPS);   \
        kernel<<<rtc_b_, 32 * RTC_WROW_WARPS, 0, rtc_stream()>>>(__VA_ARGS__);                \
        RTC_CHECK_LAUNCH(kernel);                                                             \
    } while (0)

// ----------------------------------------------------------------------------
// the weight (and bias) gradients from the registers of a row per warp
//
// The column sums (column_sums.cuh) after an input-gradient kernel read dout and inp a
// second time: 67 MB for each of Llama 1B's 33 RMSNorms a step. Where rows go one per
// warp, the input-gradient kernel adds those terms from the values it holds instead (dw):
// a grid of rtc_dw_blocks blocks, B, warp w of block b taking rows b W + w, then
// b W + w + W B, ...; each row's terms go into the warp's own K rows of C doubles in
// shared memory (a lane its own entries, rtc_dw_at: no two threads add to one), then the
// block adds its warps' rows, warp 0's first, into partial b (the context's column-sum
// buffer), and dw_finish_kernel adds the blocks' partials, in a fixed order, into the
// outputs. The order is fixed by N, C and the GPU's SM count (B is two blocks per SM, as
// many as registers let run at once: one wave): the same bits every run on a GPU (double
// sums in another order than the column sums', so within about a float rounding of theirs).
#define RTC_DW_SMEM (64 * 1024)      // the most shared memory a dw block takes
#ifndef RTC_DW_SMEM_DECL             // the emulator's (tests/cuda/cuda_emu.h)
#define RTC_DW_SMEM_DECL(name) extern __shared__ double name[]
#endif

// A dw block's shared memory: K rows of C doubles per warp.
static size_t rtc_dw_smem(int K, int C) { return (size_t)RTC_WROW_WARPS * K * C * sizeof(double); }

// Blocks of a dw launch of K sums of C columns (N rows): the context's dw_blocks, fewer
// for few rows or where the partials would not fit the column-sum buffer; 0 where a
// block's shared memory would exceed RTC_DW_SMEM (the column sums then).
static int rtc_dw_blocks(int K, int N, int C) {
    if (rtc_dw_smem(K, C) > RTC_DW_SMEM) return 0;
    const int most = rtc_get()->dw_blocks;
    int b = (N + RTC_WROW_WARPS - 1) / RTC_WROW_WARPS;
    if (b > most) b = most;
    if ((size_t)b * K * C > RTC_COLSUM_PARTIAL_DOUBLES)
        b = (int)(RTC_COLSUM_PARTIAL_DOUBLES / ((size_t)K * C));
    return b;
}

// The rows a warp takes: its one, or (all) every gridDim.x W-th from its first.
#define RTC_WROW_EACH(n, N, all)                                                               \
    for (long n = (long)blockIdx.x * RTC_WROW_WARPS + (long)(threadIdx.x >> 5); n < (N);       \
         n = (all) ? n + (long)gridDim.x * RTC_WROW_WARPS : (N))

// Where a warp's shared row keeps element (j, u) of the lane's (column rtc_wcol(j) + u):
// lanes side by side, so that a warp's 32 doubles of one (j, u) are 256 contiguous bytes
// (by column, lane l's 8 doubles of a step 64 bytes apart: 16 lanes to a bank).
__device__ __forceinline__ int rtc_dw_at(int j, int u) {
    return (j * RTC_VEC + u) * 32 + (int)(threadIdx.x & 31);
}

// The column of shared entry i (the inverse of rtc_dw_at).
__device__ __forceinline__ int rtc_dw_col(int i) {
    const int lane = i % 32, ju = i / 32;
    return ((ju / RTC_VEC) * 32 + lane) * RTC_VEC + ju % RTC_VEC;
}

// This warp's K rows of C doubles in sh, the lane's entries zeroed.
__device__ __forceinline__ double* rtc_dw_rows(double* sh, int K, int C, int V) {
    double* dw = sh + (size_t)(threadIdx.x >> 5) * K * C;
    for (int k = 0; k < K; k++)
        RTC_WROW_FOR(j, V) for (int u = 0; u < RTC_VEC; u++) dw[k * C + rtc_dw_at(j, u)] = 0.0;
    return dw;
}

// After the rows (every thread of the block): partial[blockIdx.x] = the warps' rows summed,
// warp 0's first; K rows of C, by column.
__device__ __forceinline__ void rtc_dw_block(double* partial, const double* sh, int K, int C) {
    __syncthreads();
    for (int i = threadIdx.x; i < K * C; i += blockDim.x) {
        double s = 0.0;
        for (int w = 0; w < RTC_WROW_WARPS; w++) s += sh[(size_t)w * K * C + i];
        partial[(size_t)blockIdx.x * K * C + (size_t)(i / C) * C + rtc_dw_col(i % C)] = s;
    }
}

// out_k[c] (+)= the sum of the blocks' partials of column c, k = blockIdx.y: block (x, k)
// takes 32 columns, thread (c, y) of them sums partials y, y + RTC_DW_FINISH_Y, ... in
// order, then thread (c, 0) those RTC_DW_FINISH_Y sums in order (one thread per column
// summed hundreds of partials one after the other, a few blocks for the whole row). gdt:
// the outputs' storage (column_sums.cuh rtc_colsum_store).
#define RTC_DW_FINISH_Y 8
__global__ void dw_finish_kernel(void* out0, void* out1, const double* __restrict__ partial,
                                 int blocks, int K, int C, int as, rt_dtype gdt) {
    __shared__ double sh[RTC_DW_FINISH_Y][33];
    const int c = blockIdx.x * 32 + threadIdx.x, k = blockIdx.y;
    double s = 0.0;
    if (c < C)
        for (int b = threadIdx.y; b < blocks; b += RTC_DW_FINISH_Y)
            s += partial[((size_t)b * K + k) * C + c];
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    void* out = k == 0 ? out0 : out1;
    if (threadIdx.y != 0 || c >= C || !out) return;
    double t = 0.0;
    for (int y = 0; y < RTC_DW_FINISH_Y; y++) t += sh[y][threadIdx.x];
    rtc_colsum_store(out, c, t, as, gdt);
}

static void rtc_dw_finish(void* out0, void* out1, int K, int blocks, int C, int as,
                          rt_dtype gdt) {
    const dim3 grid((unsigned)((C + 31) / 32), (unsigned)K), block(32, RTC_DW_FINISH_Y);
    double* partial = rtc_get()->colsum_partials;
    dw_finish_kernel<<<grid, block, 0, rtc_stream()>>>(out0, out1, partial, blocks, K, C, as,
                                                       gdt);
    RTC_CHECK_LAUNCH(dw_finish_kernel);
}

// ----------------------------------------------------------------------------
// LayerNorm forward: out = (inp - mean) * rstd * weight + bias, one block per row

template <int R, class O, class I>
__global__ void __launch_bounds__(1024)  // RTC_LAUNCH_ROWS: at most 1024 threads
    layernorm_forward_kernel(O* out, float* mean, float* rstd, const I* inp,
                             const float* weight, const float* bias, int C,
                             float eps, rt_dtype dt) {
    const size_t n = blockIdx.x;
    const I* x = inp + n * C;
    O* o = out + n * C;
    const rtc_row_vals<R, I> xv(x, C, dt);
    const rtc_row_vals<R, float> wv(weight, weight ? C : 0, dt);
    const rtc_row_vals<R, float> bv(bias, bias ? C : 0, dt);
    double s = 0.0;
    RTC_ROW_FOR(k, c, R, C) s += xv[k];
    const double m = rtc_block_sum(s) / C;
    double v = 0.0;
    RTC_ROW_FOR(k, c, R, C) {
        const double d = xv[k] - m;
        v += d * d;
    }
    v = rtc_block_sum(v) / C;  // biased variance, as PyTorch's layer_norm
    const float mf = (float)m;
    const float rs = (float)(1.0 / sqrt(v + (double)eps));
    RTC_ROW_FOR(k, c, R, C) {
        float y = (xv[k] - mf) * rs;
        if (weight) y *= wv[k];
        if (bias) y += bv[k];
        rtc_st(o, c, y, dt);
    }
    if (threadIdx.x == 0) {
        if (mean) mean[n] = mf;
        if (rstd) rstd[n] = rs;
    }
}

// Row n of LayerNorm's output (po: packed) from the lane's values of the row, a warp per row.
__device__ __forceinline__ void rtc_layernorm_wrow(void* out, bool po, float* mean, float* rstd,
                                                   const rtc_wrow& x, const float* weight,
                                                   const float* bias, long n, int C, float eps,
                                                   rt_dtype dt) {
    const int V = C / RTC_WROW;
    double s = 0.0;
    RTC_WROW_FOR(j, V) for (int u = 0; u < RTC_VEC; u++) s += x.v[j][u];
    const double m = rtc_warp_sum(s) / C;
    double v = 0.0;
    RTC_WROW_FOR(j, V) for (int u = 0; u < RTC_VEC; u++) {
        const double d = x.v[j][u] - m;
        v += d * d;
    }
    v = rtc_warp_sum(v) / C;  // biased variance, as PyTorch's layer_norm
    const float mf = (float)m;
    const float rs = (float)(1.0 / sqrt(v + (double)eps));
    RTC_WROW_FOR(j, V) {
        float w[RTC_VEC], b[RTC_VEC], y[RTC_VEC];
        if (weight) rtc_ldv<RTC_VEC>(weight, rtc_wcol(j), dt, w);
        if (bias) rtc_ldv<RTC_VEC>(bias, rtc_wcol(j), dt, b);
        for (int u = 0; u < RTC_VEC; u++) {
            y[u] = (x.v[j][u] - mf) * rs;
            if (weight) y[u] *= w[u];
            if (bias) y[u] += b[u];
        }
        rtc_wst(rtc_wrow_at(out, po, n, C), po, rtc_wcol(j), y, dt);
    }
    if ((threadIdx.x & 31) == 0) {
        if (mean) mean[n] = mf;
        if (rstd) rstd[n] = rs;
    }
}

// The same, a warp per row (rtc_wrow_ok); packed: RT_PACKED_OUT (out), RT_PACKED_INP (inp).
__global__ void __launch_bounds__(32 * RTC_WROW_WARPS)
    layernorm_forward_wkernel(void* out, float* mean, float* rstd, const void* inp,
                              const float* weight, const float* bias, int N, int C, float eps,
                              int packed, rt_dtype dt) {
    const long n = rtc_wrow_index(N);
    if (n < 0) return;
    const bool pi = packed & RT_PACKED_INP;
    const rtc_wrow x(rtc_wrow_at(inp, pi, n, C), pi, C / RTC_WROW, dt);
    rtc_layernorm_wrow(out, packed & RT_PACKED_OUT, mean, rstd, x, weight, bias, n, C, eps, dt);
}

// packed: RT_PACKED_OUT (out), RT_PACKED_INP (inp).
static void layernorm_forward(void* out, float* mean, float* rstd, const void* inp,
                              const float* weight, const float* bias, int N, int C, float eps,
                              int packed, rt_dtype dt) {
    if (N <= 0 || C <= 0) return;
    if (rtc_wrow_ok(C, {out, inp, weight, bias})) {
        RTC_LAUNCH_WROWS(layernorm_forward_wkernel, N, out, mean, rstd, inp, weight, bias, N, C,
                         eps, packed, dt);
        return;
    }
    rtc_with_storage(packed & RT_PACKED_OUT, out, [&](auto o) {
        rtc_with_storage(packed & RT_PACKED_INP, inp, [&](auto x) {
            RTC_LAUNCH_ROWS(layernorm_forward_kernel, N, C, o, mean, rstd, x, weight, bias, C,
                            eps, dt);
        });
    });
}

void rt_layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                          const float* weight, const float* bias, int N, int C, float eps,
                          rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_layernorm_forward");
    layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps, 0, dt);
}

void rt_layernorm_packed_forward(void* out, float* mean, float* rstd, const void* inp,
                                 const float* weight, const float* bias, int N, int C, float eps,
                                 int packed, rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_layernorm_packed_forward");
    RT_KCHECK_PACKED_ROWS(C, "rt_layernorm_packed_forward");
    layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps, packed, dt);
}

// ----------------------------------------------------------------------------
// LayerNorm backward (accumulating). With xhat = (x - mean) * rstd and g = dout * weight:
//   dinp    += rstd * (g - mean(g) - xhat * mean(g * xhat))
//   dweight += sum_rows(dout * xhat),  dbias += sum_rows(dout)

template <int R, class G, class I, class D>
__global__ void __launch_bounds__(1024)  // RTC_LAUNCH_ROWS: at most 1024 threads
    layernorm_backward_dinp_kernel(G* __restrict__ dinp,
                                   const D* __restrict__ dout,
                                   const I* __restrict__ inp,
                                   const float* __restrict__ weight,
                                   const float* __restrict__ mean,
                                   const float* __restrict__ rstd, int C,
                                   rt_dtype dt, int as) {
    const size_t n = blockIdx.x;
    const I* x = inp + n * C;
    const D* d = dout + n * C;
    G* dx = dinp + n * C;
    const float mf = mean[n], rs = rstd[n];
    const rtc_row_vals<R, D> dv(d, C, dt);
    const rtc_row_vals<R, I> xv(x, C, dt);
    const rtc_row_vals<R, float> wv(weight, weight ? C : 0, dt);
    const rtc_row_vals<R, G> gv(dx, as ? 0 : C, dt);  // not read when assigning
    double sg = 0.0, sgx = 0.0;
    RTC_ROW_FOR(k, c, R, C) {
        const float xhat = (xv[k] - mf) * rs;
        const float g = weight ? dv[k] * wv[k] : dv[k];
        sg += g;
        sgx += (double)g * xhat;
    }
    sg = rtc_block_sum(sg);
    sgx = rtc_block_sum(sgx);
    const float mg = (float)(sg / C), mgx = (float)(sgx / C);
    RTC_ROW_FOR(k, c, R, C) {
        const float xhat = (xv[k] - mf) * rs;
        const float g = weight ? dv[k] * wv[k] : dv[k];
        rtc_st(dx, c, RT_KBASE(gv[k], as) + rs * (g - mg - xhat * mgx), dt);
    }
}

// The same, a warp per row (rtc_wrow_ok); packed: RT_PACKED_OUT (dout), RT_PACKED_INP
// (inp), RT_PACKED_DINP (dinp). DW: also dweight's and dbias's terms into partial
// (rtc_dw_blocks blocks, rtc_dw_smem(2, C) bytes of shared memory).
template <bool DW>
__global__ void __launch_bounds__(32 * RTC_WROW_WARPS)
    layernorm_backward_dinp_wkernel(void* dinp, const void* dout, const void* inp,
                                    const float* __restrict__ weight,
                                    const float* __restrict__ mean,
                                    const float* __restrict__ rstd, int N, int C, int packed,
                                    rt_dtype dt, int as, double* partial) {
    RTC_DW_SMEM_DECL(rtc_dw_sh);
    const int V = C / RTC_WROW;
    const bool pd = packed & RT_PACKED_OUT, pi = packed & RT_PACKED_INP,
               pg = packed & RT_PACKED_DINP;
    double* dw = DW ? rtc_dw_rows(rtc_dw_sh, 2, C, V) : NULL;
    RTC_WROW_EACH(n, N, DW) {
        const float mf = mean[n], rs = rstd[n];
        const rtc_wrow d(rtc_wrow_at(dout, pd, n, C), pd, V, dt);
        const rtc_wrow x(rtc_wrow_at(inp, pi, n, C), pi, V, dt);
        double sg = 0.0, sgx = 0.0;
        RTC_WROW_FOR(j, V) {
            float w[RTC_VEC];
            if (weight) rtc_ldv<RTC_VEC>(weight, rtc_wcol(j), dt, w);
            for (int u = 0; u < RTC_VEC; u++) {
                const float xhat = (x.v[j][u] - mf) * rs;
                const float g = weight ? d.v[j][u] * w[u] : d.v[j][u];
                sg += g;
                sgx += (double)g * xhat;
            }
        }
        sg = rtc_warp_sum(sg);
        sgx = rtc_warp_sum(sgx);
        const float mg = (float)(sg / C), mgx = (float)(sgx / C);
        rtc_wrow_store_dinp(rtc_wrow_at(dinp, pg, n, C), pg, d, weight, V, as, dt,
                            [&](int j, int u, float g) {
                                return rs * (g - mg - (x.v[j][u] - mf) * rs * mgx);
                            });
        if (DW)  // layernorm_dwb_term's: dweight's row, then dbias's
            RTC_WROW_FOR(j, V) for (int u = 0; u < RTC_VEC; u++) {
                const int e = rtc_dw_at(j, u);
                dw[e] += (double)d.v[j][u] * ((x.v[j][u] - mf) * rs);
                dw[C + e] += d.v[j][u];
            }
    }
    if (DW) rtc_dw_block(partial, rtc_dw_sh, 2, C);
}

// dweight += sum_rows(dout * xhat), dbias += sum_rows(dout), xhat = (inp - mean) * rstd
template <class I, class D>
struct layernorm_dwb_term {
    const D* dout;
    const I* inp;
    const float *mean, *rstd;
    int C;
    rt_dtype dt;
    __device__ void operator()(int r, int c, double* acc) const {
        const size_t i = (size_t)r * C + c;
        const float d = rtc_ld(dout, i, dt);
        acc[0] += (double)d * ((rtc_ld(inp, i, dt) - mean[r]) * rstd[r]);
        acc[1] += d;
    }
};

// gdt: the storage of dweight and dbias (rtc_colsum_store).
template <class G, class I, class D>
static void layernorm_backward_on(G* dinp, void* dweight, void* dbias, const D* dout,
                                  const I* inp, const float* weight, const float* mean,
                                  const float* rstd, int N, int C, rt_dtype dt, int assign,
                                  rt_dtype gdt) {
    if (dinp)
        RTC_LAUNCH_ROWS(layernorm_backward_dinp_kernel, N, C, dinp, dout, inp, weight, mean, rstd,
                        C, dt, assign & RT_ASSIGN_1);
    if (dweight || dbias)
        rtc_column_sums<2>(dweight, dbias, layernorm_dwb_term<I, D>{dout, inp, mean, rstd, C, dt},
                           N, C, assign & RT_ASSIGN_DWEIGHT, gdt);
}

// packed: RT_PACKED_OUT (dout), RT_PACKED_INP (inp), RT_PACKED_DINP (dinp), RT_PACKED_DWEIGHT
// (dweight and dbias).
static void layernorm_backward(void* dinp, void* dweight, void* dbias, const void* dout,
                               const void* inp, const float* weight, const float* mean,
                               const float* rstd, int N, int C, int packed, rt_dtype dt,
                               int assign) {
    const rt_dtype gdt = packed & RT_PACKED_DWEIGHT ? dt : RT_F32;
    if (C <= 0) return;
    if (N <= 0) {  // the assigned weight gradients are zeros
        for (void* g : {dweight, dbias})
            if (assign & RT_ASSIGN_DWEIGHT) rtc_colsum_zero(g, C, gdt);
        return;
    }
    if (dinp && rtc_wrow_ok(C, {dinp, dout, inp, weight})) {  // then only the column sums below
        const int blocks = dweight || dbias ? rtc_dw_blocks(2, N, C) : 0;
        if (blocks) {  // dweight's and dbias's terms too
            const size_t sm = rtc_dw_smem(2, C);
            double* part = rtc_get()->colsum_partials;
            layernorm_backward_dinp_wkernel<true><<<blocks, RTC_WROW_THREADS, sm, rtc_stream()>>>(
                dinp, dout, inp, weight, mean, rstd, N, C, packed, dt, assign & RT_ASSIGN_1, part);
            RTC_CHECK_LAUNCH(layernorm_backward_dinp_wkernel);
            rtc_dw_finish(dweight, dbias, 2, blocks, C, assign & RT_ASSIGN_DWEIGHT, gdt);
            return;
        }
        RTC_LAUNCH_WROWS(layernorm_backward_dinp_wkernel<false>, N, dinp, dout, inp, weight, mean,
                         rstd, N, C, packed, dt, assign & RT_ASSIGN_1, (double*)NULL);
        dinp = NULL;
    }
    rtc_with_storage(packed & RT_PACKED_DINP, dinp, [&](auto g) {
        rtc_with_storage(packed & RT_PACKED_OUT, dout, [&](auto d) {
            rtc_with_storage(packed & RT_PACKED_INP, inp, [&](auto x) {
                layernorm_backward_on(g, dweight, dbias, d, x, weight, mean, rstd, N, C, dt,
                                      assign, gdt);
            });
        });
    });
}

void rt_layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                           const float* inp, const float* weight, const float* mean,
                           const float* rstd, int N, int C, rt_dtype dt, int assign) {
    RT_KCHECK_DT(dt, "rt_layernorm_backward");
    layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, 0, dt, assign);
}

void rt_layernorm_packed_backward(void* dinp, void* dweight, void* dbias, const void* dout,
                                  const void* inp, const float* weight, const float* mean,
                                  const float* rstd, int N, int C, int packed, rt_dtype dt,
                                  int assign) {
    RT_KCHECK_PACKED_DT(dt, "rt_layernorm_packed_backward");
    RT_KCHECK_PACKED_ROWS(C, "rt_layernorm_packed_backward");
    RT_KCHECK_PACKED_DWEIGHT(packed, assign, "rt_layernorm_packed_backward");
    layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, packed, dt,
                       assign);
}

// ----------------------------------------------------------------------------
// RMSNorm forward: out = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) + eps)

template <int R, class O, class I>
__global__ void __launch_bounds__(1024)  // RTC_LAUNCH_ROWS: at most 1024 threads
    rmsnorm_forward_kernel(O* out, float* rstd, const I* inp, const float* weight,
                           int C, float eps, rt_dtype dt) {
    const size_t n = blockIdx.x;
    const I* x = inp + n * C;
    O* o = out + n * C;
    const rtc_row_vals<R, I> xv(x, C, dt);
    const rtc_row_vals<R, float> wv(weight, weight ? C : 0, dt);
    double ss = 0.0;
    RTC_ROW_FOR(k, c, R, C) {
        const double xc = xv[k];
        ss += xc * xc;
    }
    ss = rtc_block_sum(ss);
    const float rs = (float)(1.0 / sqrt(ss / C + (double)eps));
    RTC_ROW_FOR(k, c, R, C) {
        const float y = xv[k] * rs;
        rtc_st(o, c, weight ? y * wv[k] : y, dt);
    }
    if (threadIdx.x == 0 && rstd) rstd[n] = rs;
}

// Row n of RMSNorm's output (po: packed) from the lane's values of the row, a warp per row.
__device__ __forceinline__ void rtc_rmsnorm_wrow(void* out, bool po, float* rstd, const rtc_wrow& x,
                                                 const float* weight, long n, int C, float eps,
                                                 rt_dtype dt) {
    const int V = C / RTC_WROW;
    double ss = 0.0;
    RTC_WROW_FOR(j, V) for (int u = 0; u < RTC_VEC; u++) ss += (double)x.v[j][u] * x.v[j][u];
    ss = rtc_warp_sum(ss);
    const float rs = (float)(1.0 / sqrt(ss / C + (double)eps));
    RTC_WROW_FOR(j, V) {
        float w[RTC_VEC], y[RTC_VEC];
        if (weight) rtc_ldv<RTC_VEC>(weight, rtc_wcol(j), dt, w);
        for (int u = 0; u < RTC_VEC; u++) {
            y[u] = x.v[j][u] * rs;
            if (weight) y[u] *= w[u];
        }
        rtc_wst(rtc_wrow_at(out, po, n, C), po, rtc_wcol(j), y, dt);
    }
    if ((threadIdx.x & 31) == 0 && rstd) rstd[n] = rs;
}

// The same, a warp per row (rtc_wrow_ok); packed: RT_PACKED_OUT (out), RT_PACKED_INP (inp).
__global__ void __launch_bounds__(32 * RTC_WROW_WARPS)
    rmsnorm_forward_wkernel(void* out, float* rstd, const void* inp, const float* weight, int N,
                            int C, float eps, int packed, rt_dtype dt) {
    const long n = rtc_wrow_index(N);
    if (n < 0) return;
    const bool pi = packed & RT_PACKED_INP;
    const rtc_wrow x(rtc_wrow_at(inp, pi, n, C), pi, C / RTC_WROW, dt);
    rtc_rmsnorm_wrow(out, packed & RT_PACKED_OUT, rstd, x, weight, n, C, eps, dt);
}

// packed: RT_PACKED_OUT (out), RT_PACKED_INP (inp).
static void rmsnorm_forward(void* out, float* rstd, const void* inp, const float* weight, int N,
                            int C, float eps, int packed, rt_dtype dt) {
    if (N <= 0 || C <= 0) return;
    if (rtc_wrow_ok(C, {out, inp, weight})) {
        RTC_LAUNCH_WROWS(rmsnorm_forward_wkernel, N, out, rstd, inp, weight, N, C, eps, packed,
                         dt);
        return;
    }
    rtc_with_storage(packed & RT_PACKED_OUT, out, [&](auto o) {
        rtc_with_storage(packed & RT_PACKED_INP, inp, [&](auto x) {
            RTC_LAUNCH_ROWS(rmsnorm_forward_kernel, N, C, o, rstd, x, weight, C, eps, dt);
        });
    });
}

void rt_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N,
                        int C, float eps, rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_rmsnorm_forward");
    rmsnorm_forward(out, rstd, inp, weight, N, C, eps, 0, dt);
}

void rt_rmsnorm_packed_forward(void* out, float* rstd, const void* inp, const float* weight,
                               int N, int C, float eps, int packed, rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_rmsnorm_packed_forward");
    RT_KCHECK_PACKED_ROWS(C, "rt_rmsnorm_packed_forward");
    rmsnorm_forward(out, rstd, inp, weight, N, C, eps, packed, dt);
}

// ----------------------------------------------------------------------------
// A residual add and the norm of its sum (LN: LayerNorm, else RMSNorm) in one pass, a warp
// per row: the sum, rounded to dt, is stored and normalised from the registers it is in
// (the bits of the two kernels: the norm would read back exactly the rounded values).

template <bool LN>
__global__ void __launch_bounds__(32 * RTC_WROW_WARPS)
    residual_norm_forward_wkernel(void* sum, void* out, float* mean, float* rstd, const void* a,
                                  const void* b, const float* weight, const float* bias, int N,
                                  int C, float eps, int packed_add, int packed_norm, rt_dtype dt) {
    const long n = rtc_wrow_index(N);
    if (n < 0) return;
    const int V = C / RTC_WROW;
    const bool ps = packed_add & RT_PACKED_OUT, pa = packed_add & RT_PACKED_INP,
               pb = packed_add & RT_PACKED_INP2, po = packed_norm & RT_PACKED_OUT;
    rtc_wrow x(rtc_wrow_at(a, pa, n, C), pa, V, dt);
    const rtc_wrow y(rtc_wrow_at(b, pb, n, C), pb, V, dt);
    RTC_WROW_FOR(j, V) {
        for (int u = 0; u < RTC_VEC; u++) x.v[j][u] = rtc_round_to(x.v[j][u] + y.v[j][u], dt);
        rtc_wst(rtc_wrow_at(sum, ps, n, C), ps, rtc_wcol(j), x.v[j], dt);
    }
    if (LN) rtc_layernorm_wrow(out, po, mean, rstd, x, weight, bias, n, C, eps, dt);
    else rtc_rmsnorm_wrow(out, po, rstd, x, weight, n, C, eps, dt);
}

static void residual_norm_forward(bool ln, const char* name, void* sum, void* out, float* mean,
                                  float* rstd, const void* a, const void* b, const float* weight,
                                  const float* bias, int N, int C, float eps, int packed_add,
                                  int packed_norm, rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, name);
    RT_KCHECK_PACKED_ROWS(C, name);
    RT_KCHECK_RESIDUAL_NORM(packed_add, packed_norm, name);
    if (N <= 0 || C <= 0) return;
    if (!rtc_wrow_ok(C, {sum, out, a, b, weight, bias})) {  // the two kernels
        rt_residual_packed_forward(sum, a, b, (size_t)N * C, packed_add, dt);
        if (ln) layernorm_forward(out, mean, rstd, sum, weight, bias, N, C, eps, packed_norm, dt);
        else rmsnorm_forward(out, rstd, sum, weight, N, C, eps, packed_norm, dt);
        return;
    }
    if (ln)
        RTC_LAUNCH_WROWS(residual_norm_forward_wkernel<true>, N, sum, out, mean, rstd, a, b,
                         weight, bias, N, C, eps, packed_add, packed_norm, dt);
    else
        RTC_LAUNCH_WROWS(residual_norm_forward_wkernel<false>, N, sum, out, mean, rstd, a, b,
                         weight, bias, N, C, eps, packed_add, packed_norm, dt);
}

void rt_residual_rmsnorm_packed_forward(void* sum, void* out, float* rstd, const void* a,
                                        const void* b, const float* weight, int N, int C,
                                        float eps, int packed_add, int packed_norm, rt_dtype dt) {
    residual_norm_forward(false, "rt_residual_rmsnorm_packed_forward", sum, out, NULL, rstd, a, b,
                          weight, NULL, N, C, eps, packed_add, packed_norm, dt);
}

void rt_residual_layernorm_packed_forward(void* sum, void* out, float* mean, float* rstd,
                                          const void* a, const void* b, const float* weight,
                                          const float* bias, int N, int C, float eps,
                                          int packed_add, int packed_norm, rt_dtype dt) {
    residual_norm_forward(true, "rt_residual_layernorm_packed_forward", sum, out, mean, rstd, a,
                          b, weight, bias, N, C, eps, packed_add, packed_norm, dt);
}

// ----------------------------------------------------------------------------
// RMSNorm backward (accumulating). With xhat = x * rstd and g = dout * weight:
//   dinp += rstd * (g - xhat * mean(g * xhat)),  dweight += sum_rows(dout * xhat)

template <int R, class G, class I, class D>
__global__ void __launch_bounds__(1024)  // RTC_LAUNCH_ROWS: at most 1024 threads
    rmsnorm_backward_dinp_kernel(G* __restrict__ dinp,
                                 const D* __restrict__ dout,
                                 const I* __restrict__ inp,
                                 const float* __restrict__ weight,
                                 const float* __restrict__ rstd, int C, rt_dtype dt,
                                 int as) {
    const size_t n = blockIdx.x;
    const I* x = inp + n * C;
    const D* d = dout + n * C;
    G* dx = dinp + n * C;
    const float rs = rstd[n];
    const rtc_row_vals<R, D> dv(d, C, dt);
    const rtc_row_vals<R, I> xv(x, C, dt);
    const rtc_row_vals<R, float> wv(weight, weight ? C : 0, dt);
    const rtc_row_vals<R, G> gv(dx, as ? 0 : C, dt);  // not read when assigning
    double sgx = 0.0;
    RTC_ROW_FOR(k, c, R, C) {
        const float g = weight ? dv[k] * wv[k] : dv[k];
        sgx += (double)g * (xv[k] * rs);
    }
    sgx = rtc_block_sum(sgx);
    const float mgx = (float)(sgx / C);
    RTC_ROW_FOR(k, c, R, C) {
        const float g = weight ? dv[k] * wv[k] : dv[k];
        rtc_st(dx, c, RT_KBASE(gv[k], as) + rs * (g - (xv[k] * rs) * mgx), dt);
    }
}

// The same, a warp per row (rtc_wrow_ok); packed: RT_PACKED_OUT (dout), RT_PACKED_INP
// (inp), RT_PACKED_DINP (dinp). DW: also dweight's terms into partial (rtc_dw_blocks
// blocks, rtc_dw_smem(1, C) bytes of shared memory); a kernel of its own, so that the
// one-row kernel keeps its registers (168 against 255).
template <bool DW>
__global__ void __launch_bounds__(32 * RTC_WROW_WARPS)
    rmsnorm_backward_dinp_wkernel(void* dinp, const void* dout, const void* inp,
                                  const float* __restrict__ weight,
                                  const float* __restrict__ rstd, int N, int C, int packed,
                                  rt_dtype dt, int as, double* partial) {
    RTC_DW_SMEM_DECL(rtc_dw_sh);
    const int V = C / RTC_WROW;
    const bool pd = packed & RT_PACKED_OUT, pi = packed & RT_PACKED_INP,
               pg = packed & RT_PACKED_DINP;
    double* dw = DW ? rtc_dw_rows(rtc_dw_sh, 1, C, V) : NULL;
    RTC_WROW_EACH(n, N, DW) {
        const float rs = rstd[n];
        const rtc_wrow d(rtc_wrow_at(dout, pd, n, C), pd, V, dt);
        const rtc_wrow x(rtc_wrow_at(inp, pi, n, C), pi, V, dt);
        double sgx = 0.0;
        RTC_WROW_FOR(j, V) {
            float w[RTC_VEC];
            if (weight) rtc_ldv<RTC_VEC>(weight, rtc_wcol(j), dt, w);
            for (int u = 0; u < RTC_VEC; u++) {
                const float g = weight ? d.v[j][u] * w[u] : d.v[j][u];
                sgx += (double)g * (x.v[j][u] * rs);
            }
        }
        sgx = rtc_warp_sum(sgx);
        const float mgx = (float)(sgx / C);
        rtc_wrow_store_dinp(rtc_wrow_at(dinp, pg, n, C), pg, d, weight, V, as, dt,
                            [&](int j, int u, float g) {
                                return rs * (g - (x.v[j][u] * rs) * mgx);
                            });
        if (DW)  // rmsnorm_dw_term's
            RTC_WROW_FOR(j, V) for (int u = 0; u < RTC_VEC; u++)
                dw[rtc_dw_at(j, u)] += (double)d.v[j][u] * (x.v[j][u] * rs);
    }
    if (DW) rtc_dw_block(partial, rtc_dw_sh, 1, C);
}

// dweight += sum_rows(dout * inp * rstd)
template <class I, class D>
struct rmsnorm_dw_term {
    const D* dout;
    const I* inp;
    const float* rstd;
    int C;
    rt_dtype dt;
    __device__ void operator()(int r, int c, double* acc) const {
        const size_t i = (size_t)r * C + c;
        acc[0] += (double)rtc_ld(dout, i, dt) * (rtc_ld(inp, i, dt) * rstd[r]);
    }
};

// gdt: the storage of dweight (rtc_colsum_store).
template <class G, class I, class D>
static void rmsnorm_backward_on(G* dinp, void* dweight, const D* dout, const I* inp,
                                const float* weight, const float* rstd, int N, int C, rt_dtype dt,
                                int assign, rt_dtype gdt) {
    if (dinp)
        RTC_LAUNCH_ROWS(rmsnorm_backward_dinp_kernel, N, C, dinp, dout, inp, weight, rstd, C, dt,
                        assign & RT_ASSIGN_1);
    if (dweight)
        rtc_column_sums<1>(dweight, NULL, rmsnorm_dw_term<I, D>{dout, inp, rstd, C, dt}, N, C,
                           assign & RT_ASSIGN_DWEIGHT, gdt);
}

// packed: RT_PACKED_OUT (dout), RT_PACKED_INP (inp), RT_PACKED_DINP (dinp), RT_PACKED_DWEIGHT
// (dweight).
static void rmsnorm_backward(void* dinp, void* dweight, const void* dout, const void* inp,
                             const float* weight, const float* rstd, int N, int C, int packed,
                             rt_dtype dt, int assign) {
    const rt_dtype gdt = packed & RT_PACKED_DWEIGHT ? dt : RT_F32;
    if (C <= 0) return;
    if (N <= 0) {  // the assigned weight gradient is zeros
        if (assign & RT_ASSIGN_DWEIGHT) rtc_colsum_zero(dweight, C, gdt);
        return;
    }
    if (dinp && rtc_wrow_ok(C, {dinp, dout, inp, weight})) {  // then only the column sums below
        const int blocks = dweight ? rtc_dw_blocks(1, N, C) : 0;
        if (blocks) {  // dweight's terms too
            const size_t sm = rtc_dw_smem(1, C);
            double* part = rtc_get()->colsum_partials;
            rmsnorm_backward_dinp_wkernel<true><<<blocks, RTC_WROW_THREADS, sm, rtc_stream()>>>(
                dinp, dout, inp, weight, rstd, N, C, packed, dt, assign & RT_ASSIGN_1, part);
            RTC_CHECK_LAUNCH(rmsnorm_backward_dinp_wkernel);
            rtc_dw_finish(dweight, NULL, 1, blocks, C, assign & RT_ASSIGN_DWEIGHT, gdt);
            return;
        }
        RTC_LAUNCH_WROWS(rmsnorm_backward_dinp_wkernel<false>, N, dinp, dout, inp, weight, rstd, N,
                         C, packed, dt, assign & RT_ASSIGN_1, (double*)NULL);
        dinp = NULL;
    }
    rtc_with_storage(packed & RT_PACKED_DINP, dinp, [&](auto g) {
        rtc_with_storage(packed & RT_PACKED_OUT, dout, [&](auto d) {
            rtc_with_storage(packed & RT_PACKED_INP, inp, [&](auto x) {
                rmsnorm_backward_on(g, dweight, d, x, weight, rstd, N, C, dt, assign, gdt);
            });
        });
    });
}

void rt_rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                         const float* weight, const float* rstd, int N, int C, rt_dtype dt,
                         int assign) {
    RT_KCHECK_DT(dt, "rt_rmsnorm_backward");
    rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, 0, dt, assign);
}

void rt_rmsnorm_packed_backward(void* dinp, void* dweight, const void* dout, const void* inp,
                                const float* weight, const float* rstd, int N, int C, int packed,
                                rt_dtype dt, int assign) {
    RT_KCHECK_PACKED_DT(dt, "rt_rmsnorm_packed_backward");
    RT_KCHECK_PACKED_ROWS(C, "rt_rmsnorm_packed_backward");
    RT_KCHECK_PACKED_DWEIGHT(packed, assign, "rt_rmsnorm_packed_backward");
    rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, packed, dt, assign);
}

// Lets the backward kernels with weight gradients take RTC_DW_SMEM of dynamic shared
// memory (above the default 48 KiB): a per-device function attribute, set when a thread's
// context is created (rtc_get), so launches, captured ones included, set nothing; and
// their grid, two blocks per SM.
void rtc_norm_init(rtc_ctx* c) {
    RT_CHECK_CUDA(cudaFuncSetAttribute((const void*)rmsnorm_backward_dinp_wkernel<true>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, RTC_DW_SMEM));
    RT_CHECK_CUDA(cudaFuncSetAttribute((const void*)layernorm_backward_dinp_wkernel<true>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, RTC_DW_SMEM));
    int sms = 0;   // one attribute: cudaGetDeviceProperties reads them all (milliseconds)
    RT_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, c->device));
    c->dw_blocks = 2 * (sms > 0 ? sms : 1);
}
