-- A 4-block Llama (RMSNorm, rotary, grouped-query attention, SwiGLU) sharded per block
-- and at the root on 4 ranks: the base spec of the one-line changes that
-- tests/generator/schedule_diff.lua reviews with `fsdpgen diff`.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")

local model = models.Llama{ n_layers = 4, dim = 64, n_heads = 8, n_kv_heads = 2, vocab_size = 256,
                            max_seq_len = 32 }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer)
end
fsdp.fully_shard(model)

return fsdp.spec{
  name = "review_llama_4l", model = model, world_size = 4,
  input = { batch = 2, seq_len = 32 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 3e-4 },
}
