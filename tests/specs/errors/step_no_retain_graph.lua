-- expect: 6: error: step: backward without a forward awaiting it (a backward frees its forwards' graphs unless it has retain_graph = true)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ nn.Linear(8, 8), models.DoubleLinear(8) }
fsdp.fully_shard(model[2])
fsdp.fully_shard(model)
return fsdp.spec{
  name = "x", model = model, world_size = 2, input = { shape = { 4, 8 } },
  step = { "forward", { "backward", output = 2 }, { "backward", output = 1 }, "optimizer" },
}
