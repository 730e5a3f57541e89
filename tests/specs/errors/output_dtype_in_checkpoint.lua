-- expect: 7: error: group '0' has mp_policy output_dtype = fp32 inside an activation-checkpointed region
-- FSDP2 skips the output cast when a checkpointed region is recomputed.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", output_dtype = "fp32", cast_forward_inputs = false }
local model = nn.Sequential{ models.MLP(16), models.MLP(16) }
nn.checkpoint_module(model[1])
fsdp.fully_shard(model[1], { mp_policy = mp })
fsdp.fully_shard(model)
return fsdp.spec{
  name = "output_dtype_in_checkpoint", model = model, world_size = 2,
  input = { shape = { 4, 16 }, dtype = "bf16" }, loss = "sum", optimizer = { "sgd", lr = 1e-2 },
}
