// FSDP foreach collectives on the threads backend, mirroring PyTorch's
// TestFullyShardCollectiveOps (world 128, the seed's eight parameter shapes):
//   all-gather in fp32 equals the original parameters, also after a post-forward reshard
//   to groups of 8 (reshard_after_forward=8) and an all-gather inside them;
//   reduce-scatter of `ones * rank` in fp32 and fp16 equals the seed's reference (an
//   all-reduce with the same pre/post factors and op, then this rank's chunk);
// plus varied gradients (so a wrong row would show), world size 1, divide factor = world
// and = 2 x world, forced sum, HSDP 2 x 4, largest-dim sharding, bf16 mixed precision,
// gradient accumulation and a wrong communicator.
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rt_fsdp.h"

// ---- parameters -------------------------------------------------------------------------

static const rt_fsdp_param_desc seed_params[8] = {
    {"p0", 2, {17, 257}, RT_SHARD_DIM0}, {"p1", 1, {17}, RT_SHARD_DIM0},
    {"p2", 2, {64, 312}, RT_SHARD_DIM0}, {"p3", 1, {64}, RT_SHARD_DIM0},
    {"p4", 2, {64, 64}, RT_SHARD_DIM0},  {"p5", 2, {512, 64}, RT_SHARD_DIM0},
    {"p6", 1, {256}, RT_SHARD_DIM0},     {"p7", 2, {64, 297}, RT_SHARD_DIM0},
};

static const rt_fsdp_param_desc largest_params[4] = {
    {"a", 2, {3, 8}, RT_SHARD_LARGEST_DIM},   // Shard(1)
    {"b", 2, {9, 4}, RT_SHARD_LARGEST_DIM},   // Shard(0), uneven
    {"c", 3, {2, 4, 12}, RT_SHARD_LARGEST_DIM},  // Shard(2)
    {"d", 1, {5}, RT_SHARD_LARGEST_DIM},
};

// ---- scenario ---------------------------------------------------------------------------

enum { GRAD_ONES_RANK, GRAD_VARIED };

typedef struct ctx {
    const rt_fsdp_param_desc* params;
    int nparams;
    int reshard;            // reshard_after_forward as an int (0: true)
    rt_dtype param_dtype;   // all-gather dtype / unsharded grad dtype
    rt_dtype reduce_dtype;
    double factor;          // gradient divide factor, 0 = none
    int force_sum;
    int grads;              // GRAD_*
    int replicate;          // HSDP replicate size (0 = FSDP)
    int accumulate;         // reduce twice, accumulating
    int seed_reference;     // also compare with the seed's all-reduce reference
    int wrong_comm;         // pass a communicator of the wrong size
    // results
    _Atomic long compared, wrong, errors;
    _Atomic long seed_wrong;
    _Atomic uint64_t max_diff_bits;  // max |got - want| as a double's bits (monotonic for >= 0)
} ctx;

static void note_diff(ctx* c, double d) {
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    uint64_t cur = atomic_load(&c->max_diff_bits);
    while (bits > cur && !atomic_compare_exchange_weak(&c->max_diff_bits, &cur, bits)) {
    }
}

static double max_diff(ctx* c) {
    uint64_t bits = atomic_load(&c->max_diff_bits);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

// torch.randn-like values from a fixed seed (the seed test uses manual_seed(42)).
static void randn(float* out, int64_t n, uint64_t* state) {
    for (int64_t i = 0; i < n; i += 2) {
        double u[2];
        for (int k = 0; k < 2; k++) {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            u[k] = ((*state >> 11) + 0.5) * 0x1p-53;
        }
        double r = sqrt(-2.0 * log(u[0]));
        out[i] = (float)(r * cos(2 * M_PI * u[1]));
        if (i + 1 < n) out[i + 1] = (float)(r * sin(2 * M_PI * u[1]));
    }
}

// Gradient element k of parameter i on data-parallel rank r. Multiples of 1/8 in
// [-5/8, 5/8]: exact in bf16 and fp16 also after the fp16 pre-divide.
static float grad_value(const ctx* c, int r, int i, int64_t k) {
    if (c->grads == GRAD_ONES_RANK) return (float)r;
    return (float)((r * 13 + i * 7 + k * 3) % 11 - 5) * 0.125f;
}

// Flat index in the unsharded parameter of element k of rank r's shard.
static int64_t global_index(const rt_fsdp_param_layout* p, int r, int64_t k) {
    int64_t per_outer = p->shard_rows * p->inner;
    int64_t o = k / per_outer, rem = k % per_outer;
    return (o * p->dim_size + r * p->chunk + rem / p->inner) * p->inner + rem % p->inner;
}

static void* xmalloc(size_t n) {
    void* p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

// ---- all-gather -------------------------------------------------------------------------

static void rank_all_gather(rt_comm* comm, void* arg) {
    ctx* c = arg;
    int r = rt_comm_rank(comm), ws = rt_comm_size(comm), n = c->nparams;
    rt_dtype pdt = c->param_dtype;
    size_t pes = rt_dtype_size(pdt);
    // Original parameters: made on rank 0, broadcast (as the seed does).
    float** orig = xmalloc((size_t)n * sizeof *orig);
    void** shards = xmalloc((size_t)n * sizeof *shards);
    void** unsharded = xmalloc((size_t)n * sizeof *unsharded);
    uint64_t state = 42;
    rt_fsdp_layout l;
    if (rt_fsdp_layout_init(&l, "seed", c->params, n, ws, r)) abort();
    for (int i = 0; i < n; i++) {
        const rt_fsdp_param_layout* p = &l.params[i];
        orig[i] = xmalloc((size_t)p->numel * sizeof(float));
        if (r == 0) randn(orig[i], p->numel, &state);
        if (rt_comm_broadcast(comm, orig[i], orig[i], p->numel, RT_F32, 0, NULL)) atomic_fetch_add(&c->errors, 1);
        shards[i] = xmalloc((size_t)p->padded_shard_numel * sizeof(float));
        unsharded[i] = xmalloc((size_t)p->numel * pes);
    }
    rt_fsdp_shard_params(&l, (const void* const*)orig, RT_F32, shards);
    // Sanity check of the sharding: every shard element is the original's.
    long bad = 0;
    for (int i = 0; i < n; i++) {
        const rt_fsdp_param_layout* p = &l.params[i];
        for (int64_t k = 0; k < p->shard_numel; k++)
            bad += ((float*)shards[i])[k] != orig[i][global_index(p, r, k)];
    }
    atomic_fetch_add(&c->wrong, bad);

    // Unshard (all-gather copy-in, all-gather, copy-out) and compare with the originals.
    void* ag = xmalloc((size_t)l.total_numel * pes);
    rt_comm* ag_comm = comm;
    rt_comm* small = NULL;
    if (c->wrong_comm) rt_comm_split(comm, r % 2, r, &small), ag_comm = small;
    int st = rt_fsdp_foreach_all_gather(&l, ag_comm, (const void* const*)shards, RT_F32, ag, pdt, unsharded, NULL);
    if (st) {
        atomic_fetch_add(&c->errors, 1);
        goto out;
    }
    for (int pass = 0; pass < (c->reshard ? 2 : 1); pass++) {
        bad = 0;
        long cmp = 0;
        for (int i = 0; i < n; i++) {
            for (int64_t k = 0; k < l.params[i].numel; k++) {
                char want[8];
                rt_store_f32(want, pdt, 0, orig[i][k]);
                bad += memcmp((char*)unsharded[i] + k * pes, want, pes) != 0;
            }
            cmp += l.params[i].numel;
        }
        atomic_fetch_add(&c->wrong, bad);
        atomic_fetch_add(&c->compared, cmp);
        if (pass == 1 || !c->reshard) break;

        // Post-forward reshard to groups of c->reshard ranks, then unshard inside them.
        rt_comm* pf_comm = NULL;
        st = rt_fsdp_post_forward_comm(comm, c->reshard, &pf_comm);
        rt_fsdp_layout pf;
        if (!st) st = rt_fsdp_layout_init_post_forward(&pf, "seed", c->params, n, ws, c->reshard, rt_comm_rank(pf_comm));
        if (st) {
            atomic_fetch_add(&c->errors, 1);
            rt_comm_free(pf_comm);
            goto out;
        }
        void** pf_shards = xmalloc((size_t)n * sizeof *pf_shards);
        for (int i = 0; i < n; i++) pf_shards[i] = xmalloc((size_t)pf.params[i].in_numel * pes);
        rt_dtype* udt = xmalloc((size_t)n * sizeof *udt);
        for (int i = 0; i < n; i++) udt[i] = pdt;
        rt_fsdp_post_forward_shards(&pf, (const void* const*)unsharded, udt, pf_shards, pdt);
        free(udt);
        for (int i = 0; i < n; i++) memset(unsharded[i], 0xEE, (size_t)l.params[i].numel * pes);  // "freed"
        void* ag2 = xmalloc((size_t)pf.total_numel * pes);
        st = rt_fsdp_foreach_all_gather(&pf, pf_comm, (const void* const*)pf_shards, pdt, ag2, pdt, unsharded, NULL);
        if (st) atomic_fetch_add(&c->errors, 1);
        for (int i = 0; i < n; i++) free(pf_shards[i]);
        free(pf_shards);
        free(ag2);
        rt_fsdp_layout_free(&pf);
        rt_comm_free(pf_comm);
    }
out:
    rt_comm_free(small);
    free(ag);
    for (int i = 0; i < n; i++) {
        free(orig[i]);
        free(shards[i]);
        free(unsharded[i]);
    }
    free(orig);
    free(shards);
    free(unsharded);
    rt_fsdp_layout_free(&l);
}

// ---- reduce-scatter ---------------------------------------------------------------------

static void rank_reduce(rt_comm* comm, void* arg) {
    ctx* c = arg;
    int n = c->nparams;
    rt_fsdp_mesh mesh;
    int shard = c->replicate ? rt_comm_size(comm) / c->replicate : rt_comm_size(comm);
    if (rt_fsdp_mesh_init(comm, c->replicate, shard, &mesh)) {
        atomic_fetch_add(&c->errors, 1);
        return;
    }
    int dp_rank = rt_comm_rank(comm), dp_size = rt_comm_size(comm);
    int sr = rt_comm_rank(mesh.shard), ss = rt_comm_size(mesh.shard);
    rt_fsdp_layout l;
    if (rt_fsdp_layout_init(&l, "seed", c->params, n, ss, sr)) abort();
    rt_dtype gdt = c->param_dtype, rdt = c->reduce_dtype;
    size_t ges = rt_dtype_size(gdt);
    void** grads = xmalloc((size_t)n * sizeof *grads);
    float** sharded = xmalloc((size_t)n * sizeof *sharded);
    for (int i = 0; i < n; i++) {
        const rt_fsdp_param_layout* p = &l.params[i];
        grads[i] = xmalloc((size_t)p->numel * ges);
        for (int64_t k = 0; k < p->numel; k++) rt_store_f32(grads[i], gdt, (size_t)k, grad_value(c, dp_rank, i, k));
        sharded[i] = xmalloc((size_t)p->shard_numel * sizeof(float));
    }
    void* rs_in = xmalloc((size_t)l.total_numel * rt_dtype_size(rdt));
    void* rs_out = xmalloc((size_t)l.block_numel * rt_dtype_size(rdt));
    rt_fsdp_reduce_args a = {mesh.shard, mesh.replicate, rdt, c->factor, c->force_sum, NULL};
    int rounds = c->accumulate ? 2 : 1;
    for (int k = 0; k < rounds; k++) {
        int st = rt_fsdp_foreach_reduce(&l, &a, (const void* const*)grads, gdt, rs_in, rs_out, (void* const*)sharded,
                                        RT_F32, k > 0);
        if (st) atomic_fetch_add(&c->errors, 1);
    }

    // Exact reference: (sum over every data-parallel rank) / factor, in double.
    double factor = c->factor > 0 ? c->factor : (double)dp_size;
    if (dp_size == 1 && c->factor <= 0) factor = 1;
    double tol = rdt == RT_F32 ? 2e-6 : 4e-3;  // relative; fp16/bf16 round twice
    long bad = 0, cmp = 0;
    for (int i = 0; i < n; i++) {
        const rt_fsdp_param_layout* p = &l.params[i];
        for (int64_t k = 0; k < p->shard_numel; k++) {
            int64_t g = global_index(p, sr, k);
            double sum = 0;
            for (int q = 0; q < dp_size; q++) sum += grad_value(c, q, i, g);
            double want = rounds * sum / factor, got = sharded[i][k];
            double d = fabs(got - want);
            note_diff(c, d);
            bad += d > tol * (fabs(want) > 1 ? fabs(want) : 1);
            cmp++;
        }
    }
    atomic_fetch_add(&c->wrong, bad);
    atomic_fetch_add(&c->compared, cmp);

    if (c->seed_reference) {
        // The seed's reference: reduced = grad.clone(); div(pre); all_reduce(op); div(post);
        // then assertEqual(sharded_grad.full_tensor(), reduced) (rtol 1.3e-6, atol 1e-5).
        rt_fsdp_divide d = rt_fsdp_gradient_divide_factors(ss, 0, rdt, c->factor, c->force_sum);
        long sbad = 0;
        for (int i = 0; i < n; i++) {
            const rt_fsdp_param_layout* p = &l.params[i];
            float* red = xmalloc((size_t)p->numel * sizeof(float));
            for (int64_t k = 0; k < p->numel; k++) red[k] = grad_value(c, dp_rank, i, k) / (float)d.predivide;
            if (rt_comm_all_reduce(comm, red, red, p->numel, RT_F32, d.ar_op, NULL)) atomic_fetch_add(&c->errors, 1);
            for (int64_t k = 0; k < p->numel; k++) red[k] /= (float)d.postdivide;
            for (int64_t k = 0; k < p->shard_numel; k++) {
                double want = red[global_index(p, sr, k)], got = sharded[i][k];
                sbad += fabs(got - want) > 1e-5 + 1.3e-6 * fabs(want);
            }
            free(red);
        }
        atomic_fetch_add(&c->seed_wrong, sbad);
    }
    free(rs_in);
    free(rs_out);
    for (int i = 0; i < n; i++) {
        free(grads[i]);
        free(sharded[i]);
    }
    free(grads);
    free(sharded);
    rt_fsdp_layout_free(&l);
    rt_fsdp_mesh_free(&mesh);
}

// ---- driver -----------------------------------------------------------------------------

static ctx base(const rt_fsdp_param_desc* params, int nparams) {
    ctx c;
    memset(&c, 0, sizeof c);
    c.params = params;
    c.nparams = nparams;
    c.param_dtype = RT_F32;
    c.reduce_dtype = RT_F32;
    return c;
}

static void all_gather_case(const char* what, int world, ctx c) {
    int rc = rt_threads_run(world, rank_all_gather, &c);
    CHECK(rc == 0 && c.errors == 0 && c.wrong == 0 && c.compared > 0,
          "all-gather %s, world %d: %ld elements compared with the originals, %ld differ, %ld errors",
          what, world, (long)c.compared, (long)c.wrong, (long)c.errors);
}

static void reduce_case(const char* what, int world, ctx c) {
    int rc = rt_threads_run(world, rank_reduce, &c);
    if (c.seed_reference)
        CHECK(rc == 0 && c.errors == 0 && c.seed_wrong == 0,
              "reduce-scatter %s, world %d: equals the seed's all-reduce reference (%ld differ)", what, world,
              (long)c.seed_wrong);
    CHECK(rc == 0 && c.errors == 0 && c.wrong == 0 && c.compared > 0,
          "reduce-scatter %s, world %d: %ld sharded-grad elements vs exact sum/factor, max diff %.3g, %ld wrong, "
          "%ld errors", what, world, (long)c.compared, max_diff(&c), (long)c.wrong, (long)c.errors);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    ctx c = base(seed_params, 8);

    // TestFullyShardCollectiveOps.test_all_gather_fp32: reshard_after_forward True and 8.
    all_gather_case("fp32 (reshard_after_forward=True)", 128, c);
    c.reshard = 8;
    all_gather_case("fp32, then post-forward reshard to 8 and all-gather in the group of 8", 128, c);

    // test_reduce_scatter_fp32 / _fp16: gradients ones * rank, the seed's reference.
    c = base(seed_params, 8);
    c.seed_reference = 1;
    reduce_case("fp32 of ones*rank (AVG)", 128, c);
    c.reduce_dtype = RT_F16;
    reduce_case("fp16 of ones*rank (pre 16, SUM, post 8)", 128, c);
    c.grads = GRAD_VARIED;
    reduce_case("fp16 of varied gradients", 128, c);
    c.reduce_dtype = RT_F32;
    reduce_case("fp32 of varied gradients", 128, c);
    c.seed_reference = 0;
    c.factor = 128;
    reduce_case("fp32, divide factor = world size (AVG)", 128, c);
    c.factor = 256;
    reduce_case("fp32, divide factor = 2 x world size (PREMUL_SUM 1/256)", 128, c);
    c.reduce_dtype = RT_F16;
    reduce_case("fp16, divide factor = 2 x world size (pre 16, post 16)", 128, c);
    c.factor = 0;
    c.force_sum = 1;
    c.reduce_dtype = RT_F32;
    c.seed_reference = 1;
    reduce_case("fp32, forced sum (SUM, post 128)", 128, c);
    c.reduce_dtype = RT_F16;
    reduce_case("fp16, forced sum (SUM, pre 16, post 8)", 128, c);

    // World size 1.
    c = base(seed_params, 8);
    all_gather_case("fp32", 1, c);
    c.seed_reference = 1;
    c.grads = GRAD_VARIED;
    reduce_case("fp32 (SUM, no collective)", 1, c);
    c.reduce_dtype = RT_F16;
    reduce_case("fp16", 1, c);
    c.reduce_dtype = RT_F32;
    c.seed_reference = 0;
    c.factor = 2;
    reduce_case("fp32, divide factor 2 (input / 2)", 1, c);

    // HSDP: replicate 2 x shard 4; the data-parallel size is 8.
    c = base(seed_params, 8);
    c.grads = GRAD_VARIED;
    c.replicate = 2;
    reduce_case("HSDP 2x4 fp32 (AVG reduce-scatter, AVG all-reduce)", 8, c);
    c.reduce_dtype = RT_F16;
    reduce_case("HSDP 2x4 fp16 (pre 4, SUM, SUM, post 2)", 8, c);

    // A world that is not a power of two: the divisions round (checked with a tolerance).
    c = base(seed_params, 8);
    c.grads = GRAD_VARIED;
    c.seed_reference = 1;
    reduce_case("fp32 AVG over 6 ranks", 6, c);
    c.seed_reference = 0;
    c.reduce_dtype = RT_F16;
    reduce_case("fp16 over 6 ranks (pre 4, SUM, post 1.5)", 6, c);
    c.reduce_dtype = RT_BF16;
    c.factor = 3;
    reduce_case("bf16, divide factor 3 (PREMUL_SUM 1/3)", 6, c);

    // Largest-dim sharding (Shard(1), Shard(2), uneven Shard(0)).
    c = base(largest_params, 4);
    all_gather_case("largest-dim shards", 4, c);
    c.grads = GRAD_VARIED;
    c.seed_reference = 1;
    reduce_case("largest-dim shards, fp32", 4, c);

    // bf16 mixed precision: all-gather in bf16, bf16 gradients reduced in fp32 into fp32
    // sharded gradients; and bf16 reduction.
    c = base(seed_params, 8);
    c.param_dtype = RT_BF16;
    all_gather_case("bf16 param_dtype (equals the originals rounded to bf16)", 4, c);
    c.grads = GRAD_VARIED;
    reduce_case("bf16 gradients, fp32 reduce", 4, c);
    c.reduce_dtype = RT_BF16;
    reduce_case("bf16 gradients, bf16 reduce (AVG)", 4, c);

    // Accumulation into existing sharded gradients.
    c = base(seed_params, 8);
    c.grads = GRAD_VARIED;
    c.accumulate = 1;
    reduce_case("twice, accumulating (2 x the mean)", 4, c);

    // A communicator that does not match the layout fails every rank, no hang.
    c = base(seed_params, 8);
    c.wrong_comm = 1;
    int rc = rt_threads_run(4, rank_all_gather, &c);
    CHECK(rc != 0 && c.errors == 4, "all-gather over a communicator of the wrong size: launcher %d, %ld of 4 ranks "
          "returned an error", rc, (long)c.errors);
    return check_summary();
}
