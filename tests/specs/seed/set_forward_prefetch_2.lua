-- Seed: TestFullyShardPrefetch.test_set_modules_to_forward_prefetch, num_to_prefetch=2:
-- each layer prefetches the next 2 layer(s) in forward.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 4, checkpoint_activations = true }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { reshard_after_forward = true })
end
fsdp.fully_shard(model, { reshard_after_forward = true })
local n = 2
for i = 1, #model.layers - n do
  local targets = {}
  for j = 1, n do targets[j] = model.layers[i + j] end
  model.layers[i]:set_modules_to_forward_prefetch(targets)
end
return fsdp.spec{
  name = "set_forward_prefetch_2", model = model, world_size = 4,
  input = { batch = 2, seq_len = 16 }, loss = "sum", optimizer = { "adam", lr = 1e-2 },
}
