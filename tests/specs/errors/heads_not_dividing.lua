-- expect: 3: error: ModelArgs: n_heads 3 must divide dim 16
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ dim = 16, n_heads = 3 }
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { batch = 2, seq_len = 16 } }
