-- expect: 5: error: group 'layers.0' has an offload_policy and group '' has none; fsdpgen offloads every group's sharded state or none
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2, dropout_p = 0 }
for i, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { offload_policy = i == 1 and "cpu" or nil })
end
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { batch = 2, seq_len = 16 } }
