-- expect: 6: error: set_modules_to_forward_prefetch got an empty list: an element is nil, e.g. an index past the end or 0 (Lua lists start at 1
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2 }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)
model.layers[2]:set_modules_to_forward_prefetch({ model.layers[3] })
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { batch = 2, seq_len = 16 } }
