-- expect: 5: error: input seq_len 32 exceeds the model's max_seq_len 16
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ max_seq_len = 16 }
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { batch = 2, seq_len = 32 } }
