-- expect: 7: error: parameter '0.weight': requires_grad must be true or false, got "false"
local nn, fsdp = require("nn"), require("fsdp")
local model = nn.Sequential{ nn.Linear(8, 8), nn.Linear(8, 4) }
-- as Python's p.requires_grad = False, but a string
model[1].weight.requires_grad = "false"
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 4, 8 } },
  loss = "sum" }
