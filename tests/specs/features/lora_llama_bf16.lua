-- LoRA fine-tuning as torchtune runs it with FSDP2: Llama with LoRA adapters on the
-- attention's q, v and output projections, the feed-forward's w2 and the output head
-- (models.Llama's lora_modules), every other parameter frozen (requires_grad_(false), then
-- nn.adapter_params made trainable, as torchtune's set_trainable_params). Each block is a
-- group of frozen base weights and trainable adapters: its reduce-scatter carries the
-- adapters' gradients alone, and only they have sharded gradients and AdamW state. Alpha
-- over rank is 16 / 6 (not a power of two, so the bf16 scaling rounds), adapter dropout
-- 0.1, bf16 compute with fp32 reductions, clipping, two ranks.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = models.Llama{ n_layers = 2, dim = 64, n_heads = 4, n_kv_heads = 2, vocab_size = 128,
                            max_seq_len = 16, lora_modules = { "wq", "wv", "wo", "w2", "output" },
                            lora_rank = 6, lora_alpha = 16, lora_dropout = 0.1 }
model:requires_grad_(false)
for _, p in ipairs(nn.adapter_params(model)) do p:requires_grad_(true) end
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { mp_policy = mp }) end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{
  name = "lora_llama_bf16", model = model, world_size = 2,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 1e-2, weight_decay = 0.01 }, grad_clip = 1.0,
}
