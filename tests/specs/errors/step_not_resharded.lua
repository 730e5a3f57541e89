-- expect: 6: error: group '1' is unsharded when the step ends (reshard it: set_reshard_after_backward(true) before its last backward, or a "reshard" item); the generated step repeats, so it must end as it began
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ nn.Linear(8, 8), models.MLP(8) }
fsdp.fully_shard(model[2], { reshard_after_forward = false })
fsdp.fully_shard(model)
return fsdp.spec{
  name = "x", model = model, world_size = 2, input = { shape = { 4, 8 } },
  step = { { "set_reshard_after_backward", false, module = "1" }, "forward", "backward",
           { "set_reshard_after_backward", true, module = "1" }, "optimizer" },
}
