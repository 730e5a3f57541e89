-- expect: 4: error: reshard_after_forward must be true, false, nil or an integer divisor of the shard size, got 'yes'
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.MLP(16)
fsdp.fully_shard(model, { reshard_after_forward = "yes" })
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 4, 16 } } }
