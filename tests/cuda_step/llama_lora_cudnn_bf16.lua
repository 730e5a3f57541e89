-- LoRA at the bench models' head dim (64), as tests/cuda_step/llama_cudnn_bf16.lua, with the
-- embedding and the base frozen and adapters on q and v: the first block's k needs no
-- gradient (its linear frozen, its input from the frozen embedding and norm), so cuDNN's
-- backward writes that dK to the site's spare scratch bytes (generator/memory/attention.lua
-- spare_bytes) and the step passes NULL. tests/cuda_step/run.sh runs it on a GPU only, with
-- RT_ATTENTION=cudnn, against the CPU. One rank: the adapters' gradients in place, packed.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = models.Llama{ n_layers = 2, dim = 256, n_heads = 4, n_kv_heads = 2, vocab_size = 256,
                            max_seq_len = 128, lora_modules = { "wq", "wv" }, lora_rank = 8, lora_alpha = 16 }
model:requires_grad_(false)
for _, p in ipairs(nn.adapter_params(model)) do p:requires_grad_(true) end
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { mp_policy = mp })
end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{
  name = "llama_lora_cudnn_bf16", model = model, world_size = 1,
  input = { batch = 2, seq_len = 128 }, loss = "cross_entropy", optimizer = { "adamw", lr = 1e-3 },
}
