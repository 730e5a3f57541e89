// Packed 16-bit storage on the CPU (rt_kernels.h "packed 16-bit storage"): each call widens
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
        RT_KCHECK(s != NULL, "free memory", "packed storage: out of memory for the scratch");
        pthread_setspecific(scratch_key, s);
    }
    if (s->n < n) {
        float* p = realloc(s->p, n * sizeof(float));
        RT_KCHECK(p != NULL, "free memory", "packed storage: out of memory for %zu floats of scratch", n);
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

// The fp32 operand of a packed linear: p itself, or its packed rows widened into x.
static const float* operand(float* x, const void* p, int N, int cols, int packed, rt_dtype dt) {
    if (!packed) return p;
    if (N > 0 && cols > 0) unpack(x, p, N, cols, dt);
    return x;
}

void rt_linear_packed_forward(void* out, const void* inp, const float* weight, const float* bias,
                              int N, int C, int OC, int packed, rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_linear_packed_forward");
    if (N <= 0 || OC <= 0) return;
    const size_t ni = elems(N, C);
    float* s = scratch_floats(ni + elems(N, OC));
    const float* x = operand(s, inp, N, C, packed & RT_PACKED_INP, dt);
    float* y = packed & RT_PACKED_OUT ? s + ni : out;
    rt_linear_forward(y, x, weight, bias, N, C, OC, dt);
    if (packed & RT_PACKED_OUT) pack(out, y, N, OC, dt);
}

void rt_linear_packed_backward(float* dinp, float* dweight, float* dbias, const void* dout,
                               const void* inp, const float* weight, int N, int C, int OC,
                               int packed, rt_dtype dt, int assign) {
    RT_KCHECK_PACKED_DT(dt, "rt_linear_packed_backward");
    RT_KCHECK_PACKED_DBIAS(dbias, packed, "rt_linear_packed_backward");
    const size_t nd = elems(N, OC);
    float* s = scratch_floats(nd + elems(N, C));
    const float* d = operand(s, dout, N, OC, packed & RT_PACKED_OUT, dt);
    const float* x = operand(s + nd, inp, N, C, packed & RT_PACKED_INP, dt);
    rt_linear_backward(dinp, dweight, dbias, d, x, weight, N, C, OC, dt, assign);
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

// ---- packed outputs of norms and activations: the twin into the scratch, then narrowed

void rt_layernorm_packed_forward(void* out16, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int N, int C, float eps,
                                 rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_layernorm_packed_forward");
    RT_KCHECK_PACKED_ROWS(C, "rt_layernorm_packed_forward");
    if (N <= 0 || C <= 0) return;
    float* y = scratch_floats(elems(N, C));
    rt_layernorm_forward(y, mean, rstd, inp, weight, bias, N, C, eps, dt);
    pack(out16, y, N, C, dt);
}

void rt_rmsnorm_packed_forward(void* out16, float* rstd, const float* inp, const float* weight,
                               int N, int C, float eps, rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_rmsnorm_packed_forward");
    RT_KCHECK_PACKED_ROWS(C, "rt_rmsnorm_packed_forward");
    if (N <= 0 || C <= 0) return;
    float* y = scratch_floats(elems(N, C));
    rt_rmsnorm_forward(y, rstd, inp, weight, N, C, eps, dt);
    pack(out16, y, N, C, dt);
}

// ---- activations: n dense values, packed ones widened into the scratch around the twins

static void unpack_dense(float* x, const void* src, size_t n, rt_dtype dt) {
    const uint16_t* s = src;
    for (size_t i = 0; i < n; i++) x[i] = rt_bits16_to_f32_inl(s[i], dt);
}

static void pack_dense(void* dst, const float* x, size_t n, rt_dtype dt) {
    uint16_t* d = dst;
    for (size_t i = 0; i < n; i++) d[i] = rt_bits16_from_f32_inl(x[i], dt);
}

// The fp32 view of the k-th n-value slot of the scratch s: p itself, or p widened there.
static const float* dense_operand(float* s, int k, const void* p, size_t n, int packed, rt_dtype dt) {
    if (!packed) return p;
    unpack_dense(s + (size_t)k * n, p, n, dt);
    return s + (size_t)k * n;
}

#define PACKED_ACTIVATION(name)                                                                \
    void rt_##name##_packed_forward(void* out, const void* inp, size_t n, int packed,          \
                                    rt_dtype dt) {                                             \
        RT_KCHECK_PACKED_DT(dt, "rt_" #name "_packed_forward");                                \
        if (n == 0) return;                                                                    \
        float* s = scratch_floats(2 * n);                                                      \
        const float* x = dense_operand(s, 0, inp, n, packed & RT_PACKED_INP, dt);              \
        float* y = packed & RT_PACKED_OUT ? s + n : out;                                       \
        rt_##name##_forward(y, x, n, dt);                                                      \
        if (packed & RT_PACKED_OUT) pack_dense(out, y, n, dt);                                 \
    }                                                                                          \
    void rt_##name##_packed_backward(float* dinp, const float* dout, const void* inp, size_t n, \
                                     int packed, rt_dtype dt, int assign) {                    \
        RT_KCHECK_PACKED_DT(dt, "rt_" #name "_packed_backward");                               \
        if (n == 0) return;                                                                    \
        const float* x = dense_operand(scratch_floats(n), 0, inp, n, packed & RT_PACKED_INP, dt); \
        rt_##name##_backward(dinp, dout, x, n, dt, assign);                                    \
    }

PACKED_ACTIVATION(gelu)
PACKED_ACTIVATION(relu)
PACKED_ACTIVATION(silu)

void rt_swiglu_packed_forward(void* out, const void* a, const void* b, size_t n, int packed,
                              rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_swiglu_packed_forward");
    if (n == 0) return;
    float* s = scratch_floats(3 * n);
    const float* x = dense_operand(s, 0, a, n, packed & RT_PACKED_INP, dt);
    const float* z = dense_operand(s, 1, b, n, packed & RT_PACKED_INP2, dt);
    float* y = packed & RT_PACKED_OUT ? s + 2 * n : out;
    rt_swiglu_forward(y, x, z, n, dt);
    if (packed & RT_PACKED_OUT) pack_dense(out, y, n, dt);
}

void rt_swiglu_packed_backward(float* da, float* db, const float* dout, const void* a,
                               const void* b, size_t n, int packed, rt_dtype dt, int assign) {
    RT_KCHECK_PACKED_DT(dt, "rt_swiglu_packed_backward");
    if (n == 0) return;
    float* s = scratch_floats(2 * n);
    const float* x = dense_operand(s, 0, a, n, packed & RT_PACKED_INP, dt);
    const float* z = dense_operand(s, 1, b, n, packed & RT_PACKED_INP2, dt);
    rt_swiglu_backward(da, db, dout, x, z, n, dt, assign);
}
