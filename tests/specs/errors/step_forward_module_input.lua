-- expect: 6: error: step[1]: forward on 'layers.0' with the spec's input [2, 16] int64: layer_norm expects floating-point tensors, got int64
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2, dropout_p = 0 }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)
return fsdp.spec{
  name = "x", model = model, world_size = 2, input = { batch = 2, seq_len = 16 },
  step = { { "forward", module = "layers.0" }, "backward", "optimizer" },
}
