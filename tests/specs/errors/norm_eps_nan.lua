-- expect: 3: error: RMSNorm: eps must be a positive number, got
local nn, fsdp = require("nn"), require("fsdp")
local model = nn.Sequential{ nn.Linear(4, 4), nn.RMSNorm(4, { eps = 0 / 0 }) }
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 2, 4 } } }
