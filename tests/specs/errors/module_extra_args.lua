-- expect: 8: error: Linear(down) called with 2 arguments; its forward takes 1
-- Python's TypeError: a Lua function drops extra arguments, and the PyTorch twin could
-- not make the call (it failed on the number: spec_fuzz --seed 1205 --emit).
local nn, fsdp = require("nn"), require("fsdp")
local model = nn.Module{
  down = nn.Linear(16, 8),
  forward = function(self, x)
    return self.down(x, 5)
  end,
}
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 4, 16 } } }
