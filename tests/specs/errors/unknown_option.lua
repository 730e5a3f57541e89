-- expect: 4: error: unknown fully_shard option 'reshard_after_forwrd' (did you mean 'reshard_after_forward'?)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.MLP(16)
fsdp.fully_shard(model, { reshard_after_forwrd = true })
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 4, 16 } } }
