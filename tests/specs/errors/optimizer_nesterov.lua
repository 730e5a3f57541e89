-- expect: 5: error: optimizer nesterov needs momentum > 0 and dampening = 0 (as torch.optim.SGD)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.MLP(16)
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 4, 16 } },
  optimizer = { "sgd", lr = 1e-2, nesterov = true } }
