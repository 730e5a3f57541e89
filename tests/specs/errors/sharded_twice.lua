-- expect: 5: error: module Linear is already sharded (fully_shard at line 4); each module may be sharded once
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ nn.Linear(8, 8), nn.Linear(8, 8) }
fsdp.fully_shard(model[1])
fsdp.fully_shard(model[1])
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 4, 8 } } }
