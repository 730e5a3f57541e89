-- LoRA with the base's input gradients stacked (generator/memory/stacked_linears.lua): Llama
-- with torchtune's adapters on q, v, the output projection and the feed-forward's three
-- linears (rank 8, alpha 16: the scale 2 folds into lora_b's GEMM), the base frozen. Per
-- block, wq, wq's lora_a, wk, wv and wv's lora_a make one input-gradient call over their
-- gradients side by side, and w1, w1's lora_a, w3 and w3's lora_a another: the rotary
-- embeddings, the attention and swiglu write the sums' gradients through LoRA's adds,
-- lora_b's backward reads its slice (ld_dout) and writes lora_a's output's (ld_dinp), and
-- only the adapters get weight gradients. The first block's attention norm is trainable, so
-- its input needs a gradient too. bf16 with fp32 reductions, two ranks, AdamW.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = models.Llama{ n_layers = 2, dim = 64, n_heads = 4, n_kv_heads = 2, vocab_size = 128,
                            max_seq_len = 16, lora_modules = { "wq", "wv", "wo", "w1", "w2", "w3" },
                            lora_rank = 8, lora_alpha = 16 }
model:requires_grad_(false)
for _, p in ipairs(nn.adapter_params(model)) do p:requires_grad_(true) end
model.layers[1].attention_norm.weight:requires_grad_(true)
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { mp_policy = mp }) end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{
  name = "lora_llama_stacked_bf16", model = model, world_size = 2,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 1e-2, weight_decay = 0.01 },
}
