-- bench/calibration/llama3_8b_h100.lua: Llama 3.1 8B as torchtitan's published FSDP runs
-- shard it (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Tables 1 and 3:
-- 8 and 128 H100s, local batch 2, seq 8192, selective activation checkpointing, bf16
-- parameters with fp32 reduction, AdamW): fully_shard on every block (the last one keeps
-- its parameters after forward, as torchtitan's apply_fsdp does) and the root.
-- torchtitan's selective "op" checkpointing (recompute all but the attention and every
-- other matmul) has no fsdpgen spelling; every other block fully checkpointed ("selective
-- layer", nn.checkpoint_module) recomputes about as many FLOPs and stands in for it.
-- For `fsdpgen simulate` only (world 8 as written; --gpus-per-node/--nodes re-plan it):
-- Size: huge (plans in seconds; not trained here)
-- Run:  ./fsdpgen simulate bench/calibration/llama3_8b_h100.lua --gpu h100_hbm2e --kernels torch
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
  name = "calib_llama3_8b", model = model, world_size = 8,
  input = { batch = 2, seq_len = 8192 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 3e-4, weight_decay = 0.1 },
}
