-- tests/hf/hf_llama.lua: a tiny Llama with grouped-query attention (4 heads, 2 kv heads),
-- non-default rope_theta and norm eps, sharded on 2 ranks, for tests/hf (Hugging Face
-- export and import).
local fsdp, models = require("fsdp"), require("models")

local model = models.Llama{ n_layers = 2, dim = 32, n_heads = 4, n_kv_heads = 2, vocab_size = 64,
                            max_seq_len = 16, ffn_dim = 48, rope_theta = 500.0, norm_eps = 1e-5 }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)

return fsdp.spec{
  name = "hf_llama", model = model, world_size = 2,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 1e-2 },
}
