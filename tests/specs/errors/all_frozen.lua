-- expect: 6: error: the loss does not require a gradient (it uses no parameter with requires_grad = true)
local nn, fsdp = require("nn"), require("fsdp")
local model = nn.Sequential{ nn.Linear(8, 8), nn.Linear(8, 4) }
model:requires_grad_(false)
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 4, 8 } },
  loss = "sum" }
