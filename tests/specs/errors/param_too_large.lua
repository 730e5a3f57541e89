-- expect: 4: error: parameter shape [1099511627776, 1099511627776] has more than 2^48 elements, the most fsdpgen plans for one tensor
-- (2^80 elements would wrap around in the planner's 64-bit sizes.)
local nn, fsdp = require("nn"), require("fsdp")
local model = nn.Sequential{ nn.Linear(1 << 40, 1 << 40) }
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 4, 1 << 40 } } }
