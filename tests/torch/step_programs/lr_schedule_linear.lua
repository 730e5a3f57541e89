-- A linear learning-rate decay without warmup (SGD with momentum): from lr at the first
-- optimizer step to min_lr at step 3, then min_lr, as PyTorch's LinearLR.
-- tests/torch/step_programs/check.py checks the numbers.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ nn.Linear(8, 8), models.MLP(8) }
fsdp.fully_shard(model[2])
fsdp.fully_shard(model)
return fsdp.spec{
  name = "lr_schedule_linear", model = model, world_size = 2,
  input = { shape = { 4, 8 } }, loss = "sum", optimizer = { "sgd", lr = 0.05, momentum = 0.9 },
  lr_schedule = { "linear", total_steps = 3, min_lr = 0.01 },
}
