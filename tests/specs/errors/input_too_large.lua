-- expect: 5: error: input.shape [1073741824, 1048576] has more than 2^48 elements, the most fsdpgen plans for one tensor
local nn, fsdp = require("nn"), require("fsdp")
local model = nn.Sequential{ nn.Linear(1 << 20, 8) }
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 1 << 30, 1 << 20 } } }
