-- Gradient accumulation on a 2 x 2 HSDP mesh as FSDP2's test_gradient_accumulation with
-- reduce_scatter_only: each of three microbatches reduce-scatters over the shard group, but
-- only the last all-reduces over the replicas (set_requires_all_reduce), so the partial
-- reductions add up first. tests/torch/step_programs/check.py checks the numbers.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ nn.Linear(8, 8), models.MLP(8) }
fsdp.fully_shard(model[2])
fsdp.fully_shard(model)
local step = {}
for k = 1, 3 do
  for _, item in ipairs({ { "set_requires_all_reduce", k == 3 }, "forward", "backward" }) do
    step[#step + 1] = item
  end
end
step[#step + 1] = "optimizer"
return fsdp.spec{
  name = "hsdp_reduce_scatter_only", model = model, mesh = { replicate = 2, shard = 2 },
  input = { shape = { 4, 8 } }, loss = "sum", optimizer = { "sgd", lr = 0.01 },
  step = step,
}
