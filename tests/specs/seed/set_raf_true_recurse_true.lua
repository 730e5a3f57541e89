-- Seed: TestFullyShardCommunication.test_set_reshard_after_forward (set_reshard_after_forward=true, recurse=true).
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{}
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { reshard_after_forward = false })
end
fsdp.fully_shard(model, { reshard_after_forward = false })
model:set_reshard_after_forward(true, { recurse = true })
return fsdp.spec{
  name = "set_raf_true_recurse_true", model = model, world_size = 4,
  input = { batch = 2, seq_len = 16 }, loss = "sum", optimizer = { "adam", lr = 1e-2 },
}
