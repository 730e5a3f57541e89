-- expect: 5: error: world_size must be an integer from 1 to 65536, got 0
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.MLP(16)
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 0, input = { shape = { 4, 16 } } }
