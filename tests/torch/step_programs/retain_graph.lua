-- Two backward passes over one forward (the seed's unused_in_backward with SGD, 2 ranks): a
-- Linear then a DoubleLinear; backward through the second output first (graph retained),
-- then through the first. Each pass computes its own activation gradients; only the
-- parameters' accumulate. tests/torch/step_programs/check.py checks the numbers.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local dim = 8
local model = nn.Sequential{ nn.Linear(dim, dim), models.DoubleLinear(dim) }
fsdp.fully_shard(model[1])
fsdp.fully_shard(model[2].lin1)
fsdp.fully_shard(model[2].lin2)
fsdp.fully_shard(model)
return fsdp.spec{
  name = "retain_graph_sgd", model = model, world_size = 2,
  input = { shape = { 4, dim } }, loss = "sum", optimizer = { "sgd", lr = 0.5 },
  step = { "forward", { "backward", output = 2, is_last_backward = false, retain_graph = true }, { "backward", output = 1 }, "optimizer" },
}
