// Ranks run as threads of one process: the kernels (and OpenBLAS under them, set to one
// thread by rt_kernels_init) must give each thread exactly the results of a serial run.
// Each of 4 threads runs a small transformer-block-like forward and backward on its own
// buffers, several times, and compares with the serial results bit for bit.
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>

#include "gradcheck.h"
#include "rt_optim.h"

enum { NTHREADS = 4, REPEAT = 20, B = 2, T = 16, NH = 4, NKV = 2, HD = 8, C = NH * HD };

typedef struct {
    float *x, *wq, *wk, *wv, *q, *k, *v, *att, *probs, *scratch, *h, *dh, *dq, *dk, *dv, *dx,
        *dwq, *dwk, *dwv, *m, *s;
    int ok;
} work;

#define NX ((size_t)B * T * C)
#define NKVX ((size_t)B * T * NKV * HD)

static void work_init(work* w, uint64_t seed) {
    tk_seed(seed);
    w->x = tk_alloc(NX), w->wq = tk_alloc((size_t)C * C), w->wk = tk_alloc((size_t)NKV * HD * C);
    w->wv = tk_alloc((size_t)NKV * HD * C);
    tk_fill(w->x, NX, -1, 1), tk_fill(w->wq, (size_t)C * C, -0.3f, 0.3f);
    tk_fill(w->wk, (size_t)NKV * HD * C, -0.3f, 0.3f), tk_fill(w->wv, (size_t)NKV * HD * C, -0.3f, 0.3f);
    w->q = tk_alloc(NX), w->k = tk_alloc(NKVX), w->v = tk_alloc(NKVX), w->att = tk_alloc(NX);
    w->probs = tk_alloc(rt_attention_probs_floats(B, NH, T));
    w->scratch = tk_alloc(rt_attention_scratch_floats(T));
    w->h = tk_alloc(NX), w->dh = tk_alloc(NX), w->dq = tk_alloc(NX), w->dk = tk_alloc(NKVX);
    w->dv = tk_alloc(NKVX), w->dx = tk_alloc(NX), w->dwq = tk_alloc((size_t)C * C);
    w->dwk = tk_alloc((size_t)NKV * HD * C), w->dwv = tk_alloc((size_t)NKV * HD * C);
    w->m = tk_alloc((size_t)C * C), w->s = tk_alloc((size_t)C * C);
}

static void work_free(work* w) {
    float* bufs[] = {w->x, w->wq, w->wk, w->wv, w->q, w->k, w->v, w->att, w->probs, w->scratch,
                     w->h, w->dh, w->dq, w->dk, w->dv, w->dx, w->dwq, w->dwk, w->dwv, w->m, w->s};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
}

// forward: q,k,v projections, rope, causal GQA attention, gelu, residual; sum loss;
// backward through all of it; one Adam step on wq
static void work_run(work* w) {
    rt_linear_forward(w->q, w->x, w->wq, NULL, B * T, C, C, RT_F32);
    rt_linear_forward(w->k, w->x, w->wk, NULL, B * T, C, NKV * HD, RT_F32);
    rt_linear_forward(w->v, w->x, w->wv, NULL, B * T, C, NKV * HD, RT_F32);
    rt_rope_forward(w->q, w->q, B, T, NH, HD, RT_ROPE_THETA, RT_F32);
    rt_rope_forward(w->k, w->k, B, T, NKV, HD, RT_ROPE_THETA, RT_F32);
    rt_attention_forward(w->att, w->probs, w->q, w->k, w->v, B, T, NH, NKV, HD, 1);
    rt_gelu_forward(w->h, w->att, NX, RT_F32);
    rt_residual_forward(w->h, w->h, w->x, NX, RT_F32);
    rt_zero(w->dh, NX), rt_zero(w->dq, NX), rt_zero(w->dk, NKVX), rt_zero(w->dv, NKVX);
    rt_zero(w->dx, NX), rt_zero(w->dwq, (size_t)C * C);
    rt_zero(w->dwk, (size_t)NKV * HD * C), rt_zero(w->dwv, (size_t)NKV * HD * C);
    float* datt = w->h;  // reuse: h is dead after the loss
    rt_sum_loss_backward(w->dh, NX, &(const float){1.0f}, RT_ACCUMULATE);
    rt_residual_backward(NULL, w->dx, w->dh, NX, RT_F32, RT_ACCUMULATE);
    rt_zero(datt, NX);
    rt_gelu_backward(datt, w->dh, w->att, NX, RT_F32, RT_ACCUMULATE);
    rt_attention_backward(w->dq, w->dk, w->dv, w->scratch, datt, w->q, w->k, w->v, w->probs, B, T,
                          NH, NKV, HD, 1);
    // q, k hold the rotated values; rope backward into fresh buffers before the linears
    rt_zero(w->att, NX);
    rt_rope_backward(w->att, w->dq, B, T, NH, HD, RT_ROPE_THETA, RT_F32, RT_ACCUMULATE);
    rt_linear_backward(w->dx, w->dwq, NULL, w->att, w->x, w->wq, B * T, C, C, RT_F32, RT_ACCUMULATE);
    rt_zero(w->q, NKVX);
    rt_rope_backward(w->q, w->dk, B, T, NKV, HD, RT_ROPE_THETA, RT_F32, RT_ACCUMULATE);
    rt_linear_backward(w->dx, w->dwk, NULL, w->q, w->x, w->wk, B * T, C, NKV * HD, RT_F32, RT_ACCUMULATE);
    rt_linear_backward(w->dx, w->dwv, NULL, w->dv, w->x, w->wv, B * T, C, NKV * HD, RT_F32, RT_ACCUMULATE);
    rt_adam_step(w->wq, w->dwq, w->m, w->s, (size_t)C * C, 1, 1e-3, 0.9, 0.999, 1e-8, 0.0);
}

static work serial[NTHREADS], threaded[NTHREADS];

static void* thread_main(void* arg) {
    const int r = (int)(intptr_t)arg;
    work* w = &threaded[r];
    w->ok = 1;
    for (int it = 0; it < REPEAT; it++) {
        // the Adam step moves wq: restore it (and the optimizer state) after each run
        float* wq0 = tk_alloc((size_t)C * C);
        memcpy(wq0, w->wq, (size_t)C * C * sizeof(float));
        work_run(w);
        w->ok &= memcmp(w->dx, serial[r].dx, NX * sizeof(float)) == 0;
        w->ok &= memcmp(w->dwk, serial[r].dwk, (size_t)NKV * HD * C * sizeof(float)) == 0;
        w->ok &= memcmp(w->wq, serial[r].wq, (size_t)C * C * sizeof(float)) == 0;
        memcpy(w->wq, wq0, (size_t)C * C * sizeof(float));
        rt_zero(w->m, (size_t)C * C), rt_zero(w->s, (size_t)C * C);
        free(wq0);
    }
    return NULL;
}

int main(void) {
    rt_kernels_init();
    for (int r = 0; r < NTHREADS; r++) {
        work_init(&serial[r], 100 + r);
        work_run(&serial[r]);
        work_init(&threaded[r], 100 + r);  // same seed: same inputs
    }
    pthread_t th[NTHREADS];
    for (int r = 0; r < NTHREADS; r++) pthread_create(&th[r], NULL, thread_main, (void*)(intptr_t)r);
    for (int r = 0; r < NTHREADS; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < NTHREADS; r++) {
        CHECK(threaded[r].ok,
              "thread %d of %d: %d concurrent forward+backward+adam runs bit-identical to the serial run",
              r, NTHREADS, REPEAT);
        work_free(&serial[r]), work_free(&threaded[r]);
    }
    return check_summary();
}
