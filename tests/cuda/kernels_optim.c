// test_cuda_kernels: the optimizers and clipping (device step counts, by rows, packed gradients).
#include "kernel_tests.h"

// ----------------------------------------------------------------------------
// optimizers and clipping (three steps each; the GPU is expected to give the CPU's bits),
// with the host step count (rt_optim.h) and with the step count in device memory
// (rt_cuda.h's graph-safe variants, counted as the k-th of two optimizer steps per step)

static void set_dev_step(int64_t* d_step, int64_t step) {
    RT_CHECK_CUDA(cudaMemcpy(d_step, &step, sizeof step, cudaMemcpyHostToDevice));
}

static void set_dev_lr(double* d_lr, double lr) {
    RT_CHECK_CUDA(cudaMemcpy(d_lr, &lr, sizeof lr, cudaMemcpyHostToDevice));
}

// In-place gradients (rt_cuda.h grad_dt): the device steps read fp32 gradients rounded to
// bf16 (AdamW) or fp16 (SGD with momentum) as they load them, the bits of the CPU steps on
// gradients rounded first (three steps of each).
void test_optim_grad_round(void) {
    const size_t n = 10007;
    int64_t* d_step = dalloc(sizeof(int64_t));
    double* d_lr = dalloc(sizeof(double));
    set_dev_lr(d_lr, 1e-2);
    for (int kind = 0; kind < 2; kind++) {
        const rt_dtype dt = kind ? RT_F16 : RT_BF16;
        float *p = hrand(n, 1.0f, 0.0f), *m = hrand(n, 0.0f, 0.0f), *v = hrand(n, 0.0f, 0.0f);
        float *d_p = dup(p, n), *d_m = dup(m, n), *d_v = dup(v, n);
        int changed = 0;
        for (int64_t step = 1; step <= 3; step++) {
            float* g = hrand(n, 1.0f, 0.0f);
            float* d_g = dup(g, n);  // unrounded
            for (size_t i = 0; i < n; i++) {
                const float r = rt_round_inl(g[i], dt);
                changed += r != g[i];
                g[i] = r;
            }
            set_dev_step(d_step, step);
            if (kind) {
                cpu_rt_sgd_step(p, g, m, n, step, 1e-2, 0.9, 0.1, 0.01, 0);
                rt_cuda_sgd_step_dev(d_p, d_g, d_m, n, d_step, 1, 1, d_lr, 0.9, 0.1, 0.01, 0, dt);
            } else {
                cpu_rt_adamw_step(p, g, m, v, n, step, 1e-2, 0.9, 0.95, 1e-8, 0.1);
                rt_cuda_adam_step_dev(d_p, d_g, d_m, d_v, n, d_step, 1, 1, d_lr, 0.9, 0.95, 1e-8,
                                      0.1, 1, dt);
            }
            free(g), dfree(d_g);
        }
        char nm[128];
        snprintf(nm, sizeof nm, "%s reading fp32 gradients rounded to %s: param after 3 steps",
                 kind ? "sgd momentum" : "adamw", kind ? "fp16" : "bf16");
        CHECK(changed > (int)n, "%s: %d of %zu gradients change when rounded", nm, changed, 3 * n);
        cmp(nm, d_p, p, n, TOL_EXACT);
        cmp("  ... exp_avg / momentum_buf", d_m, m, n, TOL_EXACT);
        if (!kind) cmp("  ... exp_avg_sq", d_v, v, n, TOL_EXACT);
        free(p), free(m), free(v);
        dfree(d_p), dfree(d_m), dfree(d_v);
    }
    dfree(d_step), dfree(d_lr);
}

// The device side of the row tests below: twelve tokens (ids out of range included, which
// mark nothing) marked into a mask of vocab rows, a step counter and an lr of 1e-2.
static const int32_t rows_tokens[12] = {3, 29, 3, 0, 17, -1, 30, 11, 17, 5, 64, 22};
typedef struct {
    int32_t* d_tokens;
    uint8_t* d_mask;
    int64_t* d_step;
    double* d_lr;
} rows_dev;

static rows_dev rows_dev_make(int64_t vocab) {
    rows_dev r = {dup_i32(rows_tokens, 12), (uint8_t*)dalloc((size_t)vocab),
                  dalloc(sizeof(int64_t)), dalloc(sizeof(double))};
    set_dev_lr(r.d_lr, 1e-2);
    RT_CHECK_CUDA(cudaMemset(r.d_mask, 0, (size_t)vocab));
    rt_cuda_rows_mark(r.d_mask, vocab, r.d_tokens, 12);
    return r;
}

static void rows_dev_free(rows_dev r) {
    dfree(r.d_tokens), dfree(r.d_mask), dfree(r.d_step), dfree(r.d_lr);
}

// An optimizer step by rows (rt_cuda_rows, rt_step_optimizer_rows): the rows no token looks
// up stepped without gradients, then the looked-up rows with them, give the bits of the CPU
// step over every row with the unused rows' gradients zero, and leave the looked-up rows'
// gradients 0 and the others' as they were. Rows past the vocab are never looked up; the
// tokens include ids out of range, which mark nothing; the unused rows' device gradients are
// garbage (the first pass must not read them, the second must skip them). Also with the
// unused rows stepped with their gradients (RT_ROWS_FINAL: a tied embedding's, which the
// output head gave them), which the looked-up rows' pass must not read again. Row lengths
// 16 (groups of RTC_VEC) and 6 (one element at a time), AdamW and SGD with momentum, two
// steps; `rows` past optim.cu's RTC_ROWS_BLOCKS (4096) make a block take several rows.
void test_optim_rows(int64_t rows, int64_t vocab) {
    const int64_t ntok = 12;
    const int32_t* tokens = rows_tokens;
    const rows_dev dev = rows_dev_make(vocab);
    uint8_t* d_mask = dev.d_mask;
    int64_t* d_step = dev.d_step;
    double* d_lr = dev.d_lr;
    int* looked = calloc((size_t)rows, sizeof *looked);
    if (!looked) abort();
    for (int i = 0; i < ntok; i++)
        if (tokens[i] >= 0 && tokens[i] < vocab) looked[tokens[i]] = 1;
    for (int c = 0; c < 8; c++) {
        const int64_t row_len = c % 2 ? 6 : 16;
        const int sgd = c / 2 % 2, final = c >= 4;
        const size_t n = (size_t)(rows * row_len);
        float *p = hrand(n, 1.0f, 0.0f), *m = hrand(n, 0.1f, 0.0f), *v = hrand(n, 0.1f, 0.1f);
        for (size_t i = 0; i < n; i++) v[i] = v[i] * v[i];
        float *d_p = dup(p, n), *d_m = dup(m, n), *d_v = dup(v, n);
        float* left = hrand(n, 0.0f, 0.0f);
        for (int64_t step = 1; step <= 2; step++) {
            float* g = hrand(n, 1.0f, 0.0f);
            float* d_g = dup(g, n);  // every row's gradient on the device: garbage where unused
            for (size_t i = 0; i < n; i++)  // what the device's gradients become
                if (looked[i / (size_t)row_len]) left[i] = 0.0f;
                else left[i] = g[i], g[i] = final ? g[i] : 0.0f;
            set_dev_step(d_step, step);
            for (int pass = 0; pass < 2; pass++) {
                const rt_cuda_rows sel = {d_mask, vocab, row_len, pass};
                float* dg = pass || final ? d_g : NULL;
                if (sgd)
                    rt_cuda_sgd_step_rows_dev(d_p, dg, d_m, n, d_step, 1, 1, d_lr, 0.9, 0.1, 0.01, 0,
                                              RT_BF16, 0, &sel, NULL);
                else
                    rt_cuda_adam_step_rows_dev(d_p, dg, d_m, d_v, n, d_step, 1, 1, d_lr, 0.9, 0.95,
                                               1e-8, 0.1, 1, RT_BF16, 0, &sel, NULL);
            }
            cmp("  ... grads after the looked-up rows' step", d_g, left, n, TOL_EXACT);
            for (size_t i = 0; i < n; i++) g[i] = rt_round_inl(g[i], RT_BF16);
            if (sgd)
                cpu_rt_sgd_step(p, g, m, n, step, 1e-2, 0.9, 0.1, 0.01, 0);
            else
                cpu_rt_adamw_step(p, g, m, v, n, step, 1e-2, 0.9, 0.95, 1e-8, 0.1);
            free(g), dfree(d_g);
        }
        char nm[128];
        snprintf(nm, sizeof nm, "%s by rows (%lld rows of %lld, vocab %lld; unused rows first, "
                 "%s): param after 2 steps", sgd ? "sgd momentum" : "adamw", (long long)rows,
                 (long long)row_len, (long long)vocab, final ? "with their gradients" : "no gradient");
        cmp(nm, d_p, p, n, TOL_EXACT);
        cmp("  ... exp_avg / momentum_buf", d_m, m, n, TOL_EXACT);
        if (!sgd) cmp("  ... exp_avg_sq", d_v, v, n, TOL_EXACT);
        free(p), free(m), free(v), free(left);
        dfree(d_p), dfree(d_m), dfree(d_v);
    }
    rows_dev_free(dev);
    free(looked);
}

// Two device buffers of n floats, bit for bit: prints how many differ and the largest
// difference.
static void cmp_dev_bits(const char* name, const float* da, const float* db, size_t n) {
    float *a = down(da, n), *b = down(db, n);
    size_t differ = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&a[i], &b[i], sizeof a[i]) == 0) continue;
        differ++;
        const double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= worst)) worst = d;  // NaN-sticky
    }
    free(a), free(b);
    CHECK(differ == 0, "%s: %zu values, %zu differ in bits, max diff %.3g", name, n, differ,
          worst);
}

// Packed gradients (rt_cuda.h packed_grads): the graph-safe steps reading n 16-bit values of
// bf16 (AdamW) or fp16 (SGD with momentum) give the param and state bits of the same steps
// on fp32 gradients holding those values, two steps each: over every element (groups of
// RTC_VEC with a tail of 7; the buffers one element off their alignment: one at a time), and
// by rows (rt_cuda_rows: row lengths 16 and 6, the unused rows without gradients, then the
// looked-up ones). The looked-up rows' packed gradients become 16-bit zeros, the others'
// stay as they were (all of them without rows).
void test_optim_packed_grads(void) {
    const int64_t rows = 37, vocab = 30, ntok = 12;
    const int32_t* tokens = rows_tokens;
    const rows_dev dev = rows_dev_make(vocab);
    uint8_t* d_mask = dev.d_mask;
    int64_t* d_step = dev.d_step;
    double* d_lr = dev.d_lr;
    int looked[37] = {0};
    for (int i = 0; i < ntok; i++)
        if (tokens[i] >= 0 && tokens[i] < vocab) looked[tokens[i]] = 1;
    for (int c = 0; c < 8; c++) {
        const int sgd = c & 1, mode = c >> 1;  // 0 aligned, 1 off by one, 2 and 3 by rows
        const rt_dtype dt = sgd ? RT_F16 : RT_BF16;
        const int64_t row_len = mode == 3 ? 6 : 16;
        const size_t n = mode < 2 ? 10007 : (size_t)(rows * row_len), o = mode == 1;
        float *p = hrand(n + o, 1.0f, 0.0f), *m = hrand(n + o, 0.1f, 0.0f),
              *v = hrand(n + o, 0.1f, 0.1f);
        for (size_t i = 0; i < n + o; i++) v[i] = v[i] * v[i];
        float *d_p = dup(p, n + o), *d_m = dup(m, n + o), *d_v = dup(v, n + o);  // fp32 grads
        float *e_p = dup(p, n + o), *e_m = dup(m, n + o), *e_v = dup(v, n + o);  // packed
        size_t wrong = 0;  // packed gradients not as the step leaves them
        for (int64_t step = 1; step <= 2; step++) {
            float* g = hrand(n + o, 1.0f, 0.0f);
            round_to(g, n + o, dt);
            uint16_t* h16 = bits16(g, n + o, dt);
            float* d_g = dup(g, n + o);
            uint16_t* d_g16 = dalloc((n + o) * 2);
            RT_CHECK_CUDA(cudaMemcpy(d_g16, h16, (n + o) * 2, cudaMemcpyHostToDevice));
            set_dev_step(d_step, step);
            for (int pass = mode < 2; pass < 2; pass++) {  // without rows: one pass
                const rt_cuda_rows sel = {d_mask, vocab, row_len, pass};
                const rt_cuda_rows* r = mode < 2 ? NULL : &sel;
                float* dg = pass ? d_g + o : NULL;
                void* dg16 = pass ? (void*)(d_g16 + o) : NULL;
                if (sgd) {
                    rt_cuda_sgd_step_rows_dev(d_p + o, dg, d_m + o, n, d_step, 1, 1, d_lr, 0.9,
                                              0.1, 0.01, 0, dt, 0, r, NULL);
                    rt_cuda_sgd_step_rows_dev(e_p + o, dg16, e_m + o, n, d_step, 1, 1, d_lr, 0.9,
                                              0.1, 0.01, 0, dt, 1, r, NULL);
                } else {
                    rt_cuda_adam_step_rows_dev(d_p + o, dg, d_m + o, d_v + o, n, d_step, 1, 1,
                                               d_lr, 0.9, 0.95, 1e-8, 0.1, 1, dt, 0, r, NULL);
                    rt_cuda_adam_step_rows_dev(e_p + o, dg16, e_m + o, e_v + o, n, d_step, 1, 1,
                                               d_lr, 0.9, 0.95, 1e-8, 0.1, 1, dt, 1, r, NULL);
                }
            }
            uint16_t* left = down16(d_g16, n + o);
            for (size_t i = 0; i < n + o; i++) {
                const int zeroed = mode >= 2 && looked[i / (size_t)row_len];
                wrong += left[i] != (zeroed ? 0 : h16[i]);
            }
            free(g), free(h16), free(left), dfree(d_g), dfree(d_g16);
        }
        char nm[200];
        snprintf(nm, sizeof nm, "%s, packed %s gradients (%s; n %zu) == fp32 gradients of the "
                 "same values: param after 2 steps", sgd ? "sgd momentum" : "adamw",
                 sgd ? "fp16" : "bf16",
                 mode == 0 ? "every element, groups of 8" : mode == 1 ? "every element, one "
                 "element off alignment" : mode == 2 ? "by rows of 16" : "by rows of 6", n);
        cmp_dev_bits(nm, e_p + o, d_p + o, n);
        cmp_dev_bits("  ... exp_avg / momentum_buf", e_m + o, d_m + o, n);
        if (!sgd) cmp_dev_bits("  ... exp_avg_sq", e_v + o, d_v + o, n);
        CHECK(wrong == 0, "  ... packed gradients after the steps: %s, %zu values not",
              mode >= 2 ? "the looked-up rows' zeros, the others' as they were" : "unchanged",
              wrong);
        free(p), free(m), free(v);
        dfree(d_p), dfree(d_m), dfree(d_v), dfree(e_p), dfree(e_m), dfree(e_v);
    }
    rows_dev_free(dev);
}

void test_optim(void) {
    const size_t n = 10007;
    float* g[3] = {hrand(n, 1.0f, 0.0f), hrand(n, 0.1f, 0.0f), hrand(n, 3.0f, 0.0f)};
    float* d_g[3] = {dup(g[0], n), dup(g[1], n), dup(g[2], n)};
    int64_t* d_step = dalloc(sizeof(int64_t));
    double* d_lr = dalloc(sizeof(double));
    for (int kind = 0; kind < 5; kind++) {
        static const char* names[5] = {"sgd", "sgd momentum+dampening+wd", "sgd nesterov+wd",
                                       "adam wd=0.01", "adamw"};
        float *p = hrand(n, 1.0f, 0.0f), *m = hrand(n, 0.0f, 0.0f), *v = hrand(n, 0.0f, 0.0f);
        float *d_p = dup(p, n), *d_m = dup(m, n), *d_v = dup(v, n);
        float *e_p = dup(p, n), *e_m = dup(m, n), *e_v = dup(v, n);  // device-step variant
        for (int64_t step = 1; step <= 3; step++) {
            const float* gs = g[step - 1];
            const float* d_gs = d_g[step - 1];
            // The device count as a step of two optimizer steps each: training step
            // (step + 1) / 2, its optimizer step k = 1, 2, 1: counts 1, 2, 3 again.
            const int k = (int)((step - 1) % 2 + 1);
            set_dev_step(d_step, (step + 1) / 2);
            // A different lr at each step (a schedule): the device variant reads it from d_lr.
            const double f = 1.0 / (double)(step + 2);
            double lr = (kind == 2 ? 0.15 : kind > 2 ? 3e-2 : 0.3) * f;
            set_dev_lr(d_lr, lr);
            switch (kind) {
                case 0:
                    cpu_rt_sgd_step(p, gs, NULL, n, step, lr, 0.0, 0.0, 0.0, 0);
                    rt_sgd_step(d_p, d_gs, NULL, n, step, lr, 0.0, 0.0, 0.0, 0);
                    rt_cuda_sgd_step_dev(e_p, d_gs, NULL, n, d_step, k, 2, d_lr, 0.0, 0.0, 0.0, 0, RT_F32);
                    break;
                case 1:
                    cpu_rt_sgd_step(p, gs, m, n, step, lr, 0.9, 0.1, 0.01, 0);
                    rt_sgd_step(d_p, d_gs, d_m, n, step, lr, 0.9, 0.1, 0.01, 0);
                    rt_cuda_sgd_step_dev(e_p, d_gs, e_m, n, d_step, k, 2, d_lr, 0.9, 0.1, 0.01, 0, RT_F32);
                    break;
                case 2:
                    cpu_rt_sgd_step(p, gs, m, n, step, lr, 0.9, 0.0, 0.01, 1);
                    rt_sgd_step(d_p, d_gs, d_m, n, step, lr, 0.9, 0.0, 0.01, 1);
                    rt_cuda_sgd_step_dev(e_p, d_gs, e_m, n, d_step, k, 2, d_lr, 0.9, 0.0, 0.01, 1, RT_F32);
                    break;
                case 3:
                    cpu_rt_adam_step(p, gs, m, v, n, step, lr, 0.9, 0.999, 1e-8, 0.01);
                    rt_adam_step(d_p, d_gs, d_m, d_v, n, step, lr, 0.9, 0.999, 1e-8, 0.01);
                    rt_cuda_adam_step_dev(e_p, d_gs, e_m, e_v, n, d_step, k, 2, d_lr, 0.9, 0.999, 1e-8,
                                          0.01, 0, RT_F32);
                    break;
                default:
                    cpu_rt_adamw_step(p, gs, m, v, n, step, lr, 0.9, 0.95, 1e-8, 0.1);
                    rt_adamw_step(d_p, d_gs, d_m, d_v, n, step, lr, 0.9, 0.95, 1e-8, 0.1);
                    rt_cuda_adam_step_dev(e_p, d_gs, e_m, e_v, n, d_step, k, 2, d_lr, 0.9, 0.95, 1e-8,
                                          0.1, 1, RT_F32);
                    break;
            }
        }
        char nm[128];
        snprintf(nm, sizeof nm, "%s: param after 3 steps (n=%zu)", names[kind], n);
        cmp(nm, d_p, p, n, TOL_EXACT);
        if (kind > 0) cmp("  ... exp_avg / momentum_buf", d_m, m, n, TOL_EXACT);
        if (kind > 2) cmp("  ... exp_avg_sq", d_v, v, n, TOL_EXACT);
        snprintf(nm, sizeof nm, "%s, step count on the device (rt_cuda_*_step_dev): param",
                 names[kind]);
        cmp(nm, e_p, p, n, TOL_EXACT);
        if (kind > 0) cmp("  ... exp_avg / momentum_buf", e_m, m, n, TOL_EXACT);
        if (kind > 2) cmp("  ... exp_avg_sq", e_v, v, n, TOL_EXACT);
        free(p), free(m), free(v);
        dfree(d_p), dfree(d_m), dfree(d_v), dfree(e_p), dfree(e_m), dfree(e_v);
    }

    // clipping with a host norm
    CHECK(rt_clip_coef(10.0, 1.0) == cpu_rt_clip_coef(10.0, 1.0) &&
              rt_clip_coef(0.5, 1.0) == 1.0f,
          "clip_coef(10, 1) = %.9g, clip_coef(0.5, 1) = 1", rt_clip_coef(10.0, 1.0));
    float* gc = hcopy(g[0], n);
    const float cc = cpu_rt_clip_grad_norm(gc, n, 7.5, 2.0);
    const float cg = rt_clip_grad_norm(d_g[0], n, 7.5, 2.0);
    CHECK(cc == cg, "clip_grad_norm coefficient %.9g (CPU %.9g)", cg, cc);
    cmp("clip_grad_norm scaled grads", d_g[0], gc, n, TOL_EXACT);
    (void)rt_clip_grad_norm(d_g[0], n, 0.5, 2.0);  // coef 1: untouched
    cmp("clip_grad_norm below max_norm: untouched", d_g[0], gc, n, TOL_EXACT);

    // clipping with the norm on the device: the sum of squares of three shards accumulated
    // in double, rounded to float, then each shard scaled, as the CPU step does on the host
    double* d_acc = dalloc(sizeof(double));
    float* d_sum = dalloc(sizeof(float));
    RT_CHECK_CUDA(cudaMemset(d_acc, 0, sizeof(double)));
    double host_local = 0.0, cpu_local = 0.0;
    for (int i = 0; i < 3; i++) {
        rt_cuda_sumsq_accumulate(d_acc, d_g[i], n - (size_t)i);  // odd sizes
        host_local += rt_sumsq(d_g[i], n - (size_t)i);
        cpu_local += cpu_rt_sumsq(i == 0 ? gc : g[i], n - (size_t)i);  // g[0] clipped above
    }
    rt_cuda_sumsq_to_float(d_sum, d_acc);
    double acc = 0.0;
    float sum = 0.0f;
    RT_CHECK_CUDA(cudaMemcpy(&acc, d_acc, sizeof acc, cudaMemcpyDeviceToHost));
    RT_CHECK_CUDA(cudaMemcpy(&sum, d_sum, sizeof sum, cudaMemcpyDeviceToHost));
    CHECK(acc == host_local && sum == (float)host_local &&
              fabs(acc - cpu_local) <= 1e-12 * cpu_local,
          "sumsq_accumulate over 3 shards: %.17g == sum of rt_sumsq (CPU %.17g, rel diff %.3g); "
          "to_float %.9g",
          acc, cpu_local, fabs(acc - cpu_local) / cpu_local, sum);
    const double max_norms[2] = {0.5 * sqrt((double)sum), 2.0 * sqrt((double)sum)};
    for (int c = 0; c < 2; c++) {
        float* want = down(d_g[1], n);  // the host-norm path on a copy
        float* d_want = dup(want, n);
        (void)rt_clip_grad_norm(d_want, n, sqrt((double)sum), max_norms[c]);
        rt_cuda_clip_by_total(d_g[1], n, d_sum, max_norms[c]);
        char nm[128];
        snprintf(nm, sizeof nm, "clip_by_total (norm on the device, %s) == clip_grad_norm",
                 c ? "below max_norm: untouched" : "coefficient 0.5");
        cmp_dev(nm, d_g[1], d_want, n, TOL_EXACT);
        free(want);
        dfree(d_want);
    }
    free(gc);
    dfree(d_acc), dfree(d_sum), dfree(d_step), dfree(d_lr);
    for (int i = 0; i < 3; i++) {
        free(g[i]);
        dfree(d_g[i]);
    }
}

// A step that casts (rt_cuda_cast): the new parameters also written, rounded to bf16 (AdamW)
// or fp16 (SGD with momentum), into the unsharded params of runs of both storages, as the
// all-gather's copy writes them: the 16-bit bits of the step's own fp32 results (packed
// runs) and fp32 values holding them (the others). Four runs, sorted by src as the backend
// sorts them, over elements 3 .. n - 6 of a step whose first element is shard element 101
// (groups of RTC_VEC straddle the runs' ends, and no packed group is 16-byte aligned in
// the unsharded params), then with the first element shard element 0 and the packed runs'
// offsets agreeing mod RTC_VEC (their interior groups stored 16 bytes at a time, as at one
// rank); elements in no run (the gaps: a parameter the lookups read from the shards) and
// the unsharded bytes no run names are not written. Two steps each.
static void optim_cast_case(int sgd, int aligned, int64_t* d_step, double* d_lr) {
    const size_t n = 1003;
    const int64_t base = aligned ? 0 : 101;
    // src (shard element), n, dst (in its storage's elements), packed
    const rt_cuda_cast_run runs[4] = {{base + 3, 250, aligned ? 3 : 0, 1},
                                      {base + 253, 7, 440, 0},
                                      {base + 300, 601, aligned ? 260 : 250, 1},
                                      {base + 901, 97, 447, 0}};
    const size_t un_bytes = 4096;  // up to 861 16-bit values from 0, 104 fp32 from word 440
    rt_cuda_cast_run* d_runs = dalloc(sizeof runs);
    RT_CHECK_CUDA(cudaMemcpy(d_runs, runs, sizeof runs, cudaMemcpyHostToDevice));
    const rt_dtype dt = sgd ? RT_F16 : RT_BF16;
    float *p = hrand(n, 1.0f, 0.0f), *m = hrand(n, 0.1f, 0.0f), *v = hrand(n, 0.1f, 0.1f);
    for (size_t i = 0; i < n; i++) v[i] = v[i] * v[i];
    float *d_p = dup(p, n), *d_m = dup(m, n), *d_v = dup(v, n);
    unsigned char* d_un = dalloc(un_bytes);
    RT_CHECK_CUDA(cudaMemset(d_un, 0xA5, un_bytes));
    const rt_cuda_cast cast = {d_runs, 4, d_un, dt, base};
    for (int64_t step = 1; step <= 2; step++) {
        float* g = hrand(n, 1.0f, 0.0f);
        float* d_g = dup(g, n);
        set_dev_step(d_step, step);
        if (sgd) {
            cpu_rt_sgd_step(p, g, m, n, step, 1e-2, 0.9, 0.1, 0.01, 0);
            rt_cuda_sgd_step_rows_dev(d_p, d_g, d_m, n, d_step, 1, 1, d_lr, 0.9, 0.1, 0.01, 0,
                                      RT_F32, 0, NULL, &cast);
        } else {
            cpu_rt_adamw_step(p, g, m, v, n, step, 1e-2, 0.9, 0.95, 1e-8, 0.1);
            rt_cuda_adam_step_rows_dev(d_p, d_g, d_m, d_v, n, d_step, 1, 1, d_lr, 0.9, 0.95,
                                       1e-8, 0.1, 1, RT_F32, 0, NULL, &cast);
        }
        free(g), dfree(d_g);
    }
    // what the unsharded bytes should hold: 0xA5 where no run writes
    unsigned char* want = malloc(un_bytes);
    unsigned char* got = malloc(un_bytes);
    if (!want || !got) abort();
    memset(want, 0xA5, un_bytes);
    for (int r = 0; r < 4; r++)
        for (int64_t e = 0; e < runs[r].n; e++) {
            const float x = p[runs[r].src - base + e];
            if (runs[r].packed) {
                const uint16_t h = rt_bits16_from_f32_inl(x, dt);
                memcpy(want + 2 * (runs[r].dst + e), &h, 2);
            } else {
                const float f = rt_round_inl(x, dt);
                memcpy(want + 4 * (runs[r].dst + e), &f, 4);
            }
        }
    RT_CHECK_CUDA(cudaMemcpy(got, d_un, un_bytes, cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (size_t i = 0; i < un_bytes; i++) wrong += got[i] != want[i];
    char nm[160];
    snprintf(nm, sizeof nm, "%s casting into the unsharded params (4 runs, packed and fp32, "
             "%s%s): param after 2 steps", sgd ? "sgd momentum" : "adamw", sgd ? "fp16" : "bf16",
             aligned ? ", packed groups 16-byte aligned" : "");
    cmp(nm, d_p, p, n, TOL_EXACT);
    CHECK(wrong == 0, "  ... the unsharded params: the step's values rounded, bit for bit, "
          "and nothing else written (%zu of %zu bytes wrong)", wrong, un_bytes);
    free(p), free(m), free(v), free(want), free(got);
    dfree(d_p), dfree(d_m), dfree(d_v), dfree(d_un);
    dfree(d_runs);
}

void test_optim_cast(void) {
    int64_t* d_step = dalloc(sizeof(int64_t));
    double* d_lr = dalloc(sizeof(double));
    set_dev_lr(d_lr, 1e-2);
    for (int aligned = 0; aligned < 2; aligned++)
        for (int sgd = 0; sgd < 2; sgd++) optim_cast_case(sgd, aligned, d_step, d_lr);
    dfree(d_step), dfree(d_lr);
}
