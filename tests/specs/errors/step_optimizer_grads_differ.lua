-- expect: 5: error: parameter 'lin2.weight' has a gradient at one optimizer step of the step and none (grad None) at another; fsdpgen plans one set of parameters with gradients per training step (allowed: optimizer steps that see the same parameters with gradients)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.DoubleLinear(8)
fsdp.fully_shard(model)
return fsdp.spec{
  name = "x", model = model, world_size = 2, input = { shape = { 4, 8 } },
  step = { "forward", { "backward", output = 1 }, "optimizer", "forward", { "backward", output = 2 }, "optimizer" },
}
