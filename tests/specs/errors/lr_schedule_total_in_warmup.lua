-- expect: 5: error: lr_schedule total_steps must be an integer from 11 (warmup_steps + 1) to 2^53, got 10
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.MLP(16)
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 4, 16 } },
  optimizer = { "adamw", lr = 1e-3 }, lr_schedule = { "linear", warmup_steps = 10, total_steps = 10 } }
