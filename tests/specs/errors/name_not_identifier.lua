-- expect: 6: error: spec name must be a C identifier (a letter, then letters, digits or '_'; at most 64 characters), got "my-model"
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2 }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)
return fsdp.spec{ name = "my-model", model = model, world_size = 2, input = { batch = 2, seq_len = 16 } }
