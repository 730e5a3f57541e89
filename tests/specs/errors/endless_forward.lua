-- expect: 6: error: the spec ran 200000 lines without finishing (an endless loop, or a forward that calls itself?)
local nn, fsdp = require("nn"), require("fsdp")
local model = nn.Module{
  lin = nn.Linear(4, 4),
  forward = function(self, x)
    while true do x = x end
  end,
}
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 2, 4 } } }
