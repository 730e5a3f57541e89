-- HSDP on a 2 x 2 mesh (gradients reduce-scattered over the shard group, then all-reduced
-- over the replicas) with a reduce-scatter divide factor of 8 on the MLP: its gradients are
-- the sum over the 4 ranks divided by 8; the root's, the mean.
-- tests/torch/step_programs/check.py checks the numbers.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ nn.Linear(8, 8), models.MLP(8) }
fsdp.fully_shard(model[2])
fsdp.fully_shard(model)
model[2]:set_reduce_scatter_divide_factor(8)
return fsdp.spec{
  name = "hsdp_divide_sgd", model = model, mesh = { replicate = 2, shard = 2 },
  input = { shape = { 4, 8 } }, loss = "sum", optimizer = { "sgd", lr = 0.01 },
}
