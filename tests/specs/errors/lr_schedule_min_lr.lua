-- expect: 5: error: lr_schedule min_lr must be a number from 0 to the optimizer's lr 0.001, got 0.01
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.MLP(16)
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 4, 16 } },
  optimizer = { "adamw", lr = 1e-3 }, lr_schedule = { "cosine", total_steps = 100, min_lr = 1e-2 } }
