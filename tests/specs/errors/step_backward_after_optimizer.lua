-- expect: 6: error: group '1' reduces gradients after the step's last optimizer step; they would carry into the next step (allowed: backwards before an optimizer item)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ nn.Linear(8, 8), models.MLP(8) }
fsdp.fully_shard(model[2])
fsdp.fully_shard(model)
return fsdp.spec{
  name = "x", model = model, world_size = 2, input = { shape = { 4, 8 } },
  step = { "forward", "backward", "optimizer", { "forward", module = "1" }, "backward" },
}
