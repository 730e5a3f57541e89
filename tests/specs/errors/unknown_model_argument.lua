-- expect: 3: error: unknown ModelArgs argument 'n_layer' (did you mean 'n_layers'?)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layer = 3 }
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { batch = 2, seq_len = 16 } }
