// Packed 16-bit storage on the CPU (rt_kernels.h "packed 16-bit storage"): each call widens
// what it reads into fp32, runs its fp32-storage twin and narrows what it writes (exact:
// the twins round to dt; packed parameter gradients, which the twins leave fp32, are
// rounded there). The fp32 copies live in a per-thread scratch that grows to the
// largest call and is freed when the thread exits; the CPU saves nothing by packing, the
// GPU does, and both run the same generated step.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/dtype_bits.h"
#include "kcheck.h"
#include "kround.h"
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

// The conversions below are compiled per 16-bit dtype (RT_KBY_DT; bf16's vectorise, fp16's
// rounding has branches and a loop) and per x86-64 level (RT_VEC_CLONES).

// x[N, cols] (fp32, values of dt) into dst's rows of ld elements, columns [cols, pad)
// zeroed; the columns past pad are not touched.
RT_VEC_CLONES
static void pack_rows(void* dst, const float* x, int N, int cols, int ld, int pad, rt_dtype dt) {
    uint16_t* d = dst;
    RT_KBY_DT(for (int n = 0; n < N; n++) {
        const float* xr = x + (size_t)n * cols;
        uint16_t* dr = d + (size_t)n * ld;
        for (int j = 0; j < cols; j++) dr[j] = rt_bits16_from_f32_inl(xr[j], dt);
        for (int j = cols; j < pad; j++) dr[j] = 0;
    });
}

// The columns [0, cols) of the packed src's N rows of ld elements widened into x[N, cols].
RT_VEC_CLONES
static void unpack_rows(float* x, const void* src, int N, int cols, int ld, rt_dtype dt) {
    const uint16_t* s = src;
    RT_KBY_DT(for (int n = 0; n < N; n++) {
        const uint16_t* sr = s + (size_t)n * ld;
        float* xr = x + (size_t)n * cols;
        for (int j = 0; j < cols; j++) xr[j] = rt_bits16_to_f32_inl(sr[j], dt);
    });
}

// x[N, cols] into dst's rows of RT_LD16(cols), padding zeroed.
static void pack(void* dst, const float* x, int N, int cols, rt_dtype dt) {
    pack_rows(dst, x, N, cols, RT_LD16(cols), RT_LD16(cols), dt);
}

// The packed src[N, rows of RT_LD16(cols)] widened into x[N, cols].
static void unpack(float* x, const void* src, int N, int cols, rt_dtype dt) {
    unpack_rows(x, src, N, cols, RT_LD16(cols), dt);
}

// n dense values widened into x, and x's narrowed into dst.
RT_VEC_CLONES
static void unpack_dense(float* x, const void* src, size_t n, rt_dtype dt) {
    const uint16_t* s = src;
    RT_KBY_DT(for (size_t i = 0; i < n; i++) x[i] = rt_bits16_to_f32_inl(s[i], dt););
}

RT_VEC_CLONES
static void pack_dense(void* dst, const float* x, size_t n, rt_dtype dt) {
    uint16_t* d = dst;
    RT_KBY_DT(for (size_t i = 0; i < n; i++) d[i] = rt_bits16_from_f32_inl(x[i], dt););
}

static size_t elems(int N, int cols) { return N > 0 && cols > 0 ? (size_t)N * cols : 1; }

// The fp32 buffer the twin assigns a parameter gradient p in: p itself, or (RT_PACKED_DWEIGHT)
// the scratch at s, which param_grad_store then narrows into p's 16-bit values.
static float* param_grad(float* s, void* p, int packed) {
    return p && (packed & RT_PACKED_DWEIGHT) ? s : p;
}

// n values of param_grad's buffer g rounded into the gradient p (nothing where g is p).
static void param_grad_store(void* p, const float* g, size_t n, rt_dtype dt) {
    if (g != p) pack_dense(p, g, n, dt);
}

// The fp32 operand of a packed linear: p itself, or its packed rows (ld elements: RT_LD16(cols),
// or a column slice's) widened into x.
static const float* operand(float* x, const void* p, int N, int cols, int ld, int packed,
                            rt_dtype dt) {
    if (!packed) return p;
    if (N > 0 && cols > 0) unpack_rows(x, p, N, cols, ld, dt);
    return x;
}

// The linear's fp32 twin on widened operands: alpha 1 (a bias or none), or a scaled linear's
// (no bias).
static void linear_packed_forward(void* out, const void* inp, const void* weight,
                                  const void* bias, int N, int C, int OC, int packed,
                                  rt_dtype dt, float alpha) {
    if (N <= 0 || OC <= 0) return;
    const size_t ni = elems(N, C), nw = elems(OC, C), ny = elems(N, OC);
    float* s = scratch_floats(ni + nw + ny + (size_t)OC);
    const float* x = operand(s, inp, N, C, RT_LD16(C), packed & RT_PACKED_INP, dt);
    const float* w = operand(s + ni, weight, OC, C, RT_LD16(C), packed & RT_PACKED_INP2, dt);
    const float* b = bias ? operand(s + ni + nw + ny, bias, 1, OC, RT_LD16(OC),
                                    packed & RT_PACKED_INP3, dt)
                          : NULL;
    float* y = packed & RT_PACKED_OUT ? s + ni + nw : out;
    if (alpha != 1.0f) rt_linear_scaled_forward(y, x, w, N, C, OC, alpha, dt);
    else rt_linear_forward(y, x, w, b, N, C, OC, dt);
    if (packed & RT_PACKED_OUT) pack(out, y, N, OC, dt);
}

void rt_linear_packed_forward(void* out, const void* inp, const void* weight, const void* bias,
                              int N, int C, int OC, int packed, rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_linear_packed_forward");
    RT_KCHECK_PACKED_WEIGHT(OC, C, packed, "rt_linear_packed_forward");
    RT_KCHECK_PACKED_BIAS(OC, packed, "rt_linear_packed_forward");
    linear_packed_forward(out, inp, weight, bias, N, C, OC, packed, dt, 1.0f);
}

void rt_linear_scaled_packed_forward(void* out, const void* inp, const void* weight, int N,
                                     int C, int OC, float alpha, int packed, rt_dtype dt) {
    RT_KCHECK_LINEAR_ALPHA(alpha, dt, "rt_linear_scaled_packed_forward");
    RT_KCHECK_PACKED_DT(dt, "rt_linear_scaled_packed_forward");
    RT_KCHECK_PACKED_WEIGHT(OC, C, packed, "rt_linear_scaled_packed_forward");
    linear_packed_forward(out, inp, weight, NULL, N, C, OC, packed, dt, alpha);
}

// The backward's fp32 twin on widened operands, alpha as linear_packed_forward's. A packed
// dinp is in rows of ld_dinp: RT_LD16(C), or a column slice's (assigned, C a multiple of 8:
// no padding columns, and the other columns of the wider rows are not touched).
static void linear_packed_backward(void* dinp, void* dweight, void* dbias, const void* dout,
                                   const void* inp, const void* weight, int N, int C, int OC,
                                   int packed, rt_dtype dt, int assign, int ld_dout,
                                   int ld_dinp, float alpha) {
    const size_t nd = elems(N, OC), ni = elems(N, C), nw = elems(OC, C), nb = elems(1, OC);
    float* s = scratch_floats(nd + 2 * ni + 2 * nw + nb);
    // dout's OC columns of each row of ld_dout (a slice of a stack: the others are not read)
    const float* d = operand(s, dout, N, OC, ld_dout, packed & RT_PACKED_OUT, dt);
    const float* x = operand(s + nd, inp, N, C, RT_LD16(C), packed & RT_PACKED_INP, dt);
    const float* w = operand(s + nd + ni, weight, OC, C, RT_LD16(C), packed & RT_PACKED_INP2, dt);
    float* g = dinp && (packed & RT_PACKED_DINP) ? s + nd + ni + nw : dinp;
    if (g != dinp && !(assign & RT_ASSIGN_1) && N > 0 && C > 0)
        unpack_rows(g, dinp, N, C, ld_dinp, dt);
    float* gw = param_grad(s + nd + 2 * ni + nw, dweight, packed);
    float* gb = param_grad(s + nd + 2 * ni + 2 * nw, dbias, packed);
    if (alpha != 1.0f) rt_linear_scaled_backward(g, gw, d, x, w, N, C, OC, alpha, dt, assign);
    else rt_linear_backward(g, gw, gb, d, x, w, N, C, OC, dt, assign);
    if (g != dinp && N > 0 && C > 0) pack_rows(dinp, g, N, C, ld_dinp, RT_LD16(C), dt);
    if (OC > 0) {
        param_grad_store(dweight, gw, C > 0 ? (size_t)OC * C : 0, dt);
        param_grad_store(dbias, gb, (size_t)OC, dt);
    }
}

void rt_linear_packed_backward(void* dinp, void* dweight, void* dbias, const void* dout,
                               const void* inp, const void* weight, int N, int C, int OC,
                               int packed, rt_dtype dt, int assign, int ld_dout, int ld_dinp) {
    RT_KCHECK_LINEAR_PACKED_BACKWARD(dinp, OC, C, ld_dout, ld_dinp, packed, dt, assign,
                                     "rt_linear_packed_backward");
    linear_packed_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, packed, dt, assign,
                           ld_dout, ld_dinp, 1.0f);
}

void rt_linear_scaled_packed_backward(void* dinp, void* dweight, const void* dout,
                                      const void* inp, const void* weight, int N, int C, int OC,
                                      float alpha, int packed, rt_dtype dt, int assign,
                                      int ld_dout, int ld_dinp) {
    RT_KCHECK_LINEAR_ALPHA(alpha, dt, "rt_linear_scaled_packed_backward");
    RT_KCHECK_LINEAR_PACKED_BACKWARD(dinp, OC, C, ld_dout, ld_dinp, packed, dt, assign,
                                     "rt_linear_scaled_packed_backward");
    linear_packed_backward(dinp, dweight, NULL, dout, inp, weight, N, C, OC, packed, dt, assign,
                           ld_dout, ld_dinp, alpha);
}

void rt_cross_entropy_packed_forward_backward(void* dlogits16, float* loss, const void* logits16,
                                              const int32_t* targets, int N, int V,
                                              const float* dloss, rt_dtype dt, int assign) {
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

// ---- activations: n dense values, packed ones widened into the scratch around the twins

// The fp32 view of the k-th n-value slot of the scratch s: p itself, or p widened there.
static const float* dense_operand(float* s, int k, const void* p, size_t n, int packed, rt_dtype dt) {
    if (!packed) return p;
    unpack_dense(s + (size_t)k * n, p, n, dt);
    return s + (size_t)k * n;
}

// The fp32 buffer a twin writes for p (an output, an assigned gradient): p itself, or
// (packed) the k-th n-value slot of s, which dense_store then narrows into p.
static float* dense_target(float* s, int k, void* p, size_t n, int packed) {
    return p && packed ? s + (size_t)k * n : p;
}

static void dense_store(void* p, const float* x, size_t n, rt_dtype dt) {
    if (x != p) pack_dense(p, x, n, dt);
}

// dense_target for a gradient the twin adds to unless `assigned`: a packed one's values
// widened there first.
static float* dense_grad(float* s, int k, void* p, size_t n, int packed, int assigned,
                         rt_dtype dt) {
    float* g = dense_target(s, k, p, n, packed);
    if (g != p && !assigned) unpack_dense(g, p, n, dt);
    return g;
}

#define PACKED_ACTIVATION(name)                                                                \
    void rt_##name##_packed_forward(void* out, const void* inp, size_t n, int packed,          \
                                    rt_dtype dt) {                                             \
        RT_KCHECK_PACKED_DT(dt, "rt_" #name "_packed_forward");                                \
        if (n == 0) return;                                                                    \
        float* s = scratch_floats(2 * n);                                                      \
        const float* x = dense_operand(s, 0, inp, n, packed & RT_PACKED_INP, dt);              \
        float* y = dense_target(s, 1, out, n, packed & RT_PACKED_OUT);                         \
        rt_##name##_forward(y, x, n, dt);                                                      \
        dense_store(out, y, n, dt);                                                            \
    }                                                                                          \
    void rt_##name##_packed_backward(void* dinp, const void* dout, const void* inp, size_t n,  \
                                     int packed, rt_dtype dt, int assign) {                    \
        RT_KCHECK_PACKED_DT(dt, "rt_" #name "_packed_backward");                               \
        if (n == 0) return;                                                                    \
        float* s = scratch_floats(3 * n);                                                      \
        const float* x = dense_operand(s, 0, inp, n, packed & RT_PACKED_INP, dt);              \
        const float* d = dense_operand(s, 1, dout, n, packed & RT_PACKED_OUT, dt);             \
        float* g = dense_grad(s, 2, dinp, n, packed & RT_PACKED_DINP, assign & RT_ASSIGN_1,    \
                              dt);                                                             \
        rt_##name##_backward(g, d, x, n, dt, assign);                                          \
        dense_store(dinp, g, n, dt);                                                           \
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
    float* y = dense_target(s, 2, out, n, packed & RT_PACKED_OUT);
    rt_swiglu_forward(y, x, z, n, dt);
    dense_store(out, y, n, dt);
}

// A gradient of rows x cols values in rows of ld elements (rt_kernels.h "Gradient row
// lengths"): dense_grad's fp32 buffer, the k-th n-value slot of s (its packed rows' cols
// columns widened there unless assigned), or p itself in fp32 storage (ld == cols).
static float* rows_grad(float* s, int k, void* p, int rows, int cols, int ld, int packed,
                        int assigned, rt_dtype dt) {
    const size_t n = (size_t)rows * cols;
    float* g = dense_target(s, k, p, n, packed);
    if (g != p && !assigned) unpack_rows(g, p, rows, cols, ld, dt);
    return g;
}

// rows_grad's buffer g narrowed into the gradient p: only its cols columns of each row (the
// others belong to a wider matrix's other slices).
static void rows_store(void* p, const float* g, int rows, int cols, int ld, rt_dtype dt) {
    if (g != p) pack_rows(p, g, rows, cols, ld, cols, dt);
}

void rt_swiglu_packed_backward(void* da, void* db, const void* dout, const void* a,
                               const void* b, size_t n, int packed, rt_dtype dt, int assign,
                               int C, int ld_da, int ld_db) {
    static const char* kernel = "rt_swiglu_packed_backward";
    RT_KCHECK_PACKED_DT(dt, kernel);
    RT_KCHECK_PACKED_ALIAS(da, db, packed, kernel);
    RT_KCHECK_SWIGLU_ROWS(n, C, da, db, ld_da, ld_db, packed, kernel);
    if (n == 0) return;
    const int rows = (int)(n / (size_t)C);
    float* s = scratch_floats(5 * n);
    const float* x = dense_operand(s, 0, a, n, packed & RT_PACKED_INP, dt);
    const float* z = dense_operand(s, 1, b, n, packed & RT_PACKED_INP2, dt);
    const float* d = dense_operand(s, 2, dout, n, packed & RT_PACKED_OUT, dt);
    float* ga = rows_grad(s, 3, da, rows, C, ld_da, packed & RT_PACKED_DINP, assign & RT_ASSIGN_1,
                          dt);
    float* gb = rows_grad(s, 4, db, rows, C, ld_db, packed & RT_PACKED_DINP2,
                          assign & RT_ASSIGN_2, dt);
    rt_swiglu_backward(ga, gb, d, x, z, n, dt, assign);
    rows_store(da, ga, rows, C, ld_da, dt);
    rows_store(db, gb, rows, C, ld_db, dt);
}

// ---- rotary embeddings and attention: packed operands widened, packed outputs narrowed

// Values of a [B, T, heads * HD] tensor, 0 for an empty shape (the twins check the rest).
static size_t head_elems(int B, int T, int heads, int HD) {
    return B > 0 && T > 0 && heads > 0 && HD > 0 ? (size_t)B * T * heads * HD : 0;
}

void rt_embedding_packed_forward(void* out, const int32_t* ids, const float* weight, int N, int C,
                                 int V, int packed, rt_dtype dt) {
    RT_KCHECK_EMBEDDING_PACKED(C, packed, dt);
    if (N <= 0 || C <= 0) return;
    const size_t n = (size_t)N * C;
    float* y = dense_target(scratch_floats(n + 1), 0, out, n, packed & RT_PACKED_OUT);
    rt_embedding_forward(y, ids, weight, N, C, V);
    if (y == out)
        for (size_t i = 0; i < n; i++) y[i] = rt_kround(y[i], dt);
    dense_store(out, y, n, dt);
}

void rt_rope_packed_forward(void* out, const void* inp, int B, int T, int NH, int HD,
                            float theta, int packed, rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_rope_packed_forward");
    const size_t n = head_elems(B, T, NH, HD);
    float* s = scratch_floats(2 * n + 1);
    const float* x = dense_operand(s, 0, inp, n, packed & RT_PACKED_INP, dt);
    float* y = dense_target(s, 1, out, n, packed & RT_PACKED_OUT);
    rt_rope_forward(y, x, B, T, NH, HD, theta, dt);
    dense_store(out, y, n, dt);
}

// A gradient of `heads` heads in rows of ld elements (rt_kernels.h "Gradient row lengths":
// 0 is dense): rows_grad's fp32 buffer at s, or p itself in fp32 storage.
static float* head_grad(float* s, void* p, int B, int T, int heads, int HD, int ld, int packed,
                        int assigned, rt_dtype dt) {
    const size_t n = head_elems(B, T, heads, HD);
    if (!ld || !n) return dense_grad(s, 0, p, n, packed, assigned, dt);
    return rows_grad(s, 0, p, B * T, heads * HD, ld, packed, assigned, dt);
}

// head_grad's buffer g narrowed into the gradient p, only its columns of each row.
static void head_store(void* p, const float* g, int B, int T, int heads, int HD, int ld,
                       rt_dtype dt) {
    const size_t n = head_elems(B, T, heads, HD);
    if (!ld || !n) dense_store(p, g, n, dt);
    else rows_store(p, g, B * T, heads * HD, ld, dt);
}

void rt_rope_packed_backward(void* dinp, const void* dout, int B, int T, int NH, int HD,
                             float theta, int packed, rt_dtype dt, int assign, int ld_dinp) {
    RT_KCHECK_PACKED_DT(dt, "rt_rope_packed_backward");
    RT_KCHECK_PACKED_LD(ld_dinp, NH * HD, packed & RT_PACKED_DINP, "dinp",
                        "rt_rope_packed_backward");
    const size_t n = head_elems(B, T, NH, HD);
    float* s = scratch_floats(2 * n + 1);
    const float* d = dense_operand(s, 0, dout, n, packed & RT_PACKED_OUT, dt);
    float* g = head_grad(s + n, dinp, B, T, NH, HD, ld_dinp, packed & RT_PACKED_DINP,
                         assign & RT_ASSIGN_1, dt);
    rt_rope_backward(g, d, B, T, NH, HD, theta, dt, assign);
    head_store(dinp, g, B, T, NH, HD, ld_dinp, dt);
}

// The CPU has no launch to save: the two calls, a's then b's.
void rt_rope_pair_packed_forward(void* out_a, const void* inp_a, int NH_a, int packed_a,
                                 void* out_b, const void* inp_b, int NH_b, int packed_b, int B,
                                 int T, int HD, float theta, rt_dtype dt) {
    rt_rope_packed_forward(out_a, inp_a, B, T, NH_a, HD, theta, packed_a, dt);
    rt_rope_packed_forward(out_b, inp_b, B, T, NH_b, HD, theta, packed_b, dt);
}

void rt_rope_pair_packed_backward(void* dinp_a, const void* dout_a, int NH_a, int packed_a,
                                  int assign_a, int ld_a, void* dinp_b, const void* dout_b,
                                  int NH_b, int packed_b, int assign_b, int ld_b, int B, int T,
                                  int HD, float theta, rt_dtype dt) {
    rt_rope_packed_backward(dinp_a, dout_a, B, T, NH_a, HD, theta, packed_a, dt, assign_a, ld_a);
    rt_rope_packed_backward(dinp_b, dout_b, B, T, NH_b, HD, theta, packed_b, dt, assign_b, ld_b);
}

// The forward of both entry points; kernel: the name the argument checks give.
static void packed_forward_(const char* kernel, void* out, float* stats, float* scratch,
                            const void* q, const void* k, const void* v, int B, int T, int NH,
                            int NKV, int HD, int causal, rt_dtype prec, int packed, rt_dtype dt,
                            float p, uint64_t seed, uint64_t stream) {
    RT_KCHECK_PACKED_DT(dt, kernel);
    const size_t nq = head_elems(B, T, NH, HD), nk = head_elems(B, T, NKV, HD);
    float* s = scratch_floats(2 * nq + 2 * nk + 1);
    const float* x = dense_operand(s, 0, q, nq, packed & RT_PACKED_INP, dt);
    const float* xk = dense_operand(s + nq, 0, k, nk, packed & RT_PACKED_INP2, dt);
    const float* xv = dense_operand(s + nq + nk, 0, v, nk, packed & RT_PACKED_INP3, dt);
    float* y = dense_target(s + nq + 2 * nk, 0, out, nq, packed & RT_PACKED_OUT);
    rt_attention_lowmem_dropout_forward(y, stats, scratch, x, xk, xv, B, T, NH, NKV, HD, causal,
                                        prec, dt, p, seed, stream);
    dense_store(out, y, nq, dt);
}

void rt_attention_lowmem_packed_forward(void* out, float* stats, float* scratch, const void* q,
                                        const void* k, const void* v, int B, int T, int NH,
                                        int NKV, int HD, int causal, rt_dtype prec, int packed,
                                        rt_dtype dt) {
    packed_forward_("rt_attention_lowmem_packed_forward", out, stats, scratch, q, k, v, B, T, NH,
                    NKV, HD, causal, prec, packed, dt, 0.0f, 0, 0);
}

void rt_attention_lowmem_packed_dropout_forward(void* out, float* stats, float* scratch,
                                                const void* q, const void* k, const void* v,
                                                int B, int T, int NH, int NKV, int HD,
                                                int causal, rt_dtype prec, int packed,
                                                rt_dtype dt, float p, uint64_t seed,
                                                uint64_t stream) {
    packed_forward_("rt_attention_lowmem_packed_dropout_forward", out, stats, scratch, q, k, v, B,
                    T, NH, NKV, HD, causal, prec, packed, dt, p, seed, stream);
}

// The backward of both entry points; kernel: the name the argument checks give.
static void packed_backward_(const char* kernel, void* dq, void* dk, void* dv, float* scratch,
                             const void* dout, const void* out, const void* q, const void* k,
                             const void* v, const float* stats, int B, int T, int NH, int NKV,
                             int HD, int causal, rt_dtype prec, int packed, rt_dtype dt,
                             int assign, int ld_dq, int ld_dk, int ld_dv, float p, uint64_t seed,
                             uint64_t stream) {
    RT_KCHECK_PACKED_DT(dt, kernel);
    RT_KCHECK_ATTENTION_ALIAS(dq, dk, dv, dt);
    RT_KCHECK_PACKED_LD(ld_dq, NH * HD, packed & RT_PACKED_DINP, "dq", kernel);
    RT_KCHECK_PACKED_LD(ld_dk, NKV * HD, packed & RT_PACKED_DINP2, "dk", kernel);
    RT_KCHECK_PACKED_LD(ld_dv, NKV * HD, packed & RT_PACKED_DINP3, "dv", kernel);
    const size_t nq = head_elems(B, T, NH, HD), nk = head_elems(B, T, NKV, HD);
    float* s = scratch_floats(4 * nq + 4 * nk + 1);
    const float* d = dense_operand(s, 0, dout, nq, packed & RT_PACKED_OUT, dt);
    const float* y = dense_operand(s + nq, 0, out, nq, packed & RT_PACKED_OUT, dt);
    const float* x = dense_operand(s + 2 * nq, 0, q, nq, packed & RT_PACKED_INP, dt);
    const float* xk = dense_operand(s + 3 * nq, 0, k, nk, packed & RT_PACKED_INP2, dt);
    const float* xv = dense_operand(s + 3 * nq + nk, 0, v, nk, packed & RT_PACKED_INP3, dt);
    float* g = s + 3 * nq + 2 * nk;
    float* gq = head_grad(g, dq, B, T, NH, HD, ld_dq, packed & RT_PACKED_DINP,
                          assign & RT_ASSIGN_1, dt);
    float* gk = head_grad(g + nq, dk, B, T, NKV, HD, ld_dk, packed & RT_PACKED_DINP2,
                          assign & RT_ASSIGN_2, dt);
    float* gv = head_grad(g + nq + nk, dv, B, T, NKV, HD, ld_dv, packed & RT_PACKED_DINP3,
                          assign & RT_ASSIGN_3, dt);
    rt_attention_lowmem_dropout_backward(gq, gk, gv, scratch, d, y, x, xk, xv, stats, B, T, NH,
                                         NKV, HD, causal, prec, dt, assign, p, seed, stream);
    head_store(dq, gq, B, T, NH, HD, ld_dq, dt);
    head_store(dk, gk, B, T, NKV, HD, ld_dk, dt);
    head_store(dv, gv, B, T, NKV, HD, ld_dv, dt);
}

void rt_attention_lowmem_packed_backward(void* dq, void* dk, void* dv, float* scratch,
                                         const void* dout, const void* out, const void* q,
                                         const void* k, const void* v, const float* stats, int B,
                                         int T, int NH, int NKV, int HD, int causal,
                                         rt_dtype prec, int packed, rt_dtype dt, int assign,
                                         int ld_dq, int ld_dk, int ld_dv) {
    packed_backward_("rt_attention_lowmem_packed_backward", dq, dk, dv, scratch, dout, out, q, k,
                     v, stats, B, T, NH, NKV, HD, causal, prec, packed, dt, assign, ld_dq, ld_dk,
                     ld_dv, 0.0f, 0, 0);
}

void rt_attention_lowmem_packed_dropout_backward(void* dq, void* dk, void* dv, float* scratch,
                                                 const void* dout, const void* out,
                                                 const void* q, const void* k, const void* v,
                                                 const float* stats, int B, int T, int NH,
                                                 int NKV, int HD, int causal, rt_dtype prec,
                                                 int packed, rt_dtype dt, int assign,
                                                 int ld_dq, int ld_dk, int ld_dv, float p,
                                                 uint64_t seed, uint64_t stream) {
    packed_backward_("rt_attention_lowmem_packed_dropout_backward", dq, dk, dv, scratch, dout,
                     out, q, k, v, stats, B, T, NH, NKV, HD, causal, prec, packed, dt, assign,
                     ld_dq, ld_dk, ld_dv, p, seed, stream);
}

// ---- norms and the residual add: the residual stream's packed values

// Values of an [N, C] matrix, 0 for an empty one.
static size_t row_elems(int N, int C) { return N > 0 && C > 0 ? (size_t)N * C : 0; }

void rt_layernorm_packed_forward(void* out, float* mean, float* rstd, const void* inp,
                                 const float* weight, const float* bias, int N, int C, float eps,
                                 int packed, rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_layernorm_packed_forward");
    RT_KCHECK_PACKED_ROWS(C, "rt_layernorm_packed_forward");
    const size_t n = row_elems(N, C);
    float* s = scratch_floats(2 * n + 1);
    const float* x = dense_operand(s, 0, inp, n, packed & RT_PACKED_INP, dt);
    float* y = dense_target(s + n, 0, out, n, packed & RT_PACKED_OUT);
    rt_layernorm_forward(y, mean, rstd, x, weight, bias, N, C, eps, dt);
    dense_store(out, y, n, dt);
}

void rt_layernorm_packed_backward(void* dinp, void* dweight, void* dbias, const void* dout,
                                  const void* inp, const float* weight, const float* mean,
                                  const float* rstd, int N, int C, int packed, rt_dtype dt,
                                  int assign) {
    RT_KCHECK_PACKED_DT(dt, "rt_layernorm_packed_backward");
    RT_KCHECK_PACKED_ROWS(C, "rt_layernorm_packed_backward");
    RT_KCHECK_PACKED_DWEIGHT(packed, assign, "rt_layernorm_packed_backward");
    const size_t n = row_elems(N, C), nc = C > 0 ? (size_t)C : 0;
    float* s = scratch_floats(3 * n + 2 * nc + 1);
    const float* d = dense_operand(s, 0, dout, n, packed & RT_PACKED_OUT, dt);
    const float* x = dense_operand(s + n, 0, inp, n, packed & RT_PACKED_INP, dt);
    float* g = dense_grad(s + 2 * n, 0, dinp, n, packed & RT_PACKED_DINP, assign & RT_ASSIGN_1, dt);
    float* gw = param_grad(s + 3 * n, dweight, packed);
    float* gb = param_grad(s + 3 * n + nc, dbias, packed);
    rt_layernorm_backward(g, gw, gb, d, x, weight, mean, rstd, N, C, dt, assign);
    dense_store(dinp, g, n, dt);
    param_grad_store(dweight, gw, nc, dt);
    param_grad_store(dbias, gb, nc, dt);
}

void rt_rmsnorm_packed_forward(void* out, float* rstd, const void* inp, const float* weight,
                               int N, int C, float eps, int packed, rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_rmsnorm_packed_forward");
    RT_KCHECK_PACKED_ROWS(C, "rt_rmsnorm_packed_forward");
    const size_t n = row_elems(N, C);
    float* s = scratch_floats(2 * n + 1);
    const float* x = dense_operand(s, 0, inp, n, packed & RT_PACKED_INP, dt);
    float* y = dense_target(s + n, 0, out, n, packed & RT_PACKED_OUT);
    rt_rmsnorm_forward(y, rstd, x, weight, N, C, eps, dt);
    dense_store(out, y, n, dt);
}

void rt_rmsnorm_packed_backward(void* dinp, void* dweight, const void* dout, const void* inp,
                                const float* weight, const float* rstd, int N, int C, int packed,
                                rt_dtype dt, int assign) {
    RT_KCHECK_PACKED_DT(dt, "rt_rmsnorm_packed_backward");
    RT_KCHECK_PACKED_ROWS(C, "rt_rmsnorm_packed_backward");
    RT_KCHECK_PACKED_DWEIGHT(packed, assign, "rt_rmsnorm_packed_backward");
    const size_t n = row_elems(N, C), nc = C > 0 ? (size_t)C : 0;
    float* s = scratch_floats(3 * n + nc + 1);
    const float* d = dense_operand(s, 0, dout, n, packed & RT_PACKED_OUT, dt);
    const float* x = dense_operand(s + n, 0, inp, n, packed & RT_PACKED_INP, dt);
    float* g = dense_grad(s + 2 * n, 0, dinp, n, packed & RT_PACKED_DINP, assign & RT_ASSIGN_1, dt);
    float* gw = param_grad(s + 3 * n, dweight, packed);
    rt_rmsnorm_backward(g, gw, d, x, weight, rstd, N, C, dt, assign);
    dense_store(dinp, g, n, dt);
    param_grad_store(dweight, gw, nc, dt);
}

void rt_residual_packed_forward(void* out, const void* a, const void* b, size_t n, int packed,
                                rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_residual_packed_forward");
    float* s = scratch_floats(3 * n + 1);
    const float* x = dense_operand(s, 0, a, n, packed & RT_PACKED_INP, dt);
    const float* y = dense_operand(s + n, 0, b, n, packed & RT_PACKED_INP2, dt);
    float* z = dense_target(s + 2 * n, 0, out, n, packed & RT_PACKED_OUT);
    rt_residual_forward(z, x, y, n, dt);
    dense_store(out, z, n, dt);
}

// A residual add and the norm of its sum: the two kernels, in order (the CPU has no second
// read of the sum to save).
void rt_residual_rmsnorm_packed_forward(void* sum, void* out, float* rstd, const void* a,
                                        const void* b, const float* weight, int N, int C,
                                        float eps, int packed_add, int packed_norm, rt_dtype dt) {
    RT_KCHECK_RESIDUAL_NORM(packed_add, packed_norm, "rt_residual_rmsnorm_packed_forward");
    rt_residual_packed_forward(sum, a, b, row_elems(N, C), packed_add, dt);
    rt_rmsnorm_packed_forward(out, rstd, sum, weight, N, C, eps, packed_norm, dt);
}

void rt_residual_layernorm_packed_forward(void* sum, void* out, float* mean, float* rstd,
                                          const void* a, const void* b, const float* weight,
                                          const float* bias, int N, int C, float eps,
                                          int packed_add, int packed_norm, rt_dtype dt) {
    RT_KCHECK_RESIDUAL_NORM(packed_add, packed_norm, "rt_residual_layernorm_packed_forward");
    rt_residual_packed_forward(sum, a, b, row_elems(N, C), packed_add, dt);
    rt_layernorm_packed_forward(out, mean, rstd, sum, weight, bias, N, C, eps, packed_norm, dt);
}

void rt_residual_packed_backward(void* da, void* db, const void* dout, size_t n, int packed,
                                 rt_dtype dt, int assign) {
    RT_KCHECK_PACKED_DT(dt, "rt_residual_packed_backward");
    RT_KCHECK_PACKED_ALIAS(da, db, packed, "rt_residual_packed_backward");
    float* s = scratch_floats(3 * n + 1);
    const float* d = dense_operand(s, 0, dout, n, packed & RT_PACKED_OUT, dt);
    float* ga = dense_grad(s + n, 0, da, n, packed & RT_PACKED_DINP, assign & RT_ASSIGN_1, dt);
    float* gb = dense_grad(s + 2 * n, 0, db, n, packed & RT_PACKED_DINP2, assign & RT_ASSIGN_2, dt);
    rt_residual_backward(ga, gb, d, n, dt, assign);
    dense_store(da, ga, n, dt);
    dense_store(db, gb, n, dt);
}

// ---- a tensor times a number

void rt_scale_packed_forward(void* out, const void* inp, size_t n, float s, int packed,
                             rt_dtype dt) {
    RT_KCHECK_PACKED_DT(dt, "rt_scale_packed_forward");
    if (n == 0) return;
    float* w = scratch_floats(2 * n);
    const float* x = dense_operand(w, 0, inp, n, packed & RT_PACKED_INP, dt);
    float* y = dense_target(w, 1, out, n, packed & RT_PACKED_OUT);
    rt_scale_forward(y, x, n, s, dt);
    dense_store(out, y, n, dt);
}

void rt_scale_packed_backward(void* dinp, const void* dout, size_t n, float s, int packed,
                              rt_dtype dt, int assign) {
    RT_KCHECK_PACKED_DT(dt, "rt_scale_packed_backward");
    if (n == 0) return;
    float* w = scratch_floats(2 * n);
    const float* d = dense_operand(w, 0, dout, n, packed & RT_PACKED_OUT, dt);
    float* g = dense_grad(w, 1, dinp, n, packed & RT_PACKED_DINP, assign & RT_ASSIGN_1, dt);
    rt_scale_backward(g, d, n, s, dt, assign);
    dense_store(dinp, g, n, dt);
}
