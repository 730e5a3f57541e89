-- expect: 5: error: unknown spec key 'world' (did you mean 'world_size'?)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.MLP(16)
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world = 2, input = { shape = { 4, 16 } } }
