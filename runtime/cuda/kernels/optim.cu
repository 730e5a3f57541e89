// Optimizer steps and gradient clipping on the GPU, one fused kernel per step over a whole
// flat shard (param, grad and state read and written once). Same semantics and the same
// float expressions as runtime/cpu/optim/*.c, through the element functions of
// optim_math.cuh; with -fmad=false and IEEE sqrt/division the GPU step gives the CPU
// step's bits. param, grad and the state buffers are device pointers.
//
// Two entry points per step, one kernel behind both: rt_optim.h's (step count and norm are
// host arguments, their scalars computed on the host) and rt_cuda.h's graph-safe variants
// (step count, lr and norm read from device memory when the kernel runs, so a captured
// graph replays correctly at every step). Adam's per-step scalars are computed once per block,
// by its first thread, in the step's one kernel.
// A step may also write its new values, rounded, into one rank's unsharded parameters kept
// across steps (rt_cuda_cast): the bf16/fp16 copy of the fp32 master parameters.
// One launch per group's sharded buffer, not one over several groups' (a foreach): at one
// rank each group steps beside the backward as soon as its gradients are reduced.
#include "cuda_common.cuh"
#include "optim_math.cuh"

// ----------------------------------------------------------------------------
// SGD (first: the step is the first one, momentum_buf is born from the gradient; read from
// d_step when it is not NULL, and the lr from d_lr)

// The optimizer step count of the k-th of `per` optimizer steps in training step *d_step.
__device__ __forceinline__ int64_t step_count(const int64_t* d_step, int k, int per) {
    return (*d_step - 1) * per + k;
}

// The elements a step updates, as rtc_flat<W> calls f: every one without a mask, else those
// of the rows whose mask entry equals looked_up (rt_cuda_rows). Block b takes rows b,
// b + gridDim.x, ... and skips a row with one load of its mask entry (the flat loop divided
// each group's index by the row length and read the mask: 33 M times a step for Llama 1B's
// embedding, of whose 128256 rows a step looks up at most 8192); W = RTC_VEC only where the
// row length is a multiple of it (a group never straddles two rows).
template <int W, class F>
__device__ __forceinline__ void rtc_stepped(const rt_cuda_rows& r, size_t n, F f) {
    if (!r.mask) {
        rtc_flat<W>(n, f);
        return;
    }
    const size_t len = (size_t)r.row_len;
    for (size_t row = blockIdx.x; row * len < n; row += gridDim.x) {
        if (((int64_t)row < r.vocab && r.mask[row] != 0) != (r.looked_up != 0)) continue;
        const size_t at = row * len, m = n - at < len ? n - at : len;
        rtc_groups<W>(m, threadIdx.x, blockDim.x, [&](auto w, size_t i) { f(w, at + i); });
    }
}

// Blocks of a step's launch over n elements (W of them a group): a block per row at most
// RTC_ROWS_BLOCKS of them with a mask (rtc_stepped), else rtc_blocks'.
static const size_t RTC_ROWS_BLOCKS = 4096;
static unsigned stepped_blocks(const rt_cuda_rows& r, size_t n, int W) {
    if (!r.mask) return rtc_blocks((n + (size_t)W - 1) / (size_t)W, RTC_THREADS);
    const size_t rows = (n + (size_t)r.row_len - 1) / (size_t)r.row_len;
    return (unsigned)(rows < RTC_ROWS_BLOCKS ? rows : RTC_ROWS_BLOCKS);
}

// The rows a launch steps, by value (no mask: every element), checked.
static rt_cuda_rows rows_arg(const rt_cuda_rows* rows) {
    RT_KCHECK(!rows || (rows->row_len > 0 && rows->vocab >= 0), "rows of at least one element",
              "an optimizer step by rows with an empty row");
    return rows ? *rows : rt_cuda_rows{};
}

// The cast of a launch by value (none: no runs), checked.
static rt_cuda_cast cast_arg(const rt_cuda_cast* cast) {
    RT_KCHECK(!cast || (cast->un && (cast->runs || cast->nruns == 0) && cast->nruns >= 0 &&
                        cast->base >= 0),
              "a cast with its unsharded params and runs", "an optimizer step with a bad cast");
    return cast && cast->nruns ? *cast : rt_cuda_cast{};
}

// Values v of shard elements i.. (K of them) into the unsharded params (rt_cuda_cast): the
// run at or before the first by bisection, the next ones by stepping. A group inside one
// packed run at a 16-byte boundary of the unsharded params (a parameter's interior, where
// shard and unsharded offsets agree mod K, as at one rank) is one 16-byte store, not K
// 2-byte ones.
template <int K>
__device__ __forceinline__ void rtc_cast_store(const rt_cuda_cast& c, size_t i, const float (&v)[K]) {
    if (!c.runs) return;
    int64_t e = c.base + (int64_t)i;
    int r = -1;
    for (int lo = 0, hi = c.nruns - 1; lo <= hi;) {
        const int mid = (lo + hi) / 2;
        if (c.runs[mid].src <= e) r = mid, lo = mid + 1;
        else hi = mid - 1;
    }
    if constexpr (K > 1) {
        if (r >= 0 && c.runs[r].packed && e + K <= c.runs[r].src + c.runs[r].n) {
            const int64_t j = c.runs[r].dst + (e - c.runs[r].src);
            if (j % K == 0 && (uintptr_t)c.un % 16 == 0) {
                rtc_stv((uint16_t*)c.un, (size_t)j, v, c.dt);
                return;
            }
        }
    }
    for (int u = 0; u < K; u++, e++) {
        while (r + 1 < c.nruns && c.runs[r + 1].src <= e) r++;
        if (r < 0 || e >= c.runs[r].src + c.runs[r].n) continue;
        const int64_t j = c.runs[r].dst + (e - c.runs[r].src);
        if (c.runs[r].packed) rtc_st((uint16_t*)c.un, (size_t)j, v[u], c.dt);
        else rtc_st((float*)c.un, (size_t)j, v[u], c.dt);
    }
}

// A gradient value: the grad's rounded to gdt (G float), or a packed one's (G uint16_t,
// 16-bit values of gdt: exact), or zero without grads (rt_cuda_rows); a looked-up row's
// gradient is set to 0 once read (rt_cuda.h rt_cuda_rows).
template <class G>
__device__ __forceinline__ float rtc_grad_take(G* grad, size_t i, rt_dtype gdt,
                                               const rt_cuda_rows& r) {
    if (!grad) return 0.0f;
    const float g = rtc_round_to(rtc_ld(grad, i, gdt), gdt);
    if (r.looked_up) grad[i] = G(0);
    return g;
}

// gdt: the gradients are read rounded to it (in-place gradients, rt_cuda.h; RT_F32: as
// they are). G: their storage, float or packed 16-bit (uint16_t).
template <class G>
__global__ void sgd_kernel(float* __restrict__ param, G* __restrict__ grad,
                           float* __restrict__ momentum_buf, size_t n, rtc_sgd_scalars s,
                           int first, const int64_t* __restrict__ d_step, int k, int per,
                           const double* __restrict__ d_lr, rt_dtype gdt, rt_cuda_rows rows,
                           rt_cuda_cast cast) {
    if (d_step) first = step_count(d_step, k, per) <= 1;
    if (d_lr) s.neg_lr = (float)(-*d_lr);  // rtc_sgd_scalars_of's rounding
    rtc_stepped<1>(rows, n, [&](auto, size_t i) {
        const float p[1] = {rtc_sgd_elem(s, first, param[i], rtc_grad_take(grad, i, gdt, rows),
                                         s.use_momentum ? momentum_buf + i : (float*)NULL)};
        param[i] = p[0];
        rtc_cast_store(cast, i, p);
    });
}

// packed: grad holds 16-bit values of gdt (rt_cuda.h packed_grads).
static void sgd_launch(float* param, void* grad, float* momentum_buf, size_t n,
                       int64_t step, const int64_t* d_step, int k, int per, double lr,
                       const double* d_lr, double momentum, double dampening,
                       double weight_decay, int nesterov, rt_dtype gdt, int packed,
                       const rt_cuda_rows* rows, const rt_cuda_cast* cast) {
    const rtc_sgd_scalars s = rtc_sgd_scalars_of(lr, momentum, dampening, weight_decay, nesterov);
    const rt_cuda_rows r = rows_arg(rows);
    const rt_cuda_cast c = cast_arg(cast);
    if (n == 0) return;
    rtc_with_storage(packed, grad, [&](auto g) {
        sgd_kernel<<<stepped_blocks(r, n, 1), RTC_THREADS, 0, rtc_stream()>>>(
            param, g, momentum_buf, n, s, step <= 1, d_step, k, per, d_lr, gdt, r, c);
        RTC_CHECK_LAUNCH(sgd_kernel);
    });
}

void rt_sgd_step(float* param, const float* grad, float* momentum_buf, size_t n, int64_t step,
                 double lr, double momentum, double dampening, double weight_decay,
                 int nesterov) {
    sgd_launch(param, (float*)grad, momentum_buf, n, step, NULL, 1, 1, lr, NULL, momentum,
               dampening, weight_decay, nesterov, RT_F32, 0, NULL, NULL);  // no rows: grad only read
}

// Packed gradients (rt_cuda.h packed_grads) are 16-bit values of grad_dt.
#define RTC_KCHECK_PACKED_GRADS(packed_grads, grad_dt, kernel)                              \
    RT_KCHECK(!(packed_grads) || (grad_dt) == RT_BF16 || (grad_dt) == RT_F16,               \
              "packed gradients are 16-bit: grad_dt RT_BF16 or RT_F16",                     \
              "%s with packed gradients of dtype %d", kernel, (int)(grad_dt))

void rt_cuda_sgd_step_rows_dev(float* p, void* g, float* momentum_buf, size_t n,
                               const int64_t* d_step, int k, int per, const double* d_lr,
                               double momentum, double dampening, double weight_decay,
                               int nesterov, rt_dtype grad_dt, int packed_grads,
                               const rt_cuda_rows* rows, const rt_cuda_cast* cast) {
    RT_KCHECK(d_step != NULL && d_lr != NULL, "pass the step counter's and the lr's device addresses",
              "rt_cuda_sgd_step_dev without a step counter or lr");
    RT_KCHECK(k >= 1 && k <= per, "k in 1..per (the k-th of per optimizer steps)",
              "rt_cuda_sgd_step_dev with k out of range");
    RTC_KCHECK_PACKED_GRADS(packed_grads, grad_dt, "rt_cuda_sgd_step_rows_dev");
    sgd_launch(p, g, momentum_buf, n, 0, d_step, k, per, 0.0, d_lr, momentum, dampening,
               weight_decay, nesterov, grad_dt, packed_grads, rows, cast);
}

void rt_cuda_sgd_step_dev(float* p, const float* g, float* momentum_buf, size_t n,
                          const int64_t* d_step, int k, int per, const double* d_lr,
                          double momentum, double dampening, double weight_decay, int nesterov,
                          rt_dtype grad_dt) {
    rt_cuda_sgd_step_rows_dev(p, (float*)g, momentum_buf, n, d_step, k, per, d_lr, momentum,
                              dampening, weight_decay, nesterov, grad_dt, 0, NULL, NULL);  // g only read
}

// ----------------------------------------------------------------------------
// Adam / AdamW (scalars by value, or, with d_step, from the device step count and lr)

// The device step count, for adam_kernel: d_step NULL for scalars by value.
typedef struct {
    rtc_adam_hyper h;
    const int64_t* d_step;
    int k, per;
    const double* d_lr;
} adam_dev_step;

// W = RTC_VEC: 16-byte accesses, eight values of each of the four buffers in flight per
// thread (a Llama 1B step's AdamW, 42 GB of traffic, ran at 2.8 TB/s with 4-byte ones; a
// packed gradient's eight values are one 16-byte access). gdt and G as for sgd_kernel.
// With d.d_step, each block's first thread computes the step's scalars (a few double
// operations: the same function, so the same bits, as the host's) for the block, so the
// step is one launch and the captured graph serves every step.
template <int W, class G>
__global__ void adam_kernel(float* __restrict__ param, G* __restrict__ grad,
                            float* __restrict__ exp_avg, float* __restrict__ exp_avg_sq, size_t n,
                            rtc_adam_scalars s, adam_dev_step d, rt_dtype gdt, rt_cuda_rows rows,
                            rt_cuda_cast cast) {
    __shared__ rtc_adam_scalars block_sc;
    rtc_adam_scalars sc = s;
    if (d.d_step) {
        if (threadIdx.x == 0) {
            d.h.lr = *d.d_lr;
            block_sc = rtc_adam_scalars_at(d.h, step_count(d.d_step, d.k, d.per));
        }
        __syncthreads();
        sc = block_sc;
    }
    rtc_stepped<W>(rows, n, [&](auto w, size_t i) {
        constexpr int K = decltype(w)::value;
        float p[K], g[K] = {}, m[K], v[K];
        rtc_ldv(param, i, RT_F32, p);
        if (grad) rtc_ldv(grad, i, gdt, g);  // fp32 storage: as stored (gdt rounds below)
        if (grad && rows.looked_up) {  // its gradient set to 0 once read (rt_cuda_rows)
            const float zero[K] = {};
            rtc_stv(grad, i, zero, gdt);
        }
        rtc_ldv(exp_avg, i, RT_F32, m);
        rtc_ldv(exp_avg_sq, i, RT_F32, v);
        for (int u = 0; u < K; u++)
            p[u] = rtc_adam_elem(sc, p[u], rtc_round_to(g[u], gdt), &m[u], &v[u]);
        rtc_stv(exp_avg, i, m, RT_F32);
        rtc_stv(exp_avg_sq, i, v, RT_F32);
        rtc_stv(param, i, p, RT_F32);
        rtc_cast_store(cast, i, p);
    });
}

// With rows, groups of RTC_VEC only where they cannot straddle two rows. packed: g holds
// 16-bit values of gdt (rt_cuda.h packed_grads).
static void adam_launch(float* p, void* g, float* m, float* v, size_t n,
                        rtc_adam_scalars s, adam_dev_step d, rt_dtype gdt, int packed,
                        rt_cuda_rows r, rt_cuda_cast c = rt_cuda_cast{}) {
    if (n == 0) return;
    const bool vec = rtc_aligned16({p, g, m, v}) && (!r.mask || r.row_len % RTC_VEC == 0);
    rtc_with_storage(packed, g, [&](auto gs) {
        if (vec)
            adam_kernel<RTC_VEC><<<stepped_blocks(r, n, RTC_VEC), RTC_THREADS, 0, rtc_stream()>>>(
                p, gs, m, v, n, s, d, gdt, r, c);
        else
            adam_kernel<1><<<stepped_blocks(r, n, 1), RTC_THREADS, 0, rtc_stream()>>>(
                p, gs, m, v, n, s, d, gdt, r, c);
        RTC_CHECK_LAUNCH(adam_kernel);
    });
}

static rtc_adam_hyper adam_hyper(double lr, double beta1, double beta2, double eps,
                                 double weight_decay, int adamw) {
    rtc_adam_hyper h = {lr, beta1, beta2, eps, adamw ? 0.0 : weight_decay,
                        adamw ? weight_decay : 0.0};
    return h;
}

void rt_adam_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, size_t n,
                  int64_t step, double lr, double beta1, double beta2, double eps,
                  double weight_decay) {
    const rtc_adam_scalars s =
        rtc_adam_scalars_at(adam_hyper(lr, beta1, beta2, eps, weight_decay, 0), step);
    adam_launch(param, (float*)grad, exp_avg, exp_avg_sq, n, s, adam_dev_step{}, RT_F32, 0,
                rows_arg(NULL));
}

void rt_adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, size_t n,
                   int64_t step, double lr, double beta1, double beta2, double eps,
                   double weight_decay) {
    const rtc_adam_scalars s =
        rtc_adam_scalars_at(adam_hyper(lr, beta1, beta2, eps, weight_decay, 1), step);
    adam_launch(param, (float*)grad, exp_avg, exp_avg_sq, n, s, adam_dev_step{}, RT_F32, 0,
                rows_arg(NULL));
}

void rt_cuda_adam_step_rows_dev(float* p, void* g, float* m, float* v, size_t n,
                                const int64_t* d_step, int k, int per, const double* d_lr,
                                double beta1, double beta2, double eps, double weight_decay,
                                int adamw, rt_dtype grad_dt, int packed_grads,
                                const rt_cuda_rows* rows, const rt_cuda_cast* cast) {
    RT_KCHECK(d_step != NULL && d_lr != NULL, "pass the step counter's and the lr's device addresses",
              "rt_cuda_adam_step_dev without a step counter or lr");
    RT_KCHECK(k >= 1 && k <= per, "k in 1..per (the k-th of per optimizer steps)",
              "rt_cuda_adam_step_dev with k out of range");
    RTC_KCHECK_PACKED_GRADS(packed_grads, grad_dt, "rt_cuda_adam_step_rows_dev");
    const rt_cuda_rows r = rows_arg(rows);
    const rt_cuda_cast c = cast_arg(cast);
    if (n == 0) return;
    const adam_dev_step d = {adam_hyper(0.0, beta1, beta2, eps, weight_decay, adamw), d_step, k,
                             per, d_lr};
    adam_launch(p, g, m, v, n, rtc_adam_scalars{}, d, grad_dt, packed_grads, r, c);
}

void rt_cuda_adam_step_dev(float* p, const float* g, float* m, float* v, size_t n,
                           const int64_t* d_step, int k, int per, const double* d_lr,
                           double beta1, double beta2, double eps, double weight_decay, int adamw,
                           rt_dtype grad_dt) {
    rt_cuda_adam_step_rows_dev(p, (float*)g, m, v, n, d_step, k, per, d_lr, beta1, beta2, eps,
                               weight_decay, adamw, grad_dt, 0, NULL, NULL);  // no rows: g only read
}

__global__ void rows_mark_kernel(uint8_t* __restrict__ mask, int64_t vocab,
                                 const int32_t* __restrict__ tokens, size_t n) {
    RTC_GRID_STRIDE(i, n) {
        const int32_t t = tokens[i];
        if (t >= 0 && t < vocab) mask[t] = 1;  // every writer stores the same byte
    }
}

void rt_cuda_rows_mark(uint8_t* mask, int64_t vocab, const int32_t* tokens, size_t n) {
    RTC_LAUNCH_FLAT(rows_mark_kernel, n, mask, vocab, tokens, n);
}

// ----------------------------------------------------------------------------
// gradient clipping: the coefficient from a host norm (rt_clip_coef, the CPU backend's
// arithmetic) or from the total sum of squares in device memory (rt_cuda_clip_by_total);
// scaling by exactly 1 is skipped, as on the CPU

float rt_clip_coef(double total_norm, double max_norm) {
    return rtc_clip_coef(total_norm, max_norm);
}

__global__ void clip_scale_kernel(float* __restrict__ grad, size_t n, float coef,
                                  const float* __restrict__ d_total_sumsq, double max_norm) {
    if (d_total_sumsq) coef = rtc_clip_coef(sqrt((double)*d_total_sumsq), max_norm);
    if (coef == 1.0f) return;
    RTC_GRID_STRIDE(i, n) grad[i] *= coef;
}

float rt_clip_grad_norm(float* grad, size_t n, double total_norm, double max_norm) {
    const float coef = rt_clip_coef(total_norm, max_norm);
    if (coef != 1.0f)
        RTC_LAUNCH_FLAT(clip_scale_kernel, n, grad, n, coef, (const float*)NULL, max_norm);
    return coef;
}

void rt_cuda_clip_by_total(float* x, size_t n, const float* d_total_sumsq, double max_norm) {
    RT_KCHECK(d_total_sumsq != NULL, "pass the total sum of squares' device address",
              "rt_cuda_clip_by_total without a norm");
    RTC_LAUNCH_FLAT(clip_scale_kernel, n, x, n, 1.0f, d_total_sumsq, max_norm);
}

// ----------------------------------------------------------------------------
// the global norm's sum of squares, on the device (deterministic: rtc_reduce_sum)

__global__ void double_to_float_kernel(float* out, const double* in) { out[0] = (float)in[0]; }

void rt_cuda_sumsq_accumulate(double* d_acc, const float* x, size_t n) {
    rtc_reduce_sum(rtc_get(), x, n, 1, NULL, d_acc);
}

void rt_cuda_sumsq_to_float(float* d_out, const double* d_acc) {
    double_to_float_kernel<<<1, 1, 0, rtc_stream()>>>(d_out, d_acc);
    RTC_CHECK_LAUNCH(double_to_float_kernel);
}
