// Tests of the FSDP layout (torch.chunk sizes, padding, block offsets, largest-dim
// sharding, post-forward slices, the generator-plan check), of sharding with zero padding,
// of the gradient divide factors against PyTorch's _get_gradient_divide_factors, and of the
// check of a group's unsharded parameters' words (permuted orders accepted, overlaps, gaps,
// misaligned or negative words and a wrong size refused).
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "rt_fsdp.h"

// The eight parameter shapes of TestFullyShardCollectiveOps.
static const rt_fsdp_param_desc seed_params[8] = {
    {"p0", 2, {17, 257}, RT_SHARD_DIM0}, {"p1", 1, {17}, RT_SHARD_DIM0},
    {"p2", 2, {64, 312}, RT_SHARD_DIM0}, {"p3", 1, {64}, RT_SHARD_DIM0},
    {"p4", 2, {64, 64}, RT_SHARD_DIM0},  {"p5", 2, {512, 64}, RT_SHARD_DIM0},
    {"p6", 1, {256}, RT_SHARD_DIM0},     {"p7", 2, {64, 297}, RT_SHARD_DIM0},
};

// ---- chunking ---------------------------------------------------------------------------

static void test_chunks(void) {
    rt_fsdp_param_desc d = {"w", 2, {5, 3}, RT_SHARD_DIM0};
    int64_t rows[4], want[4] = {2, 2, 1, 0};
    int ok = 1;
    for (int r = 0; r < 4; r++) {
        rt_fsdp_layout l;
        ok &= rt_fsdp_layout_init(&l, "g", &d, 1, 4, r) == 0;
        rows[r] = l.params[0].shard_rows;
        ok &= l.params[0].chunk == 2 && l.params[0].padded_shard_numel == 6 && l.params[0].padded_numel == 24 &&
              l.params[0].shard_numel == rows[r] * 3 && l.params[0].shard_shape[0] == rows[r] &&
              l.params[0].shard_shape[1] == 3;
        rt_fsdp_layout_free(&l);
    }
    CHECK(ok && memcmp(rows, want, sizeof rows) == 0,
          "d0=5, ws=4: chunk 2, rows per rank %lld,%lld,%lld,%lld (want 2,2,1,0), padded shard 6, padded 24",
          (long long)rows[0], (long long)rows[1], (long long)rows[2], (long long)rows[3]);

    rt_fsdp_layout l;
    d = (rt_fsdp_param_desc){"w", 1, {6}, RT_SHARD_DIM0};
    rt_fsdp_layout_init(&l, "g", &d, 1, 4, 3);
    CHECK(l.params[0].chunk == 2 && l.params[0].shard_rows == 0, "d0=6, ws=4: chunk 2, rank 3 empty (torch.chunk gives 3 chunks)");
    rt_fsdp_layout_free(&l);
    d = (rt_fsdp_param_desc){"w", 2, {17, 257}, RT_SHARD_DIM0};
    rt_fsdp_layout_init(&l, "g", &d, 1, 128, 16);
    int ok16 = l.params[0].chunk == 1 && l.params[0].shard_rows == 1;
    rt_fsdp_layout_free(&l);
    rt_fsdp_layout_init(&l, "g", &d, 1, 128, 17);
    CHECK(ok16 && l.params[0].shard_rows == 0 && l.params[0].padded_shard_numel == 257 &&
              l.params[0].padded_numel == 128 * 257,
          "[17, 257] at ws=128: ranks 0-16 one row, rank 17 empty, padded to 128 rows");
    rt_fsdp_layout_free(&l);
    d = (rt_fsdp_param_desc){"w", 2, {0, 4}, RT_SHARD_DIM0};
    CHECK(rt_fsdp_layout_init(&l, "g", &d, 1, 4, 0) == 0 && l.params[0].padded_numel == 0 && l.block_numel == 0,
          "an empty parameter has no rows anywhere");
    rt_fsdp_layout_free(&l);
}

static void test_seed_group(void) {
    rt_fsdp_layout l;
    int st = rt_fsdp_layout_init(&l, "seed", seed_params, 8, 128, 5);
    int64_t want_off[8] = {0, 257, 258, 570, 571, 635, 891, 893};
    int ok = st == 0;
    for (int i = 0; i < 8 && ok; i++) ok &= l.params[i].offset == want_off[i];
    CHECK(ok && l.block_numel == 1190 && l.total_numel == 1190 * 128,
          "seed group at ws=128: offsets 0,257,258,570,571,635,891,893, block 1190, total %lld",
          (long long)l.total_numel);
    CHECK(l.params[5].chunk == 4 && l.params[5].shard_numel == 256 && l.params[6].chunk == 2 &&
              l.params[1].shard_numel == 1,
          "[512, 64] chunk 4 (256 elements), [256] chunk 2, [17] rank 5 has 1 element");

    // The generator's plan: equal passes, one wrong offset is named.
    rt_fsdp_param_plan pp[8];
    for (int i = 0; i < 8; i++)
        pp[i] = (rt_fsdp_param_plan){l.params[i].shard_dim, l.params[i].in_numel, l.params[i].offset,
                                     l.params[i].shard_numel};
    rt_fsdp_plan plan = {128, 5, 8, 1190, 1190 * 128, pp};
    CHECK(rt_fsdp_layout_check(&l, &plan) == 0, "the generator's plan equal to the layout passes");
    pp[3].offset = 571;
    st = rt_fsdp_layout_check(&l, &plan);
    CHECK(st == RT_ERR_MISMATCH && strstr(l.error, "group 'seed'") && strstr(l.error, "param 3 'p3' offset") &&
              strstr(l.error, "generated code says 571, runtime computes 570"),
          "a wrong planned offset is reported: \"%s\"", l.error);
    pp[3].offset = 570;
    plan.block_numel = 1200;
    st = rt_fsdp_layout_check(&l, &plan);
    CHECK(st == RT_ERR_MISMATCH && strstr(l.error, "block numel: generated code says 1200, runtime computes 1190"),
          "a wrong planned block size is reported: \"%s\"", l.error);
    rt_fsdp_layout_free(&l);
}

// ---- largest dim and post-forward -------------------------------------------------------

static void test_largest_dim(void) {
    rt_fsdp_param_desc d[3] = {
        {"a", 2, {3, 8}, RT_SHARD_LARGEST_DIM},
        {"b", 2, {9, 4}, RT_SHARD_LARGEST_DIM},   // dim 0 is largest: uneven allowed
        {"c", 3, {2, 4, 4}, RT_SHARD_LARGEST_DIM},  // tie between dims 1 and 2: first wins
    };
    rt_fsdp_layout l;
    int st = rt_fsdp_layout_init(&l, "g", d, 3, 4, 1);
    CHECK(st == 0 && l.params[0].shard_dim == 1 && l.params[0].chunk == 2 && l.params[0].outer == 3 &&
              l.params[0].inner == 1 && l.params[0].shard_shape[0] == 3 && l.params[0].shard_shape[1] == 2,
          "[3, 8] largest dim: Shard(1), chunk 2, sharded size [3, 2]");
    CHECK(l.params[1].shard_dim == 0 && l.params[1].chunk == 3 && l.params[2].shard_dim == 1 &&
              l.params[2].outer == 2 && l.params[2].inner == 4 && l.params[2].chunk == 1,
          "[9, 4] shards dim 0 (chunk 3); [2, 4, 4] shards dim 1 (first largest), chunk 1");
    rt_fsdp_layout_free(&l);
    rt_fsdp_param_desc bad = {"odd", 2, {3, 6}, RT_SHARD_LARGEST_DIM};
    st = rt_fsdp_layout_init(&l, "g", &bad, 1, 4, 0);
    CHECK(st == RT_ERR_ARG && strstr(l.error, "'odd' [3, 6]: Shard(1) needs dim 1 (6) divisible by the world size 4"),
          "uneven Shard(1) is rejected: \"%s\"", l.error);
    rt_fsdp_layout_free(&l);
}

static void test_post_forward(void) {
    rt_fsdp_layout l;
    int st = rt_fsdp_layout_init_post_forward(&l, "seed", seed_params, 8, 128, 8, 3);
    CHECK(st == 0 && l.world == 8 && l.post_forward && l.params[0].in_numel == 128 * 257 / 8 &&
              l.params[5].in_numel == 512 * 64 / 8 && l.block_numel == 1190 * 16 && l.total_numel == 1190 * 128,
          "post-forward 8 of 128: [17, 257] keeps %lld elements, block %lld, total equals the full output",
          (long long)l.params[0].in_numel, (long long)l.block_numel);
    rt_fsdp_layout_free(&l);
    st = rt_fsdp_layout_init_post_forward(&l, "seed", seed_params, 8, 128, 12, 0);
    CHECK(st == RT_ERR_ARG && strstr(l.error, "reshard_after_forward=12 must divide the shard group size 128"),
          "a non-divisor post-forward size is rejected: \"%s\"", l.error);
    rt_fsdp_layout_free(&l);
    rt_fsdp_param_desc d = {"a", 2, {4, 8}, RT_SHARD_LARGEST_DIM};
    st = rt_fsdp_layout_init_post_forward(&l, "g", &d, 1, 4, 2, 0);
    CHECK(st == RT_ERR_ARG && strstr(l.error, "needs Shard(0)"), "post-forward with Shard(1) is rejected: \"%s\"", l.error);
    rt_fsdp_layout_free(&l);
    st = rt_fsdp_layout_init(&l, "g", seed_params, 8, 0, 0);
    CHECK(st == RT_ERR_ARG && strstr(l.error, "world size must be >= 1"), "world size 0 is rejected: \"%s\"", l.error);
    rt_fsdp_layout_free(&l);
    st = rt_fsdp_layout_init(&l, "g", seed_params, 8, 4, 4);
    CHECK(st == RT_ERR_ARG && strstr(l.error, "rank is outside [0, 4)"), "rank 4 of 4 is rejected: \"%s\"", l.error);
    rt_fsdp_layout_free(&l);
}

// ---- padding ----------------------------------------------------------------------------

static void test_padding(void) {
    rt_fsdp_param_desc d = {"w", 2, {5, 3}, RT_SHARD_DIM0};
    float full[15];
    for (int i = 0; i < 15; i++) full[i] = (float)(i + 1);
    const void* fulls[1] = {full};
    int ok = 1;
    for (int r = 0; r < 4; r++) {
        rt_fsdp_layout l;
        rt_fsdp_layout_init(&l, "g", &d, 1, 4, r);
        float shard[6];
        memset(shard, 0xFF, sizeof shard);
        void* shards[1] = {shard};
        ok &= rt_fsdp_shard_params(&l, fulls, RT_F32, shards) == 0;
        for (int k = 0; k < 6; k++) {
            int row = r * 2 + k / 3;
            float want = row < 5 ? full[row * 3 + k % 3] : 0.0f;
            ok &= shard[k] == want;
        }
        rt_fsdp_layout_free(&l);
    }
    CHECK(ok, "shards of a [5, 3] param at ws=4: rows 0-1, 2-3, 4+zero row, two zero rows");

    // Largest dim: [2, 4] sharded on dim 1 over 2 ranks -> columns {0,1} and {2,3}.
    rt_fsdp_param_desc c = {"c", 2, {2, 4}, RT_SHARD_LARGEST_DIM};
    float m[8] = {0, 1, 2, 3, 10, 11, 12, 13}, s[4];
    const void* ms[1] = {m};
    void* ss[1] = {s};
    rt_fsdp_layout l;
    rt_fsdp_layout_init(&l, "g", &c, 1, 2, 1);
    rt_fsdp_shard_params(&l, ms, RT_F32, ss);
    CHECK(s[0] == 2 && s[1] == 3 && s[2] == 12 && s[3] == 13, "Shard(1) rank 1 of [2, 4]: %g %g %g %g", s[0], s[1],
          s[2], s[3]);
    rt_fsdp_layout_free(&l);
}

// ---- divide factors ---------------------------------------------------------------------

static void expect_div(const char* what, rt_fsdp_divide d, double pre, double post, rt_redop rs, rt_redop ar) {
    char a[48], b[48];
    int ok = d.predivide == pre && d.postdivide == post && d.rs_op.kind == rs.kind && d.ar_op.kind == ar.kind &&
             (rs.kind != RT_RED_PREMUL_SUM || d.rs_op.factor == rs.factor);
    CHECK(ok, "%s: pre %g post %g rs %s ar %s", what, d.predivide, d.postdivide, rt_redop_str(d.rs_op, a, sizeof a),
          rt_redop_str(d.ar_op, b, sizeof b));
}

static void test_divide(void) {
    rt_redop S = rt_red_sum(), A = rt_red_avg();
    expect_div("fp32 ws=128", rt_fsdp_gradient_divide_factors(128, 0, RT_F32, 0, 0), 1, 1, A, A);
    expect_div("bf16 ws=128", rt_fsdp_gradient_divide_factors(128, 0, RT_BF16, 0, 0), 1, 1, A, A);
    expect_div("fp32 ws=1", rt_fsdp_gradient_divide_factors(1, 0, RT_F32, 0, 0), 1, 1, S, S);
    expect_div("fp16 ws=128: pre 16, post 8", rt_fsdp_gradient_divide_factors(128, 0, RT_F16, 0, 0), 16, 8, S, S);
    expect_div("fp16 ws=1", rt_fsdp_gradient_divide_factors(1, 0, RT_F16, 0, 0), 1, 1, S, S);
    expect_div("fp16 ws=6: pre 4, post 1.5 (PyTorch's loop)", rt_fsdp_gradient_divide_factors(6, 0, RT_F16, 0, 0), 4,
               1.5, S, S);
    expect_div("fp32 factor = ws 128", rt_fsdp_gradient_divide_factors(128, 0, RT_F32, 128, 0), 1, 1, A, S);
    expect_div("fp32 factor = 2 ws", rt_fsdp_gradient_divide_factors(128, 0, RT_F32, 256, 0), 1, 1,
               rt_red_premul_sum(1.0 / 256), S);
    expect_div("fp16 factor 256: pre 16, post 16", rt_fsdp_gradient_divide_factors(128, 0, RT_F16, 256, 0), 16, 16, S, S);
    expect_div("fp16 factor 3.5: pre 1", rt_fsdp_gradient_divide_factors(4, 0, RT_F16, 3.5, 0), 1, 3.5, S, S);
    expect_div("fp32 force sum ws=128: post 128", rt_fsdp_gradient_divide_factors(128, 0, RT_F32, 0, 1), 1, 128, S, S);
    expect_div("fp16 force sum ws=128", rt_fsdp_gradient_divide_factors(128, 0, RT_F16, 0, 1), 16, 8, S, S);
    expect_div("HSDP 2x4 fp32", rt_fsdp_gradient_divide_factors(4, 2, RT_F32, 0, 0), 1, 1, A, A);
    expect_div("HSDP 2x4 fp16: factor 8 -> pre 4, post 2", rt_fsdp_gradient_divide_factors(4, 2, RT_F16, 0, 0), 4, 2, S, S);
    expect_div("HSDP 2x1 fp32 (dp size 2)", rt_fsdp_gradient_divide_factors(1, 2, RT_F32, 0, 0), 1, 1, A, A);
    expect_div("HSDP 2x4 factor 4 = shard size", rt_fsdp_gradient_divide_factors(4, 2, RT_F32, 4, 0), 1, 1, A, S);
}

// ---- world size 1 -----------------------------------------------------------------------

// FSDP2 skips the collective for one rank but still divides by a custom factor while
// copying, on top of the pre/post factors: fp16 with factor 2 divides by 2 (pre) and by 2
// (copy), i.e. by 4. Pinned here because conformance means matching that exactly.
static void test_world1(void) {
    rt_fsdp_param_desc d = {"w", 2, {3, 2}, RT_SHARD_DIM0};
    rt_fsdp_layout l;
    rt_fsdp_layout_init(&l, "g", &d, 1, 1, 0);
    float g[6] = {8, -4, 2, 1, 0.5f, 16}, out[6];
    const void* gs[1] = {g};
    void* os[1] = {out};
    float in32[6], out32[6];
    uint16_t in16[6], out16[6];
    struct {
        const char* what;
        rt_dtype rdt;
        double factor;
        int force;
        double div;
    } cases[] = {
        {"fp32, no factor: SUM, unchanged", RT_F32, 0, 0, 1},
        {"fp32, factor 2: divided by 2", RT_F32, 2, 0, 2},
        {"fp16, no factor: pre 1, post 1", RT_F16, 0, 0, 1},
        {"fp16, factor 2: pre 2 and copy / 2 = / 4 (as FSDP2)", RT_F16, 2, 0, 4},
        {"fp32 forced sum, factor 4: copy / 4 and post 4 = / 16 (as FSDP2)", RT_F32, 4, 1, 16},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        rt_fsdp_reduce_args a = {NULL, NULL, cases[k].rdt, cases[k].factor, cases[k].force, NULL};
        int f32 = cases[k].rdt == RT_F32;
        void* rin = f32 ? (void*)in32 : (void*)in16;
        void* rout = f32 ? (void*)out32 : (void*)out16;
        int st = rt_fsdp_foreach_reduce(&l, &a, gs, RT_F32, rin, rout, os, RT_F32, 0);
        int ok = st == 0;
        for (int i = 0; i < 6; i++) ok &= out[i] == (float)(g[i] / cases[k].div);
        CHECK(ok, "world 1, %s: got %g %g ... want %g %g ...", cases[k].what, out[0], out[1], g[0] / cases[k].div,
              g[1] / cases[k].div);
    }
    rt_fsdp_layout_free(&l);
}

// ---- unsharded parameters ---------------------------------------------------------------

// A Llama block's unsharded parameters (words: fp32 norms, packed weights, a from_shard
// parameter with none), placed by the generator with w3 next to w1 (stacked in backward)
// and the rest in group order.
enum { U_NORM1, U_W1, U_W2, U_W3, U_EMB, U_NORM2, U_N };
static const char* const u_names[U_N] = {"attention_norm.weight", "w1.weight", "w2.weight",
                                         "w3.weight", "tok_embeddings.weight", "ffn_norm.weight"};
static const int64_t u_words[U_N] = {5, 32, 32, 32, 0, 6};  // rounded: 8, 32, 32, 32, 0, 8

// Runs rt_fsdp_unsharded_check on words at[] and total: 1 when its status is st and (st != 0)
// its message contains want.
static int unsharded_case(const int64_t* at, int64_t total, int st, const char* want, char* err,
                          size_t cap) {
    rt_fsdp_unsharded_param u[U_N];
    for (int i = 0; i < U_N; i++) u[i] = (rt_fsdp_unsharded_param){u_names[i], at[i], u_words[i]};
    err[0] = 0;
    const int got = rt_fsdp_unsharded_check("layers.0", u, U_N, total, err, cap);
    return got == st && (!st || (strstr(err, want) && !strchr(err, '\n')));
}

static void test_unsharded(void) {
    char err[512];
    static const struct {
        const char* what;
        int64_t at[U_N], total;
        int st;
        const char* want;
    } cases[] = {
        {"group order", {0, 8, 40, 72, 104, 104}, 112, 0, ""},
        {"w3 next to w1 (stacked), w2 after them", {0, 8, 72, 40, 104, 104}, 112, 0, ""},
        {"w1 and w3 first, the parameter without words at the end", {64, 32, 72, 0, 112, 104}, 112,
         0, ""},
        {"w2 overlapping w3", {0, 8, 64, 40, 96, 96}, 104, RT_ERR_MISMATCH,
         "parameter 'w2.weight' of group 'layers.0' is planned at word 64 of the unsharded "
         "parameters, the layout has it at 72 (overlapping 'w3.weight': a generator bug)"},
        {"w1 and w3 at one word", {0, 8, 40, 8, 72, 72}, 80, RT_ERR_MISMATCH,
         "'w3.weight' of group 'layers.0' is planned at word 8 of the unsharded parameters, the "
         "layout has it at 40 (overlapping 'w1.weight'"},
        {"w3 not at a multiple of 4 words", {0, 8, 76, 42, 108, 108}, 116, RT_ERR_MISMATCH,
         "'w3.weight' of group 'layers.0' is planned at word 42 of the unsharded parameters, the "
         "layout has it at 40 (not a multiple of 4 words"},
        {"a gap before w2", {0, 8, 76, 40, 108, 108}, 116, RT_ERR_MISMATCH,
         "'w2.weight' of group 'layers.0' is planned at word 76 of the unsharded parameters, the "
         "layout has it at 72 (words 72 to 76 unused"},
        {"a negative word", {-8, 8, 72, 40, 104, 104}, 112, RT_ERR_MISMATCH,
         "'attention_norm.weight' of group 'layers.0' is planned at word -8 of the unsharded "
         "parameters, the layout has it at 0 (a negative word"},
        {"a parameter past the planned size", {0, 8, 72, 40, 104, 104}, 108, RT_ERR_MISMATCH,
         "group 'layers.0' plans 108 words of unsharded parameters, the layout has 112 (a "
         "generator bug)"},
        {"the packed size planned with padding", {0, 8, 72, 40, 104, 104}, 120, RT_ERR_MISMATCH,
         "group 'layers.0' plans 120 words of unsharded parameters, the layout has 112"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int ok = unsharded_case(cases[k].at, cases[k].total, cases[k].st, cases[k].want, err,
                                      sizeof err);
        CHECK(ok, "unsharded parameters, %s: %s%s", cases[k].what,
              cases[k].st ? "refused: " : "accepted", err);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_chunks();
    test_seed_group();
    test_largest_dim();
    test_post_forward();
    test_padding();
    test_divide();
    test_world1();
    test_unsharded();
    return check_summary();
}
