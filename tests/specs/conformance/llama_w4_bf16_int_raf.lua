-- World size 4, Llama-style with bf16 parameters and fp32 reduction, reshard_after_forward = 2
-- (backward all-gathers inside pairs of ranks from the post-forward shards): the linears'
-- unsharded weights whose dims are multiples of 8 are packed 16-bit (rt_model.h `packed`),
-- k and v's (20 rows) are not, so every block's copy-outs and post-forward reshards mix both
-- storages; AdamW.
local fsdp, models = require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = models.Llama{ n_layers = 2, dim = 40, n_heads = 4, n_kv_heads = 2, vocab_size = 72,
                            max_seq_len = 16 }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { mp_policy = mp, reshard_after_forward = 2 })
end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{
  name = "llama_w4_bf16_int_raf", model = model, world_size = 4,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy", optimizer = { "adamw", lr = 1e-3 },
}
