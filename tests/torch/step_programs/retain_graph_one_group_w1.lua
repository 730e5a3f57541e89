-- retain_graph_one_group.lua on one rank: each pass's reduction of half the group is
-- direct (generator/plan/reductions.lua direct_reduction), its other half's sharded gradients
-- zeroed by the first. tests/torch/step_programs/check.py checks the numbers.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local dim = 8
local model = nn.Sequential{ nn.Linear(dim, dim), models.DoubleLinear(dim) }
fsdp.fully_shard(model[2])
fsdp.fully_shard(model)
return fsdp.spec{
  name = "retain_graph_one_group_w1", model = model, world_size = 1,
  input = { shape = { 4, dim } }, loss = "sum", optimizer = { "sgd", lr = 0.5 },
  step = { "forward", { "backward", output = 2, is_last_backward = false, retain_graph = true }, { "backward", output = 1 }, "optimizer" },
}
