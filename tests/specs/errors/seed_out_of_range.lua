-- expect: 6: error: seed must be an integer from 0 to 9223372036854775807, got -9223372036854775808
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2 }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { batch = 2, seq_len = 16 }, seed = math.mininteger }
