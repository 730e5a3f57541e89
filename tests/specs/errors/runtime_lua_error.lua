-- expect: 5: error: attempt to perform arithmetic on a nil value
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Module{ lin = nn.Linear(4, 4),
  forward = function(self, x)
    local y = self.scale * 2
    return self.lin(x)
  end }
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 4, 4 } } }
