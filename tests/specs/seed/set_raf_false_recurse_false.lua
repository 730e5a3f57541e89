-- Seed: TestFullyShardCommunication.test_set_reshard_after_forward (set_reshard_after_forward=false, recurse=false).
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{}
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { reshard_after_forward = true })
end
fsdp.fully_shard(model, { reshard_after_forward = true })
model:set_reshard_after_forward(false, { recurse = false })
return fsdp.spec{
  name = "set_raf_false_recurse_false", model = model, world_size = 4,
  input = { batch = 2, seq_len = 16 }, loss = "sum", optimizer = { "adam", lr = 1e-2 },
}
