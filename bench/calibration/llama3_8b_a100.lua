-- bench/calibration/llama3_8b_a100.lua: Llama 3 8B as torchtitan's published FSDP runs on
-- 64 A100s shard it (pytorch/torchtitan docs/performance.md, 2024-04-24 to 2025-06-13:
-- local batch 1, seq 8192, "selective layer" activation checkpointing, i.e. every other
-- block checkpointed; bf16 parameters with fp32 reduction, AdamW): fully_shard on every
-- block and the root.
-- For `fsdpgen simulate` only (world 64 as written, 8 GPUs per node):
-- Size: huge (plans in seconds; not trained here)
-- Run:  ./fsdpgen simulate bench/calibration/llama3_8b_a100.lua --gpu a100 --kernels torch
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")

local model = models.Llama{ n_layers = 32, dim = 4096, n_heads = 32, n_kv_heads = 8, ffn_dim = 14336,
                            vocab_size = 128256, max_seq_len = 8192, rope_theta = 500000.0 }
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
for i, layer in ipairs(model.layers) do
  if i % 2 == 0 then nn.checkpoint_module(layer) end
  fsdp.fully_shard(layer, { mp_policy = mp, reshard_after_forward = i < #model.layers })
end
fsdp.fully_shard(model, { mp_policy = mp, reshard_after_forward = true })

return fsdp.spec{
  name = "calib_llama3_8b_a100", model = model, world_size = 64,
  input = { batch = 1, seq_len = 8192 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 3e-4, weight_decay = 0.1 },
}
