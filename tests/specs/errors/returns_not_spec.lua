-- expect: 5: error: the spec must return fsdp.spec{ ... }, got a table
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.MLP(16)
fsdp.fully_shard(model)
return { name = "x", model = model }
