// Losses on the GPU: the "sum" loss of the PyTorch tests and cross-entropy with mean
// reduction, fused with its softmax (no probabilities buffer): same contracts as
// runtime/cpu/kernels/loss.c. loss, losses, logits, targets and dlogits are device
// pointers. Means and sums are in double and deterministic: per-block partial results in
// the thread's context scratch, added in a fixed order by a second kernel.
// rt_cross_entropy_forward_backward fuses the two when the loss's backward follows its
// forward (llm.c style): one row statistics pass serves both, and a packed row is staged in
// shared memory as far as it fits, so that the gradient pass does not read it from DRAM again.
// A block per row, however long the row (Llama's 128256 logits too): with thousands of rows
// a step the grid fills the GPU; splitting rows over blocks would pay with few rows only.
#include "cp_async.cuh"
#include "cuda_common.cuh"

// ----------------------------------------------------------------------------
// sum loss: loss = sum(logits) in double; backward dlogits += *dloss (a device scalar)

__global__ void add_scalar_kernel(float* __restrict__ x, size_t n, const float* __restrict__ v,
                                  int as) {
    const float d = *v;
    RTC_GRID_STRIDE(i, n) x[i] = RT_KBASE(x[i], as) + d;
}

void rt_sum_loss_forward(float* loss, const float* logits, size_t n) {
    rtc_reduce_sum(rtc_get(), logits, n, 0, loss, NULL);
}

void rt_sum_loss_backward(float* dlogits, size_t n, const float* dloss, int assign) {
    if (n == 0) return;
    add_scalar_kernel<<<rtc_blocks(n, RTC_THREADS), RTC_THREADS, 0, rtc_stream()>>>(
        dlogits, n, dloss, assign & RT_ASSIGN_1);
    RTC_CHECK_LAUNCH(add_scalar_kernel);
}

// ----------------------------------------------------------------------------
// cross-entropy: loss_n = logsumexp(logits[n,:]) - logits[n, target_n], mean over the rows
// whose target is not RT_IGNORE_INDEX

// max and sum(exp(x - max)) of one row, over the whole block (every thread gets both), in
// one read of the row (a Llama row of 128256 logits is 500 KB, and the rows in flight
// overflow L2, so a second pass would read DRAM again): each thread keeps a running max m
// and the sum of exp(x - m) (in double, rescaled when m grows); the block then rescales the
// threads' sums to the row max. Agrees with the CPU's two passes within a few float
// roundings of the sum (one per rescale).
// Loads in flight: a 1024-thread block of these kernels fills an SM's registers alone (64
// a thread at most, __launch_bounds__), so its own loads are all the SM has in flight. A
// thread takes RTC_CE_GROUPS groups of RTC_VEC elements at a time, all loaded before any is
// used: 16 bytes each where the row is 16-byte aligned (rtc_ce_aligned; 32 KB in flight
// per SM of packed rows), else element by element. The elements' order is the same either
// way, so packed and fp32 rows of the same values give the same bits. One element per
// iteration read GPT-2's logits at 1.7 TB/s on an H100; eight 2-byte elements (f4f6038)
// kept 16 KB in flight per SM. Four groups need 95 registers (ptxas, sm_90a), and spill at
// 64.
enum { RTC_CE_GROUPS = 2 };

// Whether rows x (and dx) are read (and written) 16 bytes at a time.
__device__ __forceinline__ bool rtc_ce_aligned(const void* x, const void* dx) {
    return ((uintptr_t)x | (uintptr_t)dx) % 16 == 0;
}

// v = elements i .. i + RTC_VEC - 1 of row x, one 16-byte load or (vec false) one at a time.
template <class S>
__device__ __forceinline__ void rtc_ce_ld(const S* x, size_t i, rt_dtype dt, bool vec,
                                          float (&v)[RTC_VEC]) {
    if (vec) {
        rtc_ldv(x, i, dt, v);
    } else {
        for (int e = 0; e < RTC_VEC; e++) v[e] = rtc_ld(x, i + e, dt);
    }
}

// A thread's running (m, s) with N more values v (the padding -inf: exp gives 0 for it),
// rescaled once when the max grows. While m is -inf, s is 0, or NaN once a NaN was seen
// (the CPU's sum is NaN then too).
template <int N>
__device__ __forceinline__ void rtc_lse_add(float& m, double& s, const float* v) {
    float mu = m;
#pragma unroll
    for (int u = 0; u < N; u++)
        if (v[u] > mu) mu = v[u];
    if (mu > m) {
        s *= expf(m - mu);  // 0 while m is -inf (or NaN): s is 0 (or NaN) then
        m = mu;
    }
    if (m != -INFINITY) {
#pragma unroll
        for (int u = 0; u < N; u++) s += expf(v[u] - m);
    } else {  // every v is -inf (exp gives 0) or NaN
        for (int u = 0; u < N; u++)
            if (isnan(v[u])) s = NAN;
    }
}

// Logits and their gradients are fp32 values, or (S = uint16_t) packed 16-bit values of dt
// (rt_kernels.h "packed 16-bit storage"), read and stored by rtc_ld(v) / rtc_st(v).
// Groups g < staged (rtc_ce_stage) are read from st, the shared memory copy of x's first
// groups; the others from x.
template <class S>
__device__ __forceinline__ void rtc_row_lse(const S* x, const S* st, int staged, int V,
                                            rt_dtype dt, float* mx_out, double* sum_out) {
    const bool vec = rtc_ce_aligned(x, NULL);
    const int groups = V / RTC_VEC;
    float m = -INFINITY;
    double s = 0.0;
    for (int g0 = threadIdx.x; g0 < groups; g0 += RTC_CE_GROUPS * blockDim.x) {
        float v[RTC_CE_GROUPS][RTC_VEC];
#pragma unroll
        for (int u = 0; u < RTC_CE_GROUPS; u++) {
            const int g = g0 + u * (int)blockDim.x;
            if (g < groups)
                rtc_ce_ld(g < staged ? st : x, (size_t)g * RTC_VEC, dt, vec, v[u]);
            else
                for (int e = 0; e < RTC_VEC; e++) v[u][e] = -INFINITY;
        }
        rtc_lse_add<RTC_CE_GROUPS * RTC_VEC>(m, s, &v[0][0]);
    }
    for (int j = groups * RTC_VEC + threadIdx.x; j < V; j += blockDim.x) {
        const float v = rtc_ld(x, j, dt);
        rtc_lse_add<1>(m, s, &v);
    }
    const float mx = rtc_block_max(m);
    *mx_out = mx;
    *sum_out = rtc_block_sum(m == -INFINITY ? s : s * expf(m - mx));  // s: 0, or NaN
}

// ----------------------------------------------------------------------------
// backward (accumulating): dlogits += (softmax - onehot(target)) * dloss / M, M the number
// of non-ignored rows (counted first, with the targets checked, into the scratch)

__global__ void ce_count_kernel(double* __restrict__ count_out,
                                const int32_t* __restrict__ targets, int N, int V) {
    double c = 0.0;
    for (int n = threadIdx.x; n < N; n += blockDim.x) {
        const int32_t t = targets[n];
        if (t == RT_IGNORE_INDEX) continue;
        if (t < 0 || t >= V)
            RTC_DEVICE_FAIL(RT_KHINT_TARGET, RT_KMSG_TARGET,
                            (int)t, n, V);
        c += 1.0;
    }
    c = rtc_block_sum(c);
    if (threadIdx.x == 0) count_out[0] = c;
}

// dlogits row n from the row's statistics (mx, s) (block-wide; count > 0, target t kept).
// Each element alone, so its bits do not depend on the grouping: RTC_CE_GROUPS groups of
// RTC_VEC elements at a time as rtc_row_lse, 16 bytes at a time where both rows are 16-byte
// aligned; groups g < staged read from st, as rtc_row_lse.
template <class S>
__device__ __forceinline__ void rtc_ce_grad_row(S* __restrict__ dx, const S* __restrict__ x,
                                                const S* st, int staged, int V, int32_t t,
                                                float mx, double s, double count,
                                                const float* dloss, rt_dtype dt, int as) {
    const double g = (double)*dloss / count;
    const float gs = (float)(g / s);  // softmax_j * g = exp(x_j - mx) * (g / s)
    const float gf = (float)g;
    auto grad = [&](float v, float d, size_t j) {  // the CPU kernel's two steps, in its order
        float r = (as ? 0.0f : d) + expf(v - mx) * gs;
        if (j == (size_t)t) r -= gf;
        return r;
    };
    const bool vec = rtc_ce_aligned(x, dx);
    const int groups = V / RTC_VEC;
    for (int g0 = threadIdx.x; g0 < groups; g0 += RTC_CE_GROUPS * blockDim.x) {
        float v[RTC_CE_GROUPS][RTC_VEC], d[RTC_CE_GROUPS][RTC_VEC] = {};
#pragma unroll
        for (int u = 0; u < RTC_CE_GROUPS; u++) {
            const int gu = g0 + u * (int)blockDim.x;
            if (gu < groups) {
                rtc_ce_ld(gu < staged ? st : x, (size_t)gu * RTC_VEC, dt, vec, v[u]);
                if (!as) rtc_ce_ld(dx, (size_t)gu * RTC_VEC, dt, vec, d[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < RTC_CE_GROUPS; u++) {
            const int gu = g0 + u * (int)blockDim.x;
            if (gu >= groups) break;
            const size_t i = (size_t)gu * RTC_VEC;
            for (int e = 0; e < RTC_VEC; e++) d[u][e] = grad(v[u][e], d[u][e], i + e);
            if (vec)
                rtc_stv(dx, i, d[u], dt);
            else
                for (int e = 0; e < RTC_VEC; e++) rtc_st(dx, i + e, d[u][e], dt);
        }
    }
    for (int j = groups * RTC_VEC + threadIdx.x; j < V; j += blockDim.x)
        rtc_st(dx, j, grad(rtc_ld(x, j, dt), as ? 0.0f : rtc_ld(dx, j, dt), j), dt);
}

// A row without contribution (ignored, or every row ignored): assigned rows become zeros.
template <class S>
__device__ __forceinline__ void rtc_ce_no_grad_row(S* dx, int V, int as) {
    if (as)
        for (int j = threadIdx.x; j < V; j += blockDim.x) dx[j] = 0;
}

__global__ void __launch_bounds__(1024)  // rtc_row_threads: at most 1024 threads
ce_backward_kernel(float* __restrict__ dlogits, const float* __restrict__ logits,
                   const int32_t* __restrict__ targets, const double* __restrict__ count_in,
                   int V, const float* dloss, rt_dtype dt, int as) {
    const double count = count_in[0];
    const size_t n = blockIdx.x;
    const int32_t t = targets[n];
    float* dx = dlogits + n * V;
    if (count == 0.0 || t == RT_IGNORE_INDEX) {  // block-uniform
        rtc_ce_no_grad_row(dx, V, as);
        return;
    }
    const float* x = logits + n * V;
    float mx;
    double s;
    rtc_row_lse(x, x, 0, V, dt, &mx, &s);
    rtc_ce_grad_row(dx, x, x, 0, V, t, mx, s, count, dloss, dt, as);
}

// ----------------------------------------------------------------------------
// staged rows: the fused kernel's packed row copied into shared memory (as much of it as
// fits) before its statistics pass, which reads the copy, as does the gradient pass. The
// logits are then read from DRAM once, not twice: on Llama 1B (8192 rows of 128256 bf16
// logits, 256.5 KB each) an H100's 227 KB of shared memory per block holds 88% of a row, and
// the rest, read twice, is 4 MB over the 132 rows in flight, which L2 holds between the
// passes. The groups are read in the same order from either place: the same bits.

// Dynamic shared memory of ce_forward_kernel (the emulator's: tests/cuda/cuda_emu.h).
#ifndef RTC_CE_SMEM_DECL
#define RTC_CE_SMEM_DECL(name) extern __shared__ __align__(16) unsigned char name[]
#endif

// Groups [0, staged) of packed row x (16 bytes each) into st by cp.async, every copy of the
// thread in flight at once, then waited for. Thread i copies the groups g with
// g % blockDim.x == i, the ones it reads in rtc_row_lse and rtc_ce_grad_row, so no barrier
// is needed before those read them or before the next row overwrites them.
__device__ __forceinline__ void rtc_ce_stage(uint16_t* st, const uint16_t* x, int staged) {
    for (int g = threadIdx.x; g < staged; g += blockDim.x)
        rtc_cp8(st + (size_t)g * RTC_VEC, x + (size_t)g * RTC_VEC, true);
    rtc_cp_commit();
    rtc_cp_wait<0>();
}

// The groups of each row that ce_forward_kernel stages for a launch with dlogits: packed
// rows (16-byte aligned: rows of RT_LD16 elements) only, at most the context's ce_stage bytes.
template <class S>
static int rtc_ce_staged(const rtc_ctx* c, const S* dlogits, const S* logits, int V) {
    if (sizeof(S) != 2 || !dlogits || ((uintptr_t)dlogits | (uintptr_t)logits) % 16) return 0;
    const size_t fit = c->ce_stage / 16, groups = (size_t)(V / RTC_VEC);
    return (int)(groups < fit ? groups : fit);
}

// ----------------------------------------------------------------------------
// forward, alone or with the backward

// The forward: block b handles rows b, b + gridDim.x, ... (row n at n * ld); its (sum of
// losses, count) go to partial[b] and partial[gridDim.x + b], the rows' losses to `losses`
// when not NULL. With dlogits (rt_cross_entropy_(packed_)forward_backward; count_in from
// ce_count_kernel) also each row's gradient, from the statistics its loss used (the
// backward kernel's function: the same bits), so the logits are read once less; a packed
// row's padding columns [V, ld) are zeroed (the head's backward sums over them). Its first
// `staged` groups are read from shared memory (rtc_ce_stage; 16 bytes of it each).
template <class S>
__global__ void __launch_bounds__(1024)  // rtc_row_threads: at most 1024 threads
ce_forward_kernel(double* __restrict__ partial, float* __restrict__ losses,
                  S* __restrict__ dlogits, const S* __restrict__ logits, int ld,
                  const int32_t* __restrict__ targets, const double* __restrict__ count_in, int N,
                  int V, const float* dloss, rt_dtype dt, int as, int staged) {
    RTC_CE_SMEM_DECL(rtc_ce_sh);
    S* st = (S*)rtc_ce_sh;
    double total = 0.0, count = 0.0;
    for (int n = blockIdx.x; n < N; n += gridDim.x) {
        const int32_t t = targets[n];  // the same for the whole block: no divergence
        if (t != RT_IGNORE_INDEX && (t < 0 || t >= V)) {
            if (threadIdx.x == 0)
                RTC_DEVICE_FAIL(RT_KHINT_TARGET, RT_KMSG_TARGET,
                                (int)t, n, V);
            return;
        }
        S* dx = dlogits ? dlogits + (size_t)n * ld : NULL;
        if (dx)
            for (int j = V + threadIdx.x; j < ld; j += blockDim.x) dx[j] = 0;
        if (t == RT_IGNORE_INDEX) {
            if (threadIdx.x == 0 && losses) losses[n] = 0.0f;
            if (dx) rtc_ce_no_grad_row(dx, V, as);
            continue;
        }
        const S* x = logits + (size_t)n * ld;
        if constexpr (sizeof(S) == 2) rtc_ce_stage(st, x, staged);
        float mx;
        double s;
        rtc_row_lse(x, st, staged, V, dt, &mx, &s);
        if (threadIdx.x == 0) {
            const double l = log(s) + (double)mx - (double)rtc_ld(x, t, dt);
            if (losses) losses[n] = (float)l;
            total += l;
            count += 1.0;
        }
        if (dx) rtc_ce_grad_row(dx, x, st, staged, V, t, mx, s, count_in[0], dloss, dt, as);
    }
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = total;
        partial[gridDim.x + blockIdx.x] = count;
    }
}

// loss[0] = sum(partial totals) / sum(partial counts), in block order; 0/0 = NaN when
// every target is ignored, as PyTorch's mean reduction.
__global__ void ce_final_kernel(float* loss, const double* partial, int nparts) {
    double total = 0.0, count = 0.0;
    for (int b = 0; b < nparts; b++) {
        total += partial[b];
        count += partial[nparts + b];
    }
    loss[0] = (float)(total / count);
}

// No rows: the mean of nothing, 0/0 = NaN, written on the stream (and no gradient rows).
static bool ce_no_rows(float* loss, int N, int V) {
    if (N > 0 && V > 0) return false;
    ce_final_kernel<<<1, 1, 0, rtc_stream()>>>(loss, rtc_get()->scratch, 0);
    RTC_CHECK_LAUNCH(ce_final_kernel);
    return true;
}

// The loss (and per-row losses, and with dlogits the gradient: ce_forward_kernel) of N, V > 0
// rows of ld elements of S, in two launches. The partials start at scratch[0], below the
// count's slot (RTC_RESULT_SLOT + 1, ce_count).
template <class S>
static void ce_forward(float* loss, float* losses, S* dlogits, const S* logits, int ld,
                       const int32_t* targets, const double* count, int N, int V, const float* dloss,
                       rt_dtype dt, int as) {
    rtc_ctx* ctx = rtc_get();
    const int parts = N < RTC_PARTIALS ? N : RTC_PARTIALS;
    const int staged = rtc_ce_staged(ctx, dlogits, logits, V);
    const size_t smem = (size_t)staged * 16;
    ce_forward_kernel<S><<<(unsigned)parts, rtc_row_threads(V), smem, rtc_stream()>>>(
        ctx->scratch, losses, dlogits, logits, ld, targets, count, N, V, dloss, dt, as, staged);
    RTC_CHECK_LAUNCH(ce_forward_kernel);
    ce_final_kernel<<<1, 1, 0, rtc_stream()>>>(loss, ctx->scratch, parts);
    RTC_CHECK_LAUNCH(ce_final_kernel);
}

void rt_cross_entropy_forward(float* loss, float* losses, const float* logits,
                              const int32_t* targets, int N, int V) {
    if (ce_no_rows(loss, N, V)) return;
    ce_forward<float>(loss, losses, NULL, logits, V, targets, NULL, N, V, NULL, RT_F32, 0);
}

// ----------------------------------------------------------------------------
// backward entry points

// M (the rows kept) into the context scratch, the targets checked: the backward's first step.
static double* ce_count(rtc_ctx* ctx, const int32_t* targets, int N, int V) {
    double* count = ctx->scratch + RTC_RESULT_SLOT + 1;
    ce_count_kernel<<<1, 1024, 0, rtc_stream()>>>(count, targets, N, V);
    RTC_CHECK_LAUNCH(ce_count_kernel);
    return count;
}

void rt_cross_entropy_backward(float* dlogits, const float* logits, const int32_t* targets,
                               int N, int V, const float* dloss, rt_dtype dt, int assign) {
    RT_KCHECK_DT(dt, "rt_cross_entropy_backward");
    if (N <= 0 || V <= 0) return;
    const double* count = ce_count(rtc_get(), targets, N, V);
    ce_backward_kernel<<<(unsigned)N, rtc_row_threads(V), 0, rtc_stream()>>>(
        dlogits, logits, targets, count, V, dloss, dt, assign & RT_ASSIGN_1);
    RTC_CHECK_LAUNCH(ce_backward_kernel);
}

// Loss and gradient in one pass; rows of ld elements of S. N, V > 0.
template <class S>
static void ce_forward_backward(S* dlogits, float* loss, const S* logits, int ld,
                                const int32_t* targets, int N, int V, const float* dloss, rt_dtype dt,
                                int assign) {
    const double* count = ce_count(rtc_get(), targets, N, V);
    ce_forward(loss, NULL, dlogits, logits, ld, targets, count, N, V, dloss, dt,
               assign & RT_ASSIGN_1);
}

void rt_cross_entropy_forward_backward(float* dlogits, float* loss, const float* logits,
                                       const int32_t* targets, int N, int V, const float* dloss,
                                       rt_dtype dt, int assign) {
    RT_KCHECK_DT(dt, "rt_cross_entropy_forward_backward");
    if (ce_no_rows(loss, N, V)) return;
    ce_forward_backward(dlogits, loss, logits, V, targets, N, V, dloss, dt, assign);
}

void rt_cross_entropy_packed_forward_backward(void* dlogits16, float* loss, const void* logits16,
                                              const int32_t* targets, int N, int V,
                                              const float* dloss, rt_dtype dt, int assign) {
    RT_KCHECK_PACKED_DT(dt, "rt_cross_entropy_packed_forward_backward");
    if (ce_no_rows(loss, N, V)) return;
    ce_forward_backward((uint16_t*)dlogits16, loss, (const uint16_t*)logits16, RT_LD16(V),
                        targets, N, V, dloss, dt, assign);
}

// Lets the packed fused kernel stage a row in all the shared memory a block may have (the
// device's opt-in maximum less the kernel's static shared memory): a per-device function
// attribute, set when a thread's context is created (rtc_get), as norm.cu's.
void rtc_loss_init(rtc_ctx* c) {
    int optin = 0;
    RT_CHECK_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                         c->device));
    cudaFuncAttributes a;
    RT_CHECK_CUDA(cudaFuncGetAttributes(&a, (const void*)ce_forward_kernel<uint16_t>));
    const size_t stage =
        (size_t)optin > a.sharedSizeBytes ? (optin - a.sharedSizeBytes) & ~(size_t)15 : 0;
    RT_CHECK_CUDA(cudaFuncSetAttribute((const void*)ce_forward_kernel<uint16_t>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)stage));
    c->ce_stage = c->ce_stage_max = stage;
}

void rt_cuda_set_loss_stage(size_t bytes) {
    rtc_ctx* c = rtc_get();
    c->ce_stage = (bytes < c->ce_stage_max ? bytes : c->ce_stage_max) & ~(size_t)15;
}
