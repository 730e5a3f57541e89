-- Fine-tuning on one rank in bf16, as a single GPU runs it: Llama with its embedding (a
-- group of its own) frozen and the first block's attention frozen beside its trainable
-- feed-forward. At one rank the backward writes the sharded gradients in place, packed in
-- bf16 (memory/grad_assigns.lua): the frozen weights get none, their group no gradients or
-- optimizer state at all, and AdamW steps the rest.
local fsdp, models = require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = models.Llama{ n_layers = 2, dim = 64, n_heads = 4, n_kv_heads = 2, vocab_size = 128,
                            max_seq_len = 16 }
model.tok_embeddings:requires_grad_(false)
model.layers[1].attention:requires_grad_(false)
fsdp.fully_shard(model.tok_embeddings, { mp_policy = mp })
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { mp_policy = mp }) end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{
  name = "frozen_llama_w1_bf16", model = model, world_size = 1,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 3e-3, weight_decay = 0.1 },
}
