-- Seed numerics (_test_set_reduce_scatter_divide_factor_mixed_prevision): three MLP(16)
-- in a Sequential, bf16 params, fp32 reduce, divide factor = world size on the root.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = nn.Sequential{ models.MLP(16), models.MLP(16), models.MLP(16) }
for i = 1, #model do fsdp.fully_shard(model[i], { mp_policy = mp }) end
fsdp.fully_shard(model, { mp_policy = mp })
model:set_reduce_scatter_divide_factor(2)
return fsdp.spec{
  name = "mixed_precision_mlp3", model = model, world_size = 2,
  input = { shape = { 4, 16 }, dtype = "bf16" }, loss = "sum", optimizer = { "adamw", lr = 1e-2 },
}
