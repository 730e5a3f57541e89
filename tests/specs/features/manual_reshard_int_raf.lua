-- A manual reshard() of a block that reshard_after_forward = 2 left sharded post-forward:
-- as in FSDP2, it is a real reshard (event IDLE reshard "layers.1": the post-forward
-- shard is dropped), so that block's backward all-gather runs over the full 4-rank shard
-- group while the other blocks' run inside their 2-rank post-forward groups.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 3, dropout_p = 0 }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { reshard_after_forward = 2 }) end
fsdp.fully_shard(model)
return fsdp.spec{
  name = "manual_reshard_int_raf", model = model, world_size = 4,
  input = { batch = 2, seq_len = 16 }, loss = "sum", optimizer = { "adam", lr = 1e-2 },
  step = { "forward", { "reshard", module = "layers.1" }, "backward", "optimizer" },
}
