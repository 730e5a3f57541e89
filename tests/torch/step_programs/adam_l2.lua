-- Adam with an L2 weight decay term (torch.optim.Adam's, not AdamW's decoupled one), other
-- betas and eps, over two steps. tests/torch/step_programs/check.py checks the numbers.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ nn.Linear(8, 8), models.MLP(8) }
fsdp.fully_shard(model[2])
fsdp.fully_shard(model)
return fsdp.spec{
  name = "adam_l2", model = model, world_size = 2, input = { shape = { 4, 8 } }, loss = "sum",
  optimizer = { "adam", lr = 0.01, betas = { 0.8, 0.95 }, eps = 1e-6, weight_decay = 0.1 },
}
