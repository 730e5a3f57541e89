-- HSDP on a 2 x 4 mesh with reshard_after_forward = 2 and reshard() on every sharded
-- module between forward and backward: the root's frees its unsharded parameters, each
-- block's drops its post-forward shard, so every backward all-gather runs over the full
-- 4-rank shard group (none inside a post-forward group); gradients are reduce-scattered,
-- then all-reduced across the 2 replicas.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2, dropout_p = 0 }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { reshard_after_forward = 2 }) end
fsdp.fully_shard(model)
return fsdp.spec{
  name = "hsdp_manual_reshard_int_raf", model = model, mesh = { replicate = 2, shard = 4 },
  input = { batch = 2, seq_len = 16 }, loss = "sum", optimizer = { "adam", lr = 1e-2 },
  step = { "forward", "reshard", "backward", "optimizer" },
}
