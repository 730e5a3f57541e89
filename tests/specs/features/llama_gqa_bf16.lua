-- Llama-style model (RMSNorm, rotary, grouped-query attention, SwiGLU), bf16 compute with
-- fp32 reduction, activation checkpointing, cross-entropy loss, gradient clipping.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = models.Llama{ n_layers = 2, dim = 64, n_heads = 8, n_kv_heads = 2, vocab_size = 256,
                            max_seq_len = 32, checkpoint_activations = true }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { mp_policy = mp }) end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{
  name = "llama_gqa_bf16", model = model, world_size = 4,
  input = { batch = 2, seq_len = 32 }, loss = "cross_entropy", optimizer = { "adamw", lr = 3e-4 },
  grad_clip = 1.0,
}
