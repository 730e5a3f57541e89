-- expect: 5: error: optimizer beta2 must be in [0, 1), got 1.0
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.MLP(16)
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 4, 16 } },
  optimizer = { "adamw", lr = 1e-3, betas = { 0.9, 1.0 } } }
