-- expect: 6: error: spec name 'rt' clashes with the runtime's symbols (rt, rt_*, RT_*)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2 }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)
return fsdp.spec{ name = "rt", model = model, world_size = 2, input = { batch = 2, seq_len = 16 } }
