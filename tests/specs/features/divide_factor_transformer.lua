-- Seed numerics (_test_set_reduce_scatter_divide_factor): reshard_after_forward false,
-- divide factor 2 x world size on the root's group (a pre-multiplied sum), AVG elsewhere.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ dropout_p = 0, weight_tying = false }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { reshard_after_forward = false }) end
fsdp.fully_shard(model, { reshard_after_forward = false })
model:set_gradient_divide_factor(8)
return fsdp.spec{
  name = "divide_factor_transformer", model = model, world_size = 4,
  input = { batch = 2, seq_len = 16 }, loss = "sum", optimizer = { "adamw", lr = 1e-2 },
}
