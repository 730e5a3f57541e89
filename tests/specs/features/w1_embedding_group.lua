-- One rank, the embedding a group of its own as torchtitan shards Llama (then each block,
-- then [norm, output] with the root): only the lookup reads the embedding, which reads it
-- from the shards (packing.lua mark_params), so its group has no unsharded parameters
-- at all (place_unsharded_params: no buffer; the all-gather copies nothing). bf16 params,
-- so the head is packed beside the fp32 norm in the root's unsharded parameters.
local fsdp, models = require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = models.Llama{ n_layers = 2, dim = 64, n_heads = 4, n_kv_heads = 2, vocab_size = 128,
                            max_seq_len = 16 }
fsdp.fully_shard(model.tok_embeddings, { mp_policy = mp })
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { mp_policy = mp }) end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{
  name = "w1_embedding_group", model = model, world_size = 1,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy", optimizer = { "adamw", lr = 3e-3 },
}
