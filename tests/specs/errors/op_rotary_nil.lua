-- expect: 6: error: rotary expects a tensor, got nil
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Module{ lin = nn.Linear(4, 4),
  forward = function(self, x)
    local y = self.lin(x)
    return nn.functional.rotary(nil, { n_heads = 2 })
  end }
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 4, 4 } } }
