-- Seed: TestFullyShardPrefetch.test_set_modules_to_backward_prefetch, num_to_prefetch=1:
-- each layer prefetches the previous 1 layer(s) in backward.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 4, checkpoint_activations = true }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { reshard_after_forward = true })
end
fsdp.fully_shard(model, { reshard_after_forward = true })
local n = 1
for i = n + 1, #model.layers do
  local targets = {}
  for j = 1, n do targets[j] = model.layers[i - j] end
  model.layers[i]:set_modules_to_backward_prefetch(targets)
end
return fsdp.spec{
  name = "set_backward_prefetch_1", model = model, world_size = 4,
  input = { batch = 2, seq_len = 16 }, loss = "sum", optimizer = { "adam", lr = 1e-2 },
}
