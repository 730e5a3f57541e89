-- expect: 8: error: step[6] computes with group 'layers.0', which the optimizer at step[4] stepped while it was unsharded: it would use the parameters from before that step, as FSDP2 does; reshard it before the optimizer (set_reshard_after_backward(true) before its backward, or a "reshard" item)
-- (FSDP2 runs it with stale parameters; the result then depends on the sharding.)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2, dropout_p = 0 }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)
local layer0 = "layers.0"
return fsdp.spec{
  name = "x", model = model, world_size = 2, input = { batch = 2, seq_len = 8 },
  step = { { "set_reshard_after_backward", false, module = layer0 }, "forward", "backward", "optimizer",
    { "set_reshard_after_backward", true, module = layer0 }, "forward", "backward", "optimizer" },
}
