-- expect: 5: error: unknown constant lr_schedule key 'min_lr'; allowed: warmup_steps
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.MLP(16)
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 4, 16 } },
  optimizer = { "adamw", lr = 1e-3 }, lr_schedule = { "constant", warmup_steps = 5, min_lr = 0 } }
