// The CUDA step backend's copy plans (runtime/cuda/step/segments.c) against runtime/fsdp's
// host copies, on random groups: uneven dim-0 shards, Shard(largest dim), post-forward
// layouts, every rank, fp32/bf16/fp16, unsharded parameters in fp32 slots and packed (16-bit
// groups: every other one). Each plan applied on the host (rt_seg_apply, the
// reference of the GPU kernel) must write exactly the bytes the host copy writes and
// nothing else. Runs without a GPU.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rt_fsdp.h"
#include "segments.h"

// ---- random groups ----------------------------------------------------------------------

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint32_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static int uniform(int lo, int hi) { return lo + (int)(next() % (uint32_t)(hi - lo + 1)); }

typedef struct group {
    int n;
    rt_fsdp_param_desc d[6];
    char names[6][16];
} group;

static void random_group(group* g, int largest_dim, int world) {
    g->n = uniform(1, 6);
    for (int i = 0; i < g->n; i++) {
        rt_fsdp_param_desc* d = &g->d[i];
        snprintf(g->names[i], sizeof g->names[i], "p%d", i);
        d->name = g->names[i];
        d->ndim = uniform(1, 3);
        for (int k = 0; k < d->ndim; k++) d->shape[k] = uniform(1, 9);
        d->placement = largest_dim ? RT_SHARD_LARGEST_DIM : RT_SHARD_DIM0;
        if (largest_dim) {
            // Shard(d > 0) must divide evenly: make the largest dim a multiple of world.
            int best = 0;
            for (int k = 1; k < d->ndim; k++)
                if (d->shape[k] > d->shape[best]) best = k;
            if (best > 0) d->shape[best] = world * uniform(2, 4);
        }
    }
}

static int64_t numel(const rt_fsdp_param_desc* d) {
    int64_t n = 1;
    for (int k = 0; k < d->ndim; k++) n *= d->shape[k];
    return n;
}

// Buffers start with a pattern so that a run writing outside its place shows up.
static void* pattern(size_t bytes, uint8_t seed) {
    uint8_t* b = malloc(bytes + 1);
    for (size_t i = 0; i < bytes; i++) b[i] = (uint8_t)(seed + 37 * i);
    return b;
}

// Floats that survive bf16/fp16 conversions without NaNs.
static void* values(int64_t n, rt_dtype dt) {
    void* b = malloc((size_t)n * rt_dtype_size(dt) + 1);
    for (int64_t i = 0; i < n; i++) rt_store_f32(b, dt, (size_t)i, (float)uniform(-1000, 1000) / 7.0f);
    return b;
}

static int same(const void* a, const void* b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

static int failures = 0, layouts = 0, runs = 0;

// The unsharded buffer's two storages (backend.h UN_F32, UN_PACKED): in a 16-bit group the
// odd parameters are packed (param_dtype's bits at the start of their fp32 slot, at 16-bit
// element offsets), and each plan leaves the other storage's parameters out. dts: each
// parameter's storage, for runtime/fsdp's copies.
static void storages(int n, const int64_t* un_off, rt_dtype pdt, int64_t off[2][6], rt_dtype* dts) {
    for (int i = 0; i < n; i++) {
        const int packed = pdt != RT_F32 && i % 2;
        off[0][i] = packed ? -1 : un_off[i];
        off[1][i] = packed ? 2 * un_off[i] : -1;
        dts[i] = packed ? pdt : RT_F32;
    }
}

// Applies the copy-out plans of both storages (rt_seg_all_gather_out) to un.
static void apply_copy_out(const rt_fsdp_layout* l, int64_t off[2][6], float* un, const void* out,
                           rt_dtype pdt) {
    for (int k = 0; k < 2; k++) {
        rt_seg_plan p = {0};
        rt_seg_all_gather_out(&p, l, off[k]);
        rt_seg_apply(&p, un, k ? pdt : RT_F32, out, pdt, 0);
        runs += p.nsegs;
        rt_seg_plan_free(&p);
    }
}

// ---- one layout -------------------------------------------------------------------------


static void fail(const char* what, const group* g, int world, int rank) {
    if (failures++ < 10)
        printf("FAIL %s: %d params, world %d rank %d, first shape [%lld...]\n", what, g->n, world,
               rank, (long long)g->d[0].shape[0]);
}

// One rank: the direct plan (rt_seg_reduce_direct) writes the sharded gradients that the
// fp32 copy-in and view-out write, assigned and accumulated.
static void check_reduce_direct(rt_fsdp_layout* L, const group* g, const int64_t* un_off,
                                int64_t un_total, const int64_t* shard_off) {
    float* grads = values(un_total, RT_F32);
    float* rs = malloc((size_t)L->total_numel * 4 + 1);
    const void* gp[6];
    for (int i = 0; i < g->n; i++) gp[i] = grads + un_off[i];
    rt_fsdp_reduce_scatter_copy_in(L, gp, RT_F32, rs, RT_F32);
    rt_seg_plan p = {0};
    rt_seg_reduce_direct(&p, L, un_off, shard_off);
    for (int acc = 0; acc < 2; acc++) {
        float* ga = values(L->block_numel, RT_F32);
        float* gb = malloc((size_t)L->block_numel * 4 + 1);
        memcpy(gb, ga, (size_t)L->block_numel * 4);
        void* sp[6];
        for (int i = 0; i < g->n; i++) sp[i] = ga + shard_off[i];
        rt_fsdp_reduce_scatter_view_out(L, rs, RT_F32, sp, RT_F32, acc);
        rt_seg_apply(&p, gb, RT_F32, grads, RT_F32, acc);
        if (!same(ga, gb, (size_t)L->block_numel * 4)) fail(acc ? "reduce_direct (accumulate)" : "reduce_direct", g, 1, 0);
        free(ga), free(gb);
    }
    runs += p.nsegs;
    rt_seg_plan_free(&p);
    rt_seg_plan q = {0};
    rt_fsdp_layout two;
    if (!rt_fsdp_layout_init(&two, "g", g->d, g->n, 2, 0) && rt_seg_reduce_direct(&q, &two, un_off, shard_off) != RT_ERR_ARG)
        fail("reduce_direct accepted a layout of 2 ranks", g, 2, 0);
    rt_fsdp_layout_free(&two);
    rt_seg_plan_free(&q);
    free(grads), free(rs);
}

// One rank: the direct plans (rt_seg_all_gather_direct) of both storages write the
// unsharded parameters that the copy-in and copy-out write; the fp32 storage's from the
// shards rounded to param_dtype first (as rtcs_copy_rounded applies it).
static void check_all_gather_direct(rt_fsdp_layout* L, const group* g, const int64_t* shard_off,
                                    const int64_t* un_off, int64_t un_total, rt_dtype pdt) {
    int64_t so[2][6];
    rt_dtype udt[6];
    storages(g->n, un_off, pdt, so, udt);
    float* shards = values(L->block_numel, RT_F32);
    float* rounded = malloc((size_t)L->block_numel * 4 + 1);
    void* narrow = malloc((size_t)L->block_numel * 4 + 1);
    rt_convert(narrow, pdt, shards, RT_F32, (size_t)L->block_numel);
    rt_convert(rounded, RT_F32, narrow, pdt, (size_t)L->block_numel);
    void* out = malloc((size_t)L->total_numel * 4 + 1);
    float* ua = pattern((size_t)un_total * 4, 4);
    float* ub = pattern((size_t)un_total * 4, 4);
    const void* sp[6];
    void* up[6];
    for (int i = 0; i < g->n; i++) sp[i] = shards + shard_off[i], up[i] = ua + un_off[i];
    rt_fsdp_all_gather_copy_in(L, sp, RT_F32, out, pdt);
    rt_fsdp_all_gather_copy_out_as(L, out, pdt, up, udt);
    for (int k = 0; k < 2; k++) {
        rt_seg_plan p = {0};
        rt_seg_all_gather_direct(&p, L, shard_off, so[k]);
        rt_seg_apply(&p, ub, k ? pdt : RT_F32, k ? shards : rounded, RT_F32, 0);
        runs += p.nsegs;
        rt_seg_plan_free(&p);
    }
    if (!same(ua, ub, (size_t)un_total * 4)) fail("all_gather_direct", g, 1, 0);
    rt_seg_plan q = {0};
    rt_fsdp_layout two;
    if (!rt_fsdp_layout_init(&two, "g", g->d, g->n, 2, 0) &&
        rt_seg_all_gather_direct(&q, &two, shard_off, un_off) != RT_ERR_ARG)
        fail("all_gather_direct accepted a layout of 2 ranks", g, 2, 0);
    rt_fsdp_layout_free(&two);
    rt_seg_plan_free(&q);
    free(shards), free(rounded), free(narrow), free(out), free(ua), free(ub);
}

static void check_sharded(const group* g, int world, int rank, rt_dtype pdt, rt_dtype rdt) {
    rt_fsdp_layout L;
    if (rt_fsdp_layout_init(&L, "g", g->d, g->n, world, rank)) {
        rt_fsdp_layout_free(&L);  // a random shape FSDP2 refuses (uneven Shard(d > 0))
        return;
    }
    layouts++;
    int64_t shard_off[6], un_off[6], un_total = 0;
    for (int i = 0; i < g->n; i++) {
        shard_off[i] = L.params[i].offset;
        un_off[i] = un_total;
        un_total += numel(&g->d[i]) + 3;  // a gap the copies must not touch
    }
    size_t es = rt_dtype_size(pdt), rs = rt_dtype_size(rdt);
    float* shards = values(L.block_numel, RT_F32);
    const void* sp[6];
    void* up[6];

    // all-gather copy-in
    void* a = pattern((size_t)L.total_numel * es, 1);
    void* b = pattern((size_t)L.total_numel * es, 1);
    for (int i = 0; i < g->n; i++) sp[i] = shards + shard_off[i];
    rt_fsdp_all_gather_copy_in(&L, sp, RT_F32, a, pdt);
    rt_seg_plan p = {0};
    rt_seg_all_gather_in(&p, &L, shard_off);
    rt_seg_apply(&p, b, pdt, shards, RT_F32, 0);
    runs += p.nsegs;
    if (!same(a, b, (size_t)L.total_numel * es)) fail("all_gather_in", g, world, rank);
    rt_seg_plan_free(&p);
    free(a), free(b);

    // all-gather copy-out (fp32 storage of param_dtype values, or packed)
    int64_t so[2][6];
    rt_dtype udt[6];
    storages(g->n, un_off, pdt, so, udt);
    void* out = values(L.total_numel, pdt);
    float* ua = pattern((size_t)un_total * 4, 2);
    float* ub = pattern((size_t)un_total * 4, 2);
    for (int i = 0; i < g->n; i++) up[i] = ua + un_off[i];
    rt_fsdp_all_gather_copy_out_as(&L, out, pdt, up, udt);
    apply_copy_out(&L, so, ub, out, pdt);
    if (!same(ua, ub, (size_t)un_total * 4)) fail("all_gather_out", g, world, rank);
    free(out), free(ua), free(ub);

    // reduce-scatter copy-in from the unsharded grads (fp32 slots)
    float* grads = values(un_total, RT_F32);
    void* ra = pattern((size_t)L.total_numel * rs, 3);
    void* rb = pattern((size_t)L.total_numel * rs, 3);
    for (int i = 0; i < g->n; i++) sp[i] = grads + un_off[i];
    rt_fsdp_reduce_scatter_copy_in(&L, sp, RT_F32, ra, rdt);
    rt_seg_reduce_scatter_in(&p, &L, un_off);
    rt_seg_apply(&p, rb, rdt, grads, RT_F32, 0);
    runs += p.nsegs;
    if (!same(ra, rb, (size_t)L.total_numel * rs)) fail("reduce_scatter_in", g, world, rank);
    rt_seg_plan_free(&p);
    free(ra), free(rb), free(grads);

    // view-out, assigned and accumulated
    void* rout = values(L.block_numel, rdt);
    rt_seg_view_out(&p, &L, shard_off);
    for (int acc = 0; acc < 2; acc++) {
        float* ga = values(L.block_numel, RT_F32);
        float* gb = malloc((size_t)L.block_numel * 4 + 1);
        memcpy(gb, ga, (size_t)L.block_numel * 4);
        void* gp[6];
        for (int i = 0; i < g->n; i++) gp[i] = ga + shard_off[i];
        rt_fsdp_reduce_scatter_view_out(&L, rout, rdt, gp, RT_F32, acc);
        rt_seg_apply(&p, gb, RT_F32, rout, rdt, acc);
        if (!same(ga, gb, (size_t)L.block_numel * 4)) fail(acc ? "view_out (accumulate)" : "view_out", g, world, rank);
        free(ga), free(gb);
    }
    runs += p.nsegs;
    rt_seg_plan_free(&p);
    free(rout), free(shards);
    if (world == 1) {
        check_reduce_direct(&L, g, un_off, un_total, shard_off);
        check_all_gather_direct(&L, g, shard_off, un_off, un_total, pdt);
    }
    rt_fsdp_layout_free(&L);
}

static void check_post_forward(const group* g, int world, int pf_world, int pf_rank, rt_dtype pdt) {
    rt_fsdp_layout pf;
    if (rt_fsdp_layout_init_post_forward(&pf, "g", g->d, g->n, world, pf_world, pf_rank)) {
        rt_fsdp_layout_free(&pf);
        return;
    }
    layouts++;
    int64_t off[6], un_off[6], un_total = 0;
    for (int i = 0; i < g->n; i++) {
        off[i] = pf.params[i].offset;
        un_off[i] = un_total;
        un_total += numel(&g->d[i]) + 2;
    }
    int64_t so[2][6];
    rt_dtype udt[6];
    storages(g->n, un_off, pdt, so, udt);
    float* un = values(un_total, RT_F32);
    for (int i = 0; i < g->n; i++)  // the packed parameters' values in their storage
        for (int64_t k = 0; udt[i] != RT_F32 && k < numel(&g->d[i]); k++)
            rt_store_f32(un, pdt, (size_t)(so[1][i] + k), (float)uniform(-1000, 1000) / 7.0f);
    const void* up[6];
    void* sp[6];
    float* sa = pattern((size_t)pf.block_numel * 4, 4);
    float* sb = pattern((size_t)pf.block_numel * 4, 4);
    for (int i = 0; i < g->n; i++) up[i] = un + un_off[i], sp[i] = sa + off[i];
    rt_fsdp_post_forward_shards(&pf, up, udt, sp, RT_F32);
    rt_seg_plan p = {0};
    for (int k = 0; k < 2; k++) {
        rt_seg_post_forward(&p, &pf, so[k]);
        rt_seg_apply(&p, sb, RT_F32, un, k ? pdt : RT_F32, 0);
        runs += p.nsegs;
        rt_seg_plan_free(&p);
    }
    if (!same(sa, sb, (size_t)pf.block_numel * 4)) fail("post_forward", g, world, pf_rank);

    // the all-gather from post-forward shards: copy-in and copy-out
    size_t es = rt_dtype_size(pdt);
    void* a = pattern((size_t)pf.total_numel * es, 5);
    void* b = pattern((size_t)pf.total_numel * es, 5);
    for (int i = 0; i < g->n; i++) up[i] = sa + off[i];
    rt_fsdp_all_gather_copy_in(&pf, up, RT_F32, a, pdt);
    rt_seg_all_gather_in(&p, &pf, off);
    rt_seg_apply(&p, b, pdt, sa, RT_F32, 0);
    runs += p.nsegs;
    if (!same(a, b, (size_t)pf.total_numel * es)) fail("post_forward all_gather_in", g, world, pf_rank);
    rt_seg_plan_free(&p);
    void* out = values(pf.total_numel, pdt);
    float* ua = pattern((size_t)un_total * 4, 6);
    float* ub = pattern((size_t)un_total * 4, 6);
    for (int i = 0; i < g->n; i++) sp[i] = ua + un_off[i];
    rt_fsdp_all_gather_copy_out_as(&pf, out, pdt, sp, udt);
    apply_copy_out(&pf, so, ub, out, pdt);
    if (!same(ua, ub, (size_t)un_total * 4)) fail("post_forward all_gather_out", g, world, pf_rank);
    free(a), free(b), free(out), free(ua), free(ub), free(sa), free(sb), free(un);
    rt_fsdp_layout_free(&pf);
}

// ---- main -------------------------------------------------------------------------------

int main(void) {
    const rt_dtype dts[3] = {RT_F32, RT_BF16, RT_F16};
    for (int placement = 0; placement < 2; placement++) {
        failures = layouts = runs = 0;
        for (int t = 0; t < 300; t++) {
            int world = uniform(1, 6);
            group g;
            random_group(&g, placement, world);
            rt_dtype pdt = dts[uniform(0, 2)], rdt = dts[uniform(0, 2)];
            for (int r = 0; r < world; r++) check_sharded(&g, world, r, pdt, rdt);
        }
        CHECK(failures == 0, "%s: all-gather in/out, reduce-scatter in, view-out (assign, accumulate), "
              "and on one rank the direct reduction (assign, accumulate) and all-gather "
              "on %d layouts (%d runs) equal runtime/fsdp's host copies byte for byte (%d differ)",
              placement ? "Shard(largest dim)" : "dim-0 (uneven)", layouts, runs, failures);
    }
    failures = layouts = runs = 0;
    for (int t = 0; t < 300; t++) {
        int world = uniform(1, 8);
        int divisors[8], nd = 0;
        for (int k = 1; k <= world; k++)
            if (world % k == 0) divisors[nd++] = k;
        int pf_world = divisors[uniform(0, nd - 1)];
        group g;
        random_group(&g, 0, world);
        rt_dtype pdt = dts[uniform(0, 2)];
        for (int r = 0; r < pf_world; r++) check_post_forward(&g, world, pf_world, r, pdt);
    }
    CHECK(failures == 0, "post-forward: reshard slices and the sub-group all-gather in/out on %d "
          "layouts (%d runs) equal runtime/fsdp's host copies byte for byte (%d differ)",
          layouts, runs, failures);
    rt_seg_plan merged = {0};
    rt_fsdp_param_desc d = {"w", 2, {8, 4}, RT_SHARD_DIM0};
    rt_fsdp_layout L;
    rt_fsdp_layout_init(&L, "g", &d, 1, 4, 1);
    int64_t zero = 0;
    rt_seg_reduce_scatter_in(&merged, &L, &zero);
    CHECK(merged.nsegs == 1 && merged.total == 32,
          "an even dim-0 parameter's reduce-scatter copy-in is one run (got %d runs, %lld elements)",
          merged.nsegs, (long long)merged.total);
    rt_seg_plan_free(&merged);
    rt_fsdp_layout_free(&L);
    return check_summary();
}
