-- examples/mixed_precision.lua: FSDP2's MixedPrecisionPolicy on a small Llama (RMSNorm,
-- rotary, grouped-query attention, SwiGLU): parameters all-gathered and computed in bf16,
-- gradients reduce-scattered in fp32, the sharded parameters and AdamW's state kept in
-- fp32; the root's policy casts the logits back to fp32 for the loss (output_dtype).
-- 2 ranks, gradient clipping, a warm-up + cosine learning-rate schedule.
-- Size: small (trains on a CPU in seconds; tests/examples/run.sh trains it)
-- Run:  ./fsdpgen run examples/mixed_precision.lua -- --steps 50 --log-every 10
--       ./fsdpgen plan examples/mixed_precision.lua   (the .schedule names each cast)
local fsdp, models = require("fsdp"), require("models")

local model = models.Llama{ n_layers = 2, dim = 64, n_heads = 4, n_kv_heads = 2, vocab_size = 256,
                            max_seq_len = 32 }
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { mp_policy = mp })
end
fsdp.fully_shard(model, { mp_policy = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32",
                                                                  output_dtype = "fp32" } })

return fsdp.spec{
  name = "mixed_precision", model = model, world_size = 2,
  input = { batch = 4, seq_len = 32 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 1e-3, weight_decay = 0.1 }, grad_clip = 1.0,
  lr_schedule = { "cosine", warmup_steps = 5, total_steps = 100, min_lr = 1e-4 },
}
