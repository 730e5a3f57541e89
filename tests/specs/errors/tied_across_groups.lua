-- expect: 5: error: parameter 'tok_embeddings.weight' is shared with group 'tok_embeddings'; put tied modules in one group with fully_shard({a, b})
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ weight_tying = true }
fsdp.fully_shard(model.tok_embeddings)
fsdp.fully_shard(model.output)
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { batch = 2, seq_len = 16 } }
