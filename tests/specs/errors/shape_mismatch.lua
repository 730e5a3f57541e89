-- expect: 7: error: linear: input [4, 32] does not match weight [8, 16] (last input dim must be 16)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Module{
  up = nn.Linear(16, 32),
  down = nn.Linear(16, 8),
  forward = function(self, x)
    return self.down(self.up(x))
  end,
}
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 4, 16 } } }
