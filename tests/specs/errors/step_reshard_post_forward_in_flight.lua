-- expect: 7: error: step[3] reshards group 'layers.0' while its all-gather from the post-forward shards is in flight (an unshard with async_op, or a prefetch), and step[4] waits for it: FSDP2 would copy that all-gather out as the full shard group's and fail (allowed: the all-gather waited for before the reshard, e.g. an unshard without async_op, or the reshard before the unshard)
-- (PyTorch 2.11 raises in split_with_sizes_copy at the backward's copy-out.)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2, dropout_p = 0 }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { reshard_after_forward = 2 }) end
fsdp.fully_shard(model)
return fsdp.spec{
  name = "x", model = model, world_size = 4, input = { batch = 2, seq_len = 8 },
  step = { "forward", { "unshard", module = "layers.0", async_op = true }, { "reshard", module = "layers.0" },
    "backward", "optimizer" },
}
