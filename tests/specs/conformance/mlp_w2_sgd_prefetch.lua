-- World size 2: four MLP blocks with explicit forward and backward prefetching two
-- groups ahead, the last block kept unsharded after forward, SGD with momentum.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ models.MLP(24), models.MLP(24), models.MLP(24), models.MLP(24) }
for i, mlp in ipairs(model) do
  fsdp.fully_shard(mlp, { reshard_after_forward = i < 4 })
end
fsdp.fully_shard(model)
model[1]:set_modules_to_forward_prefetch({ model[2], model[3] })
model[4]:set_modules_to_backward_prefetch({ model[3], model[2] })
return fsdp.spec{
  name = "mlp_w2_sgd_prefetch", model = model, world_size = 2,
  input = { shape = { 6, 24 } }, loss = "sum",
  optimizer = { "sgd", lr = 1e-4, momentum = 0.9 },
}
