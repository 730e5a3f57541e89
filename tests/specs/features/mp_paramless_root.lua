-- cast_forward_inputs on a root without parameters: FSDP2 casts a state's floating inputs
-- to its policy's param_dtype whether or not the state owns parameters. The blocks do not
-- cast (cast_forward_inputs = false), so their bf16 weights meet the root's cast input.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local block_mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32", cast_forward_inputs = false }
local model = nn.Sequential{ models.MLP(16), models.MLP(16) }
for i = 1, #model do fsdp.fully_shard(model[i], { mp_policy = block_mp }) end
fsdp.fully_shard(model, { mp_policy = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16" } })
return fsdp.spec{
  name = "mp_paramless_root", model = model, world_size = 2,
  input = { shape = { 4, 16 } }, loss = "sum", optimizer = { "adamw", lr = 1e-2 },
}
