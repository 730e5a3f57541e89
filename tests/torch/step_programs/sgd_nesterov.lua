-- SGD with Nesterov momentum, dampening 0 and weight decay (torch.optim.SGD's rules) over
-- two steps. tests/torch/step_programs/check.py checks the numbers.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ nn.Linear(8, 8), models.MLP(8) }
fsdp.fully_shard(model[2])
fsdp.fully_shard(model)
return fsdp.spec{
  name = "sgd_nesterov", model = model, world_size = 2, input = { shape = { 4, 8 } }, loss = "sum",
  optimizer = { "sgd", lr = 0.01, momentum = 0.9, dampening = 0, nesterov = true, weight_decay = 0.05 },
}
