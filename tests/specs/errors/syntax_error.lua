-- expect: 4: error: syntax error
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.MLP(16)
fsdp.fully_shard(model, { reshard_after_forward = true )
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 4, 16 } } }
