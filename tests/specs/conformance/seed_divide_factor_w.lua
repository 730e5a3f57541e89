-- test_set_reduce_scatter_divide_factor (divide_factor = world): as the 2 x world variant,
-- at world 4, where the factor equals the group size and FSDP2 reduces with AVG.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ dropout_p = 0, weight_tying = false }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { reshard_after_forward = false }) end
fsdp.fully_shard(model, { reshard_after_forward = false })
model:set_reduce_scatter_divide_factor(4)
return fsdp.spec{
  name = "seed_divide_factor_w", model = model, world_size = 4,
  input = { batch = 2, seq_len = 16 }, loss = "sum", optimizer = { "adamw", lr = 1e-2 },
}
