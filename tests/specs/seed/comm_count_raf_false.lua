-- Seed: TestFullyShardCommunication.test_fully_shard_communication_count (reshard_after_forward=false).
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{}
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { reshard_after_forward = false })
end
fsdp.fully_shard(model, { reshard_after_forward = false })
return fsdp.spec{
  name = "comm_count_raf_false", model = model, world_size = 4,
  input = { batch = 2, seq_len = 16 }, loss = "sum", optimizer = { "adam", lr = 1e-2 },
}
