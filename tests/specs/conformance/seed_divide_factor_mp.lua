-- test_set_reduce_scatter_divide_factor, mixed-precision variant: three MLP(16) in a
-- Sequential, bf16 parameters with fp32 reduction, the root sharded too (it owns no
-- parameters), divide factor = world, AdamW, sum loss over a [4, 16] float input.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = nn.Sequential{ models.MLP(16), models.MLP(16), models.MLP(16) }
for _, mlp in ipairs(model) do fsdp.fully_shard(mlp, { mp_policy = mp }) end
fsdp.fully_shard(model, { mp_policy = mp })
model:set_reduce_scatter_divide_factor(2)
return fsdp.spec{
  name = "seed_divide_factor_mp", model = model, world_size = 2,
  input = { shape = { 4, 16 } }, loss = "sum", optimizer = { "adamw", lr = 1e-2 },
}
