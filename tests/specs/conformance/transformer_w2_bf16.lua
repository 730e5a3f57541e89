-- World size 2, GPT-2 style (LayerNorm, GELU with biases, tied output): bf16 parameters with
-- fp32 reduction and no checkpointing, so the block's activations and the MLP's hidden
-- gradients are packed 16-bit buffers (rt_kernels.h), attention's q, k, v and output
-- included; AdamW.
local fsdp, models = require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = models.Transformer{ n_layers = 2, vocab_size = 64, dim = 32, n_heads = 4,
                                  max_seq_len = 16, dropout_p = 0 }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { mp_policy = mp }) end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{
  name = "transformer_w2_bf16", model = model, world_size = 2,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy", optimizer = { "adamw", lr = 1e-3 },
}
