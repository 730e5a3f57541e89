-- expect: 5: error: the spec makes more than 20000 parameters, the most fsdpgen plans
-- (A runaway loop or n_layers: refused when the limit is passed, not after hours of planning.)
local nn, fsdp = require("nn"), require("fsdp")
local layers = {}
for i = 1, 10001 do layers[i] = nn.Linear(2, 2) end
local model = nn.Sequential(layers)
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 1, input = { shape = { 1, 2 } } }
