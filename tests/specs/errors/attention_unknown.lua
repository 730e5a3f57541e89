-- expect: 6: error: attention must be "auto", "cudnn" or "fsdpgen", got "flash"
local fsdp, models = require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2 }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { batch = 2, seq_len = 16 }, attention = "flash" }
