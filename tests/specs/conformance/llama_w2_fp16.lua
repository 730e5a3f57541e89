-- World size 2, Llama-style: fp16 parameters and fp16 reduction (FSDP2's pre/post
-- divide for overflow-prone reductions), grouped-query attention, rotary embeddings,
-- shards on the largest dim, Adam.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "fp16", reduce_dtype = "fp16" }
local model = models.Llama{ n_layers = 2, dim = 32, n_heads = 4, n_kv_heads = 2, vocab_size = 64,
                            max_seq_len = 16 }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { mp_policy = mp, shard_placement = "largest_dim" })
end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{
  name = "llama_w2_fp16", model = model, world_size = 2,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy", optimizer = { "adam", lr = 1e-3 },
}
