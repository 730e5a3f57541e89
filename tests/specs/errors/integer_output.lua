-- expect: 7: error: the loss does not require a gradient (it uses no parameter with requires_grad = true)
-- (As in PyTorch, a cast to an integer dtype has no gradient.)
local nn, fsdp = require("nn"), require("fsdp")
local model = nn.Module{ lin = nn.Linear(4, 4) }
model.forward = function(self, x) return self.lin(x):to("int32") end
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 2, 4 } } }
