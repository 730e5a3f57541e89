// test_cuda_kernels: the helpers several of its files use, and their shared count and random stream.
#include "kernel_tests.h"

int check_passed_ = 0, check_failed_ = 0;
uint64_t rng_state = HOST_DATA_SEED;

// x[i] rounded to prec's 16-bit format (unchanged for RT_F32): the values a tensor of that
// dtype holds under mixed precision.
void round_to(float* x, size_t n, rt_dtype prec) {
    for (size_t i = 0; i < n; i++) {
        if (prec == RT_BF16) x[i] = rt_bf16_to_f32_inl(rt_bf16_from_f32_inl(x[i]));
        if (prec == RT_F16) x[i] = rt_f16_to_f32_inl(rt_f16_from_f32_inl(x[i]));
    }
}

// One unit in the last place of x in dt (bf16: 8 significant bits, fp16: 11, with the
// subnormal spacing 2^-24 below 2^-14), 0 for RT_F32.
double ulp_in(double x, rt_dtype dt) {
    if (dt != RT_BF16 && dt != RT_F16) return 0.0;
    int e;
    frexp(fabs(x), &e);  // |x| = m * 2^e, m in [0.5, 1): the leading bit is 2^(e-1)
    if (dt == RT_F16 && e < -13) e = -13;
    return ldexp(1.0, e - (dt == RT_BF16 ? 8 : 11));
}

// Device values that the kernel rounded to dt against the CPU's: element i passes when
// |got - want| <= tol * max(1, |want|) + ulps * ulp_in(max(|got|, |want|), dt): the fp32
// values before the rounding agree within tol, and a rounding near a tie may then go the
// other way. Also checks that every device value is exact in dt (the store rounded it).
void cmp_dt(const char* name, const float* dgot, const float* want, size_t n, double tol,
            rt_dtype dt, int ulps) {
    float* got = down(dgot, n);
    double worst = 0.0;  // largest |got - want| in units of the allowed difference
    size_t over = 0, inexact = 0;
    for (size_t i = 0; i < n; i++) {
        const double g = got[i], w = want[i];
        float r = got[i];
        round_to(&r, 1, dt);
        if (memcmp(&r, &got[i], sizeof r) != 0) inexact++;
        if (isnan(g) || isnan(w)) {
            if (!(isnan(g) && isnan(w))) over++;
            continue;
        }
        const double m = fabs(g) > fabs(w) ? fabs(g) : fabs(w);
        const double allowed = tol * (fabs(w) > 1.0 ? fabs(w) : 1.0) + ulps * ulp_in(m, dt);
        const double d = fabs(g - w);
        if (d > allowed) over++;
        if (allowed > 0.0 && d / allowed > worst) worst = d / allowed;
        if (allowed == 0.0 && d > 0.0) worst = INFINITY;
    }
    free(got);
    const char* P = dt == RT_BF16 ? "bf16" : dt == RT_F16 ? "fp16" : "fp32";
    CHECK(over == 0 && inexact == 0,
          "%s: %zu values, worst diff %.3g of the allowed (tol %.3g + %d %s ulp), %zu over, %zu "
          "not exact in %s",
          name, n, worst, tol, ulps, P, over, inexact, P);
}

// fills host h and device d (n values) with NaN (assigned) or copies of init
void reset_out(float* h, float* d, const float* init, size_t n, int assigned) {
    if (assigned)
        for (size_t i = 0; i < n; i++) h[i] = NAN;
    else
        memcpy(h, init, n * sizeof(float));
    RT_CHECK_CUDA(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
}

// device d = host h (n floats)
void upload(float* d, const float* h, size_t n) {
    RT_CHECK_CUDA(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
}

int dev_same(const float* da, const float* db, size_t n) {
    float *a = down(da, n), *b = down(db, n);
    const int same = memcmp(a, b, n * sizeof(float)) == 0;
    free(a), free(b);
    return same;
}

int dev_same16(const void* da, const void* db, size_t n) {
    uint16_t *a = down16(da, n), *b = down16(db, n);
    const int same = memcmp(a, b, n * 2) == 0;
    free(a), free(b);
    return same;
}

// n values of h into device storage d: fp32 (es 4) or dt's 16-bit bits (es 2).
void put_vals(void* d, const float* h, size_t n, int es, rt_dtype dt) {
    if (es == 4) {
        RT_CHECK_CUDA(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
        return;
    }
    uint16_t* b = malloc(n * sizeof *b);
    if (!b) abort();
    for (size_t i = 0; i < n; i++) b[i] = rt_bits16_from_f32_inl(h[i], dt);
    RT_CHECK_CUDA(cudaMemcpy(d, b, n * 2, cudaMemcpyHostToDevice));
    free(b);
}

// n_rows rows of RT_LD16(cols) 16-bit values at d16, widened, equal x[rows, cols] (device)
// bit for bit; *pad counts non-zero padding values.
int packed_same(const void* d16, const float* dx, int rows, int cols, rt_dtype dt,
                int* pad) {
    const int ld = RT_LD16(cols);
    uint16_t* h = malloc((size_t)rows * ld * sizeof(uint16_t));
    float* x = down(dx, (size_t)rows * cols);
    if (!h) abort();
    RT_CHECK_CUDA(cudaMemcpy(h, d16, (size_t)rows * ld * 2, cudaMemcpyDeviceToHost));
    int same = 1;
    *pad = 0;
    for (int n = 0; n < rows; n++) {
        for (int j = 0; j < cols; j++) {
            const float w = rt_bits16_to_f32_inl(h[(size_t)n * ld + j], dt);
            same &= memcmp(&w, &x[(size_t)n * cols + j], sizeof w) == 0;
        }
        for (int j = cols; j < ld; j++) *pad += h[(size_t)n * ld + j] != 0;
    }
    free(h), free(x);
    return same;
}

// x[rows, cols] (values of dt) as packed rows of RT_LD16(cols) on the device, zero padding.
void* dev_packed(const float* x, int rows, int cols, rt_dtype dt) {
    const int ld = RT_LD16(cols);
    uint16_t* h = calloc((size_t)rows * ld, sizeof *h);
    if (!h) abort();
    for (int n = 0; n < rows; n++)
        for (int j = 0; j < cols; j++)
            h[(size_t)n * ld + j] = rt_bits16_from_f32_inl(x[(size_t)n * cols + j], dt);
    void* d = dalloc((size_t)rows * ld * 2);
    RT_CHECK_CUDA(cudaMemcpy(d, h, (size_t)rows * ld * 2, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

// A packed gradient on the device before a backward call: poisoned when the call assigns
// it, else g0's n dense values packed (what the call adds to).
void dev_grad16(void* d16, const float* g0, size_t n, int assigned, rt_dtype dt) {
    uint16_t* h = malloc(n * sizeof *h);
    if (!h) abort();
    for (size_t i = 0; i < n; i++) h[i] = assigned ? 0xABAB : rt_bits16_from_f32_inl(g0[i], dt);
    RT_CHECK_CUDA(cudaMemcpy(d16, h, n * sizeof *h, cudaMemcpyHostToDevice));
    free(h);
}

// n 16-bit values from the device.
uint16_t* down16(const void* d, size_t n) {
    uint16_t* h = malloc(n * sizeof *h);
    if (!h) abort();
    RT_CHECK_CUDA(cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost));
    return h;
}

// Host 16-bit bits of x[n] (values of dt).
uint16_t* bits16(const float* x, size_t n, rt_dtype dt) {
    uint16_t* h = malloc(n * sizeof *h);
    if (!h) abort();
    for (size_t i = 0; i < n; i++) h[i] = rt_bits16_from_f32_inl(x[i], dt);
    return h;
}

// rows x ld 16-bit values on the host: `sentinel` everywhere but the n column slices (slice
// i from column off[i], cols[i] wide), which hold the dense rows of src[i].
void wide_rows(uint16_t* w, int rows, int ld, int n, const int* off, const int* cols,
               uint16_t* const* src, uint16_t sentinel) {
    for (size_t i = 0; i < (size_t)rows * ld; i++) w[i] = sentinel;
    for (int i = 0; i < n; i++)
        for (int r = 0; r < rows; r++)
            memcpy(w + (size_t)r * ld + off[i], src[i] + (size_t)r * cols[i],
                   (size_t)cols[i] * sizeof *w);
}
