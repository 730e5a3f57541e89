-- expect: 6: error: step[1]: module '1.in_proj' is not sharded (sharded modules: '', 1)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ nn.Linear(8, 8), models.MLP(8) }
fsdp.fully_shard(model[2])
fsdp.fully_shard(model)
return fsdp.spec{
  name = "x", model = model, world_size = 2, input = { shape = { 4, 8 } },
  step = { { "unshard", module = "1.in_proj" }, "forward", "backward", "optimizer" },
}
