// Binary elementwise ops (residual add, product, broadcast add) and the product by a number,
// which round what they write to dt (rt_kernels.h "Mixed precision"), and the flat buffer
// helpers (zero, copy, scale, accumulate, axpy, sum of squares). The rounding loops are
// compiled per dtype (RT_KBY_DT), so that they vectorise.
#include "rt_kernels.h"

#include <string.h>

#include "kround.h"

// ----------------------------------------------------------------------------
// residual add: out = a + b

void rt_residual_forward(float* out, const float* a, const float* b, size_t n, rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_residual_forward");
    RT_KBY_DT(for (size_t i = 0; i < n; i++) out[i] = rt_kround(a[i] + b[i], dt););
}

// da == db (x + x): (da + dout) + dout, rounded once.
void rt_residual_backward(float* da, float* db, const float* dout, size_t n, rt_dtype dt,
                          int assign) {
    RT_KCHECK_DT(dt, "rt_residual_backward");
    const int as1 = assign & RT_ASSIGN_1, as2 = assign & RT_ASSIGN_2;
    RT_KBY_DT({
        if (da && da == db) {
            for (size_t i = 0; i < n; i++) da[i] = rt_kround((da[i] + dout[i]) + dout[i], dt);
            return;
        }
        if (da)
            for (size_t i = 0; i < n; i++) da[i] = rt_kround(RT_KBASE(da[i], as1) + dout[i], dt);
        if (db)
            for (size_t i = 0; i < n; i++) db[i] = rt_kround(RT_KBASE(db[i], as2) + dout[i], dt);
    });
}

// ----------------------------------------------------------------------------
// product: out = a * b

void rt_mul_forward(float* out, const float* a, const float* b, size_t n, rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_mul_forward");
    RT_KBY_DT(for (size_t i = 0; i < n; i++) out[i] = rt_kround(a[i] * b[i], dt););
}

// da == db (x * x): (da + dout * b) + dout * a, rounded once.
void rt_mul_backward(float* da, float* db, const float* dout, const float* a, const float* b,
                     size_t n, rt_dtype dt, int assign) {
    RT_KCHECK_DT(dt, "rt_mul_backward");
    const int as1 = assign & RT_ASSIGN_1, as2 = assign & RT_ASSIGN_2;
    RT_KBY_DT({
        if (da && da == db) {
            for (size_t i = 0; i < n; i++)
                da[i] = rt_kround((da[i] + dout[i] * b[i]) + dout[i] * a[i], dt);
            return;
        }
        if (da)
            for (size_t i = 0; i < n; i++)
                da[i] = rt_kround(RT_KBASE(da[i], as1) + dout[i] * b[i], dt);
        if (db)
            for (size_t i = 0; i < n; i++)
                db[i] = rt_kround(RT_KBASE(db[i], as2) + dout[i] * a[i], dt);
    });
}

// ----------------------------------------------------------------------------
// product by a number: out = inp * s (s already fp32, as PyTorch's opmath scalar)

void rt_scale_forward(float* out, const float* inp, size_t n, float s, rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_scale_forward");
    RT_KBY_DT(for (size_t i = 0; i < n; i++) out[i] = rt_kround(inp[i] * s, dt););
}

void rt_scale_backward(float* dinp, const float* dout, size_t n, float s, rt_dtype dt,
                       int assign) {
    RT_KCHECK_DT(dt, "rt_scale_backward");
    const int as = assign & RT_ASSIGN_1;
    if (dinp)
        RT_KBY_DT(for (size_t i = 0; i < n; i++) dinp[i] =
                      rt_kround(RT_KBASE(dinp[i], as) + dout[i] * s, dt););
}

// ----------------------------------------------------------------------------
// broadcast add: out[rows,cols] = a[rows,cols] + b[cols]

void rt_broadcast_add_forward(float* out, const float* a, const float* b, int rows, int cols,
                              rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_broadcast_add_forward");
    RT_KBY_DT(for (int r = 0; r < rows; r++) {
        const float* ar = a + (size_t)r * cols;
        float* o = out + (size_t)r * cols;
        for (int c = 0; c < cols; c++) o[c] = rt_kround(ar[c] + b[c], dt);
    });
}

// db (a reduction over rows, like a bias gradient) is not rounded.
void rt_broadcast_add_backward(float* da, float* db, const float* dout, int rows, int cols,
                               rt_dtype dt, int assign) {
    RT_KCHECK_DT(dt, "rt_broadcast_add_backward");
    const int as = assign & RT_ASSIGN_1;
    if (da)
        RT_KBY_DT(for (size_t i = 0; i < (size_t)rows * cols; i++)
                      da[i] = rt_kround(RT_KBASE(da[i], as) + dout[i], dt););
    if (db) {
        // Column sums in double, a block of columns at a time (see linear.c).
        for (int c0 = 0; c0 < cols; c0 += RT_COLBLOCK) {
            int cn = cols - c0 < RT_COLBLOCK ? cols - c0 : RT_COLBLOCK;
            double acc[RT_COLBLOCK] = {0};
            for (int r = 0; r < rows; r++) {
                const float* d = dout + (size_t)r * cols + c0;
                for (int c = 0; c < cn; c++) acc[c] += d[c];
            }
            for (int c = 0; c < cn; c++) db[c0 + c] += (float)acc[c];
        }
    }
}

// ----------------------------------------------------------------------------
// buffer helpers

void rt_zero(float* x, size_t n) {
    if (n) memset(x, 0, n * sizeof(float));
}

void rt_copy(float* dst, const float* src, size_t n) {
    if (n && dst != src) memmove(dst, src, n * sizeof(float));
}

void rt_scale(float* out, const float* inp, size_t n, float s) {
    for (size_t i = 0; i < n; i++) out[i] = s * inp[i];
}

void rt_accumulate(float* dst, const float* src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

void rt_axpy(float* dst, const float* src, size_t n, float alpha) {
    for (size_t i = 0; i < n; i++) dst[i] += alpha * src[i];
}

// ----------------------------------------------------------------------------
// sum of squares (global-norm clipping): double accumulation, so the sum of the ranks'
// partial sums agrees with the unsharded sum to well below fp32 resolution

double rt_sumsq(const float* x, size_t n) {
    // Four independent accumulators let the loop pipeline without reassociation flags.
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += (double)x[i] * x[i];
        s1 += (double)x[i + 1] * x[i + 1];
        s2 += (double)x[i + 2] * x[i + 2];
        s3 += (double)x[i + 3] * x[i + 3];
    }
    for (; i < n; i++) s0 += (double)x[i] * x[i];
    return (s0 + s1) + (s2 + s3);
}
