-- MixedPrecisionPolicy.output_dtype: bf16 blocks hand fp32 outputs to an fp32 root. Each
-- block's inputs are cast to bf16 on entry (cast_forward_inputs) and its output back to
-- fp32 after its post-forward (FSDP2's cast_forward_outputs), which the plan makes a view.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32", output_dtype = "fp32" }
local model = nn.Sequential{ models.MLP(16), models.MLP(16) }
for i = 1, #model do fsdp.fully_shard(model[i], { mp_policy = mp }) end
fsdp.fully_shard(model)
return fsdp.spec{
  name = "mp_output_dtype", model = model, world_size = 2,
  input = { shape = { 4, 16 } }, loss = "sum", optimizer = { "adamw", lr = 1e-2 },
}
