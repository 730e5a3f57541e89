// Linear layer (nn.Linear) through cuBLAS (tensor cores for bf16/fp16 operands) on the GPU.
// Same contracts as runtime/cpu/kernels/linear.c: forward overwrites, backward accumulates,
// NULL gradients are skipped. out and dinp are rounded to dt: by cuBLAS's epilogue into a
// 16-bit copy that is widened into place (forward, assigned dinp), or by a pass after an
// fp32 GEMM (rtc_round_buf: a dinp accumulated onto). Packed parameter gradients
// (RT_PACKED_DWEIGHT) are written 16-bit where they are computed: dweight by cuBLAS's
// epilogue, dbias by the column sums or, assigned with dweight, by cuBLASLt's epilogue. The
// scaled linear (rt_linear_scaled_*: no bias, alpha a power of two) is the same code with
// its alpha in the GEMMs', whose epilogues scale the fp32 sums before rounding them.
#include "column_sums.cuh"

// ----------------------------------------------------------------------------
// rounding of a GEMM's output: x[i] = (float)(dt)x[i], nothing for RT_F32

__global__ void round_buf_kernel(float* __restrict__ x, size_t n, rt_dtype dt) {
    RTC_GRID_STRIDE(i, n) x[i] = rtc_round_to(x[i], dt);
}

void rtc_round_buf(float* x, size_t n, rt_dtype dt) {
    if (dt != RT_BF16 && dt != RT_F16) return;
    RTC_LAUNCH_FLAT(round_buf_kernel, n, x, n, dt);
}

// ----------------------------------------------------------------------------
// column sums: db[c] += sum over rows of d[r, c], in double (as the CPU kernels), in row
// chunks (column_sums.cuh); d's rows are ld long, float or packed (uint16_t) storage, db's
// values fp32 or (gdt 16-bit) packed

template <class S>
struct colsum_term {
    const S* d;
    int ld;
    rt_dtype dt;
    __device__ void operator()(int r, int c, double* acc) const {
        acc[0] += rtc_ld(d, (size_t)r * ld + c, dt);
    }
};

template <class S>
static void colsum_acc(void* db, const S* d, int rows, int cols, int ld, rt_dtype dt, int as,
                       rt_dtype gdt) {
    rtc_column_sums<1>(db, NULL, colsum_term<S>{d, ld, dt}, rows, cols, as, gdt);
}

void rtc_colsum_acc(float* db, const float* d, int rows, int cols) {
    colsum_acc(db, d, rows, cols, cols, RT_F32, 0, RT_F32);
}

// ----------------------------------------------------------------------------
// linear forward: out[N,OC] = inp[N,C] · weight[OC,C]^T + bias[OC]

// out[n, j] = bias[j] (the GEMM then accumulates onto it with beta = 1), or 0 when C == 0
// and there is no bias.
__global__ void rows_fill_kernel(float* __restrict__ out, const float* __restrict__ bias,
                                 size_t n, int OC) {
    RTC_GRID_STRIDE(i, n) out[i] = bias ? bias[i % (size_t)OC] : 0.0f;
}

// The weight as a GEMM operand of OC rounded up to 8 rows: its packed rows in place (w16p:
// dense, OC a multiple of 8, RT_KCHECK_PACKED_WEIGHT), or narrowed into s with zero rows
// added.
static rtc_operand16 weight16(char* s, const float* weight, const void* w16p, int OC, int C,
                              rt_dtype dt) {
    if (w16p) return rtc_operand16{w16p, C};
    const rtc_operand16 w16 = rtc_narrow(s, weight, OC, C, C, dt);
    rtc_zero_rows16(w16, OC, rtc_ld16(OC));
    return w16;
}

// 16-bit operands: cuBLAS writes the product rounded to dt into a 16-bit block of the
// operand scratch (with the bias added before the rounding, by cuBLASLt's epilogue) and one
// pass widens it into place (rtc_gemm16_rounded): per output element 2 + 2 + 4 bytes against
// 4 + 4 + 4 and a rounding pass's 4 + 4 with an fp32 output. The product spans OC rounded up
// to 8 columns, over zero rows of the weight's copy (GPT-2's LM head: 1.8 ms, not 13.2),
// and sums over C rounded up to 8, the copies' zero padding (on an H100 the bias epilogue
// with C = 65 and C = 17 gave values up to 11 times test_cuda_kernels' tolerance off).
// Packed operands (rt_kernels.h) are used in place: x16p not NULL is the input's packed rows
// (no copy of inp), w16p not NULL the weight's (weight16), b16p not NULL the bias's (OC a
// multiple of 8: no padding to add), out16 not NULL receives the rounded product (out is
// not written). alpha scales the product (1 with a bias: rtc_gemm16_rounded).
static void linear_forward16(float* out, const float* inp, const void* x16p, const float* weight,
                             const void* w16p, const float* bias, const void* b16p, int N, int C,
                             int OC, rt_dtype dt, void* out16, float alpha) {
    const int OCp = rtc_ld16(OC);
    const size_t nx = x16p ? 0 : rtc_elems16(N, C), nw = w16p ? 0 : rtc_elems16(OCp, C),
                 nb = bias ? (size_t)OCp : 0;
    char* s = (char*)rtc_operand_scratch((nx + nw + nb + (out16 ? 0 : rtc_elems16(N, OC))) * 2);
    const rtc_operand16 x16 =
        x16p ? rtc_operand16{x16p, rtc_ld16(C)} : rtc_narrow(s, inp, N, C, C, dt);
    const rtc_operand16 w16 = weight16(s + nx * 2, weight, w16p, OC, C, dt);
    const void* b16 =
        b16p ? b16p : bias ? rtc_narrow(s + (nx + nw) * 2, bias, 1, OC, OC, dt).p : NULL;
    char* t = out16 ? (char*)out16 : s + (nx + nw + nb) * 2;  // 16-byte aligned
    rtc_gemm16_rounded(0, 1, N, OC, x16.ld, alpha, x16, w16, b16, t, OCp, out, dt);
}

// dweight[OC, C] (+)= alpha dout16^T · inp16 (beta 0 or 1). OC is the product's row count here
// and the contiguous one of dout's copy: not a multiple of 8, it sends cuBLAS to an align1
// kernel (GPT-2's LM head: 2.3 ms, against 1.4 ms for 50264 rows), so the last OC % 8 rows
// are a second, small product. A packed dweight (pdw: assigned, OC and C multiples of 8,
// RT_KCHECK_PACKED_DWEIGHT_LINEAR) is cuBLAS's output rounded to dt in its epilogue, its
// rows written in place: no fp32 product and no rounding pass. dbias not NULL (both
// assigned, OC a multiple of 8): the bias gradient in the same product's epilogue
// (rtc_gemm16_bgrad, alpha 1: a scaled linear has no bias), dout not read again by the
// column sums; returns whether cuBLASLt took it (else the caller sums the columns).
static bool dweight16(void* dweight, bool pdw, void* dbias, rtc_operand16 d16, rtc_operand16 i16,
                      int N, int C, int OC, float beta, rt_dtype dt, float alpha) {
    if (dbias && rtc_gemm16_bgrad(OC, C, N, d16, i16, dweight, pdw, C, dbias, dt)) return true;
    if (pdw) {
        rtc_gemm16_rounded(1, 0, OC, C, N, alpha, d16, i16, NULL, dweight, C, NULL, dt);
        return false;
    }
    const int bulk = OC & ~7;
    float* dw = (float*)dweight;
    rtc_gemm16(1, 0, bulk, C, N, alpha, d16, i16, beta, dw, C, dt);
    const rtc_operand16 tail = {(const char*)d16.p + (size_t)bulk * 2, d16.ld};
    rtc_gemm16(1, 0, OC - bulk, C, N, alpha, tail, i16, beta, dw + (size_t)bulk * C, C, dt);
    return false;
}

// The fp32-storage forward of rt_linear_forward (alpha 1) and rt_linear_scaled_forward (no
// bias): the 16-bit path, or an fp32 GEMM onto the bias rows.
static void linear_forward(float* out, const float* inp, const float* weight, const float* bias,
                           int N, int C, int OC, rt_dtype dt, float alpha) {
    if (N <= 0 || OC <= 0) return;
    if (dt != RT_F32 && C > 0) {
        linear_forward16(out, inp, NULL, weight, NULL, bias, NULL, N, C, OC, dt, NULL, alpha);
        return;
    }
    const size_t n = (size_t)N * OC;
    if (bias || C <= 0) {
        rows_fill_kernel<<<rtc_blocks(n, RTC_THREADS), RTC_THREADS, 0, rtc_stream()>>>(
            out, bias, n, OC);
        RTC_CHECK_LAUNCH(rows_fill_kernel);
    }
    if (C <= 0) return;  // bias values are exact in dt
    rtc_gemm_rm(0, 1, N, OC, C, alpha, inp, C, weight, C, bias ? 1.0f : 0.0f, out, OC, RT_F32);
}

void rt_linear_forward(float* out, const float* inp, const float* weight, const float* bias,
                       int N, int C, int OC, rt_dtype dt) {
    RT_KCHECK_DT(dt, "rt_linear_forward");
    linear_forward(out, inp, weight, bias, N, C, OC, dt, 1.0f);
}

void rt_linear_scaled_forward(float* out, const float* inp, const float* weight, int N, int C,
                              int OC, float alpha, rt_dtype dt) {
    RT_KCHECK_LINEAR_ALPHA(alpha, dt, "rt_linear_scaled_forward");
    linear_forward(out, inp, weight, NULL, N, C, OC, dt, alpha);
}

// ----------------------------------------------------------------------------
// linear backward (accumulating, or assigning dinp, and dweight with dbias, by their bits):
// dinp += dout·W, dW += dout^T·inp, dbias += colsum(dout)

// 16-bit elements of the copies linear_backward16 makes (dout's aside; none of a packed input
// or weight) and of dinp's product: a 16-bit block when assigned, none when assigned packed,
// fp32 values when added to a packed dinp.
static size_t linear_backward16_elems(const void* dinp, const void* dweight, bool packed_inp,
                                      bool packed_w, bool packed_dinp, int N, int C, int OC,
                                      int as) {
    const size_t product = !dinp ? 0 : as ? (packed_dinp ? 0 : rtc_elems16(N, C))
                                          : (packed_dinp ? 2 * (size_t)N * C : 0);
    return (dinp && !packed_w ? rtc_elems16(rtc_ld16(OC), C) : 0) +
           (dweight && !packed_inp ? rtc_elems16(N, C) : 0) + product;
}

// d16 (packed rows of RT_LD16(C)) = d16 + x[rows, C], rounded once to dt. Dense rows (C a
// multiple of 8, as a packed activation's) are one flat vectorised pass (rtc_add_flat), W
// elements per access; others index each element's row.
template <int W>
__global__ void add_packed_kernel(uint16_t* __restrict__ d16, const float* __restrict__ x,
                                  int C, size_t n, rt_dtype dt) {
    if (C % 8 == 0) {
        rtc_add_flat<W>(d16, d16, x, n, dt);
        return;
    }
    RTC_GRID_STRIDE(i, n) {
        uint16_t* p = d16 + (i / C) * (size_t)RT_LD16(C) + i % C;
        *p = rt_bits16_from_f32_inl(rt_bits16_to_f32_inl(*p, dt) + x[i], dt);
    }
}

// The 16-bit products of the backward from dout's 16-bit rows d16 (a copy or the packed
// dout: rtc_ld16(OC) long with zero padding, or a column slice of OC a multiple of 8), the
// input's (x16p: packed; NULL: a copy of inp) and the weight's (weight16), the other copies
// at s (linear_backward16_elems of them, in the operand scratch). dinp's sums run over OC
// rounded up to 8 (dout's zero padding times the weight copy's zero rows: an odd OC sent
// cuBLAS to an align1 kernel, 9.4 ms for GPT-2's LM head against 1.4); an assigned dinp is
// rounded in cuBLAS's epilogue and widened into place (as linear_forward16's output), or
// left there when it is packed (pg), in its rows of ld_dinp (RT_LD16(C), or a column
// slice's: C a multiple of 8, so the product writes no other columns); a packed dinp added
// to (rows of RT_LD16(C)) gets the fp32 product, then one pass adding and rounding
// (add_packed_kernel). pdw: dweight is packed; dbias: computed with it where cuBLASLt can
// (dweight16, whose answer this returns). alpha scales every product (the fp32 one added to
// a packed dinp too).
static bool linear_backward16(void* dinp, bool pg, int ld_dinp, void* dweight, bool pdw,
                              void* dbias, rtc_operand16 d16, char* s, const float* inp,
                              const void* x16p, const float* weight, const void* w16p, int N,
                              int C, int OC, rt_dtype dt, int as, float beta_w, float alpha) {
    const int OCp = rtc_ld16(OC);
    const size_t nw = dinp && !w16p ? rtc_elems16(OCp, C) : 0,
                 ni = dweight && !x16p ? rtc_elems16(N, C) : 0;
    if (dinp) {
        const rtc_operand16 w16 = weight16(s, weight, w16p, OC, C, dt);
        if (pg && as) {
            rtc_gemm16_rounded(0, 0, N, C, OCp, alpha, d16, w16, NULL, dinp, ld_dinp, NULL, dt);
        } else if (pg) {
            float* product = (float*)(s + (nw + ni) * 2);
            const size_t n = (size_t)N * C;
            rtc_gemm16(0, 0, N, C, OCp, alpha, d16, w16, 0.0f, product, C, dt);
            RTC_LAUNCH_VEC(add_packed_kernel, n, C % 8 == 0 && rtc_aligned16({dinp, product}),
                           (uint16_t*)dinp, product, C, n, dt);
        } else if (as) {
            rtc_gemm16_rounded(0, 0, N, C, OCp, alpha, d16, w16, NULL, s + (nw + ni) * 2,
                               rtc_ld16(C), (float*)dinp, dt);
        } else {
            rtc_gemm16(0, 0, N, C, OCp, alpha, d16, w16, 1.0f, (float*)dinp, C, dt);
            rtc_round_buf((float*)dinp, (size_t)N * C, dt);
        }
    }
    if (!dweight) return false;
    const rtc_operand16 i16 =
        x16p ? rtc_operand16{x16p, rtc_ld16(C)} : rtc_narrow(s + nw * 2, inp, N, C, C, dt);
    return dweight16(dweight, pdw, dbias, d16, i16, N, C, OC, beta_w, dt, alpha);
}

// The degenerate shapes' gradients (no terms); returns whether there is nothing more to do.
// A packed dinp (pg) or dweight (pdw) is zeroed as its rows' bytes: the 16-bit zeros, a
// packed dinp's RT_LD16(C) of each row of ld_dinp (a column slice's C: not the other
// columns).
static bool linear_backward_empty(void* dinp, bool pg, int ld_dinp, void* dweight, bool pdw,
                                  int N, int C, int OC, int as, int as_w) {
    if (dinp && as && N > 0 && C > 0 && OC <= 0) {
        if (pg)
            RT_CHECK_CUDA(cudaMemset2DAsync(dinp, (size_t)ld_dinp * 2, 0,
                                            (size_t)rtc_ld16(C) * 2, (size_t)N, rtc_stream()));
        else rt_zero((float*)dinp, (size_t)N * C);
    }
    if (dweight && as_w && N <= 0 && C > 0 && OC > 0)
        rt_zero((float*)dweight, (size_t)OC * C / (pdw ? 2 : 1));  // OC * C even when packed
    return N <= 0 || OC <= 0 || C <= 0;
}

// The backward of both entry points (no checks here; packed is 0 for RT_F32): the
// degenerate shapes and dbias, then fp32 GEMMs, or the 16-bit products with dout narrowed
// once for both unless it is packed (as inp and dinp may be: rt_linear_packed_backward's
// contract). dout's rows are ld_dout long: OC unless packed; packed, RT_LD16(OC) or a column
// slice of a wider matrix (OC a multiple of 8, so that the dinp GEMM's sum over OC rounded
// up to 8 reads no other slice's columns), read in place by the GEMMs and the bias sums.
// dinp's rows are ld_dinp long: C in fp32 storage; packed, RT_LD16(C) or (assigned, C a
// multiple of 8) a column slice of a wider matrix, written in place by its GEMM. dweight
// and dbias are packed with RT_PACKED_DWEIGHT (assigned: the entry point checks). alpha
// scales the GEMMs' products: 1, or a scaled linear's (dbias NULL).
static void linear_backward_any(void* dinp, void* dweight, void* dbias, const void* dout,
                                const void* inp, const void* weight, int N, int C, int OC,
                                int packed, rt_dtype dt, int assign, int ld_dout, int ld_dinp,
                                float alpha) {
    const int as = assign & RT_ASSIGN_1, as_w = assign & RT_ASSIGN_DWEIGHT;
    const float beta_w = as_w ? 0.0f : 1.0f;  // an assigned dweight is not read
    const bool pd = packed & RT_PACKED_OUT, pi = packed & RT_PACKED_INP,
               pw = packed & RT_PACKED_INP2, pg = packed & RT_PACKED_DINP,
               pdw = packed & RT_PACKED_DWEIGHT;
    const bool done =
        linear_backward_empty(dinp, pg, ld_dinp, dweight, pdw, N, C, OC, as, as_w);
    auto column_sums = [&] {
        if (dbias && (N > 0 || as_w) && OC > 0)  // assigned without rows: zeros
            rtc_with_storage(pd, dout, [&](auto d) {
                colsum_acc(dbias, d, N, OC, ld_dout, dt, as_w, pdw ? dt : RT_F32);
            });
    };
    // the bias gradient in the weight gradient's product (dweight16), both assigned
    const bool with_dw = dbias && dweight && as_w && dt != RT_F32 && !done && OC % 8 == 0;
    if (!with_dw) column_sums();
    if (done || (!dinp && !dweight)) return;
    if (dt == RT_F32) {
        const float *d = (const float*)dout, *x = (const float*)inp;
        float* g = (float*)dinp;
        if (g) {  // dinp[N,C] += dout[N,OC] · weight[OC,C] (assigned: beta = 0)
            rtc_gemm_rm(0, 0, N, C, OC, alpha, d, OC, (const float*)weight, C, as ? 0.0f : 1.0f,
                        g, C, dt);
            rtc_round_buf(g, (size_t)N * C, dt);
        }
        if (dweight)  // dweight[OC,C] += dout^T[OC,N] · inp[N,C]
            rtc_gemm_rm(1, 0, OC, C, N, alpha, d, OC, x, C, beta_w, (float*)dweight, C, dt);
        return;
    }
    const size_t nd = pd ? 0 : rtc_elems16(N, OC);
    char* s = (char*)rtc_operand_scratch(
        (nd + linear_backward16_elems(dinp, dweight, pi, pw, pg, N, C, OC, as)) * 2);
    const rtc_operand16 d16 = pd ? rtc_operand16{dout, ld_dout}
                                 : rtc_narrow(s, (const float*)dout, N, OC, OC, dt);
    const bool db_done =
        linear_backward16(dinp, pg, ld_dinp, dweight, pdw, with_dw ? dbias : NULL, d16,
                          s + nd * 2, (const float*)inp, pi ? inp : NULL,
                          pw ? NULL : (const float*)weight, pw ? weight : NULL, N, C, OC, dt, as,
                          beta_w, alpha);
    if (with_dw && !db_done) column_sums();
}

void rt_linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, int N, int C, int OC,
                        rt_dtype dt, int assign) {
    RT_KCHECK_DT(dt, "rt_linear_backward");
    linear_backward_any(dinp, dweight, dbias, dout, inp, weight, N, C, OC, 0, dt, assign, OC, C,
                        1.0f);
}

void rt_linear_scaled_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                               const float* weight, int N, int C, int OC, float alpha,
                               rt_dtype dt, int assign) {
    RT_KCHECK_LINEAR_ALPHA(alpha, dt, "rt_linear_scaled_backward");
    linear_backward_any(dinp, dweight, NULL, dout, inp, weight, N, C, OC, 0, dt, assign, OC, C,
                        alpha);
}

// ----------------------------------------------------------------------------
// packed 16-bit storage (rt_kernels.h): the 16-bit paths above, reading packed operands in
// place and leaving a packed output in its buffer

// The packed forward of rt_linear_packed_forward (alpha 1) and rt_linear_scaled_packed_forward
// (no bias; no terms: zeros, which alpha leaves alone).
static void linear_packed_forward(void* out, const void* inp, const void* weight,
                                  const void* bias, int N, int C, int OC, int packed, rt_dtype dt,
                                  float alpha) {
    if (N <= 0 || OC <= 0) return;
    const bool po = packed & RT_PACKED_OUT, pi = packed & RT_PACKED_INP,
               pw = packed & RT_PACKED_INP2, pb = bias && (packed & RT_PACKED_INP3);
    if (C <= 0) {  // no terms (and no weight values): the bias rows (or zeros), narrowed
                   // into a packed output
        const size_t ny = po ? (size_t)N * OC : 0;
        float* y =
            po || pb ? (float*)rtc_operand_scratch((ny + (pb ? OC : 0)) * sizeof(float)) : NULL;
        const float* b = (const float*)bias;
        if (pb) {
            float* wide = y + ny;
            rtc_widen(wide, bias, 1, OC, OC, dt);
            b = wide;
        }
        rt_linear_forward(po ? y : (float*)out, NULL, NULL, b, N, C, OC, dt);
        if (po) rtc_narrow(out, y, N, OC, OC, dt);
        return;
    }
    linear_forward16(po ? NULL : (float*)out, pi ? NULL : (const float*)inp, pi ? inp : NULL,
                     pw ? NULL : (const float*)weight, pw ? weight : NULL,
                     pb ? NULL : (const float*)bias, pb ? bias : NULL, N, C, OC, dt,
                     po ? out : NULL, alpha);
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

void rt_linear_packed_backward(void* dinp, void* dweight, void* dbias, const void* dout,
                               const void* inp, const void* weight, int N, int C, int OC,
                               int packed, rt_dtype dt, int assign, int ld_dout, int ld_dinp) {
    RT_KCHECK_LINEAR_PACKED_BACKWARD(dinp, OC, C, ld_dout, ld_dinp, packed, dt, assign,
                                     "rt_linear_packed_backward");
    linear_backward_any(dinp, dweight, dbias, dout, inp, weight, N, C, OC, packed, dt, assign,
                        ld_dout, ld_dinp, 1.0f);
}

void rt_linear_scaled_packed_backward(void* dinp, void* dweight, const void* dout,
                                      const void* inp, const void* weight, int N, int C, int OC,
                                      float alpha, int packed, rt_dtype dt, int assign,
                                      int ld_dout, int ld_dinp) {
    RT_KCHECK_LINEAR_ALPHA(alpha, dt, "rt_linear_scaled_packed_backward");
    RT_KCHECK_LINEAR_PACKED_BACKWARD(dinp, OC, C, ld_dout, ld_dinp, packed, dt, assign,
                                     "rt_linear_scaled_packed_backward");
    linear_backward_any(dinp, dweight, NULL, dout, inp, weight, N, C, OC, packed, dt, assign,
                        ld_dout, ld_dinp, alpha);
}
