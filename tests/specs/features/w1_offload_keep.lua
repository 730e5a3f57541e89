-- One rank with FSDP2's CPUOffloadPolicy on every group: the sharded state lives in pinned
-- host memory, so no unsharded parameters are kept across steps there (generator/plan/
-- keep.lua persist); a block's forward reshard keeps them for its backward all-gather
-- instead (keep.lua mark), the one keep of that kind in the repository's specs. The
-- numbers are FSDP2's with the copies.
local fsdp, models = require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2, dropout_p = 0, weight_tying = false }
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { mp_policy = mp, offload_policy = fsdp.CPUOffloadPolicy{} })
end
fsdp.fully_shard(model, { mp_policy = mp, offload_policy = "cpu" })
return fsdp.spec{
  name = "w1_offload_keep", model = model, world_size = 1,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 1e-2 },
}
