-- expect: 6: error: group 'layers.0' has its own mesh 2x2; fsdpgen's generated code runs one mesh per spec (allowed: no mesh, or the spec's, 1x4)
-- check pass: FSDP2 allows a group its own mesh; the generated code runs one mesh.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2, dropout_p = 0 }
for i, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { mesh = i == 1 and { replicate = 2, shard = 2 } or nil })
end
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 4, input = { batch = 2, seq_len = 16 } }
