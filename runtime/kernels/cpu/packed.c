// Packed 16-bit logits on the CPU (rt_kernels.h "packed 16-bit logits"): each call widens
// what it reads into fp32, runs its fp32-storage twin and narrows what it writes (exact:
// the twins round to dt). The fp32 copies live in a per-thread scratch that grows to the
// largest call and is freed when the thread exits; the CPU saves nothing by packing, the
// GPU does, and both run the same generated step.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/dtype_bits.h"
#include "kcheck.h"
#include "rt_kernels.h"

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

typedef struct {
    float* p;
    size_t n;
} scratch;

static void scratch_free(void* s) {
    free(((scratch*)s)->p);
    free(s);
}

static void scratch_key_make(void) { pthread_key_create(&scratch_key, scratch_free); }

// The thread's scratch, at least n floats.
static float* scratch_floats(size_t n) {
    pthread_once(&scratch_once, scratch_key_make);
    scratch* s = pthread_getspecific(scratch_key);
    if (!s) {
        s = calloc(1, sizeof *s);
        RT_KCHECK(s != NULL, "free memory", "packed logits: out of memory for the scratch");
        pthread_setspecific(scratch_key, s);
    }
    if (s->n < n) {
        float* p = realloc(s->p, n * sizeof(float));
        RT_KCHECK(p != NULL, "free memory", "packed logits: out of memory for %zu floats of scratch", n);
        s->p = p, s->n = n;
    }
    return s->p;
}

// x[N, cols] (fp32, values of dt) into dst's rows of RT_LD16(cols), padding zeroed.
static void pack(void* dst, const float* x, int N, int cols, rt_dtype dt) {
    uint16_t* d = dst;
    const int ld = RT_LD16(cols);
    for (int n = 0; n < N; n++) {
        const float* xr = x + (size_t)n * cols;
        uint16_t* dr = d + (size_t)n * ld;
        for (int j = 0; j < cols; j++) dr[j] = rt_bits16_from_f32_inl(xr[j], dt);
        for (int j = cols; j < ld; j++) dr[j] = 0;
    }
}

// The packed src[N, rows of RT_LD16(cols)] widened into x[N, cols].
static void unpack(float* x, const void* src, int N, int cols, rt_dtype dt) {
    const uint16_t* s = src;
    const int ld = RT_LD16(cols);
    for (int n = 0; n < N; n++) {
        const uint16_t* sr = s + (size_t)n * ld;
        float* xr = x + (size_t)n * cols;
        for (int j = 0; j < cols; j++) xr[j] = rt_bits16_to_f32_inl(sr[j], dt);
    }
}

static size_t elems(int N, int cols) { return N > 0 && cols > 0 ? (size_t)N * cols : 1; }

void rt_linear_packed_forward(void* out16, const float* inp, const float* weight, int N, int C,
                              int OC, rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_linear_packed_forward");
    if (N <= 0 || OC <= 0) return;
    float* out = scratch_floats(elems(N, OC));
    rt_linear_forward(out, inp, weight, NULL, N, C, OC, dt);
    pack(out16, out, N, OC, dt);
}

void rt_cross_entropy_packed_forward_backward(void* dlogits16, float* loss, const void* logits16,
                                              const int32_t* targets, int N, int V, float dloss,
                                              rt_dtype dt, int assign) {
    RT_KCHECK_PACKED_DT(dt, "rt_cross_entropy_packed_forward_backward");
    const size_t n = elems(N, V);
    float* x = scratch_floats(2 * n);
    float* g = x + n;
    if (N > 0 && V > 0) {
        unpack(x, logits16, N, V, dt);
        if (!(assign & RT_ASSIGN_1)) unpack(g, dlogits16, N, V, dt);
    }
    rt_cross_entropy_forward_backward(g, loss, x, targets, N, V, dloss, dt, assign);
    if (N > 0 && V > 0) pack(dlogits16, g, N, V, dt);
}

void rt_linear_packed_backward(float* dinp, float* dweight, const void* dout16,
                               const float* inp, const float* weight, int N, int C, int OC,
                               rt_dtype dt, int assign) {
    RT_KCHECK_PACKED_DT(dt, "rt_linear_packed_backward");
    float* dout = scratch_floats(elems(N, OC));
    if (N > 0 && OC > 0) unpack(dout, dout16, N, OC, dt);
    rt_linear_backward(dinp, dweight, NULL, dout, inp, weight, N, C, OC, dt, assign);
}
