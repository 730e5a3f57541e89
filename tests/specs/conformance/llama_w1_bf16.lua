-- World size 1, Llama-style with bf16 parameters and fp32 reduction, AdamW: the direct
-- reduction (the gradients straight into the sharded fp32 gradients, no collective and no
-- reduce-scatter buffers; generator/plan/reductions.lua direct_reduction, rt_step_reduce_direct)
-- with packed 16-bit unsharded weights and activations, as the benchmark's Llama runs.
local fsdp, models = require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = models.Llama{ n_layers = 2, dim = 48, n_heads = 4, n_kv_heads = 2, vocab_size = 64,
                            max_seq_len = 16 }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { mp_policy = mp })
end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{
  name = "llama_w1_bf16", model = model, world_size = 1,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy", optimizer = { "adamw", lr = 1e-3 },
}
