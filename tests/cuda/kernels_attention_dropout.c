// test_cuda_kernels: attention dropout (rt_attention_lowmem_dropout_*, the packed calls too)
// against the CPU kernels drawing the same masks (same seed and stream), on the fp32 and the
// tensor-core flash kernels; p = 0 through the dropout calls is the plain calls' bits.
#include "kernel_tests.h"

#define DROP_SEED 0x243F6A8885A308D3ull
#define DROP_STREAM 7

// Every tensor of a packed case in packed 16-bit storage.
#define DROP_PACKED_ALL                                                                      \
    (RT_PACKED_OUT | RT_PACKED_INP | RT_PACKED_INP2 | RT_PACKED_INP3 | RT_PACKED_DINP |     \
     RT_PACKED_DINP2 | RT_PACKED_DINP3)

// A case: its shape, p, the operands' precision and the GPU's storage (packed: every tensor
// in packed 16-bit storage of prec, dt = prec; else fp32 storage, dt = RT_F32).
typedef struct {
    int B, T, NH, NKV, HD, causal, packed;
    rt_dtype prec, dt;
    float p;
} drop_case;

// The case's q (dq, out) and k (v, dk, dv) elements.
static size_t nq_of(const drop_case* x) { return (size_t)x->B * x->T * x->NH * x->HD; }
static size_t nk_of(const drop_case* x) { return (size_t)x->B * x->T * x->NKV * x->HD; }

// A case's tensors on the CPU (host, fp32 storage: the CPU's packed calls run its fp32 calls
// on their widened operands, with dt = prec, and narrow what they rounded to dt) or the GPU
// (device, the case's storage): q, k, v, dout, out, dq, dk, dv; stats and the scratch (fp32).
typedef struct {
    void *q, *k, *v, *dout, *out, *dq, *dk, *dv;
    float *stats, *scratch;
} drop_bufs;

static void forward(const drop_case* x, drop_bufs* b, int gpu, float p, uint64_t stream) {
    if (!gpu)
        cpu_rt_attention_lowmem_dropout_forward(b->out, b->stats, b->scratch, b->q, b->k, b->v,
                                                x->B, x->T, x->NH, x->NKV, x->HD, x->causal,
                                                x->prec, x->dt, p, DROP_SEED, stream);
    else if (x->packed)
        rt_attention_lowmem_packed_dropout_forward(b->out, b->stats, b->scratch, b->q, b->k, b->v,
                                                   x->B, x->T, x->NH, x->NKV, x->HD, x->causal,
                                                   x->prec, DROP_PACKED_ALL, x->dt, p, DROP_SEED,
                                                   stream);
    else
        rt_attention_lowmem_dropout_forward(b->out, b->stats, b->scratch, b->q, b->k, b->v, x->B,
                                            x->T, x->NH, x->NKV, x->HD, x->causal, x->prec,
                                            x->dt, p, DROP_SEED, stream);
}

// want: bits 1, 2, 4 for b's dq, dk, dv (the others NULL).
static void backward(const drop_case* x, drop_bufs* b, int gpu, int want, int assign, float p) {
    void* dq = want & 1 ? b->dq : NULL;
    void* dk = want & 2 ? b->dk : NULL;
    void* dv = want & 4 ? b->dv : NULL;
    if (!gpu)
        cpu_rt_attention_lowmem_dropout_backward(dq, dk, dv, b->scratch, b->dout, b->out, b->q,
                                                 b->k, b->v, b->stats, x->B, x->T, x->NH, x->NKV,
                                                 x->HD, x->causal, x->prec, x->dt, assign, p,
                                                 DROP_SEED, DROP_STREAM);
    else if (x->packed)
        rt_attention_lowmem_packed_dropout_backward(
            dq, dk, dv, b->scratch, b->dout, b->out, b->q, b->k, b->v, b->stats, x->B, x->T,
            x->NH, x->NKV, x->HD, x->causal, x->prec, DROP_PACKED_ALL, x->dt, assign, 0, 0, 0, p,
            DROP_SEED, DROP_STREAM);
    else
        rt_attention_lowmem_dropout_backward(dq, dk, dv, b->scratch, b->dout, b->out, b->q, b->k,
                                             b->v, b->stats, x->B, x->T, x->NH, x->NKV, x->HD,
                                             x->causal, x->prec, x->dt, assign, p, DROP_SEED,
                                             DROP_STREAM);
}

// n values v on the CPU (a host copy) or the GPU (the case's storage).
static void* vals(const drop_case* x, const float* v, size_t n, int gpu) {
    if (!gpu) return hcopy(v, n);
    void* d = dalloc(n * (x->packed ? 2 : 4));
    put_vals(d, v, n, x->packed ? 2 : 4, x->dt);
    return d;
}

// The GPU's n values at d (the case's storage) as floats on the host.
static float* floats(const drop_case* x, const void* d, size_t n) {
    if (!x->packed) return down(d, n);
    uint16_t* h = down16(d, n);
    float* f = malloc(n * sizeof *f);
    if (!f) abort();
    for (size_t i = 0; i < n; i++) f[i] = rt_bits16_to_f32_inl(h[i], x->dt);
    free(h);
    return f;
}

// Sets the gradients of b to g0 (dk, dv: its first nk values), or poisons them when assigned
// (NaN, or 0xABAB packed).
static void reset_grads(const drop_case* x, drop_bufs* b, const float* g0, size_t nq, size_t nk,
                        int assigned, int gpu) {
    void* g[3] = {b->dq, b->dk, b->dv};
    for (int i = 0; i < 3; i++) {
        const size_t n = i ? nk : nq;
        if (gpu && x->packed) {
            dev_grad16(g[i], g0, n, assigned, x->dt);
        } else if (gpu) {
            float* h = malloc(n * sizeof *h);
            if (!h) abort();
            reset_out(h, g[i], g0, n, assigned);
            free(h);
        } else {
            for (size_t j = 0; j < n; j++) ((float*)g[i])[j] = assigned ? NAN : g0[j];
        }
    }
}

static drop_bufs bufs_new(const drop_case* x, const float* q, const float* k, const float* v,
                          const float* dout, int gpu) {
    const size_t nq = nq_of(x), nk = nk_of(x);
    const size_t ns = rt_attention_stats_floats(x->B, x->NH, x->T);
    const size_t nsc = rt_attention_lowmem_scratch_floats(x->B, x->NH, x->T);
    const size_t es = gpu && x->packed ? 2 : 4;
    drop_bufs b;
    b.q = vals(x, q, nq, gpu), b.k = vals(x, k, nk, gpu), b.v = vals(x, v, nk, gpu);
    b.dout = vals(x, dout, nq, gpu);
    if (gpu) {
        b.out = dalloc(nq * es), b.dq = dalloc(nq * es), b.dk = dalloc(nk * es);
        b.dv = dalloc(nk * es);
        b.stats = dalloc(ns * sizeof(float)), b.scratch = dalloc(nsc * sizeof(float));
    } else {
        b.out = malloc(nq * es), b.dq = malloc(nq * es), b.dk = malloc(nk * es);
        b.dv = malloc(nk * es);
        b.stats = malloc(ns * sizeof(float)), b.scratch = malloc(nsc * sizeof(float));
        if (!b.out || !b.dq || !b.dk || !b.dv || !b.stats || !b.scratch) abort();
    }
    return b;
}

static void bufs_free(drop_bufs* b, int gpu) {
    void* p[10] = {b->q, b->k, b->v, b->dout, b->out, b->dq, b->dk, b->dv, b->stats, b->scratch};
    for (int i = 0; i < 10; i++) gpu ? dfree(p[i]) : free(p[i]);
}

// ----------------------------------------------------------------------------
// allowances

// Per element, what the GPU may differ from the CPU by beyond the fp32 tolerance: the
// derivation of attention_tc_ref.h with each probability P[r,c] times its mask factor
// Z[r,c] where it multiplies v (out) or dout (dv), and dS = P (Z dP - D). The tensor-core
// kernels narrow P Z and dS to 16 bits (u, eta: attn_tc_u, attn_tc_eta; both 0 for the fp32
// kernels):
//   out  u sum_c P Z |v| + eta/l sum_c |v|      dv  sum_r (u P Z + eta) |dout|
//   dq   scale sum_c (u |dS| + eta) |k|        dk  scale sum_r (u |dS| + eta) |q|
// A backward reading an out rounded to a 16-bit dt (unit roundoff uo; 0: an fp32 out) takes
// D = rowsum(dout * out) off by dD_r <= uo sum_d |dout| |out|, which moves dS by P dD_r:
// dq += scale sum_c P |dD_r| |k|, dk += scale sum_r P |dD_r| |q|.
typedef struct {
    double *out, *dq, *dk, *dv;
} drop_bound;

static void drop_bound_compute(drop_bound* bd, const drop_case* x, const float* q,
                               const float* k, const float* v, const float* dout, double u,
                               double eta, double uo) {
    const int B = x->B, T = x->T, NH = x->NH, NKV = x->NKV, HD = x->HD;
    const size_t ldq = (size_t)NH * HD, ldk = (size_t)NKV * HD;
    bd->out = attn_tc_zeros((size_t)B * T * ldq), bd->dq = attn_tc_zeros((size_t)B * T * ldq);
    bd->dk = attn_tc_zeros((size_t)B * T * ldk), bd->dv = attn_tc_zeros((size_t)B * T * ldk);
    const double scale = (float)(1.0 / sqrt((double)HD));
    const double zs = (float)(1.0 / (1.0 - (double)x->p));
    double *P = attn_tc_zeros((size_t)T * T), *Z = attn_tc_zeros((size_t)T * T);
    double *dS = attn_tc_zeros((size_t)T * T), *dD = attn_tc_zeros((size_t)T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int hk = h / (NH / NKV);
            const size_t qo = (size_t)b * T * ldq + (size_t)h * HD;
            const size_t ko = (size_t)b * T * ldk + (size_t)hk * HD;
            for (int r = 0; r < T; r++) {
                const int len = x->causal ? r + 1 : T;
                double *Pr = P + (size_t)r * T, *Zr = Z + (size_t)r * T, *dSr = dS + (size_t)r * T;
                double mx = -INFINITY, l = 0.0, D = 0.0;
                for (int c = 0; c < len; c++) {
                    double s = 0.0;
                    for (int d = 0; d < HD; d++)
                        s += (double)q[qo + r * ldq + d] * k[ko + c * ldk + d];
                    Pr[c] = scale * s;
                    if (Pr[c] > mx) mx = Pr[c];
                    const uint64_t e = (((uint64_t)b * NH + h) * T + r) * T + c;
                    Zr[c] = cpu_rt_dropout_uniform(DROP_SEED, DROP_STREAM, e) >= x->p ? zs : 0.0;
                }
                for (int c = 0; c < len; c++) l += (Pr[c] = exp(Pr[c] - mx));
                for (int c = 0; c < len; c++) {
                    Pr[c] /= l;
                    double dp = 0.0;
                    for (int d = 0; d < HD; d++)
                        dp += (double)dout[qo + r * ldq + d] * v[ko + c * ldk + d];
                    dSr[c] = Zr[c] * dp;
                    D += Pr[c] * dSr[c];
                }
                for (int c = 0; c < len; c++) dSr[c] = Pr[c] * (dSr[c] - D);
                dD[r] = 0.0;
                for (int d = 0; d < HD; d++) {
                    double a = 0.0, e = 0.0, o = 0.0;
                    for (int c = 0; c < len; c++) {
                        const double vv = v[ko + c * ldk + d];
                        a += Pr[c] * Zr[c] * fabs(vv);
                        e += fabs(vv);
                        o += Pr[c] * Zr[c] * vv;
                    }
                    bd->out[qo + r * ldq + d] = u * a + eta / l * e;
                    dD[r] += uo * fabs(dout[qo + r * ldq + d]) * fabs(o);
                }
            }
            for (int r = 0; r < T; r++) {
                const int len = x->causal ? r + 1 : T;
                const double *Pr = P + (size_t)r * T, *Zr = Z + (size_t)r * T;
                const double* dSr = dS + (size_t)r * T;
                for (int c = 0; c < len; c++) {
                    const double wq = scale * (u * fabs(dSr[c]) + eta + Pr[c] * dD[r]);
                    const double wv = u * Pr[c] * Zr[c] + eta;
                    for (int d = 0; d < HD; d++) {
                        const size_t i = ko + (size_t)c * ldk + d;
                        bd->dq[qo + r * ldq + d] += wq * fabs(k[i]);
                        bd->dk[i] += wq * fabs(q[qo + r * ldq + d]);
                        bd->dv[i] += wv * fabs(dout[qo + r * ldq + d]);
                    }
                }
            }
        }
    free(P), free(Z), free(dS), free(dD);
}

static void drop_bound_free(drop_bound* bd) {
    free(bd->out), free(bd->dq), free(bd->dk), free(bd->dv);
}

// got against want (n values): the largest |got - want| / allowance, the allowance being
// bound + TOL_GEMM max(1, |want|) + one ulp of a 16-bit dt (both sides round their store);
// *diff: the largest |got - want| / max(1, |want|). NaN: infinite.
static double drop_ratio(const float* got, const float* want, const double* bound, size_t n,
                         rt_dtype dt, double* diff) {
    double worst = 0.0;
    *diff = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double g = got[i], w = want[i];
        const double one = fabs(w) > 1.0 ? fabs(w) : 1.0;
        const double m = fabs(g) > fabs(w) ? fabs(g) : fabs(w);
        const double allow = bound[i] + TOL_GEMM * one + ulp_in(m, dt);
        const double e = isnan(g) || isnan(w) ? INFINITY : fabs(g - w);
        if (e / one > *diff) *diff = e / one;
        if (e / allow > worst) worst = e / allow;
    }
    return worst;
}

// The GPU's n values at dgot (the case's storage) against the CPU's want; passes within
// the allowance.
static void cmp_drop(const char* name, const drop_case* x, const void* dgot, const float* want,
                     const double* bound, size_t n) {
    float* g = floats(x, dgot, n);
    double diff;
    const double r = drop_ratio(g, want, bound, n, x->dt, &diff);
    CHECK(r <= 1.0, "%s: %zu values, max diff %.3g, max diff/allowance %.3f", name, n, diff, r);
    free(g);
}

// ----------------------------------------------------------------------------
// the tests

static const char* storage_name(const drop_case* x) {
    if (x->prec == RT_F32) return "fp32";
    if (x->packed) return x->prec == RT_BF16 ? "packed bf16" : "packed fp16";
    return x->prec == RT_BF16 ? "fp32 storage, bf16 operands" : "fp32 storage, fp16 operands";
}

// The tensor-core kernels run the case (attention.cu use_tensor_cores).
static int on_tensor_cores(const drop_case* x) {
    return x->prec != RT_F32 && x->HD % 16 == 0 && x->HD <= 128;
}

// The case's operands (q, k, v, dout, and g0 the gradients' initial values), values of prec
// (of dt for g0).
static void case_data(const drop_case* x, float** q, float** k, float** v, float** dout,
                      float** g0) {
    const size_t nq = nq_of(x), nk = nk_of(x);
    *q = hrand(nq, 1.5f, 0.0f), *k = hrand(nk, 1.5f, 0.0f), *v = hrand(nk, 1.0f, 0.0f);
    *dout = hrand(nq, 1.0f, 0.0f), *g0 = hrand(nq, 1.0f, 0.0f);
    round_to(*q, nq, x->prec), round_to(*k, nk, x->prec), round_to(*v, nk, x->prec);
    round_to(*dout, nq, x->prec), round_to(*g0, nq, x->dt);
}

// prec RT_F32: fp32 storage on the fp32 kernels; RT_BF16 / RT_F16: 16-bit operands in fp32
// storage (dt RT_F32), or with packed every tensor packed (dt = prec), on the tensor cores
// where they take HD, else on the fp32 kernels. Forward out and stats against the CPU;
// backward from the CPU's out and stats, dq, dk, dv added to and assigned; each gradient
// alone gives the joint call's bits; and the CPU drawing another stream's masks differs.
void test_attention_dropout(rt_dtype prec, int packed, int B, int T, int NH, int NKV, int HD,
                            int causal, float p) {
    const drop_case x = {B, T, NH, NKV, HD, causal, packed, prec, packed ? prec : RT_F32, p};
    const size_t nq = nq_of(&x), nk = nk_of(&x);
    const size_t ns = rt_attention_stats_floats(B, NH, T);
    const int tc = on_tensor_cores(&x);
    float *q, *k, *v, *dout, *g0;
    case_data(&x, &q, &k, &v, &dout, &g0);
    drop_bufs c = bufs_new(&x, q, k, v, dout, 0), g = bufs_new(&x, q, k, v, dout, 1);
    const int is_bf16 = prec == RT_BF16;
    drop_bound bd;
    drop_bound_compute(&bd, &x, q, k, v, dout, tc ? attn_tc_u(is_bf16) : 0.0,
                       tc ? attn_tc_eta(is_bf16) : 0.0, packed ? attn_tc_u(is_bf16) : 0.0);
    printf("== attention dropout p=%g, %s (%s kernels), B=%d T=%d NH=%d NKV=%d HD=%d causal=%d\n",
           p, storage_name(&x), tc ? "tensor-core" : "fp32", B, T, NH, NKV, HD, causal);

    forward(&x, &c, 0, p, DROP_STREAM);
    forward(&x, &g, 1, p, DROP_STREAM);
    cmp_drop("  forward: out vs CPU", &x, g.out, c.out, bd.out, nq);
    cmp("  forward: stats (max, 1/sum: the undropped softmax's) vs CPU", g.stats, c.stats, ns,
        TOL_GEMM);
    if (T >= 16) {  // a control: the same comparison against another stream's masks fails
        drop_bufs o = c;
        o.out = malloc(nq * sizeof(float)), o.stats = malloc(ns * sizeof(float));
        if (!o.out || !o.stats) abort();
        forward(&x, &o, 0, p, DROP_STREAM + 1);
        float* gv = floats(&x, g.out, nq);
        double diff;
        const double r = drop_ratio(gv, o.out, bd.out, nq, x.dt, &diff);
        CHECK(r > 10.0, "  control: another stream differs (out vs the CPU with stream %d: max "
              "diff %.3g, max diff/allowance %.3g)", DROP_STREAM + 1, diff, r);
        free(gv), free(o.out), free(o.stats);
    }

    // backward from the CPU's out and stats
    put_vals(g.out, c.out, nq, packed ? 2 : 4, x.dt);
    upload(g.stats, c.stats, ns);
    const int all = RT_ASSIGN_1 | RT_ASSIGN_2 | RT_ASSIGN_3;
    for (int as = 0; as < 2; as++) {
        reset_grads(&x, &c, g0, nq, nk, as, 0);
        reset_grads(&x, &g, g0, nq, nk, as, 1);
        backward(&x, &c, 0, 7, as ? all : RT_ACCUMULATE, p);
        backward(&x, &g, 1, 7, as ? all : RT_ACCUMULATE, p);
        char nm[3][80];
        const char* gn[3] = {"dq", "dk", "dv"};
        for (int i = 0; i < 3; i++)
            snprintf(nm[i], sizeof nm[i], "  backward (CPU out, stats): %s (%s)", gn[i],
                     as ? "assigned" : "+=");
        cmp_drop(nm[0], &x, g.dq, c.dq, bd.dq, nq);
        cmp_drop(nm[1], &x, g.dk, c.dk, bd.dk, nk);
        cmp_drop(nm[2], &x, g.dv, c.dv, bd.dv, nk);
    }
    // each gradient alone (assigned): the joint call's bits, the same masks in every kernel
    drop_bufs s = bufs_new(&x, q, k, v, dout, 1);
    RT_CHECK_CUDA(cudaMemcpy(s.out, g.out, nq * (packed ? 2 : 4), cudaMemcpyDeviceToDevice));
    RT_CHECK_CUDA(cudaMemcpy(s.stats, g.stats, ns * sizeof(float), cudaMemcpyDeviceToDevice));
    reset_grads(&x, &s, g0, nq, nk, 1, 1);
    for (int w = 1; w <= 4; w *= 2) backward(&x, &s, 1, w, all, p);
    const int same = packed ? dev_same16(s.dq, g.dq, nq) && dev_same16(s.dk, g.dk, nk) &&
                                  dev_same16(s.dv, g.dv, nk)
                            : dev_same(s.dq, g.dq, nq) && dev_same(s.dk, g.dk, nk) &&
                                  dev_same(s.dv, g.dv, nk);
    CHECK(same, "  backward dq, dk, dv each alone: the joint call's bits");

    drop_bound_free(&bd);
    bufs_free(&c, 0), bufs_free(&g, 1), bufs_free(&s, 1);
    free(q), free(k), free(v), free(dout), free(g0);
}

// p = 0 through the dropout calls: the plain calls' bits (forward out and stats, backward
// dq, dk, dv added to g0).
void test_attention_dropout_zero(rt_dtype prec, int packed, int B, int T, int NH, int NKV,
                                 int HD, int causal) {
    const drop_case x = {B, T, NH, NKV, HD, causal, packed, prec, packed ? prec : RT_F32, 0.0f};
    const size_t nq = nq_of(&x), nk = nk_of(&x);
    const size_t ns = rt_attention_stats_floats(B, NH, T);
    float *q, *k, *v, *dout, *g0;
    case_data(&x, &q, &k, &v, &dout, &g0);
    drop_bufs a = bufs_new(&x, q, k, v, dout, 1), b = bufs_new(&x, q, k, v, dout, 1);
    forward(&x, &a, 1, 0.0f, DROP_STREAM);
    if (packed)
        rt_attention_lowmem_packed_forward(b.out, b.stats, b.scratch, b.q, b.k, b.v, B, T, NH,
                                           NKV, HD, causal, prec, DROP_PACKED_ALL, x.dt);
    else
        rt_attention_lowmem_forward(b.out, b.stats, b.scratch, b.q, b.k, b.v, B, T, NH, NKV, HD,
                                    causal, prec, x.dt);
    int same = (packed ? dev_same16(a.out, b.out, nq) : dev_same(a.out, b.out, nq)) &&
               dev_same(a.stats, b.stats, ns);
    reset_grads(&x, &a, g0, nq, nk, 0, 1);
    reset_grads(&x, &b, g0, nq, nk, 0, 1);
    backward(&x, &a, 1, 7, RT_ACCUMULATE, 0.0f);
    if (packed)
        rt_attention_lowmem_packed_backward(b.dq, b.dk, b.dv, b.scratch, b.dout, b.out, b.q, b.k,
                                            b.v, b.stats, B, T, NH, NKV, HD, causal, prec,
                                            DROP_PACKED_ALL, x.dt, RT_ACCUMULATE, 0, 0, 0);
    else
        rt_attention_lowmem_backward(b.dq, b.dk, b.dv, b.scratch, b.dout, b.out, b.q, b.k, b.v,
                                     b.stats, B, T, NH, NKV, HD, causal, prec, x.dt,
                                     RT_ACCUMULATE);
    same = same && (packed ? dev_same16(a.dq, b.dq, nq) && dev_same16(a.dk, b.dk, nk) &&
                                 dev_same16(a.dv, b.dv, nk)
                           : dev_same(a.dq, b.dq, nq) && dev_same(a.dk, b.dk, nk) &&
                                 dev_same(a.dv, b.dv, nk));
    CHECK(same, "attention dropout p=0, %s (%s kernels), B=%d T=%d NH=%d NKV=%d HD=%d "
          "causal=%d: forward and backward == the plain calls, bit for bit", storage_name(&x),
          on_tensor_cores(&x) ? "tensor-core" : "fp32", B, T, NH, NKV, HD, causal);
    bufs_free(&a, 1), bufs_free(&b, 1);
    free(q), free(k), free(v), free(dout), free(g0);
}
