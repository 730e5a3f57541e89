-- expect: 5: error: unknown lr_schedule 'cosin' (did you mean 'cosine'?); allowed: constant, cosine, linear
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.MLP(16)
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 4, 16 } },
  optimizer = { "adamw", lr = 1e-3 }, lr_schedule = { "cosin", total_steps = 100 } }
