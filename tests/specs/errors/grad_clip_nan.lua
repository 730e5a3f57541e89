-- expect: 5: error: grad_clip must be a positive number (max global gradient norm)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.MLP(16)
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 4, 16 } },
  grad_clip = 0 / 0 }
