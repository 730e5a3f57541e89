-- Seed: TestFullyShardCommunication.test_set_reshard_after_forward (set_reshard_after_forward=none, recurse=true).
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{}
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)
return fsdp.spec{
  name = "set_raf_none_recurse_true", model = model, world_size = 4,
  input = { batch = 2, seq_len = 16 }, loss = "sum", optimizer = { "adam", lr = 1e-2 },
}
