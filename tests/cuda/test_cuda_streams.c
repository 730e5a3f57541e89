// Tests of the CUDA kernels' streams and graph-safe steps (rt_cuda.h): the per-thread
// stream setting, and a small training step (linear, LayerNorm, dropout, causal flash
// attention, GELU, cross-entropy, their backwards, gradient clipping, AdamW and SGD with
// momentum) run three ways, three steps each, which must give the same bits:
//   * eagerly on the legacy default stream with rt_optim.h's host step count and host norm
//     (rt_sumsq, rt_clip_grad_norm);
//   * eagerly on a created stream with rt_cuda.h's device step count and device norm;
//   * captured once into a CUDA graph on that stream in the strict capture mode
//     (cudaStreamCaptureModeGlobal: any synchronizing, allocating or legacy-stream call
//     inside the step fails the capture) and replayed for each step, only the device step
//     counter changing between replays.
//
// Without a GPU (cudaGetDeviceCount reports none, as in CI) it prints a SKIP line and
// `0 passed, 0 failed`.
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda_helpers.h"
#include "rt_check.h"
#include "rt_cuda.h"
#include "rt_kernels.h"
#include "rt_optim.h"

// ----------------------------------------------------------------------------
// a small step: h = W1 x + b1, ln = layernorm(h), drop = dropout(ln),
// att = attention(q = ln, k = h, v = drop), logits = W2 gelu(att), cross-entropy, backward.
// Shapes: N rows (B*T), C inputs, H hidden (NH heads of HD), V classes.

enum { B = 2, T = 48, N = B * T, C = 72, NH = 5, HD = 32, H = NH * HD, V = 50 };
enum { NSTATS = B * NH * T * 2, NSCRATCH = 2 * T * T };  // rt_attention_*_floats

typedef struct {
    float *x, *w1, *b1, *w2, *lnw, *lnb;                  // inputs and parameters
    float *h, *ln, *mean, *rstd, *drop, *att, *act, *logits;  // activations
    float *astats, *ascratch;                             // attention's saved stats, scratch
    float *loss, *losses;                                  // loss outputs
    float *dlogits, *dact, *datt, *ddrop, *dln, *dh;       // activation gradients
    float *dw1, *db1, *dw2, *dlnw, *dlnb;                  // parameter gradients
    float *m1, *v1, *mom2;                                 // AdamW state of w1, SGD's of w2
    float* sum;                                            // the grad norm's sum of squares
    int32_t* targets;
    int64_t* step;  // the device step counter
    double* lr;     // the device lr (a new one each step: a schedule)
    double* acc;    // the sum of squares in double
    float* one;     // the loss's incoming gradient, 1 (read on the device)
} step_bufs;

#define STEP_FIELDS(X)                                                                   \
    X(x, N * C) X(w1, H * C) X(b1, H) X(w2, V * H) X(lnw, H) X(lnb, H) X(h, N * H)       \
    X(ln, N * H) X(mean, N) X(rstd, N) X(drop, N * H) X(att, N * H) X(astats, NSTATS)   \
    X(ascratch, NSCRATCH) X(act, N * H) X(logits, N * V) X(loss, 1) X(losses, N)         \
    X(dlogits, N * V) X(dact, N * H) X(datt, N * H) X(ddrop, N * H)                      \
    X(dln, N * H) X(dh, N * H) X(dw1, H * C) X(db1, H) X(dw2, V * H) X(dlnw, H) X(dlnb, H)  \
    X(m1, H * C) X(v1, H * C) X(mom2, V * H) X(sum, 1)

static step_bufs step_alloc(void) {
    step_bufs s;
#define ALLOC(f, n)                                                     \
    {                                                                   \
        float* h_ = hrand((size_t)(n), 1.0f, 0.0f);                     \
        s.f = dup(h_, (size_t)(n));                                     \
        free(h_);                                                       \
    }
    STEP_FIELDS(ALLOC)
#undef ALLOC
    RT_CHECK_CUDA(cudaMemset(s.m1, 0, (size_t)H * C * sizeof(float)));  // Adam: zero state
    RT_CHECK_CUDA(cudaMemset(s.v1, 0, (size_t)H * C * sizeof(float)));
    int32_t t[N];
    for (int i = 0; i < N; i++) t[i] = (i % 7 == 3) ? RT_IGNORE_INDEX : (int32_t)((i * 37) % V);
    s.targets = dup_i32(t, N);
    s.step = dalloc(sizeof(int64_t));
    s.lr = dalloc(sizeof(double));
    s.acc = dalloc(sizeof(double));
    s.one = dscalar(1.0f);
    return s;
}

static void step_free(step_bufs* s) {
#define FREE(f, n) dfree(s->f);
    STEP_FIELDS(FREE)
#undef FREE
    dfree(s->targets), dfree(s->step), dfree(s->lr), dfree(s->acc), dfree(s->one);
}

// Copies every buffer of `from` into `to` (device to device, synchronously: test setup).
static void step_copy(step_bufs* to, const step_bufs* from) {
#define COPY(f, n) \
    RT_CHECK_CUDA(cudaMemcpy(to->f, from->f, (size_t)(n) * sizeof(float), cudaMemcpyDefault));
    STEP_FIELDS(COPY)
#undef COPY
}

// Compares every buffer of two steps, exactly.
static void step_cmp(const char* what, const step_bufs* got, const step_bufs* want) {
    char nm[160];
#define CMP(f, n)                                                  \
    snprintf(nm, sizeof nm, "%s: " #f " (%d values)", what, (int)(n)); \
    cmp_dev(nm, got->f, want->f, (size_t)(n), TOL_EXACT);
    STEP_FIELDS(CMP)
#undef CMP
}

// Forward and backward: only rt_* kernel calls, all on the calling thread's stream.
static void step_forward_backward(step_bufs* s) {
    rt_linear_forward(s->h, s->x, s->w1, s->b1, N, C, H, RT_F32);
    rt_layernorm_forward(s->ln, s->mean, s->rstd, s->h, s->lnw, s->lnb, N, H, RT_LAYERNORM_EPS, RT_F32);
    rt_dropout_forward(s->drop, s->ln, (size_t)N * H, 0.1f, 1234, 5, 0, RT_F32);
    rt_attention_lowmem_forward(s->att, s->astats, s->ascratch, s->ln, s->h, s->drop, B, T, NH,
                                NH, HD, 1, RT_F32, RT_F32);
    rt_gelu_forward(s->act, s->att, (size_t)N * H, RT_F32);
    rt_linear_forward(s->logits, s->act, s->w2, NULL, N, H, V, RT_F32);
    rt_cross_entropy_forward(s->loss, s->losses, s->logits, s->targets, N, V);
    // backward: gradients zeroed first (memsets), then accumulated
    rt_zero(s->dlogits, (size_t)N * V);
    rt_zero(s->dact, (size_t)N * H);
    rt_zero(s->datt, (size_t)N * H);
    rt_zero(s->ddrop, (size_t)N * H);
    rt_zero(s->dln, (size_t)N * H);
    rt_zero(s->dh, (size_t)N * H);
    rt_zero(s->dw1, (size_t)H * C);
    rt_zero(s->db1, H);
    rt_zero(s->dw2, (size_t)V * H);
    rt_zero(s->dlnw, H);
    rt_zero(s->dlnb, H);
    rt_cross_entropy_backward(s->dlogits, s->logits, s->targets, N, V, s->one, RT_F32,
                              RT_ACCUMULATE);
    rt_linear_backward(s->dact, s->dw2, NULL, s->dlogits, s->act, s->w2, N, H, V, RT_F32, RT_ACCUMULATE);
    rt_gelu_backward(s->datt, s->dact, s->att, (size_t)N * H, RT_F32, RT_ACCUMULATE);
    rt_attention_lowmem_backward(s->dln, s->dh, s->ddrop, s->ascratch, s->datt, s->att, s->ln,
                                 s->h, s->drop, s->astats, B, T, NH, NH, HD, 1, RT_F32, RT_F32,
                                 RT_ACCUMULATE);
    rt_dropout_backward(s->dln, s->ddrop, (size_t)N * H, 0.1f, 1234, 5, 0, RT_F32, RT_ACCUMULATE);
    rt_layernorm_backward(s->dh, s->dlnw, s->dlnb, s->dln, s->h, s->lnw, s->mean, s->rstd, N, H, RT_F32, RT_ACCUMULATE);
    rt_linear_backward(NULL, s->dw1, s->db1, s->dh, s->x, s->w1, N, C, H, RT_F32, RT_ACCUMULATE);
    rt_scale(s->dw1, s->dw1, (size_t)H * C, 0.5f);
    rt_copy(s->dact, s->dh, (size_t)N * H);
}

#define MAX_NORM 0.05  // small enough to clip
#define LR(step) (1e-2 / (double)(step))  // a learning-rate schedule

// Clipping and optimizer with the host step count and norm (rt_optim.h, as the CPU step).
static float step_optimize_host(step_bufs* s, int64_t step) {
    const double local = rt_sumsq(s->dw1, (size_t)H * C) + rt_sumsq(s->dw2, (size_t)V * H);
    const float sum = (float)local;  // the CPU step all-reduces this float
    RT_CHECK_CUDA(cudaMemcpyAsync(s->sum, &sum, sizeof sum, cudaMemcpyHostToDevice,
                                  (cudaStream_t)rt_cuda_get_stream()));
    const double total = sqrt((double)sum);
    const float coef = rt_clip_grad_norm(s->dw1, (size_t)H * C, total, MAX_NORM);
    (void)rt_clip_grad_norm(s->dw2, (size_t)V * H, total, MAX_NORM);
    rt_adamw_step(s->w1, s->dw1, s->m1, s->v1, (size_t)H * C, step, LR(step), 0.9, 0.95, 1e-8, 0.1);
    rt_sgd_step(s->w2, s->dw2, s->mom2, (size_t)V * H, step, LR(step), 0.9, 0.1, 0.01, 1);
    return coef;
}

// The same with the step count, lr and norm in device memory (rt_cuda.h): capturable.
static void step_optimize_dev(step_bufs* s) {
    RT_CHECK_CUDA(cudaMemsetAsync(s->acc, 0, sizeof(double), (cudaStream_t)rt_cuda_get_stream()));
    rt_cuda_sumsq_accumulate(s->acc, s->dw1, (size_t)H * C);
    rt_cuda_sumsq_accumulate(s->acc, s->dw2, (size_t)V * H);
    rt_cuda_sumsq_to_float(s->sum, s->acc);
    rt_cuda_clip_by_total(s->dw1, (size_t)H * C, s->sum, MAX_NORM);
    rt_cuda_clip_by_total(s->dw2, (size_t)V * H, s->sum, MAX_NORM);
    rt_cuda_adam_step_dev(s->w1, s->dw1, s->m1, s->v1, (size_t)H * C, s->step, 1, 1, s->lr, 0.9,
                          0.95, 1e-8, 0.1, 1, RT_F32);
    rt_cuda_sgd_step_dev(s->w2, s->dw2, s->mom2, (size_t)V * H, s->step, 1, 1, s->lr, 0.9, 0.1,
                         0.01, 1, RT_F32);
}

static void set_step(step_bufs* s, int64_t step) {  // outside the graph, on the stream
    static int64_t host_step;  // pinned would be faster; pageable is fine for a test
    static double host_lr;
    host_step = step;
    host_lr = LR(step);
    RT_CHECK_CUDA(cudaMemcpyAsync(s->step, &host_step, sizeof host_step, cudaMemcpyHostToDevice,
                                  (cudaStream_t)rt_cuda_get_stream()));
    RT_CHECK_CUDA(cudaMemcpyAsync(s->lr, &host_lr, sizeof host_lr, cudaMemcpyHostToDevice,
                                  (cudaStream_t)rt_cuda_get_stream()));
    RT_CHECK_CUDA(cudaStreamSynchronize((cudaStream_t)rt_cuda_get_stream()));
}

// ----------------------------------------------------------------------------
// the stream setting

typedef struct {
    void* seen_before;
    void* seen_after;
    void* set;
} thread_arg;

static void* stream_thread(void* p) {
    thread_arg* a = p;
    RT_CHECK_CUDA(cudaSetDevice(0));
    a->seen_before = rt_cuda_get_stream();
    rt_cuda_set_stream(a->set);
    a->seen_after = rt_cuda_get_stream();
    return NULL;
}

static void test_stream_setting(cudaStream_t s) {
    CHECK(rt_cuda_get_stream() == NULL, "a new context runs on the legacy default stream (NULL)");
    rt_cuda_set_stream(s);
    CHECK(rt_cuda_get_stream() == (void*)s, "rt_cuda_set_stream(s): rt_cuda_get_stream() == s");
    thread_arg a = {(void*)1, NULL, (void*)s};
    pthread_t th;
    RT_CHECK_SYS(pthread_create(&th, NULL, stream_thread, &a) == 0, "pthread_create");
    pthread_join(th, NULL);
    CHECK(a.seen_before == NULL && a.seen_after == (void*)s && rt_cuda_get_stream() == (void*)s,
          "the stream is per thread: another thread starts on NULL, sets its own");
    rt_cuda_set_stream(NULL);
    CHECK(rt_cuda_get_stream() == NULL, "rt_cuda_set_stream(NULL): back to the legacy stream");
}

// ----------------------------------------------------------------------------
// host-step eager on the legacy stream == device-step eager on a created stream == graph
// replays on that stream, after every step

static void test_steps_on_streams(cudaStream_t s) {
    CHECK(rt_attention_stats_floats(B, NH, T) == NSTATS &&
              rt_attention_lowmem_scratch_floats(B, NH, T) == NSCRATCH,
          "attention buffers of the test step: %d stats, %d scratch floats", NSTATS, NSCRATCH);
    step_bufs init = step_alloc(), host = step_alloc(), eager = step_alloc(),
              graphed = step_alloc();
    step_copy(&host, &init);
    step_copy(&eager, &init);
    step_copy(&graphed, &init);

    // captured once, in the strict mode
    rt_cuda_set_stream(s);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    RT_CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    step_forward_backward(&graphed);
    step_optimize_dev(&graphed);
    RT_CHECK_CUDA(cudaStreamEndCapture(s, &graph));
    size_t nodes = 0;
    RT_CHECK_CUDA(cudaGraphGetNodes(graph, NULL, &nodes));
    RT_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(nodes > 30, "training step captured in cudaStreamCaptureModeGlobal: %zu graph nodes",
          nodes);

    for (int64_t step = 1; step <= 3; step++) {
        char what[96];
        // the reference: host step count and norm, legacy default stream
        rt_cuda_set_stream(NULL);
        step_forward_backward(&host);
        const float coef = step_optimize_host(&host, step);
        RT_CHECK_CUDA(cudaDeviceSynchronize());
        // device step count and norm, eagerly on s
        rt_cuda_set_stream(s);
        set_step(&eager, step);
        step_forward_backward(&eager);
        step_optimize_dev(&eager);
        RT_CHECK_CUDA(cudaStreamSynchronize(s));
        snprintf(what, sizeof what, "step %d (clip coef %.6g), device step on a stream == host",
                 (int)step, coef);
        step_cmp(what, &eager, &host);
        // graph replay
        set_step(&graphed, step);
        RT_CHECK_CUDA(cudaGraphLaunch(exec, s));
        RT_CHECK_CUDA(cudaStreamSynchronize(s));
        snprintf(what, sizeof what, "step %d, graph replay == host", (int)step);
        step_cmp(what, &graphed, &host);
    }
    RT_CHECK_CUDA(cudaGraphExecDestroy(exec));
    RT_CHECK_CUDA(cudaGraphDestroy(graph));

    // rt_sumsq on a created stream waits for that stream only, same value
    rt_cuda_set_stream(NULL);
    const double ss_legacy = rt_sumsq(host.dw1, (size_t)H * C);
    rt_cuda_set_stream(s);
    const double ss_stream = rt_sumsq(eager.dw1, (size_t)H * C);
    CHECK(ss_stream == ss_legacy, "rt_sumsq on the created stream: %.17g", ss_stream);
    rt_cuda_set_stream(NULL);
    step_free(&init), step_free(&host), step_free(&eager), step_free(&graphed);
}

// ----------------------------------------------------------------------------
// The kernels' operand scratch outlives a graph that captured it: the CUDA step backend
// captures the step once, and an eval run eagerly between two replays may need a larger
// scratch (Llama 1B's eval head: 2.1 GB of 16-bit logits), which must not free the one
// the graph reads (the bf16 linears narrow their operands into it).

static void test_scratch_outlives_graph(cudaStream_t s) {
    enum { R1 = 16, R2 = 64 * R1, IN = 40, OUT = 24 };
    float* hx = hrand((size_t)R2 * IN, 1.0f, 0.0f);
    float* hw = hrand((size_t)OUT * IN, 1.0f, 0.0f);
    float *x = dup(hx, (size_t)R2 * IN), *w = dup(hw, (size_t)OUT * IN);
    float *y = (float*)dalloc((size_t)R2 * OUT * sizeof(float)), *want = (float*)dalloc(R1 * OUT * sizeof(float));
    rt_cuda_set_stream(s);
    rt_linear_forward(want, x, w, NULL, R1, IN, OUT, RT_BF16);  // eager: the scratch for R1 rows
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    RT_CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    rt_linear_forward(y, x, w, NULL, R1, IN, OUT, RT_BF16);
    RT_CHECK_CUDA(cudaStreamEndCapture(s, &graph));
    RT_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    rt_linear_forward(y, x, w, NULL, R2, IN, OUT, RT_BF16);  // eager, 64 times the rows: it grows
    rt_cuda_release_scratch();  // frees the grown one only: the graph's is kept
    RT_CHECK_CUDA(cudaMemsetAsync(y, 0, (size_t)R1 * OUT * sizeof(float), s));
    RT_CHECK_CUDA(cudaGraphLaunch(exec, s));
    RT_CHECK_CUDA(cudaStreamSynchronize(s));
    cmp_dev("a bf16 linear's graph replayed after an eager call grew the operand scratch, and "
            "after the grown one was released: the same values as before", y, want,
            (size_t)R1 * OUT, TOL_EXACT);
    RT_CHECK_CUDA(cudaMemsetAsync(y, 0, (size_t)R1 * OUT * sizeof(float), s));
    rt_linear_forward(y, x, w, NULL, R1, IN, OUT, RT_BF16);  // eager again: allocates anew
    cmp_dev("  ... an eager call after the release", y, want, (size_t)R1 * OUT, TOL_EXACT);
    RT_CHECK_CUDA(cudaGraphExecDestroy(exec));
    RT_CHECK_CUDA(cudaGraphDestroy(graph));
    rt_cuda_set_stream(NULL);
    dfree(x), dfree(w), dfree(y), dfree(want);
    free(hx), free(hw);
}

// A capture whose origin stream does not wait for a forked stream's work is refused at its
// end (cudaErrorStreamCaptureUnjoined); joined back through a third stream it is taken and
// runs both forks' work. The step backend's capture joins every side stream it forks
// (rtb_step_end); on the GPU this also checks that the emulator refuses what CUDA refuses.
static void test_capture_joins(void) {
    enum { BYTES = 64 };
    cudaStream_t o, a, b;
    cudaEvent_t ev[4];
    RT_CHECK_CUDA(cudaStreamCreateWithFlags(&o, cudaStreamNonBlocking));
    RT_CHECK_CUDA(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    RT_CHECK_CUDA(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    for (int i = 0; i < 4; i++) RT_CHECK_CUDA(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
    unsigned char* d = (unsigned char*)dalloc(BYTES);
    RT_CHECK_CUDA(cudaMemset(d, 0, BYTES));

    // a forks from o and writes; o ends the capture without waiting for it
    cudaGraph_t g = NULL;
    RT_CHECK_CUDA(cudaStreamBeginCapture(o, cudaStreamCaptureModeGlobal));
    RT_CHECK_CUDA(cudaEventRecord(ev[0], o));
    RT_CHECK_CUDA(cudaStreamWaitEvent(a, ev[0], 0));
    RT_CHECK_CUDA(cudaMemsetAsync(d, 1, BYTES, a));
    const cudaError_t unjoined = cudaStreamEndCapture(o, &g);
    (void)cudaGetLastError();
    CHECK(unjoined == cudaErrorStreamCaptureUnjoined && g == NULL,
          "a capture whose origin does not wait for a forked stream's write ends with "
          "cudaErrorStreamCaptureUnjoined (%s)", cudaGetErrorName(unjoined));
    // a took part in the failed capture: whatever CUDA says of it now, it is not used again
    (void)cudaStreamDestroy(a);
    (void)cudaGetLastError();
    RT_CHECK_CUDA(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));

    // o -> a (writes the first half) -> b (the second half) -> o
    RT_CHECK_CUDA(cudaStreamBeginCapture(o, cudaStreamCaptureModeGlobal));
    RT_CHECK_CUDA(cudaEventRecord(ev[1], o));
    RT_CHECK_CUDA(cudaStreamWaitEvent(a, ev[1], 0));
    RT_CHECK_CUDA(cudaMemsetAsync(d, 2, BYTES / 2, a));
    RT_CHECK_CUDA(cudaEventRecord(ev[2], a));
    RT_CHECK_CUDA(cudaStreamWaitEvent(b, ev[2], 0));
    RT_CHECK_CUDA(cudaMemsetAsync(d + BYTES / 2, 3, BYTES / 2, b));
    RT_CHECK_CUDA(cudaEventRecord(ev[3], b));
    RT_CHECK_CUDA(cudaStreamWaitEvent(o, ev[3], 0));
    const cudaError_t joined = cudaStreamEndCapture(o, &g);
    unsigned char h[BYTES] = {0};
    if (joined == cudaSuccess) {
        cudaGraphExec_t exec;
        RT_CHECK_CUDA(cudaGraphInstantiate(&exec, g, 0));
        RT_CHECK_CUDA(cudaGraphLaunch(exec, o));
        RT_CHECK_CUDA(cudaStreamSynchronize(o));
        RT_CHECK_CUDA(cudaMemcpy(h, d, BYTES, cudaMemcpyDeviceToHost));
        RT_CHECK_CUDA(cudaGraphExecDestroy(exec));
        RT_CHECK_CUDA(cudaGraphDestroy(g));
    }
    CHECK(joined == cudaSuccess && h[0] == 2 && h[BYTES - 1] == 3,
          "a capture joined back through a third stream ends (%s) and its graph runs both "
          "writes (%d, %d)", cudaGetErrorName(joined), h[0], h[BYTES - 1]);
    dfree(d);
    for (int i = 0; i < 4; i++) RT_CHECK_CUDA(cudaEventDestroy(ev[i]));
    RT_CHECK_CUDA(cudaStreamDestroy(o));
    RT_CHECK_CUDA(cudaStreamDestroy(a));
    RT_CHECK_CUDA(cudaStreamDestroy(b));
}

// ----------------------------------------------------------------------------

int main(void) {
    if (skip_without_gpu("cuda streams")) return 0;
    RT_CHECK_CUDA(cudaSetDevice(0));
    rt_kernels_init();
    cudaStream_t s;
    RT_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    test_stream_setting(s);
    test_steps_on_streams(s);
    test_scratch_outlives_graph(s);
    test_capture_joins();
    RT_CHECK_CUDA(cudaStreamDestroy(s));
    return check_summary();
}
