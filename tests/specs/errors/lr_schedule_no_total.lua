-- expect: 5: error: cosine lr_schedule needs total_steps
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.MLP(16)
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 4, 16 } },
  optimizer = { "adamw", lr = 1e-3 }, lr_schedule = { "cosine", warmup_steps = 10 } }
