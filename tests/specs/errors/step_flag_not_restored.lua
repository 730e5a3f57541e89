-- expect: 6: error: '1' has set_requires_gradient_sync(false) when the step ends but true when it begins; the generated step repeats, so it must end as it began
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ nn.Linear(8, 8), models.MLP(8) }
fsdp.fully_shard(model[2])
fsdp.fully_shard(model)
return fsdp.spec{
  name = "x", model = model, world_size = 2, input = { shape = { 4, 8 } },
  step = { "forward", "backward", "optimizer", { "set_requires_gradient_sync", false, module = "1" } },
}
