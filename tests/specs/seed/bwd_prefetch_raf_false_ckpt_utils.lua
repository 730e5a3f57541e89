-- Seed: TestFullyShardPrefetch._test_backward_prefetch_forward_backward
-- (reshard_after_forward=false, checkpoint_impl=utils).
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 3, checkpoint_activations = true }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { reshard_after_forward = false })
end
fsdp.fully_shard(model, { reshard_after_forward = false })
return fsdp.spec{
  name = "bwd_prefetch_raf_false_ckpt_utils", model = model, world_size = 4,
  input = { batch = 2, seq_len = 16 }, loss = "sum", optimizer = { "adam", lr = 1e-2 },
}
