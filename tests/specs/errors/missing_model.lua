-- expect: 5: error: spec is missing 'model' (the root module)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.MLP(16)
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", world_size = 2, input = { shape = { 4, 16 } } }
