-- World size 4: reshard_after_forward = 2 (backward all-gathers inside pairs of ranks),
-- gradient accumulation over two microbatches, forced sum reduction with a custom
-- divide factor on every block, Adam.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 3, vocab_size = 16, dim = 16, n_heads = 4,
                                  dropout_p = 0, weight_tying = false }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { reshard_after_forward = 2 })
  layer:set_force_sum_reduction_for_comms(true)
  layer:set_gradient_divide_factor(8)
end
fsdp.fully_shard(model)
return fsdp.spec{
  name = "transformer_w4_int_raf", model = model, world_size = 4,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy", optimizer = { "adam", lr = 1e-2 },
  step = { { "set_requires_gradient_sync", false }, "forward", "backward",
           { "set_requires_gradient_sync", true }, "forward", "backward", "optimizer" },
}
