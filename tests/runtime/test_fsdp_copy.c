// FSDP2's copies (rt_fsdp_copy.h's plans and rt_fsdp.h's per-parameter host API, which
// applies those plans) against an independent reference: for every element of every
// parameter, where torch.chunk puts it (the rank whose shard holds it, its place in that
// padded shard, in the all-gather / reduce-scatter buffers and in the unpadded sharded
// gradient), computed here from the shapes alone. On random groups: uneven dim-0 shards,
// Shard(largest dim), post-forward layouts, every rank, fp32/bf16/fp16, unsharded
// parameters in fp32 slots and packed (16-bit groups: every other one, as the CUDA backend
// stores them). Each copy runs twice, through the host API with per-parameter pointers
// and as a plan built with flat (arena) offsets applied by rt_copy_apply (what the CUDA
// kernel runs), and both must write exactly the reference's bytes and nothing else.
// Control: the same checks against a deliberately wrong reference (np.array_split's rows
// instead of torch.chunk's; interleaved post-forward slices) must find differences.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rt_fsdp.h"
#include "rt_fsdp_copy.h"

#include "fsdp_copy_ref.h"

// ---- results ----------------------------------------------------------------------------

enum { SHARD, AG_IN, AG_OUT, RS_IN, VIEW_OUT, VIEW_ACC, RS_DIRECT, AG_DIRECT, PF_SHARDS,
       PF_AG_IN, PF_AG_OUT, OPS };
static const char* op_names[OPS] = {
    "shard_params", "all-gather copy-in", "all-gather copy-out (fp32 slots and packed)",
    "reduce-scatter copy-in", "view-out", "view-out (accumulate)",
    "one rank: direct reduction (assign, accumulate)", "one rank: direct all-gather",
    "post-forward shards", "post-forward all-gather copy-in", "post-forward all-gather copy-out"};
static int tried[OPS], api_diff[OPS], plan_diff[OPS];

// Compares got (from the host API when api, else from the flat plan) with want.
static void compare(int op, int api, const uint8_t* got, const uint8_t* want, int64_t elems,
                    int world, int rank) {
    if (memcmp(got, want, (size_t)elems * 4 + 1) == 0) return;
    int* diff = api ? api_diff : plan_diff;
    if (!wrong && diff[op] == 0)
        printf("  first difference: %s (%s), world %d rank %d\n", op_names[op],
               api ? "host API" : "flat plan", world, rank);
    diff[op]++;
}

// One try of op: a from the host API and b from the flat plan, each against want.
static void compare_both(int op, const uint8_t* a, const uint8_t* b, const uint8_t* want,
                         int64_t elems, int world, int rank) {
    tried[op]++;
    compare(op, 1, a, want, elems, world, rank);
    compare(op, 0, b, want, elems, world, rank);
}

// Applies plan p with flat sides (what the CUDA backend does) and frees it.
static void apply_flat(rt_copy_plan* p, void* dst, rt_dtype ddt, const void* src, rt_dtype sdt,
                       int accumulate) {
    rt_copy_apply(p, rt_copy_flat(dst, ddt), rt_copy_flat(src, sdt), accumulate);
    rt_copy_plan_free(p);
}

// ---- sharded layouts --------------------------------------------------------------------

// All-gather copy-out of layout L (geometry G) from a random all-gather output.
static void check_copy_out(rt_fsdp_layout* L, const geo* G, int op, const int64_t* un_off,
                           int64_t un_total, rt_dtype pdt, int rank) {
    int64_t so[2][MAXP];
    rt_dtype udt[MAXP];
    storages(G->n, un_off, pdt, so, udt);
    int64_t total = G->block * G->world;
    uint8_t* ag = values(total, pdt);
    uint8_t* want = pattern(un_total, 2);
    uint8_t *a = dup(want, un_total), *b = dup(want, un_total);
    for (int i = 0; i < G->n; i++)
        for (int64_t e = 0, pos; e < G->numel[i]; e++) {
            int q = place(G, i, e, &pos);
            put(want, udt[i], un_index(un_off, udt, i, e), ag, pdt, q * G->block + G->off[i] + pos,
                0);
        }
    void* up[MAXP];
    ptrs(up, a, un_off, G->n, RT_F32, udt);
    rt_fsdp_all_gather_copy_out_as(L, ag, pdt, up, udt);
    for (int k = 0; k < 2; k++) {
        rt_copy_plan p = {0};
        rt_copy_all_gather_out(&p, L, so[k]);
        apply_flat(&p, b, k ? pdt : RT_F32, ag, pdt, 0);
    }
    compare_both(op, a, b, want, un_total, G->world, rank);
    free(ag), free(want), free(a), free(b);
}

// All-gather copy-in of layout L from random shards (fp32, at the layout's block offsets).
static void check_copy_in(rt_fsdp_layout* L, const geo* G, int op, rt_dtype pdt, int rank) {
    int64_t total = G->block * G->world;
    uint8_t* shards = values(G->block, RT_F32);
    uint8_t* want = pattern(total, 1);
    uint8_t *a = dup(want, total), *b = dup(want, total);
    for (int i = 0; i < G->n; i++)
        for (int64_t j = 0; j < G->piece[i]; j++)
            put(want, pdt, rank * G->block + G->off[i] + j, shards, RT_F32, G->off[i] + j, 0);
    const void* sp[MAXP];
    ptrs((void**)sp, shards, G->off, G->n, RT_F32, NULL);
    rt_fsdp_all_gather_copy_in(L, sp, RT_F32, a, pdt);
    rt_copy_plan p = {0};
    rt_copy_all_gather_in(&p, L, G->off);
    apply_flat(&p, b, pdt, shards, RT_F32, 0);
    compare_both(op, a, b, want, total, G->world, rank);
    free(shards), free(want), free(a), free(b);
}

static void check_shard_params(rt_fsdp_layout* L, const geo* G, const int64_t* un_off,
                               int64_t un_total, rt_dtype dt, int rank) {
    uint8_t* full = values(un_total, dt);
    uint8_t* want = pattern(G->block, 3);
    uint8_t *a = dup(want, G->block), *b = dup(want, G->block);
    for (int i = 0; i < G->n; i++) {
        zero(want, dt, G->off[i], G->piece[i]);
        for (int64_t e = 0, pos; e < G->numel[i]; e++)
            if (place(G, i, e, &pos) == rank)
                put(want, dt, G->off[i] + pos, full, dt, un_off[i] + e, 0);
    }
    const void* fp[MAXP];
    void* sp[MAXP];
    ptrs((void**)fp, full, un_off, G->n, dt, NULL);
    ptrs(sp, a, G->off, G->n, dt, NULL);
    rt_fsdp_shard_params(L, fp, dt, sp);
    rt_copy_plan p = {0};
    rt_copy_shard_params(&p, L, un_off, G->off);
    apply_flat(&p, b, dt, full, dt, 0);
    compare_both(SHARD, a, b, want, G->block, G->world, rank);
    free(full), free(want), free(a), free(b);
}

static void check_reduce_scatter_in(rt_fsdp_layout* L, const geo* G, const int64_t* un_off,
                                    int64_t un_total, rt_dtype rdt, int rank) {
    int64_t total = G->block * G->world;
    uint8_t* grads = values(un_total, RT_F32);
    uint8_t* want = pattern(total, 4);
    uint8_t *a = dup(want, total), *b = dup(want, total);
    zero(want, rdt, 0, total);  // the pieces fill every block: padding is zeros
    for (int i = 0; i < G->n; i++)
        for (int64_t e = 0, pos; e < G->numel[i]; e++) {
            int q = place(G, i, e, &pos);
            put(want, rdt, q * G->block + G->off[i] + pos, grads, RT_F32, un_off[i] + e, 0);
        }
    const void* gp[MAXP];
    ptrs((void**)gp, grads, un_off, G->n, RT_F32, NULL);
    rt_fsdp_reduce_scatter_copy_in(L, gp, RT_F32, a, rdt);
    rt_copy_plan p = {0};
    rt_copy_reduce_scatter_in(&p, L, un_off);
    apply_flat(&p, b, rdt, grads, RT_F32, 0);
    compare_both(RS_IN, a, b, want, total, G->world, rank);
    free(grads), free(want), free(a), free(b);
}

// View-out from a random reduce-scatter output into sharded gradients of gdt (at sh_off),
// assigned and accumulated onto random values.
static void check_view_out(rt_fsdp_layout* L, const geo* G, const int64_t* sh_off, int64_t sh_total,
                           rt_dtype rdt, rt_dtype gdt, int rank) {
    uint8_t* out = values(G->block, rdt);
    for (int acc = 0; acc < 2; acc++) {
        int op = acc ? VIEW_ACC : VIEW_OUT;
        uint8_t* want = pattern(sh_total, 5);
        for (int i = 0; i < G->n; i++)  // the old gradients
            for (int64_t j = 0; j < G->piece[i]; j++)
                rt_store_f32(want, gdt, (size_t)(sh_off[i] + j), (float)uniform(-99, 99) / 3.0f);
        uint8_t *a = dup(want, sh_total), *b = dup(want, sh_total);
        for (int i = 0; i < G->n; i++)
            for (int64_t e = 0, pos; e < G->numel[i]; e++)
                if (place(G, i, e, &pos) == rank)
                    put(want, gdt, sh_off[i] + sharded_place(G, i, e, rank), out, rdt,
                        G->off[i] + pos, acc);
        void* sp[MAXP];
        ptrs(sp, a, sh_off, G->n, gdt, NULL);
        rt_fsdp_reduce_scatter_view_out(L, out, rdt, sp, gdt, acc);
        rt_copy_plan p = {0};
        rt_copy_view_out(&p, L, sh_off);
        apply_flat(&p, b, gdt, out, rdt, acc);
        compare_both(op, a, b, want, sh_total, G->world, rank);
        free(want), free(a), free(b);
    }
    free(out);
}

// One rank (CUDA backend only, flat plans): the direct reduction writes each gradient
// element into its sharded gradient (assigned, accumulated), and the direct all-gather
// each shard element into the unsharded parameter; neither takes a layout of 2 ranks.
static void check_direct(rt_fsdp_layout* L, const geo* G, const group* g, const int64_t* un_off,
                         int64_t un_total, const int64_t* sh_off, rt_dtype pdt) {
    uint8_t* grads = values(un_total, RT_F32);
    int ok = 1;
    for (int acc = 0; acc < 2; acc++) {
        uint8_t* want = values(G->block, RT_F32);
        uint8_t* b = dup(want, G->block);
        for (int i = 0; i < G->n; i++)
            for (int64_t e = 0; e < G->numel[i]; e++)
                put(want, RT_F32, sh_off[i] + sharded_place(G, i, e, 0), grads, RT_F32,
                    un_off[i] + e, acc);
        rt_copy_plan p = {0};
        ok &= rt_copy_reduce_direct(&p, L, un_off, sh_off) == 0;
        apply_flat(&p, b, RT_F32, grads, RT_F32, acc);
        compare(RS_DIRECT, 0, b, want, G->block, 1, 0);
        free(want), free(b);
    }
    int64_t so[2][MAXP];
    rt_dtype udt[MAXP];
    storages(G->n, un_off, pdt, so, udt);
    uint8_t* shards = values(G->block, RT_F32);
    uint8_t* want = pattern(un_total, 6);
    uint8_t* b = dup(want, un_total);
    for (int i = 0; i < G->n; i++)
        for (int64_t e = 0, pos; e < G->numel[i]; e++) {
            place(G, i, e, &pos);
            put(want, udt[i], un_index(un_off, udt, i, e), shards, RT_F32, sh_off[i] + pos, 0);
        }
    for (int k = 0; k < 2; k++) {
        rt_copy_plan p = {0};
        ok &= rt_copy_all_gather_direct(&p, L, sh_off, so[k]) == 0;
        apply_flat(&p, b, k ? pdt : RT_F32, shards, RT_F32, 0);
    }
    compare(AG_DIRECT, 0, b, want, un_total, 1, 0);
    rt_fsdp_layout two;
    rt_copy_plan q = {0};
    if (!rt_fsdp_layout_init(&two, "g", g->d, g->n, 2, 0))
        ok &= rt_copy_reduce_direct(&q, &two, un_off, sh_off) == RT_ERR_ARG &&
              rt_copy_all_gather_direct(&q, &two, sh_off, un_off) == RT_ERR_ARG && q.nruns == 0;
    rt_fsdp_layout_free(&two);
    if (!ok && !wrong) printf("  a direct builder returned the wrong status\n");
    plan_diff[RS_DIRECT] += !ok;
    tried[RS_DIRECT]++, tried[AG_DIRECT]++;
    free(grads), free(shards), free(want), free(b);
}

static void check_sharded(const group* g, int world, int rank, rt_dtype pdt, rt_dtype rdt,
                          rt_dtype gdt) {
    rt_fsdp_layout L;
    if (rt_fsdp_layout_init(&L, "g", g->d, g->n, world, rank)) {
        rt_fsdp_layout_free(&L);  // a random shape FSDP2 refuses (uneven Shard(d > 0))
        return;
    }
    geo G;
    geometry(&G, g, world, world, 0);
    int64_t un_off[MAXP], un_total = 0;
    for (int i = 0; i < g->n; i++) {
        un_off[i] = un_total;
        un_total += G.numel[i] + 3;  // a gap the copies must not touch
    }
    check_shard_params(&L, &G, un_off, un_total, pdt, rank);
    check_copy_in(&L, &G, AG_IN, pdt, rank);
    check_copy_out(&L, &G, AG_OUT, un_off, un_total, pdt, rank);
    check_reduce_scatter_in(&L, &G, un_off, un_total, rdt, rank);
    int64_t sh_off[MAXP], sh_total = 0;  // sharded gradients with gaps, at other offsets
    for (int i = 0; i < g->n; i++) {
        sh_off[i] = sh_total + 1;
        sh_total += G.piece[i] + 2;
    }
    check_view_out(&L, &G, sh_off, sh_total, rdt, gdt, rank);
    if (world == 1) check_direct(&L, &G, g, un_off, un_total, G.off, pdt);
    rt_fsdp_layout_free(&L);
}

// ---- post-forward layouts ---------------------------------------------------------------

static void check_post_forward(const group* g, int world, int pf_world, int pf_rank, rt_dtype pdt) {
    rt_fsdp_layout pf;
    if (rt_fsdp_layout_init_post_forward(&pf, "g", g->d, g->n, world, pf_world, pf_rank)) {
        rt_fsdp_layout_free(&pf);
        return;
    }
    geo G;
    geometry(&G, g, pf_world, world, 1);
    int64_t un_off[MAXP], un_total = 0, so[2][MAXP];
    for (int i = 0; i < g->n; i++) {
        un_off[i] = un_total;
        un_total += G.numel[i] + 2;
    }
    rt_dtype udt[MAXP];
    storages(g->n, un_off, pdt, so, udt);
    uint8_t* un = pattern(un_total, 7);
    for (int i = 0; i < g->n; i++)
        for (int64_t e = 0; e < G.numel[i]; e++)
            rt_store_f32(un, udt[i], (size_t)un_index(un_off, udt, i, e),
                         (float)uniform(-1000, 1000) / 7.0f);
    uint8_t* want = pattern(G.block, 8);
    uint8_t *a = dup(want, G.block), *b = dup(want, G.block);
    for (int i = 0; i < g->n; i++) {
        zero(want, RT_F32, G.off[i], G.piece[i]);
        for (int64_t e = 0, pos; e < G.numel[i]; e++)
            if (place(&G, i, e, &pos) == pf_rank)
                put(want, RT_F32, G.off[i] + pos, un, udt[i], un_index(un_off, udt, i, e), 0);
    }
    const void* up[MAXP];
    void* sp[MAXP];
    ptrs((void**)up, un, un_off, g->n, RT_F32, udt);
    ptrs(sp, a, G.off, g->n, RT_F32, NULL);
    rt_fsdp_post_forward_shards(&pf, up, udt, sp, RT_F32);
    for (int k = 0; k < 2; k++) {
        rt_copy_plan p = {0};
        rt_copy_post_forward(&p, &pf, so[k], G.off);
        apply_flat(&p, b, RT_F32, un, k ? pdt : RT_F32, 0);
    }
    compare_both(PF_SHARDS, a, b, want, G.block, pf_world, pf_rank);
    free(un), free(want), free(a), free(b);
    check_copy_in(&pf, &G, PF_AG_IN, pdt, pf_rank);
    check_copy_out(&pf, &G, PF_AG_OUT, un_off, un_total, pdt, pf_rank);
    rt_fsdp_layout_free(&pf);
}

// ---- main -------------------------------------------------------------------------------

// Every check on `groups` random groups of each placement and as many post-forward ones.
static void run_all(int groups) {
    const rt_dtype dts[3] = {RT_F32, RT_BF16, RT_F16};
    memset(tried, 0, sizeof tried), memset(api_diff, 0, sizeof api_diff);
    memset(plan_diff, 0, sizeof plan_diff);
    for (int placement = 0; placement < 2; placement++)
        for (int t = 0; t < groups; t++) {
            int world = uniform(1, 6);
            group g;
            random_group(&g, placement, world);
            rt_dtype pdt = dts[uniform(0, 2)], rdt = dts[uniform(0, 2)], gdt = dts[uniform(0, 2)];
            for (int r = 0; r < world; r++) check_sharded(&g, world, r, pdt, rdt, gdt);
        }
    for (int t = 0; t < groups; t++) {
        int world = uniform(1, 8), divisors[8], nd = 0;
        for (int k = 1; k <= world; k++)
            if (world % k == 0) divisors[nd++] = k;
        int pf_world = divisors[uniform(0, nd - 1)];
        group g;
        random_group(&g, 0, world);
        rt_dtype pdt = dts[uniform(0, 2)];
        for (int r = 0; r < pf_world; r++) check_post_forward(&g, world, pf_world, r, pdt);
    }
}

int main(void) {
    run_all(300);
    for (int op = 0; op < OPS; op++) {
        int api = op != RS_DIRECT && op != AG_DIRECT;  // the direct plans have no host API
        CHECK(tried[op] > 0 && api_diff[op] == 0 && plan_diff[op] == 0,
              "%s on %d layouts: %s the reference's bytes (torch.chunk's place of each "
              "element), nothing else (%d, %d differ)",
              op_names[op], tried[op],
              api ? "the host API and the flat plan (rt_copy_apply) write"
                  : "the flat plan (rt_copy_apply) writes",
              api_diff[op], plan_diff[op]);
    }

    // Control: the wrong reference must disagree with the copies.
    wrong = 1;
    run_all(60);
    int sharded = 0, pf = 0, total = 0;
    for (int op = 0; op < OPS; op++) {
        *(op >= PF_SHARDS ? &pf : &sharded) += api_diff[op] + plan_diff[op];
        total += tried[op];
    }
    CHECK(sharded > 0 && pf > 0,
          "control: against a wrong reference (np.array_split rows; interleaved post-forward "
          "slices) the same checks find %d sharded and %d post-forward differences in %d "
          "copies",
          sharded, pf, total);
    wrong = 0;

    // Merging: an even dim-0 parameter's reduce-scatter copy-in is one run in a flat plan;
    // with per-parameter buffers, runs of two parameters stay apart.
    rt_fsdp_param_desc d = {"w", 2, {8, 4}, RT_SHARD_DIM0};
    rt_fsdp_layout L;
    rt_fsdp_layout_init(&L, "g", &d, 1, 4, 1);
    int64_t zero_off = 0;
    rt_copy_plan p = {0};
    rt_copy_reduce_scatter_in(&p, &L, &zero_off);
    CHECK(
        p.nruns == 1 && p.total == 32,
        "an even dim-0 parameter's reduce-scatter copy-in is one run (got %d runs, %lld elements)",
        p.nruns, (long long)p.total);
    rt_copy_plan_free(&p);
    rt_fsdp_layout_free(&L);
    // [3] and [1] over 2 ranks: rank 1's block is p0's row, p0's padding row, p1's padding
    // row; the two zero runs continue each other only in one flat buffer.
    rt_fsdp_param_desc e[2] = {{"a", 1, {3}, RT_SHARD_DIM0}, {"b", 1, {1}, RT_SHARD_DIM0}};
    rt_fsdp_layout_init(&L, "g", e, 2, 2, 0);
    int64_t offs[2] = {0, 3};
    rt_copy_plan flat = {0};
    rt_copy_reduce_scatter_in(&p, &L, NULL);
    rt_copy_reduce_scatter_in(&flat, &L, offs);
    CHECK(p.nruns == 5 && p.runs[3].param == 0 && p.runs[4].param == 1 && flat.nruns == 4,
          "two parameters' padding runs: apart with per-parameter gradients (5 runs, got %d), "
          "merged with the gradients in one buffer (4 runs, got %d)",
          p.nruns, flat.nruns);
    rt_copy_plan_free(&p), rt_copy_plan_free(&flat);
    rt_copy_zeros(&p, 3, 5);
    uint8_t* z = pattern(16, 9);
    uint8_t* zw = dup(z, 16);
    zero(zw, RT_BF16, 3, 5);
    rt_copy_apply(&p, rt_copy_flat(z, RT_BF16), rt_copy_flat(NULL, RT_F32), 0);
    CHECK(p.nruns == 1 && memcmp(z, zw, 16 * 4 + 1) == 0,
          "rt_copy_zeros: 5 bf16 zeros at 3, nothing else");
    rt_copy_plan_free(&p);
    free(z), free(zw);
    rt_fsdp_layout_free(&L);
    return check_summary();
}
