-- expect: 6: error: step[1]: 'unshard' takes no value (only its options, such as module = ...)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ nn.Linear(8, 8), models.MLP(8) }
fsdp.fully_shard(model[2])
fsdp.fully_shard(model)
return fsdp.spec{
  name = "x", model = model, world_size = 2, input = { shape = { 4, 8 } },
  step = { { "unshard", "1" }, "forward", "backward", "optimizer" },
}
