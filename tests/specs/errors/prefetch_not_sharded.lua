-- expect: 7: error: set_modules_to_forward_prefetch: element 1 is not a sharded module (prefetch targets must be passed to fully_shard)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2 }
fsdp.fully_shard(model.layers[1])
fsdp.fully_shard(model)
-- layers[2] was never sharded
model.layers[1]:set_modules_to_forward_prefetch({ model.layers[2] })
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { batch = 2, seq_len = 16 } }
