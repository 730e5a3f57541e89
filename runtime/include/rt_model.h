// rt_model.h — what the generator emits about one spec: parameters, FSDP groups, the
// static memory plan's persistent offsets, the optimizer, the input, the step function and
// the eval program, plus the events and collective counts the planner expects (for the
// conformance test).
//
// Everything here is decided by the generator; the runtime recomputes the layouts from
// the parameter shapes and compares them with these numbers before the first step.
#ifndef FSDPGEN_RT_MODEL_H
#define FSDPGEN_RT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "rt_dtype.h"
#include "rt_fsdp.h"
#include "rt_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rt_rank;

// ---- parameters -------------------------------------------------------------------------

// How PyTorch initializes the parameter (nn.Linear: uniform(-1/sqrt(in), 1/sqrt(in));
// nn.Embedding: normal(0, 1); norms: ones / zeros).
typedef enum rt_init_kind { RT_INIT_ZEROS, RT_INIT_ONES, RT_INIT_NORMAL, RT_INIT_UNIFORM } rt_init_kind;

typedef struct rt_model_param {
    const char* fqn;              // PyTorch FQN, e.g. "layers.0.attention.wq.weight"
    const char* const* aliases;   // further names of a tied parameter (NULL-terminated), or NULL
    int ndim;
    int64_t shape[RT_MAX_DIMS];
    int group;                    // index into rt_model.groups
    int64_t block_offset;         // element offset inside one rank block (sharded params; and
                                  // grads and optimizer state, less frozen_before)
    int64_t unsharded_offset;     // element offset inside the group's unsharded gradients
                                  // (fp32, the shards' padding included; the trainable
                                  // parameters' alone: rt_model_group frozen_numel)
    int64_t unsharded_word;       // offset in 4-byte words inside the group's unsharded
                                  // parameters: one after another in the generator's order
                                  // (group order, but the weights of stacked linears next to
                                  // each other), each from a multiple of 4 words, without
                                  // padding (rt_fsdp_unsharded_check); a word per element of
                                  // fp32 storage, half of one packed, none from_shard
    rt_init_kind init;
    double init_scale;            // std (normal) or bound (uniform)
    int packed;                   // 1: the unsharded parameter is kept in its group's 16-bit
                                  // param_dtype (rt_kernels.h "packed 16-bit storage"): 2-D
                                  // with both dims multiples of 8 (a linear's weight), or 1-D
                                  // of a multiple of 8 (a linear's bias)
    int grad_none;                // 1: the step program gives it no gradient (FSDP2 leaves its
                                  // grad None), so the optimizer leaves it and its state alone
    int from_shard;               // 1: one shard rank, and only embedding lookups read it, whose
                                  // output is rounded to param_dtype anyway: they read the fp32
                                  // sharded parameter, and the all-gather copies nothing for it
    int frozen;                   // 1: requires_grad false in a group with trainable parameters:
                                  // no gradient and no room in its group's gradients or
                                  // optimizer state (unsharded_offset unused); a frozen
                                  // group's parameters leave it 0 (rt_model_group frozen)
    int64_t frozen_before;        // elements of the padded shards of the frozen parameters
                                  // before it in its group's block: its sharded gradient and
                                  // optimizer state are at block_offset - frozen_before
                                  // (rt_model_grad_offset)
} rt_model_param;

// ---- groups -----------------------------------------------------------------------------

// A reduce-scatter of some of a group's parameters: FSDP2's post-backward reduces only the
// gradients that exist (fsdp_params_with_grad), packed as if they were the whole group.
typedef struct rt_model_reduction {
    int nparams;                  // >= 1, fewer than the group's
    const int* params;            // indices into the group's params, increasing
    int64_t block_numel;          // one rank block of their layout (the reduce-scatter output)
    int part;                     // a part of a split reduction (one rank, direct; generator/
                                  // plan/reductions.lua Sim:reduce_parts): it assigns its
                                  // parameters' sharded grads and zeroes no others, and the
                                  // optimizer steps it on its own (rt_step_optimizer r)
    int rows;                     // 0, or a part of one 2-D parameter (a tied embedding) that
                                  // rt_step_optimizer_rows steps by rows: RT_ROWS_FINAL (the
                                  // rows no token looks up, whose gradient the output head
                                  // finished; in place, the lookups add to it after this
                                  // part) or RT_ROWS_LOOKED_UP (the others, at the end)
} rt_model_reduction;

typedef struct rt_model_group {
    const char* name;             // FQNs joined by ", " ("" for the root)
    int nparams;
    const int* params;            // indices into rt_model.params, in group order
    rt_shard_placement placement;
    int pf_world;                 // reshard_after_forward = int: post-forward group size; 0 otherwise
    rt_dtype param_dtype;         // all-gather / compute dtype (mp_policy.param_dtype)
    rt_dtype reduce_dtype;        // reduce-scatter dtype
    double divide_factor;         // set_gradient_divide_factor, <= 0 for none
    int force_sum;                // set_force_sum_reduction_for_comms
    int all_reduce;               // HSDP: all-reduce across replicas after the reduce-scatter
    int64_t block_numel;          // one rank block (sharded params = all-gather input)
    int64_t padded_numel;         // block_numel * shard world (unsharded, padded)
    int64_t unsharded_words;      // 4-byte words of the unsharded parameters (rt_model_param
                                  // unsharded_word)
    // [shard rank] -> [nparams]: each rank's planned layout (ranks alike share one table)
    const rt_fsdp_param_plan* const* plan;
    size_t params_off;            // arena byte offsets of the persistent fp32 buffers
    size_t grads_off;             // (the gradients are param_dtype's 16 bits where packed)
    size_t state_off;             // optimizer state (0..2 buffers of rt_model_grad_numel), if any
    int nreductions;              // reduce-scatters of fewer parameters, numbered 1..n in
    const rt_model_reduction* reductions;  // rt_step_reduce_scatter (0: the whole group)
    int grads_packed;             // the sharded gradients are stored in param_dtype (bf16,
                                  // fp16): in place, each assigned once by the backward
                                  // (generator/memory/grad_assigns.lua packed_groups)
    int offload;                  // offload_policy (every group or none): the persistent
                                  // buffers live in pinned host memory (CUDA backend)
    int frozen;                   // no parameter requires grad: never reduced or stepped, no
                                  // gradients or optimizer state (grads_off, state_off unused)
    int64_t frozen_numel;         // elements of the frozen parameters' padded shards in one rank
                                  // block (rt_model_param frozen), which have no gradients: the
                                  // sharded gradients and each optimizer state buffer hold the
                                  // others' alone, in group order, block_numel - frozen_numel
                                  // elements (rt_model_grad_numel), as torch.optim keeps state
                                  // only for parameters with a gradient; the unsharded
                                  // gradients that times the shard world
    int kept_across;              // one rank: the unsharded params are kept across steps at
    size_t kept_off;              // kept_off (a persistent buffer, unsharded_words words);
                                  // every all-gather is kept, every optimizer step casts into
                                  // them (generator/plan/keep.lua persist)
} rt_model_group;

// Elements of one rank block of group g's sharded gradients and of each of its optimizer
// state buffers.
static inline int64_t rt_model_grad_numel(const rt_model_group* g) {
    return g->block_numel - g->frozen_numel;
}

// Element offset of parameter p's sharded gradient and optimizer state in its group's.
static inline int64_t rt_model_grad_offset(const rt_model_param* p) {
    return p->block_offset - p->frozen_before;
}

// ---- expectations -----------------------------------------------------------------------

typedef struct rt_model_event {
    const char* state;            // FORWARD, PRE_BACKWARD, POST_BACKWARD
    const char* kind;             // unshard, reshard, post_backward
    const char* group;
} rt_model_event;

typedef struct rt_model_count {
    const char* what;             // "forward all_gather", "backward reduce_scatter", ...
    int count;
} rt_model_count;

// What the planner expects of one program of the model (the step, the eval program, the
// step after an eval), checked by the conformance test.
typedef struct rt_model_expect {
    size_t peak;                  // the memory plan's peak
    int nevents;
    const rt_model_event* events;
    int ncounts;
    const rt_model_count* counts;
} rt_model_expect;

// ---- the Hugging Face map ----------------------------------------------------------------
// How the model's parameters become a Hugging Face directory (config.json and
// model.safetensors) and back: computed by generator/emit/hf.lua, moved by runtime/train/hf.c.

// How one HF tensor is made from parameters (W [out, in] row-major; HF shape in rt_hf_tensor):
//   COPY       the parameter as it is
//   TRANSPOSE  W^T [in, out] (GPT-2's Conv1D layout)
//   QKV        [Wq; Wk; Wv]^T [in, 3 out] (GPT-2's fused c_attn)
//   ROPE       rows of each of `heads` heads reordered from interleaved rotary pairs
//              (x[2i], x[2i+1]: fsdpgen's kernel, Meta's layout) to HF's halves
//              (x[i], x[i + hd/2]): HF row h*hd + j*hd/2 + i = row h*hd + 2i + j
//   ZEROS      no parameter: zeros (GPT-2's attention biases, which fsdpgen's model lacks);
//              on load they must be zeros
typedef enum rt_hf_op { RT_HF_COPY, RT_HF_TRANSPOSE, RT_HF_QKV, RT_HF_ROPE, RT_HF_ZEROS } rt_hf_op;

typedef struct rt_hf_tensor {
    const char* name;             // HF state-dict name
    const char* alt;              // another name accepted on load (GPT-2 hub files), or NULL
    rt_hf_op op;
    int src[3];                   // indices into rt_model.params (QKV: q, k, v), -1 unused
    int heads;                    // ROPE: heads of these rows
    int ndim;
    int64_t shape[2];             // HF shape
    int tied;                     // 1: HF ties it to another tensor: not written; on load,
                                  // where present, it must hold its parameter's values
    int lora[2];                  // where lora_scale != 0, src[0] is a LoRALinear's weight W
    double lora_scale;            // and these its lora_a (A) and lora_b (B): saved merged,
                                  // W + lora_scale * B A (alpha / rank); on load W alone, the
                                  // adapters keep their initialization
} rt_hf_tensor;

// A config.json field: `value` is written under `key` (when `written`) and, with a check,
// compared with a loaded config's value at `key` ("a|b": the first path present; "a.b":
// member b of object a), or with `absent` (HF's default) where the file has none.
typedef enum rt_hf_check { RT_HF_NONE, RT_HF_EQ, RT_HF_MIN } rt_hf_check;  // MIN: file >= value

typedef struct rt_hf_config {
    const char* key;
    const char* value;            // JSON text
    rt_hf_check check;
    const char* absent;           // JSON text, or NULL: the field is required
    const char* alt;              // JSON text of another value that is the same model, or NULL
    int written;
} rt_hf_config;

typedef struct rt_hf_map {
    const char* arch;             // "llama", "gpt2"
    const char* peft_config;      // where the model has LoRA adapters: PEFT's adapter_config.json
                                  // (--save-peft), else NULL
    int nconfig;
    const rt_hf_config* config;
    int ntensors;
    const rt_hf_tensor* tensors;
} rt_hf_map;

// ---- the model --------------------------------------------------------------------------

typedef enum rt_loss_kind { RT_LOSS_SUM, RT_LOSS_CROSS_ENTROPY } rt_loss_kind;
typedef enum rt_optim_kind { RT_OPTIM_SGD, RT_OPTIM_ADAM, RT_OPTIM_ADAMW } rt_optim_kind;

// The learning-rate schedule (spec key lr_schedule; rt_step_lr): the lr of the run's i-th
// optimizer.step() (0-based, counting every optimizer item of every training step):
//   i < warmup_steps:  lr * (i + 1) / warmup_steps
//   after, with p = min(1, (i - warmup_steps) / (total_steps - warmup_steps)):
//     RT_LR_CONSTANT  lr
//     RT_LR_LINEAR    min_lr + (lr - min_lr) * (1 - p)
//     RT_LR_COSINE    min_lr + (lr - min_lr) * (0.5 * (1 + cos(pi * p)))
// in doubles, as a Python loop that sets param_group["lr"] computes it. All zero: the
// optimizer's lr at every step.
typedef enum rt_lr_decay { RT_LR_CONSTANT, RT_LR_LINEAR, RT_LR_COSINE } rt_lr_decay;

typedef struct rt_lr_schedule {
    rt_lr_decay decay;
    int64_t warmup_steps;         // 0: none
    int64_t total_steps;          // > warmup_steps unless decay is RT_LR_CONSTANT
    double min_lr;
} rt_lr_schedule;

typedef struct rt_model_optim {
    rt_optim_kind kind;
    double lr, beta1, beta2, eps, weight_decay;  // Adam/AdamW
    double momentum, dampening;                  // SGD (weight_decay shared)
    int nesterov;
    int nstates;                                 // state buffers per group: 2, 1 or 0
} rt_model_optim;

// ---- attention sites ------------------------------------------------------------------------

// The spec's `attention`: which attention the CUDA backend runs at each site (below). AUTO:
// per site, the faster of cuDNN and fsdpgen's kernels, timed at start; CUDNN: cuDNN wherever
// it takes the shape; FSDPGEN: never cuDNN. The environment's RT_ATTENTION (auto, cudnn or
// fsdpgen) overrides it for a run. The CPU backend always runs fsdpgen's kernels.
typedef enum rt_attention_choice {
    RT_ATTENTION_AUTO,
    RT_ATTENTION_CUDNN,
    RT_ATTENTION_FSDPGEN
} rt_attention_choice;

// An attention shape whose ops may run on cuDNN (generator/memory/attention.lua: q, k, v, the
// output and their gradients packed in dtype, the gradients of q, k and v assigned): the
// generated step calls rt_step_attention_forward / _backward with its index.
typedef struct rt_model_attention {
    int B, T, NH, NKV, HD, causal;
    rt_dtype dtype;               // RT_BF16 or RT_F16
    size_t scratch_bytes;         // each call's planned scratch: fsdpgen's kernels' scratch, or
                                  // cuDNN's workspace, which must fit (else fsdpgen's run)
    int ld_dq, ld_dk, ld_dv;      // row lengths (elements) of the gradients of q, k and v: 0
                                  // dense, else column slices of one wider matrix whose one
                                  // GEMM computes the input gradient of their three linears
                                  // (rt_kernels.h "Gradient row lengths")
    size_t spare_bytes;           // the scratch's last bytes, beyond cuDNN's workspace, where
                                  // cuDNN's backward writes the gradients the step passes as
                                  // NULL (no tensor needs them), dense, each 256-byte aligned
                                  // in q, k, v order; 0 where every one is needed
} rt_model_attention;

typedef struct rt_model {
    const char* name;             // spec name
    const char* spec_file;        // spec file name (no directory)
    const char* generator;        // "fsdpgen X.Y"
    int world;                    // replicate * shard
    int replicate;                // 1 without HSDP
    int shard;
    int nparams;
    const rt_model_param* params;
    int ngroups;
    const rt_model_group* groups;
    // Input of one forward on one rank: tokens [batch, seq_len] (int32 ids < vocab, plus
    // shifted targets for cross-entropy) or a float tensor of input_shape.
    int tokens;
    int64_t batch, seq_len, vocab;
    int input_ndim;
    int64_t input_shape[RT_MAX_DIMS];
    rt_loss_kind loss;
    int n_forward;                // forward items per step (= microbatches A)
    int n_backward;               // backward items per step (each records one loss)
    int64_t flops_per_step;       // model FLOPs of one step on all ranks (generator/plan/flops.lua:
                                  // PaLM's 6N + 12LTd per token), 0: unknown (no TFLOP/s)
    int64_t tokens_per_step;      // the items (tokens, or samples) per step, all ranks
    rt_model_optim optim;
    int optimizer_rows;           // 1: the step calls rt_step_optimizer_rows (the backend keeps a
                                  // mask of the vocab rows the step's tokens look up)
    rt_lr_schedule lr_schedule;   // all zero: optim.lr at every optimizer step
    int n_optimizer;              // "optimizer" items per step: the schedule advances by
                                  // this many per step (one per optimizer.step())
    double grad_clip;             // max global grad norm, 0 for none
    uint64_t seed;
    int draws_rng;                // dropout with p > 0: masks differ every step, so the CUDA
                                  // backend replays no graph (kernel arguments would freeze)
    size_t arena_bytes;           // capacity of each rank's arena (every program's plan fits)
    rt_attention_choice attention_choice;
    int nattention;               // attention sites (above), shared by every program
    const rt_model_attention* attention;
    // 1 for the conformance test's non-sharded reference (mesh replicate = world x shard
    // 1): gradients are all-reduced over every rank with the divide factors the sharded
    // model uses (rt_fsdp_gradient_divide_factors over the whole world).
    int reference;
    void (*step)(struct rt_rank* R);
    rt_model_expect expect;
    // The eval program (generator/plan/planner.lua run_eval; rt_step_eval): model.eval(), then
    // `with torch.no_grad(): loss = model(inp)` on forward item 0's input and reshard() on
    // every FSDP module. NULL with eval_unavailable saying why where the generated code
    // cannot do what FSDP2 would (generator/plan/planner.lua plan_eval).
    void (*eval)(struct rt_rank* R);
    rt_model_expect eval_expect;
    const char* eval_unavailable;
    // The training step that follows an eval, where it differs from `step` (FSDP2's backward
    // prefetch targets the eval's post-forward records: generator/plan/planner.lua after_eval),
    // else NULL.
    void (*step_after_eval)(struct rt_rank* R);
    rt_model_expect after_eval_expect;
    // The Hugging Face map (--save-hf, --load-hf), or NULL with hf_unavailable saying why.
    const rt_hf_map* hf;
    const char* hf_unavailable;
} rt_model;

#ifdef __cplusplus
}
#endif
#endif
