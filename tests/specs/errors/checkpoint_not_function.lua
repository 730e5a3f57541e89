-- expect: 5: error: checkpoint expects a function or a module (checkpoint(fn, ...)), got number
local nn, fsdp = require("nn"), require("fsdp")
local model = nn.Module{
  lin = nn.Linear(4, 4),
  forward = function(self, x) return nn.checkpoint(4, x) end,
}
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 2, 4 } } }
