-- Seed: TestFullyShardPrefetch._test_backward_prefetch_multi_forward
-- (reshard_after_forward=2, checkpoint_impl=composable): two forwards, one backward through both.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 3 }
for _, layer in ipairs(model.layers) do
  nn.checkpoint_module(layer)
  fsdp.fully_shard(layer, { reshard_after_forward = 2 })
end
fsdp.fully_shard(model, { reshard_after_forward = 2 })
return fsdp.spec{
  name = "multi_forward_raf_2_ckpt_composable", model = model, world_size = 4,
  input = { batch = 2, seq_len = 16 }, loss = "sum", optimizer = { "adam", lr = 1e-2 },
  step = { "forward", "forward", "backward" },
}
