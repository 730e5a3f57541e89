-- A checkpointed region backpropagated twice: the first backward retains the graph, a
-- second forward follows, and the last backward runs through both forwards, so it
-- recomputes the first forward's blocks again (as torch.utils.checkpoint does at every
-- backward) into buffers of its own. Each backward reads its own replays (the planner's
-- pair_recomputed); one replay per region, shared by both backwards, failed to emit.
local fsdp, models = require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2, dropout_p = 0, checkpoint_activations = true }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)
return fsdp.spec{
  name = "retain_graph_ckpt", model = model, world_size = 2,
  input = { batch = 2, seq_len = 8 }, loss = "cross_entropy", optimizer = { "adamw", lr = 1e-2 },
  step = { "forward", { "backward", retain_graph = true }, "forward", "backward", "optimizer" },
}
