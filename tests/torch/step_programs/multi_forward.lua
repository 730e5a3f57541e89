-- Two forwards on two batches (forward items 0 and 1), one backward through both:
-- (l1 + l2).backward(). tests/torch/step_programs/check.py checks the numbers.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ nn.Linear(8, 8), models.MLP(8) }
fsdp.fully_shard(model[2])
fsdp.fully_shard(model)
return fsdp.spec{
  name = "multi_forward_sgd", model = model, world_size = 2,
  input = { shape = { 4, 8 } }, loss = "sum", optimizer = { "sgd", lr = 0.01 },
  step = { "forward", "forward", "backward", "optimizer" },
}
