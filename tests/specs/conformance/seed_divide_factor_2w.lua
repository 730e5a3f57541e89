-- test_set_reduce_scatter_divide_factor (divide_factor = 2 x world): Transformer without
-- dropout or tying, every block and the root with reshard_after_forward = false, AdamW,
-- sum loss; the factor is set on the root (its own group, as FSDP2's setter).
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ dropout_p = 0, weight_tying = false }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { reshard_after_forward = false }) end
fsdp.fully_shard(model, { reshard_after_forward = false })
model:set_reduce_scatter_divide_factor(2 * 2)
return fsdp.spec{
  name = "seed_divide_factor_2w", model = model, world_size = 2,
  input = { batch = 2, seq_len = 16 }, loss = "sum", optimizer = { "adamw", lr = 1e-2 },
}
