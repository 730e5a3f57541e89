// tiny_model.c — hand-written rt_models (what the generator would emit) for the driver
// tests: parameters, one FSDP group each, arena offsets, planned events / counts / peak and
// the step functions calling rt_step.h as a generated step does. See tiny_model.h.
#include "tiny_model.h"

#include <stddef.h>
#include <string.h>
#include <time.h>

#include "rt_kernels.h"
#include "rt_step.h"

// ---- tiny: Linear(4 -> 5), sum loss ---------------------------------------------------

// Arena offsets (bytes) of one plan of the tiny step.
typedef struct tiny_offsets {
    size_t ag, unsh, out, loss, dout, ugrad, rs_in, rs_out;
    int64_t padded;  // group padded_numel (unsharded buffers are viewed at this size)
    int hsdp;
    int unsynced;    // no all_gather_sync before the all-gather (the runtime must die)
    int stale;       // a second optimizer step with no reduce-scatter since the first (dies)
    int frozen;      // the bias frozen: no gradient, the weight's reduction (1) alone
} tiny_offsets;

// shard 2: block 15 (weight 12 + bias 3), padded 30; peak = end of rs_out = 960 + 60.
static const tiny_offsets tiny_off = {256, 384, 512, 576, 640, 704, 832, 960, 30, 0, 0, 0, 0};
// shard 1: block 25 (weight 20 + bias 5), padded 25; peak = 1216 + 100.
static const tiny_offsets ref_off = {512, 640, 768, 832, 896, 960, 1088, 1216, 25, 1, 0, 0, 0};
static const tiny_offsets unsynced_off = {256, 384, 512, 576, 640, 704, 832, 960, 30, 0, 1, 0, 0};
static const tiny_offsets stale_off = {256, 384, 512, 576, 640, 704, 832, 960, 30, 0, 0, 1, 0};
// the bias frozen: unsharded grads of the weight alone (24); peak = 960 + 48.
static const tiny_offsets frozen_off = {256, 384, 512, 576, 640, 704, 832, 960, 24, 0, 0, 0, 1};

static void tiny_step_with(rt_rank* R, const tiny_offsets* o) {
    const int N = 3, C = 4, OC = 5;
    rt_step_begin(R);
    rt_step_section(R, "forward");
    if (!o->unsynced) rt_step_all_gather_sync(R);
    rt_step_all_gather(R, 0, 0, "FORWARD", o->ag, 0);
    rt_step_all_gather_wait(R, 0, o->unsh);
    float* w = RT_F32(R, o->unsh, 4 * 20);
    float* b = RT_F32(R, o->unsh + 4 * 20, 4 * 5);
    float* out = RT_F32(R, o->out, 4 * 15);
    rt_linear_forward(out, R->inputs[0], w, b, N, C, OC, RT_F32);
    float* loss = RT_F32(R, o->loss, 4);
    rt_sum_loss_forward(loss, out, 15);
    rt_step_loss(R, 0, loss);
    rt_step_section(R, "backward");
    float* dout = RT_F32(R, o->dout, 4 * 15);
    rt_zero(dout, 15);
    rt_sum_loss_backward(dout, 15, rt_step_one(R), RT_ACCUMULATE);
    float* ug = RT_F32(R, o->ugrad, 4 * (size_t)o->padded);
    rt_zero(ug, (size_t)o->padded);
    rt_linear_backward(NULL, ug, o->frozen ? NULL : ug + 20, dout, R->inputs[0], w, N, C, OC,
                       RT_F32, RT_ACCUMULATE);
    rt_step_reshard(R, 0, "POST_BACKWARD");
    rt_step_reduce_scatter(R, 0, o->frozen, o->ugrad, RT_F32, o->rs_in, o->rs_out);
    if (o->hsdp) rt_step_all_reduce(R, 0);
    rt_step_post_backward(R, 0, "POST_BACKWARD");
    rt_step_section(R, "optimizer");
    rt_step_optimizer(R, 0, 0, 1, o->stale ? 2 : 1, 0);
    if (o->stale) rt_step_optimizer(R, 0, 0, 2, 2, 0);
    rt_step_end(R);
}

static void tiny_step(rt_rank* R) { tiny_step_with(R, &tiny_off); }
static void tiny_ref_step(rt_rank* R) { tiny_step_with(R, &ref_off); }

// The eval program: the step's forward under no_grad, then reshard() (the group is the
// root's, which keeps its parameters unsharded after forward).
static void tiny_eval_with(rt_rank* R, const tiny_offsets* o) {
    rt_step_begin(R);
    rt_step_section(R, "forward");
    rt_step_all_gather_sync(R);
    rt_step_all_gather(R, 0, 0, "FORWARD", o->ag, 0);
    rt_step_all_gather_wait(R, 0, o->unsh);
    float* out = RT_F32(R, o->out, 4 * 15);
    rt_linear_forward(out, R->inputs[0], RT_F32(R, o->unsh, 4 * 20), RT_F32(R, o->unsh + 4 * 20, 4 * 5), 3,
                      4, 5, RT_F32);
    float* loss = RT_F32(R, o->loss, 4);
    rt_sum_loss_forward(loss, out, 15);
    rt_step_eval_loss(R, loss);
    rt_step_section(R, "reshard");
    rt_step_reshard(R, 0, "IDLE");
    rt_step_end(R);
}

static void tiny_eval(rt_rank* R) { tiny_eval_with(R, &tiny_off); }
static void tiny_ref_eval(rt_rank* R) { tiny_eval_with(R, &ref_off); }
static void tiny_unsynced_step(rt_rank* R) { tiny_step_with(R, &unsynced_off); }
static void tiny_stale_step(rt_rank* R) { tiny_step_with(R, &stale_off); }
static void tiny_frozen_step(rt_rank* R) { tiny_step_with(R, &frozen_off); }
// tiny_slow: the tiny step, then 100 ms on every rank (step times the ETA can resolve).
static void tiny_slow_step(rt_rank* R) {
    tiny_step_with(R, &tiny_off);
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

static const char* const bias_aliases[] = {"head.bias", NULL};

// Designated initializers throughout: rt_model.h may grow fields. UNSH_OFF is the offset in
// the unsharded gradients and parameters alike (20 weights, then the bias).
#define PARAM(FQN, ALIASES, NDIM, SHAPE, BLOCK_OFF, UNSH_OFF, INIT, SCALE)                     \
    {.fqn = FQN, .aliases = ALIASES, .ndim = NDIM, .shape = SHAPE, .group = 0,                \
     .block_offset = BLOCK_OFF, .unsharded_offset = UNSH_OFF, .unsharded_word = UNSH_OFF,      \
     .init = INIT, .init_scale = SCALE}
#define SHAPE2(A, B) {A, B}
#define SHAPE1(A) {A}

static const rt_model_param tiny_params_sharded[] = {
    PARAM("lin.weight", NULL, 2, SHAPE2(5, 4), 0, 0, RT_INIT_UNIFORM, 0.5),
    PARAM("lin.bias", bias_aliases, 1, SHAPE1(5), 12, 20, RT_INIT_ZEROS, 0.0),
};
static const rt_model_param tiny_params_ref[] = {
    PARAM("lin.weight", NULL, 2, SHAPE2(5, 4), 0, 0, RT_INIT_UNIFORM, 0.5),
    PARAM("lin.bias", bias_aliases, 1, SHAPE1(5), 20, 20, RT_INIT_ZEROS, 0.0),
};
// The weight planned packed (rt_model.h) in an fp32 group, and [5, 4]: the runtime must
// reject it.
static const rt_model_param tiny_params_packed[] = {
    {.fqn = "lin.weight", .ndim = 2, .shape = {5, 4}, .init = RT_INIT_UNIFORM, .init_scale = 0.5,
     .packed = 1},
    PARAM("lin.bias", bias_aliases, 1, SHAPE1(5), 12, 20, RT_INIT_ZEROS, 0.0),
};
// The bias planned read from the shards (rt_model.h from_shard) at shard world 2: rejected.
static const rt_model_param tiny_params_from_shard[] = {
    PARAM("lin.weight", NULL, 2, SHAPE2(5, 4), 0, 0, RT_INIT_UNIFORM, 0.5),
    {.fqn = "lin.bias", .aliases = bias_aliases, .ndim = 1, .shape = {5}, .block_offset = 12,
     .unsharded_offset = 20, .unsharded_word = 20, .init = RT_INIT_ZEROS, .from_shard = 1},
};
// The bias planned at word 24 of the unsharded parameters, where the layout has it at 20:
// rejected.
static const rt_model_param tiny_params_word[] = {
    PARAM("lin.weight", NULL, 2, SHAPE2(5, 4), 0, 0, RT_INIT_UNIFORM, 0.5),
    {.fqn = "lin.bias", .aliases = bias_aliases, .ndim = 1, .shape = {5}, .block_offset = 12,
     .unsharded_offset = 20, .unsharded_word = 24, .init = RT_INIT_ZEROS},
};
// The bias frozen (requires_grad false): no gradient, no room in the group's gradients or
// optimizer state, which hold the weight's 12 elements alone.
static const rt_model_param tiny_params_frozen[] = {
    PARAM("lin.weight", NULL, 2, SHAPE2(5, 4), 0, 0, RT_INIT_UNIFORM, 0.5),
    {.fqn = "lin.bias", .aliases = bias_aliases, .ndim = 1, .shape = {5}, .block_offset = 12,
     .unsharded_word = 20, .init = RT_INIT_ZEROS, .grad_none = 1, .frozen = 1},
};
static const int tiny_group_params[] = {0, 1};

// By shard rank, [nparams]: shard_dim, in_numel, offset, shard_numel.
static const rt_fsdp_param_plan tiny_rank0[] = {{0, 12, 0, 12}, {0, 3, 12, 3}};  // rows 0..2
static const rt_fsdp_param_plan tiny_rank1[] = {{0, 12, 0, 8}, {0, 3, 12, 2}};   // rows 3..4
static const rt_fsdp_param_plan* const tiny_plan[] = {tiny_rank0, tiny_rank1};
static const rt_fsdp_param_plan tiny_ref_rank[] = {{0, 20, 0, 20}, {0, 5, 20, 5}};
static const rt_fsdp_param_plan* const tiny_ref_plan[] = {tiny_ref_rank};  // shard world 1
// A plan the runtime must reject: rank 1's weight shard planned with 3 rows instead of 2.
static const rt_fsdp_param_plan tiny_wrong_rank1[] = {{0, 12, 0, 12}, {0, 3, 12, 2}};
static const rt_fsdp_param_plan* const tiny_wrong_plan[] = {tiny_rank0, tiny_wrong_rank1};

#define GROUP(NAME, NPARAMS, PARAMS, PLAN, BLOCK, PADDED, WORDS, ALLRED, POFF, GOFF, SOFF)    \
    {.name = NAME, .nparams = NPARAMS, .params = PARAMS, .placement = RT_SHARD_DIM0,         \
     .pf_world = 0, .param_dtype = RT_F32, .reduce_dtype = RT_F32, .divide_factor = 0.0,      \
     .force_sum = 0, .all_reduce = ALLRED, .block_numel = BLOCK, .padded_numel = PADDED,      \
     .unsharded_words = WORDS, .plan = PLAN, .params_off = POFF, .grads_off = GOFF,           \
     .state_off = SOFF}
// tiny's unsharded parameters: 20 words of weights, the bias's 5 rounded up to 8
#define TINY_GROUP(PLAN, BLOCK, PADDED, ALLRED, POFF, GOFF, SOFF) \
    GROUP("lin", 2, tiny_group_params, PLAN, BLOCK, PADDED, 28, ALLRED, POFF, GOFF, SOFF)

static const rt_model_group tiny_groups[] = {TINY_GROUP(tiny_plan, 15, 30, 0, 0, 64, 128)};
static const rt_model_group tiny_wrong_groups[] = {TINY_GROUP(tiny_wrong_plan, 15, 30, 0, 0, 64, 128)};
// The unsharded parameters planned at the padded size (30 words) where the layout has 28:
// rejected.
static const rt_model_group tiny_words_groups[] = {
    GROUP("lin", 2, tiny_group_params, tiny_plan, 15, 30, 30, 0, 0, 64, 128)};
static const rt_model_group tiny_ref_groups[] = {TINY_GROUP(tiny_ref_plan, 25, 25, 1, 0, 128, 256)};
// Reductions of the bias alone the runtime must reject: planned with a block of 4 elements
// (its padded shard is 3), and listing a parameter index past the group's.
static const int tiny_bias_only[] = {1}, tiny_no_such_param[] = {2};
static const rt_model_reduction tiny_wrong_reductions[] = {{1, tiny_bias_only, 4, 0, 0}};
static const rt_model_reduction tiny_bad_index_reductions[] = {{1, tiny_no_such_param, 3, 0, 0}};
#define TINY_REDUCTION_GROUP(REDUCTIONS)                                                     \
    {.name = "lin", .nparams = 2, .params = tiny_group_params, .param_dtype = RT_F32,          \
     .reduce_dtype = RT_F32, .block_numel = 15, .padded_numel = 30, .unsharded_words = 28,    \
     .plan = tiny_plan,                                                                        \
     .grads_off = 64, .state_off = 128, .nreductions = 1, .reductions = REDUCTIONS}
static const rt_model_group tiny_wrong_reduction_groups[] = {TINY_REDUCTION_GROUP(tiny_wrong_reductions)};
// tiny_frozen's group: the weight's reduction, gradients and state (12 elements a block; the
// bias's padded shard of 3 is frozen); and one planned with 2 frozen elements (rejected).
static const int tiny_weight_only[] = {0};
static const rt_model_reduction tiny_weight_reductions[] = {{1, tiny_weight_only, 12, 0, 0}};
#define TINY_FROZEN_GROUP(FROZEN_NUMEL)                                                      \
    {.name = "lin", .nparams = 2, .params = tiny_group_params, .param_dtype = RT_F32,          \
     .reduce_dtype = RT_F32, .block_numel = 15, .padded_numel = 30, .unsharded_words = 28,    \
     .plan = tiny_plan, .grads_off = 64, .state_off = 128, .nreductions = 1,                   \
     .reductions = tiny_weight_reductions, .frozen_numel = FROZEN_NUMEL}
static const rt_model_group tiny_frozen_groups[] = {TINY_FROZEN_GROUP(3)};
static const rt_model_group tiny_frozen_wrong_groups[] = {TINY_FROZEN_GROUP(2)};
static const rt_model_group tiny_bad_index_groups[] = {TINY_REDUCTION_GROUP(tiny_bad_index_reductions)};

static const rt_model_event tiny_events[] = {
    {"FORWARD", "unshard", "lin"},
    {"POST_BACKWARD", "reshard", "lin"},
    {"POST_BACKWARD", "post_backward", "lin"},
};
static const rt_model_count tiny_counts[] = {{"forward all_gather", 1}, {"backward reduce_scatter", 1}};
static const rt_model_count tiny_ref_counts[] = {
    {"forward all_gather", 1}, {"backward reduce_scatter", 1}, {"backward all_reduce", 1}};
static const rt_model_event tiny_eval_events[] = {{"FORWARD", "unshard", "lin"}, {"IDLE", "reshard", "lin"}};
static const rt_model_count tiny_eval_counts[] = {{"forward all_gather", 1}};
static const rt_model_event tiny_bad_events[] = {
    {"FORWARD", "unshard", "lin"},
    {"POST_BACKWARD", "post_backward", "lin"},
};
static const rt_model_count tiny_bad_counts[] = {{"forward all_gather", 2}};

#define ADAMW {.kind = RT_OPTIM_ADAMW, .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, \
               .weight_decay = 1e-2, .nstates = 2}
#define SGD_HUGE {.kind = RT_OPTIM_SGD, .lr = 1e38, .nstates = 0}

// Every tiny model has a warmup-then-cosine lr schedule, so the resume checks cover it.

// Model FLOPs (generator/plan/flops.lua): 6 x 3 rows x 25 parameters on each of 2 ranks.
#define TINY_FLOPS (6 * 3 * 25 * 2)

// EVAL: the eval program or NULL; its loss ends at 580 (sharded) / 836 (reference) bytes.
#define TINY_MODEL(NAME, WORLD_R, WORLD_S, PARAMS, GROUPS, OPTIM, ARENA, PEAK, STEP, EVENTS,    \
                   NEVENTS, COUNTS, NCOUNTS, EVAL, EVAL_PEAK)                                  \
    {.name = NAME, .spec_file = "tiny.lua", .generator = "fsdpgen test", .world = 2,          \
     .replicate = WORLD_R, .shard = WORLD_S, .nparams = 2, .params = PARAMS, .ngroups = 1,     \
     .groups = GROUPS, .tokens = 0, .input_ndim = 2, .input_shape = {3, 4},                   \
     .loss = RT_LOSS_SUM, .n_forward = 1, .n_backward = 1, .optim = OPTIM,                    \
     .flops_per_step = TINY_FLOPS, .tokens_per_step = 6,                                      \
     .lr_schedule = {RT_LR_COSINE, 2, 6, 1e-3}, .n_optimizer = 1, .grad_clip = 0.0,           \
     .seed = 1234, .arena_bytes = ARENA, .reference = (WORLD_S == 1), .step = STEP,           \
     .expect = {PEAK, NEVENTS, EVENTS, NCOUNTS, COUNTS}, .eval = EVAL,                        \
     .eval_expect = {EVAL_PEAK, 2, tiny_eval_events, 1, tiny_eval_counts}}

const rt_model tiny_model = TINY_MODEL("tiny", 1, 2, tiny_params_sharded, tiny_groups, ADAMW,
                                       1024, 1020, tiny_step, tiny_events, 3, tiny_counts, 2,
                                       tiny_eval, 580);
const rt_model tiny_ref_model = TINY_MODEL("tiny", 2, 1, tiny_params_ref, tiny_ref_groups,
                                           ADAMW, 1344, 1316, tiny_ref_step, tiny_events, 3,
                                           tiny_ref_counts, 3, tiny_ref_eval, 836);
const rt_model tiny_nan_model = TINY_MODEL("tiny_nan", 1, 2, tiny_params_sharded, tiny_groups,
                                           SGD_HUGE, 1024, 1020, tiny_step, tiny_events, 3,
                                           tiny_counts, 2, NULL, 0);
const rt_model tiny_bad_model = TINY_MODEL("tiny_bad", 1, 2, tiny_params_sharded, tiny_groups,
                                           ADAMW, 1024, 1000, tiny_step, tiny_bad_events, 2,
                                           tiny_bad_counts, 1, NULL, 0);
const rt_model tiny_wrong_model = TINY_MODEL("tiny_wrong", 1, 2, tiny_params_sharded,
                                             tiny_wrong_groups, ADAMW, 1024, 1020, tiny_step,
                                             tiny_events, 3, tiny_counts, 2, NULL, 0);
const rt_model tiny_wrong_reduction_model = TINY_MODEL("tiny_wrong_reduction", 1, 2, tiny_params_sharded,
                                                       tiny_wrong_reduction_groups, ADAMW, 1024, 1020,
                                                       tiny_step, tiny_events, 3, tiny_counts, 2, NULL, 0);
const rt_model tiny_bad_index_model = TINY_MODEL("tiny_bad_index", 1, 2, tiny_params_sharded,
                                                 tiny_bad_index_groups, ADAMW, 1024, 1020, tiny_step,
                                                 tiny_events, 3, tiny_counts, 2, NULL, 0);
const rt_model tiny_packed_model = TINY_MODEL("tiny_packed", 1, 2, tiny_params_packed, tiny_groups,
                                              ADAMW, 1024, 1020, tiny_step, tiny_events, 3,
                                              tiny_counts, 2, NULL, 0);
const rt_model tiny_from_shard_model = TINY_MODEL("tiny_from_shard", 1, 2, tiny_params_from_shard,
                                                  tiny_groups, ADAMW, 1024, 1020, tiny_step,
                                                  tiny_events, 3, tiny_counts, 2, NULL, 0);
const rt_model tiny_word_model = TINY_MODEL("tiny_word", 1, 2, tiny_params_word, tiny_groups, ADAMW,
                                            1024, 1020, tiny_step, tiny_events, 3, tiny_counts, 2,
                                            NULL, 0);
const rt_model tiny_words_model = TINY_MODEL("tiny_words", 1, 2, tiny_params_sharded,
                                             tiny_words_groups, ADAMW, 1024, 1020, tiny_step,
                                             tiny_events, 3, tiny_counts, 2, NULL, 0);
const rt_model tiny_unsynced_model = TINY_MODEL("tiny_unsynced", 1, 2, tiny_params_sharded,
                                                tiny_groups, ADAMW, 1024, 1020, tiny_unsynced_step,
                                                tiny_events, 3, tiny_counts, 2, NULL, 0);
const rt_model tiny_slow_model = TINY_MODEL("tiny_slow", 1, 2, tiny_params_sharded, tiny_groups,
                                            ADAMW, 1024, 1020, tiny_slow_step, tiny_events, 3,
                                            tiny_counts, 2, tiny_eval, 580);
const rt_model tiny_stale_model = TINY_MODEL("tiny_stale", 1, 2, tiny_params_sharded, tiny_groups,
                                             ADAMW, 1024, 1020, tiny_stale_step, tiny_events, 3,
                                             tiny_counts, 2, NULL, 0);
// Named "tiny": a checkpoint of tiny is what tiny_frozen's binary wrote when a group with
// frozen parameters kept optimizer state for all of them.
const rt_model tiny_frozen_model = TINY_MODEL("tiny", 1, 2, tiny_params_frozen, tiny_frozen_groups,
                                              ADAMW, 1024, 1008, tiny_frozen_step, tiny_events, 3,
                                              tiny_counts, 2, NULL, 0);
const rt_model tiny_frozen_wrong_model = TINY_MODEL("tiny_frozen_wrong", 1, 2, tiny_params_frozen,
                                                    tiny_frozen_wrong_groups, ADAMW, 1024, 1008,
                                                    tiny_frozen_step, tiny_events, 3, tiny_counts,
                                                    2, NULL, 0);

// ---- tok: Embedding [16,16] as logits, cross-entropy, 2 microbatches --------------------

enum {
    TOK_V = 16, TOK_B = 2, TOK_T = 3, TOK_N = TOK_B * TOK_T,
    // arena (bytes): params 0, grads 512, state 1024 (2 x 128 floats), then:
    TOK_AG = 2048, TOK_UNSH = 3072, TOK_LOGITS = 4096, TOK_LOSS = 4480, TOK_DLOGITS = 4544,
    TOK_UGRAD = 4928, TOK_RS_IN = 5952, TOK_RS_OUT = 6976, TOK_ARENA = 7488,
};

static void tok_step(rt_rank* R) {
    rt_step_begin(R);
    for (int a = 0; a < 2; a++) {
        rt_step_section(R, "forward");
        rt_step_all_gather_sync(R);
        rt_step_all_gather(R, 0, 0, "FORWARD", TOK_AG, 0);
        rt_step_all_gather_wait(R, 0, TOK_UNSH);
        float* w = RT_F32(R, TOK_UNSH, 4 * TOK_V * TOK_V);
        float* logits = RT_F32(R, TOK_LOGITS, 4 * TOK_N * TOK_V);
        rt_embedding_forward(logits, R->tokens[a], w, TOK_N, TOK_V, TOK_V);
        float* loss = RT_F32(R, TOK_LOSS, 4);
        rt_cross_entropy_forward(loss, NULL, logits, R->targets[a], TOK_N, TOK_V);
        rt_step_loss(R, a, loss);
        rt_step_section(R, "backward");
        float* dl = RT_F32(R, TOK_DLOGITS, 4 * TOK_N * TOK_V);
        rt_zero(dl, TOK_N * TOK_V);
        rt_cross_entropy_backward(dl, logits, R->targets[a], TOK_N, TOK_V, rt_step_one(R), RT_F32,
                                  RT_ACCUMULATE);
        float* ug = RT_F32(R, TOK_UGRAD, 4 * 256);
        rt_zero(ug, 256);
        rt_embedding_backward(ug, dl, R->tokens[a], TOK_N, TOK_V, TOK_V);
        rt_step_reshard(R, 0, "POST_BACKWARD");
        rt_step_reduce_scatter(R, 0, 0, TOK_UGRAD, RT_F32, TOK_RS_IN, TOK_RS_OUT);
        rt_step_post_backward(R, 0, "POST_BACKWARD");
    }
    rt_step_section(R, "optimizer");
    rt_step_optimizer(R, 0, 0, 1, 1, 0);
    rt_step_end(R);
}

static const rt_model_param tok_params[] = {
    PARAM("emb.weight", NULL, 2, SHAPE2(TOK_V, TOK_V), 0, 0, RT_INIT_NORMAL, 1.0),
};
static const int tok_group_params[] = {0};
static const rt_fsdp_param_plan tok_rank[] = {{0, 128, 0, 128}};
static const rt_fsdp_param_plan* const tok_plan[] = {tok_rank, tok_rank};
static const rt_model_group tok_groups[] = {
    GROUP("emb", 1, tok_group_params, tok_plan, 128, 256, 256, 0, 0, 512, 1024),
};
static const rt_model_event tok_events[] = {
    {"FORWARD", "unshard", "emb"}, {"POST_BACKWARD", "reshard", "emb"},
    {"POST_BACKWARD", "post_backward", "emb"},
    {"FORWARD", "unshard", "emb"}, {"POST_BACKWARD", "reshard", "emb"},
    {"POST_BACKWARD", "post_backward", "emb"},
};
static const rt_model_count tok_counts[] = {{"forward all_gather", 2}, {"backward reduce_scatter", 2}};

const rt_model tok_model = {
    .name = "tok", .spec_file = "tok.lua", .generator = "fsdpgen test", .world = 2,
    .replicate = 1, .shard = 2, .nparams = 1, .params = tok_params, .ngroups = 1,
    .groups = tok_groups, .tokens = 1, .batch = TOK_B, .seq_len = TOK_T, .vocab = TOK_V,
    .loss = RT_LOSS_CROSS_ENTROPY, .n_forward = 2, .n_backward = 2,
    .optim = {.kind = RT_OPTIM_ADAM, .lr = 1e-1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
              .weight_decay = 0.0, .nstates = 2},
    .n_optimizer = 1, .seed = 7, .arena_bytes = TOK_ARENA,
    .step = tok_step, .expect = {TOK_ARENA, 6, tok_events, 2, tok_counts},
};

// ---- lookup -----------------------------------------------------------------------------

const rt_model* tiny_model_by_name(const char* name) {
    if (!name || !*name || !strcmp(name, "tiny")) return &tiny_model;
    if (!strcmp(name, "tiny_ref")) return &tiny_ref_model;
    if (!strcmp(name, "tiny_nan")) return &tiny_nan_model;
    if (!strcmp(name, "tiny_bad")) return &tiny_bad_model;
    if (!strcmp(name, "tiny_wrong")) return &tiny_wrong_model;
    if (!strcmp(name, "tiny_wrong_reduction")) return &tiny_wrong_reduction_model;
    if (!strcmp(name, "tiny_bad_index")) return &tiny_bad_index_model;
    if (!strcmp(name, "tiny_packed")) return &tiny_packed_model;
    if (!strcmp(name, "tiny_from_shard")) return &tiny_from_shard_model;
    if (!strcmp(name, "tiny_word")) return &tiny_word_model;
    if (!strcmp(name, "tiny_words")) return &tiny_words_model;
    if (!strcmp(name, "tiny_unsynced")) return &tiny_unsynced_model;
    if (!strcmp(name, "tiny_stale")) return &tiny_stale_model;
    if (!strcmp(name, "tiny_slow")) return &tiny_slow_model;
    if (!strcmp(name, "tiny_frozen")) return &tiny_frozen_model;
    if (!strcmp(name, "tiny_frozen_wrong")) return &tiny_frozen_wrong_model;
    if (!strcmp(name, "tok")) return &tok_model;
    return NULL;
}
