-- Gradient accumulation over two microbatches: no gradient sync on the first (unsharded
-- gradients are kept; parameters still reshard after backward, as FSDP2's default
-- reshard_after_backward), sync on the last.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2, dropout_p = 0 }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)
return fsdp.spec{
  name = "grad_accumulation", model = model, world_size = 2,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy",
  step = { { "set_requires_gradient_sync", false }, "forward", "backward",
           { "set_requires_gradient_sync", true }, "forward", "backward", "optimizer" },
}
