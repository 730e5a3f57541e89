-- Gradient accumulation on a 2 x 2 HSDP mesh: the first microbatch's backward without
-- gradient sync (unsharded gradients kept), the second's with it (reduce-scatter over the
-- shard group, then all-reduce over the replicas). tests/torch/step_programs/check.py
-- checks the numbers.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ nn.Linear(8, 8), models.MLP(8) }
fsdp.fully_shard(model[2])
fsdp.fully_shard(model)
return fsdp.spec{
  name = "hsdp_accumulation", model = model, mesh = { replicate = 2, shard = 2 },
  input = { shape = { 4, 8 } }, loss = "sum", optimizer = { "sgd", lr = 0.01 },
  step = { { "set_requires_gradient_sync", false }, "forward", "backward",
           { "set_requires_gradient_sync", true }, "forward", "backward", "optimizer" },
}
