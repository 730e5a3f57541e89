-- retain_graph.lua with the DoubleLinear in one group: the first backward pass (through
-- output 2) gives only lin2 a gradient, the second only lin1, so the group's two
-- reduce-scatters each carry half its parameters (FSDP2 reduces only the gradients that
-- exist), and the second adds to the sharded gradients the first left.
-- tests/torch/step_programs/check.py checks the numbers.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local dim = 8
local model = nn.Sequential{ nn.Linear(dim, dim), models.DoubleLinear(dim) }
fsdp.fully_shard(model[2])
fsdp.fully_shard(model)
return fsdp.spec{
  name = "retain_graph_one_group", model = model, world_size = 2,
  input = { shape = { 4, dim } }, loss = "sum", optimizer = { "sgd", lr = 0.5 },
  step = { "forward", { "backward", output = 2, is_last_backward = false, retain_graph = true }, { "backward", output = 1 }, "optimizer" },
}
