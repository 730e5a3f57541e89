-- LoRA with the base's input gradients stacked (generator/memory/stacked_linears.lua) on
-- one rank, as a single GPU fine-tunes: lora_llama_stacked_bf16 with adapters on every
-- linear (wk's too: q, k and v each reach their slice through LoRA's add) and the output
-- head. At one rank the adapters' gradients are in place and packed in bf16, so the
-- stacks' weight-gradient calls assign packed gradients (RT_PACKED_DWEIGHT).
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = models.Llama{ n_layers = 2, dim = 64, n_heads = 4, n_kv_heads = 2, vocab_size = 128,
                            max_seq_len = 16,
                            lora_modules = { "wq", "wk", "wv", "wo", "w1", "w2", "w3", "output" },
                            lora_rank = 8, lora_alpha = 16 }
model:requires_grad_(false)
for _, p in ipairs(nn.adapter_params(model)) do p:requires_grad_(true) end
model.layers[1].attention_norm.weight:requires_grad_(true)
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { mp_policy = mp }) end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{
  name = "lora_llama_stacked_w1_bf16", model = model, world_size = 1,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 1e-2, weight_decay = 0.01 },
}
