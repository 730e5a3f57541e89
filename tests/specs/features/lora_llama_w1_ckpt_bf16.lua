-- LoRA on one rank in bf16, as a single GPU fine-tunes: adapters on q, k, v and the
-- feed-forward's w1 and w3 (linears that share an input, so the backward stacks their
-- products), the base frozen, each block activation-checkpointed (torchtune's
-- enable_activation_checkpointing). At one rank the backward writes the adapters' sharded
-- gradients in place, packed in bf16; the frozen weights get none and no optimizer state.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = models.Llama{ n_layers = 2, dim = 64, n_heads = 4, n_kv_heads = 2, vocab_size = 128,
                            max_seq_len = 16, checkpoint_activations = true,
                            lora_modules = { "wq", "wk", "wv", "w1", "w3" }, lora_rank = 8,
                            lora_alpha = 16 }
model:requires_grad_(false)
for _, p in ipairs(nn.adapter_params(model)) do p:requires_grad_(true) end
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { mp_policy = mp }) end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{
  name = "lora_llama_w1_ckpt_bf16", model = model, world_size = 1,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 3e-3, weight_decay = 0.01 },
}
