-- Seed: TestFullyShardPrefetch._test_backward_prefetch_unused_in_backward: a Linear then a
-- DoubleLinear; backward through the second output first (not the last backward, graph
-- retained), then through the first.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local dim = 8
local model = nn.Sequential{ nn.Linear(dim, dim), models.DoubleLinear(dim) }
fsdp.fully_shard(model[1], { reshard_after_forward = true })
fsdp.fully_shard(model[2].lin1, { reshard_after_forward = true })
fsdp.fully_shard(model[2].lin2, { reshard_after_forward = true })
fsdp.fully_shard(model, { reshard_after_forward = true })
return fsdp.spec{
  name = "unused_in_backward", model = model, world_size = 4,
  input = { shape = { 4, dim } }, loss = "sum",
  step = { "forward", { "backward", output = 2, is_last_backward = false, retain_graph = true }, { "backward", output = 1 } },
}
