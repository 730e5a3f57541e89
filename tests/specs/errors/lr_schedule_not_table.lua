-- expect: 5: error: lr_schedule must be { "cosine" | "linear" | "constant", warmup_steps = W, total_steps = N, min_lr = x }
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.MLP(16)
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 4, 16 } },
  optimizer = { "adamw", lr = 1e-3 }, lr_schedule = "cosine" }
