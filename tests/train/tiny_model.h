// tiny_model.h — hand-written rt_models standing in for generated code in the driver tests:
//   tiny_model       Linear(4 -> 5) (weight [5,4] uniform, bias [5] zeros, tied alias
//                    "head.bias"), sum loss over an input [3,4], AdamW; world 2, shard 2
//                    (uneven: rank 1 holds 2 of 5 rows); 900 model FLOPs per step
//   tiny_ref_model   the same planned with mesh {replicate 2, shard 1} (reference = 1)
//   tiny_nan_model   tiny with SGD lr 1e38: step 2's loss overflows
//   tiny_bad_model   tiny with wrong planned events, counts and peak (conformance must fail)
//   tiny_wrong_model tiny with a wrong sharding plan (rt_rank_init must reject it)
//   tiny_packed_model tiny with its [5,4] weight planned packed in an fp32 group (rejected too)
//   tiny_from_shard_model tiny with its bias planned read from the shards at shard world 2
//                    (rejected too)
//   tiny_word_model  tiny with its bias planned at the wrong word of the unsharded
//                    parameters (rejected too)
//   tiny_words_model tiny with its unsharded parameters planned at the wrong size (rejected)
//   tiny_unsynced_model tiny whose step all-gathers with no all_gather_sync before (dies)
//   tiny_stale_model    tiny whose step has a second optimizer step with no reduce-scatter
//                       since the first (dies)
//   tiny_slow_model  tiny whose step sleeps 100 ms (for the ETA)
//   tiny_frozen_model tiny with its bias frozen (named "tiny": tiny's checkpoints are its
//                    checkpoints as written with optimizer state for the bias too)
//   tiny_frozen_wrong_model tiny_frozen with its frozen elements planned at 2, not 3 (rejected)
//   tok_model        Embedding [16,16] read as logits, cross-entropy over tokens [2,3],
//                    2 microbatches (gradient accumulation), Adam; world 2, shard 2; no
//                    model FLOPs (an embedding lookup only)
#ifndef FSDPGEN_TESTS_TINY_MODEL_H
#define FSDPGEN_TESTS_TINY_MODEL_H

#include "rt_model.h"

extern const rt_model tiny_model;
extern const rt_model tiny_ref_model;
extern const rt_model tiny_nan_model;
extern const rt_model tiny_bad_model;
extern const rt_model tiny_wrong_model;
extern const rt_model tiny_packed_model;
extern const rt_model tiny_from_shard_model;
extern const rt_model tiny_word_model;
extern const rt_model tiny_words_model;
extern const rt_model tiny_unsynced_model;
extern const rt_model tiny_stale_model;
extern const rt_model tiny_slow_model;
extern const rt_model tiny_frozen_model;
extern const rt_model tiny_frozen_wrong_model;
extern const rt_model tok_model;

// The model named by TINY_MODEL ("tiny" when unset), or NULL for an unknown name.
const rt_model* tiny_model_by_name(const char* name);

#endif
