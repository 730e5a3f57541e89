-- expect: 5: error: mesh 512 x 256 has more than 65536 ranks, the most fsdpgen supports
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.MLP(16)
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, mesh = { replicate = 512, shard = 256 }, input = { shape = { 4, 16 } } }
