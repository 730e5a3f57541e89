-- tests/hf/hf_gpt2.lua: a tiny GPT-2 (learned positions, LayerNorm, exact GELU, tied
-- output), sharded on 2 ranks, for tests/hf (Hugging Face export and import).
local fsdp, models = require("fsdp"), require("models")

local model = models.GPT2{ n_layers = 2, dim = 32, n_heads = 4, vocab_size = 64, max_seq_len = 16 }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)

return fsdp.spec{
  name = "hf_gpt2", model = model, world_size = 2,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 1e-2 },
}
