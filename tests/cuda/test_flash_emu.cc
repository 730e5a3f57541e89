// The CUDA flash-attention kernels (runtime/cuda/kernels/flash_attention.cuh: forward, D,
// dK/dV, dQ, and the launch logic that picks tiles and grids) run on the CPU through
// tests/cuda/cuda_emu.h (CUDA threads as fibers, or pthreads under TSan), against the CPU
// attention kernel (runtime/cpu/kernels/attention.c, linked as cpu_rt_*). Needs no GPU: it
// checks the kernels' indexing, tiling, masking, online softmax and GQA accumulation
// everywhere; what only a GPU run can show (device expf, scheduling, speed) is left to
// test_cuda_kernels. Built twice by runtime/cuda.ninja: with AddressSanitizer and UBSan
// (shared-memory overruns, reads of unwritten shared memory through NaN poisoning) and
// with ThreadSanitizer (races between two __syncthreads).
//
// For each shape (every padded head dim 32/64/128/256, T not a multiple of the tiles,
// MHA and GQA, causal and not), compared with |got - want| / max(1, |want|):
//   forward out and stats (m, 1/l) against the CPU lowmem forward;
//   backward dq, dk, dv accumulated onto non-zero buffers, from the emulated forward's out
//   and stats, against the CPU lowmem backward from the CPU's;
//   dq, dk, dv each requested alone: the same bits as the joint call;
//   dt bf16 and the assign bits: the unrounded, accumulating call's values rounded, bit
//   for bit (flash_store_check.h).
// Then the same with attention dropout (the kernels' DROP instantiations) against the CPU's
// dropout calls with the same seed and stream, within the same tolerances.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda_emu.h"
#include "host_data.h"
#include "flash_attention.cuh"
#include "flash_store_check.h"
// the CPU reference: cpu_rt_*
#include "cpu_rename.h"
#include "rt_kernels.h"
#include "cpu_unrename.h"

#define TOL_FWD 2e-5
#define TOL_BWD 1e-4

struct emu_launcher {
    void operator()(rtc_fa_kernel kernel, dim3 grid, size_t smem, const rtc_fa_args& a) const {
        emu_launch(kernel, grid, RTC_FA_NT, smem, a);
    }
};

// ----------------------------------------------------------------------------
// helpers

// Largest |got - want| / max(1, |want|); NaN anywhere is infinitely far.
static double maxdiff(const float* got, const float* want, size_t n) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double g = got[i], w = want[i];
        const double e = (isnan(g) || isnan(w)) ? INFINITY : fabs(g - w) / fmax(1.0, fabs(w));
        if (e > worst) worst = e;
    }
    return worst;
}

// max diff over the stats' m entries (even) and 1/l entries (odd) separately
static double maxdiff_strided(const float* got, const float* want, size_t n, size_t first) {
    double worst = 0.0;
    for (size_t i = first; i < n; i += 2) {
        const double g = got[i], w = want[i];
        const double e = (isnan(g) || isnan(w)) ? INFINITY : fabs(g - w) / fmax(1.0, fabs(w));
        if (e > worst) worst = e;
    }
    return worst;
}

static int same_bits(const float* a, const float* b, size_t n) {
    return memcmp(a, b, n * sizeof(float)) == 0;
}

// ----------------------------------------------------------------------------
// one shape, with attention dropout p (0: none; the kernels' DROP instantiations and the
// CPU's dropout calls drawing the same masks)

static void test_shape(int B, int T, int NH, int NKV, int HD, int causal, float p = 0.0f) {
    const uint64_t seed = 0x5DEECE66Dull, stream = 11;
    const size_t nq = (size_t)B * T * NH * HD, nk = (size_t)B * T * NKV * HD;
    const size_t ns = cpu_rt_attention_stats_floats(B, NH, T);
    const size_t nsc = cpu_rt_attention_lowmem_scratch_floats(B, NH, T);
    float *q = hrand(nq, 1.5f, 0.0f), *k = hrand(nk, 1.5f, 0.0f), *v = hrand(nk, 1.0f, 0.0f);
    float* dout = hrand(nq, 1.0f, 0.0f);
    float *dq0 = hrand(nq, 1.0f, 0.0f), *dk0 = hrand(nk, 1.0f, 0.0f), *dv0 = hrand(nk, 1.0f, 0.0f);
    float *out = hrand(nq, 1.0f, 0.0f), *stats = hrand(ns, 1.0f, 0.0f),
          *scratch = hrand(nsc, 1.0f, 0.0f);
    float *eout = hrand(nq, 1.0f, 0.0f), *estats = hrand(ns, 1.0f, 0.0f),
          *escratch = hrand(nsc, 1.0f, 0.0f);
    emu_launcher launch;
    char nm[200];
    int at = p > 0.0f ? snprintf(nm, sizeof nm, "dropout p=%g ", p) : 0;
    snprintf(nm + at, sizeof nm - at, "B=%d T=%d NH=%d NKV=%d HD=%d (tiles of HD %d) %s", B, T,
             NH, NKV, HD, rtc_fa_hdp(HD), causal ? "causal" : "full");

    // forward
    cpu_rt_attention_lowmem_dropout_forward(out, stats, scratch, q, k, v, B, T, NH, NKV, HD,
                                            causal, RT_F32, RT_F32, p, seed, stream);
    rtc_fa_args a = rtc_fa_make_args(B, T, NH, NKV, HD, causal, p, seed, stream);
    a.q = q, a.k = k, a.v = v;
    rtc_fa_args fa = a;
    fa.out = eout;
    fa.stats = estats;
    rtc_fa_forward(launch, fa);
    const double e_out = maxdiff(eout, out, nq);
    const double e_m = maxdiff_strided(estats, stats, ns, 0);
    const double e_inv = maxdiff_strided(estats, stats, ns, 1);
    CHECK(e_out <= TOL_FWD && e_m <= TOL_FWD && e_inv <= TOL_FWD,
          "flash forward %s: out max diff %.3g, stats m %.3g, 1/l %.3g (tol %.3g)", nm, e_out, e_m,
          e_inv, TOL_FWD);

    // backward, all three gradients, accumulated onto dq0/dk0/dv0
    float *dq = hcopy(dq0, nq), *dk = hcopy(dk0, nk), *dv = hcopy(dv0, nk);
    float *edq = hcopy(dq0, nq), *edk = hcopy(dk0, nk), *edv = hcopy(dv0, nk);
    cpu_rt_attention_lowmem_dropout_backward(dq, dk, dv, scratch, dout, out, q, k, v, stats, B, T,
                                             NH, NKV, HD, causal, RT_F32, RT_F32, RT_ACCUMULATE,
                                             p, seed, stream);
    rtc_fa_args ba = a;
    ba.dout = dout, ba.out_in = eout, ba.stats_in = estats, ba.D = escratch;
    ba.dq = edq, ba.dk = edk, ba.dv = edv;
    rtc_fa_backward(launch, ba);
    const double e_dq = maxdiff(edq, dq, nq), e_dk = maxdiff(edk, dk, nk),
                 e_dv = maxdiff(edv, dv, nk);
    CHECK(e_dq <= TOL_BWD && e_dk <= TOL_BWD && e_dv <= TOL_BWD,
          "flash backward %s (+=): dq max diff %.3g, dk %.3g, dv %.3g (tol %.3g)", nm, e_dq, e_dk,
          e_dv, TOL_BWD);

    // each gradient alone (the others NULL) gives the joint call's bits
    float *sdq = hcopy(dq0, nq), *sdk = hcopy(dk0, nk), *sdv = hcopy(dv0, nk);
    rtc_fa_args s1 = ba;
    s1.dk = s1.dv = NULL, s1.dq = sdq;
    rtc_fa_backward(launch, s1);
    rtc_fa_args s2 = ba;
    s2.dq = s2.dv = NULL, s2.dk = sdk;
    rtc_fa_backward(launch, s2);
    rtc_fa_args s3 = ba;
    s3.dq = s3.dk = NULL, s3.dv = sdv;
    rtc_fa_backward(launch, s3);
    CHECK(same_bits(sdq, edq, nq) && same_bits(sdk, edk, nk) && same_bits(sdv, edv, nk),
          "flash backward %s: dq, dk, dv each alone == the joint call, bit for bit", nm);
    {
        auto fwd = [&launch](const rtc_fa_args& x) { rtc_fa_forward(launch, x); };
        auto bwd = [&launch](const rtc_fa_args& x) { rtc_fa_backward(launch, x); };
        char what[240];
        snprintf(what, sizeof what, "flash %s, dt bf16", nm);
        check_round_assign(fwd, bwd, RT_BF16, fa, eout, estats, ba, edq, edk, edv, dq0, dk0, dv0,
                           what);
    }

    free(q), free(k), free(v), free(dout), free(dq0), free(dk0), free(dv0);
    free(out), free(stats), free(scratch), free(eout), free(estats), free(escratch);
    free(dq), free(dk), free(dv), free(edq), free(edk), free(edv), free(sdq), free(sdk), free(sdv);
}

// ----------------------------------------------------------------------------

int main(void) {
    rng_state = 0x853C49E6748FEA9Bull;  // this test's own random stream
    cpu_rt_kernels_init();
    // B, T, NH, NKV, HD, causal: each padded head dim, T below, at and across tile sizes
    test_shape(1, 1, 1, 1, 1, 1);
    test_shape(2, 5, 4, 2, 3, 1);
    test_shape(1, 70, 2, 1, 32, 1);
    test_shape(2, 33, 4, 4, 32, 0);
    test_shape(1, 97, 3, 3, 40, 1);
    test_shape(1, 64, 4, 2, 64, 0);
    test_shape(1, 45, 2, 1, 100, 1);
    test_shape(1, 33, 2, 2, 128, 0);
    test_shape(1, 37, 2, 1, 200, 1);
    test_shape(1, 20, 1, 1, 256, 0);
    // dropout: each padded head dim, the causal diagonal and partial tiles, GQA
    test_shape(2, 37, 4, 2, 16, 1, 0.1f);
    test_shape(1, 70, 2, 2, 64, 0, 0.5f);
    test_shape(1, 45, 2, 1, 100, 1, 0.3f);
    test_shape(1, 20, 1, 1, 256, 0, 0.5f);
    // every kernel configuration, launched above or not, fits the smallest opt-in limit
    struct smem_check {
        size_t worst = 0;
        int n = 0;
        void operator()(rtc_fa_kernel, size_t smem) {
            if (smem > worst) worst = smem;
            n++;
        }
    } all;
    rtc_fa_each_kernel(all);
    CHECK(all.worst <= EMU_MAX_SMEM,
          "all %d flash kernel configurations: largest shared memory %zu bytes (limit %d)", all.n,
          all.worst, EMU_MAX_SMEM);
    CHECK(emu_limit_errors == 0,
          "every launch within the GPU limits (%ld blocks emulated; largest shared memory %zu "
          "bytes, limit %d)",
          emu_blocks_run, emu_max_smem_seen, EMU_MAX_SMEM);
    return check_summary();
}
