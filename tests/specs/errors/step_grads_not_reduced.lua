-- expect: 6: error: group '1' holds unsharded gradients that no reduce-scatter took when the step ends (its last backward ran without gradient sync); the generated step repeats, so it must end as it began
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ nn.Linear(8, 8), models.MLP(8) }
fsdp.fully_shard(model[2])
fsdp.fully_shard(model)
return fsdp.spec{
  name = "x", model = model, world_size = 2, input = { shape = { 4, 8 } },
  step = { { "set_requires_gradient_sync", false, module = "1" }, "forward", "backward",
           { "set_requires_gradient_sync", true, module = "1" }, "optimizer" },
}
