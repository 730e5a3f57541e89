-- tests/hf/hf_llama_lora.lua: tests/hf/hf_llama.lua's model with LoRA adapters on every
-- linear, its base frozen, for tests/hf: --load-hf loads the base weights (the adapters keep
-- their initialization), --save-hf writes them with the adapters merged in.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")

local model = models.Llama{ n_layers = 2, dim = 32, n_heads = 4, n_kv_heads = 2, vocab_size = 64,
                            max_seq_len = 16, ffn_dim = 48, rope_theta = 500.0, norm_eps = 1e-5,
                            lora_modules = { "wq", "wk", "wv", "wo", "w1", "w2", "w3", "output" },
                            lora_rank = 4, lora_alpha = 12 }
model:requires_grad_(false)
for _, p in ipairs(nn.adapter_params(model)) do p:requires_grad_(true) end
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)

return fsdp.spec{
  name = "hf_llama_lora", model = model, world_size = 2,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 1e-2 },
}
