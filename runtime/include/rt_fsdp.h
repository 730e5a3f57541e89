// FSDP2's foreach collectives over rt_comm, as torch/distributed/fsdp/_fully_shard/
// (_fsdp_collectives.py, _fsdp_param.py) does them, for one parameter group at a time:
//
//   sharding     dim-0 chunks as torch.chunk (chunk = ceil(d0 / ws), trailing ranks may be
//                empty), every rank's shard zero-padded to chunk 0's size; or Shard(d) on
//                the largest dim d (first largest; d > 0 must divide evenly, as in FSDP2).
//   all-gather   copy-in: each padded shard, cast to param_dtype, into this rank's block of
//                the group's flat output (block = all padded shards back to back); an
//                in-place all-gather fills the other world-1 blocks (rank-major); copy-out:
//                each parameter's rows from every block into the unsharded parameter.
//   reduce-      copy-in: each gradient padded to ceil(d0/ws)*ws rows and laid out so block
//   scatter      r holds every parameter's rows for rank r (torch._chunk_cat), cast to
//                reduce_dtype; pre-divide; reduce-scatter (+ HSDP all-reduce over the
//                replicate group); post-divide; view-out: each parameter's unpadded shard,
//                cast to the sharded gradient's dtype, assigned or accumulated.
//
// The generator plans every size and offset; rt_fsdp_layout_* computes them again and
// rt_fsdp_layout_check compares them with the generated numbers (clear error on any
// difference). Data movement here runs on the host (threads backend buffers): each copy
// builds its copy plan (rt_fsdp_copy.h) and applies it; the CUDA step backend runs the same
// plans with its copy kernel.
#ifndef RT_FSDP_H
#define RT_FSDP_H

#include <stdint.h>

#include "rt_comm.h"
#include "rt_dtype.h"
#include "rt_tensor.h"

// ---- parameters -------------------------------------------------------------------------

typedef enum rt_shard_placement {
    RT_SHARD_DIM0 = 0,         // Shard(0), uneven allowed (padded)
    RT_SHARD_LARGEST_DIM = 1,  // Shard(first largest dim); uneven only if that dim is 0
} rt_shard_placement;

typedef struct rt_fsdp_param_desc {
    const char* name;  // FQN, for messages
    int ndim;          // >= 1
    int64_t shape[RT_MAX_DIMS];
    rt_shard_placement placement;
} rt_fsdp_param_desc;

// ---- layout -----------------------------------------------------------------------------

// One parameter's place in its group, as seen by one rank. Counts are elements.
typedef struct rt_fsdp_param_layout {
    char name[64];               // FQN (copied from the description), for messages
    int shard_dim;               // 0, or the largest dim
    int64_t numel;               // unsharded numel
    int64_t dim_size;            // size of shard_dim
    int64_t outer, inner;        // products of the dims before / after shard_dim
    int64_t chunk;               // ceil(dim_size / world): rows of chunk 0 along shard_dim
    int64_t shard_rows;          // this rank's rows (torch.chunk; may be 0)
    int64_t shard_shape[RT_MAX_DIMS];  // this rank's sharded size (shard_rows on shard_dim)
    int64_t shard_numel;         // its numel (the sharded param / sharded grad)
    int64_t padded_shard_numel;  // chunk * outer * inner: every rank's padded shard
    int64_t padded_numel;        // padded_shard_numel * world (ceil(d0/ws)*ws rows for dim 0)
    int64_t in_numel;            // elements in one rank block: padded_shard_numel, or
                                 // padded_numel / world for a post-forward layout
    int64_t offset;              // element offset inside a rank block
} rt_fsdp_param_layout;

typedef struct rt_fsdp_layout {
    char name[64];        // group name, for messages
    int world;            // ranks of the all-gather / reduce-scatter group
    int rank;             // this rank in it
    int shard_world;      // the shard group size the padding follows (== world unless
                          // post_forward)
    int post_forward;     // 1: all-gather of reshard_after_forward=int shards (dim 0 only)
    int nparams;
    int64_t block_numel;  // one rank block: all-gather input = reduce-scatter output
    int64_t total_numel;  // block_numel * world: all-gather output = reduce-scatter input
    rt_fsdp_param_layout* params;  // nparams entries (owned)
    char error[512];      // last error, one line
} rt_fsdp_layout;

// Layout of a group sharded over `world` ranks, seen by `rank`. Returns 0, or RT_ERR_ARG
// with a message in out->error (bad shapes, uneven Shard(d > 0), world < 1, ...).
int rt_fsdp_layout_init(rt_fsdp_layout* out, const char* group, const rt_fsdp_param_desc* params,
                        int nparams, int world, int rank);
// Layout of the all-gather that unshards from post-forward shards when
// reshard_after_forward = pf_world (a divisor of shard_world): each rank keeps the flat
// slice pf_rank of every padded parameter and gathers inside its group of pf_world ranks.
int rt_fsdp_layout_init_post_forward(rt_fsdp_layout* out, const char* group,
                                     const rt_fsdp_param_desc* params, int nparams,
                                     int shard_world, int pf_world, int pf_rank);
void rt_fsdp_layout_free(rt_fsdp_layout* l);

// What the generated code planned for one group; compared field by field.
typedef struct rt_fsdp_param_plan {
    int shard_dim;
    int64_t in_numel;     // elements per rank block
    int64_t offset;       // offset inside the rank block
    int64_t shard_numel;  // this rank's unpadded shard
} rt_fsdp_param_plan;

typedef struct rt_fsdp_plan {
    int world, rank;
    int nparams;
    int64_t block_numel, total_numel;
    const rt_fsdp_param_plan* params;
} rt_fsdp_plan;

// Returns 0 when plan equals the layout, else RT_ERR_MISMATCH with a message in l->error
// naming the group, parameter, field and both values.
int rt_fsdp_layout_check(rt_fsdp_layout* l, const rt_fsdp_plan* plan);

// ---- unsharded parameters ---------------------------------------------------------------

// One parameter of a group's unsharded parameters, a buffer of 4-byte words (rt_model.h
// unsharded_word).
typedef struct rt_fsdp_unsharded_param {
    const char* name;  // FQN, for messages
    int64_t word;      // its first word, as planned
    int64_t words;     // the words it holds (0: none), before rounding up to 4
} rt_fsdp_unsharded_param;

// The generator's placement of them checked: each one's extent [word, word + words rounded
// up to 4) is 4-word aligned, nonnegative and inside [0, total), no two overlap, and the
// rounded sizes sum to total (the buffer's planned size, rt_model_group unsharded_words):
// the extents packed tight, in whatever order the generator put them (stacked linears'
// weights next to each other: not necessarily the group's). Checked as that packing: in
// order of their first words, each starts where the one before ends, the first at 0 (a
// parameter without words at such a boundary). Returns 0, RT_ERR_MISMATCH with a one-line
// message in err (cap bytes) naming the group and the first parameter out of place with its
// planned word and the packing's (or both sizes), or RT_ERR_NOMEM.
int rt_fsdp_unsharded_check(const char* group, const rt_fsdp_unsharded_param* params,
                            int nparams, int64_t total, char* err, size_t cap);

// ---- sharding ---------------------------------------------------------------------------

// This rank's padded shards from full parameters (the state after fully_shard):
// shards[i] gets padded_shard_numel elements, zeros past the rank's rows. Same dtype.
int rt_fsdp_shard_params(rt_fsdp_layout* l, const void* const* full, rt_dtype dtype,
                         void* const* shards);
// Post-forward reshard (pf layout): shards[i] (shard_dtype) gets the flat slice
// [rank * in_numel, (rank + 1) * in_numel) of unsharded parameter i (unsharded_dtypes[i])
// padded with zeros to padded_numel.
int rt_fsdp_post_forward_shards(rt_fsdp_layout* pf, const void* const* unsharded,
                                const rt_dtype* unsharded_dtypes, void* const* shards,
                                rt_dtype shard_dtype);

// ---- all-gather -------------------------------------------------------------------------

// Copy-in: shards[i] (in_numel elements of shard_dtype) cast to param_dtype into this
// rank's block of ag_output (total_numel elements of param_dtype).
int rt_fsdp_all_gather_copy_in(rt_fsdp_layout* l, const void* const* shards, rt_dtype shard_dtype,
                               void* ag_output, rt_dtype param_dtype);
// In-place all-gather of the blocks over comm (size world, rank rank: checked; a wrong
// communicator fails it, so peers do not hang).
int rt_fsdp_all_gather(rt_fsdp_layout* l, rt_comm* comm, void* ag_output, rt_dtype param_dtype,
                       void* stream);
// Copy-out: every parameter's rows from every block into unsharded[i] (numel elements,
// param_dtype, the parameter's own shape); padding is dropped.
int rt_fsdp_all_gather_copy_out(rt_fsdp_layout* l, const void* ag_output, rt_dtype param_dtype,
                                void* const* unsharded);
// The same into unsharded tensors of other dtypes, unsharded_dtypes[i] for parameter i (the
// CPU backend computes on fp32 storage holding param_dtype values, except for the packed
// parameters of rt_model.h, which stay in param_dtype).
int rt_fsdp_all_gather_copy_out_as(rt_fsdp_layout* l, const void* ag_output, rt_dtype param_dtype,
                                   void* const* unsharded, const rt_dtype* unsharded_dtypes);
// The three above in order.
int rt_fsdp_foreach_all_gather(rt_fsdp_layout* l, rt_comm* comm, const void* const* shards,
                               rt_dtype shard_dtype, void* ag_output, rt_dtype param_dtype,
                               void* const* unsharded, void* stream);

// ---- gradient division ------------------------------------------------------------------

// PyTorch's _get_gradient_divide_factors. A divide of 1 means none.
typedef struct rt_fsdp_divide {
    double predivide;   // applied to the reduce-scatter input
    double postdivide;  // applied to the reduced output
    rt_redop rs_op;     // reduce-scatter reduction
    rt_redop ar_op;     // HSDP all-reduce reduction
} rt_fsdp_divide;

// shard_size: reduce-scatter group size; replicate_size: HSDP all-reduce group size, 0
// without one (data-parallel size = shard_size * max(replicate_size, 1)); factor: the
// set_gradient_divide_factor value, <= 0 for none; force_sum: set_force_sum_reduction_for_comms.
//   fp32/bf16 without force_sum: no factor -> SUM if dp size 1 else AVG (both ops); factor
//     -> rs AVG if factor == shard_size else PREMUL_SUM(1/factor), ar SUM; no pre/post.
//   fp16 (overflow risk) or force_sum: SUM/SUM with factor (default dp size) split as
//     pre = 1, doubled while factor % pre == 0 and factor / pre > pre (fp16 only; 1 with
//     force_sum in fp32/bf16), post = factor / pre.
rt_fsdp_divide rt_fsdp_gradient_divide_factors(int shard_size, int replicate_size,
                                               rt_dtype reduce_dtype, double factor,
                                               int force_sum);

// buf[i] /= factor for n elements of dt, computed in fp32 and rounded once to dt (FSDP2's
// _div_if_needed on a reduced-precision tensor). A factor of 1 does nothing.
void rt_fsdp_divide_buffer(void* buf, int64_t n, rt_dtype dt, double factor);

// ---- reduce-scatter ---------------------------------------------------------------------

// Copy-in: grads[i] (numel elements of grad_dtype, unsharded shape) into rs_input
// (total_numel elements of reduce_dtype): block r holds every parameter's rows for rank r,
// zero-padded to chunk rows.
int rt_fsdp_reduce_scatter_copy_in(rt_fsdp_layout* l, const void* const* grads, rt_dtype grad_dtype,
                                   void* rs_input, rt_dtype reduce_dtype);

typedef struct rt_fsdp_reduce_args {
    rt_comm* shard_comm;      // reduce-scatter group: size l->world, rank l->rank
    rt_comm* replicate_comm;  // HSDP all-reduce group, NULL without HSDP
    rt_dtype reduce_dtype;
    double divide_factor;     // set_gradient_divide_factor, <= 0 for none
    int force_sum;            // set_force_sum_reduction_for_comms
    void* stream;
} rt_fsdp_reduce_args;

// Pre-divide rs_input in place, reduce-scatter into rs_output (block_numel elements; a
// world of 1 copies instead, dividing by divide_factor if set on top of the pre/post
// factors, exactly as FSDP2's foreach_reduce does), all-reduce over
// the replicate group if any, post-divide. Divisions compute in fp32 and round once to
// reduce_dtype (as a PyTorch div_ on a reduced-precision tensor does).
int rt_fsdp_reduce_scatter(rt_fsdp_layout* l, const rt_fsdp_reduce_args* a, void* rs_input,
                           void* rs_output);
// View-out: sharded_grads[i] (shard_numel elements of grad_dtype) = or += the parameter's
// part of rs_output, cast from reduce_dtype (accumulation adds in grad_dtype after the
// cast, as `grad += new_sharded_grad`).
int rt_fsdp_reduce_scatter_view_out(rt_fsdp_layout* l, const void* rs_output, rt_dtype reduce_dtype,
                                    void* const* sharded_grads, rt_dtype grad_dtype, int accumulate);
// Copy-in, reduce, view-out. grads are unsharded gradients in grad_dtype (param_dtype
// under mixed precision); sharded_grads are in sharded_dtype (the parameter's orig dtype).
int rt_fsdp_foreach_reduce(rt_fsdp_layout* l, const rt_fsdp_reduce_args* a, const void* const* grads,
                           rt_dtype grad_dtype, void* rs_input, void* rs_output,
                           void* const* sharded_grads, rt_dtype sharded_dtype, int accumulate);

// ---- meshes -----------------------------------------------------------------------------

// A (replicate x shard) mesh over world ranks, as init_device_mesh: shard groups are
// contiguous runs of `shard` ranks, replicate groups take every shard-th rank.
typedef struct rt_fsdp_mesh {
    rt_comm* shard;      // this rank's shard group
    rt_comm* replicate;  // this rank's replicate group (NULL when replicate == 0: plain FSDP)
} rt_fsdp_mesh;

// replicate == 0: plain FSDP over the whole world (shard must equal the world size).
// Collective over world. Returns 0 or an rt_status (message in rt_comm_last_error(world)).
int rt_fsdp_mesh_init(rt_comm* world, int replicate, int shard, rt_fsdp_mesh* out);
void rt_fsdp_mesh_free(rt_fsdp_mesh* mesh);
// The post-forward group for reshard_after_forward = size: contiguous runs of `size`
// ranks inside the shard group. Collective over shard.
int rt_fsdp_post_forward_comm(rt_comm* shard, int size, rt_comm** out);

#endif
