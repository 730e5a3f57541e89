// The CUDA step backend's copy kernel (rtcs_copy, rtcs_copy_rounded: kernels.cu) against its
// host reference rt_copy_apply, byte for byte, on random plans: runs of 1 to 13 elements (so
// runs start and end inside a thread's 8-element chunk, the kernel's slow path) and long
// ones, zero-fill runs, every source / destination dtype, assigned and accumulated, and
// the rounded copy of fp32 sources to bf16 / fp16; and plans whose runs keep both sides
// 16-byte aligned along most chunks (the kernel's 16-byte path), as parameters placed at
// multiples of 8 elements do. Destination bytes outside the runs must stay as they were.
// Built for the GPU and for the CPU emulator (tests/cuda_step/run.sh).
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dtype_bits.h"
#include "kernels.h"
#include "rt_fsdp_copy.h"

#define SRC_N 4096
#define DST_N 8192
#define PLANS 40

static uint64_t rng = 0x2545f4914f6cdd1dULL;
static uint32_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static int uniform(int lo, int hi) { return lo + (int)(next() % (uint32_t)(hi - lo + 1)); }

static size_t elem_bytes(rt_dtype dt) { return dt == RT_F32 ? 4 : 2; }

// n values of dt in [-4, 4) with the low bits of fp32 set (so rounding matters).
static void random_values(void* buf, rt_dtype dt, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float v = ((float)(next() % 65536u) - 32768.0f) / 8192.0f + (float)next() * 1e-12f;
        if (dt == RT_F32) ((float*)buf)[i] = v;
        else ((uint16_t*)buf)[i] = rt_bits16_from_f32_inl(v, dt);
    }
}

// Runs with disjoint destinations in increasing order, random sources (a sixth zero-fill).
// aligned: long runs whose source and destination offsets are congruent to the run's start
// in the plan modulo 8, so each whole 8-element chunk of the run is 16-byte aligned on both
// sides (in every dtype). Returns how many runs start off a multiple of 8 elements into
// the plan.
static int random_plan(rt_copy_plan* p, int aligned) {
    p->nruns = uniform(1, 40);
    p->cap = p->nruns;
    p->runs = (rt_copy_run*)malloc((size_t)p->nruns * sizeof(rt_copy_run));
    p->total = 0;
    int64_t d = uniform(0, 5);
    int odd = 0;
    for (int k = 0; k < p->nruns; k++) {
        const int64_t n = aligned       ? uniform(8, 150)
                          : next() % 4 ? uniform(1, 13)
                                       : uniform(14, 150);
        if (p->total % 8) odd++;
        if (aligned) d += (p->total - d) & 7;
        rt_copy_run* r = &p->runs[k];
        r->n = n;
        r->dst = d;
        r->src = next() % 6 ? uniform(0, SRC_N - 8 - (int)n) : -1;
        if (aligned && r->src >= 0) r->src = (r->src & ~7) | (p->total & 7);
        r->param = -1;
        p->total += n;
        d += n + uniform(0, 3);
    }
    return odd;
}

// One plan, one dtype pair: the device result against rt_copy_apply's. round_dt != RT_F32:
// rtcs_copy_rounded of fp32 sources (the reference rounds a copy of the source first).
static int same_as_host(const rt_copy_plan* p, rt_dtype dst_dt, rt_dtype src_dt, rt_dtype round_dt,
                        int accumulate) {
    static unsigned char src[SRC_N * 4], dst0[DST_N * 4], want[DST_N * 4], got[DST_N * 4];
    const size_t sb = SRC_N * elem_bytes(src_dt), db = DST_N * elem_bytes(dst_dt);
    random_values(src, src_dt, SRC_N);
    random_values(dst0, dst_dt, DST_N);
    memcpy(want, dst0, db);
    if (round_dt != RT_F32) {
        static float rounded[SRC_N];
        for (int i = 0; i < SRC_N; i++) rounded[i] = rt_round_inl(((const float*)src)[i], round_dt);
        rt_copy_apply(p, rt_copy_flat(want, dst_dt), rt_copy_flat(rounded, RT_F32), accumulate);
    } else {
        rt_copy_apply(p, rt_copy_flat(want, dst_dt), rt_copy_flat(src, src_dt), accumulate);
    }
    rtcs_plan dp;
    void *dsrc = NULL, *ddst = NULL;
    if (rtcs_plan_upload(&dp, p) != 0 || cudaMalloc(&dsrc, sb) != cudaSuccess ||
        cudaMalloc(&ddst, db) != cudaSuccess) {
        printf("device allocation failed\n");
        exit(1);
    }
    cudaMemcpy(dsrc, src, sb, cudaMemcpyHostToDevice);
    cudaMemcpy(ddst, dst0, db, cudaMemcpyHostToDevice);
    if (round_dt != RT_F32)
        rtcs_copy_rounded(&dp, ddst, dst_dt, (const float*)dsrc, round_dt, accumulate, NULL);
    else
        rtcs_copy(&dp, ddst, dst_dt, dsrc, src_dt, accumulate, NULL);
    cudaMemcpy(got, ddst, db, cudaMemcpyDeviceToHost);
    cudaFree(dsrc);
    cudaFree(ddst);
    rtcs_plan_free(&dp);
    return memcmp(got, want, db) == 0;
}

int main(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("SKIP seg_copy: no GPU\n0 passed, 0 failed\n");
        return 0;
    }
    static const rt_dtype dts[3] = {RT_F32, RT_BF16, RT_F16};
    static const char* names[3] = {"f32", "bf16", "f16"};
    // (dst, src, round) combinations: every pair plain, and fp32 sources rounded first
    for (int di = 0; di < 3; di++) {
        for (int si = 0; si < 3; si++) {
            for (int acc = 0; acc < 2; acc++) {
                int same = 0, odd = 0;
                for (int k = 0; k < PLANS; k++) {
                    rt_copy_plan p;
                    odd += random_plan(&p, k % 2);
                    same += same_as_host(&p, dts[di], dts[si], RT_F32, acc);
                    free(p.runs);
                }
                CHECK(same == PLANS && odd > 0,
                      "rtcs_copy %s -> %s, %s: %d of %d random plans byte-identical to "
                      "rt_copy_apply, half of them aligned (%d runs starting inside an 8-element "
                      "chunk)",
                      names[si], names[di], acc ? "accumulated" : "assigned", same, PLANS, odd);
            }
        }
        for (int ri = 1; ri < 3; ri++) {
            for (int acc = 0; acc < 2; acc++) {
                int same = 0;
                for (int k = 0; k < PLANS; k++) {
                    rt_copy_plan p;
                    random_plan(&p, k % 2);
                    same += same_as_host(&p, dts[di], RT_F32, dts[ri], acc);
                    free(p.runs);
                }
                CHECK(same == PLANS,
                      "rtcs_copy_rounded f32 (rounded to %s) -> %s, %s: %d of %d random plans, "
                      "half of them aligned, byte-identical to rounding then rt_copy_apply",
                      names[ri], names[di], acc ? "accumulated" : "assigned", same, PLANS);
            }
        }
    }
    return check_summary();
}
