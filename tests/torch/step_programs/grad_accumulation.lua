-- Gradient accumulation: the first microbatch's backward without gradient sync (unsharded
-- gradients kept), the second's with it. tests/torch/step_programs/check.py checks the numbers.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ nn.Linear(8, 8), models.MLP(8) }
fsdp.fully_shard(model[2])
fsdp.fully_shard(model)
return fsdp.spec{
  name = "grad_accumulation_sgd", model = model, world_size = 2,
  input = { shape = { 4, 8 } }, loss = "sum", optimizer = { "sgd", lr = 0.01 },
  step = { { "set_requires_gradient_sync", false }, "forward", "backward",
           { "set_requires_gradient_sync", true }, "forward", "backward", "optimizer" },
}
