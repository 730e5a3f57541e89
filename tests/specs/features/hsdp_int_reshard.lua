-- HSDP on a 2 x 4 mesh with reshard_after_forward = 2: backward all-gathers run inside
-- 2-rank post-forward groups; gradients are reduce-scattered, then all-reduced across
-- the 2 replicas.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 3, dropout_p = 0 }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { reshard_after_forward = 2 }) end
fsdp.fully_shard(model)
return fsdp.spec{
  name = "hsdp_int_reshard", model = model, mesh = { replicate = 2, shard = 4 },
  input = { batch = 2, seq_len = 16 }, loss = "sum",
}
