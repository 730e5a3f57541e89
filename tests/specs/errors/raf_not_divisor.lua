-- expect: 5: error: reshard_after_forward = 3 must divide the shard size 4 (allowed: 1, 2, 4, true or false)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{}
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { reshard_after_forward = 3 })
end
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 4, input = { batch = 2, seq_len = 16 } }
