-- expect: 3: error: unsupported dtype fp8 for param_dtype; allowed: bf16, fp16, fp32, int32, int64
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "fp8" }
local model = models.MLP(16)
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 4, 16 } } }
