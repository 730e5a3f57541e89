-- GPT-2 style Transformer in bf16 on 2 ranks with dropout 0.1, which PyTorch's test
-- Transformer also applies inside scaled_dot_product_attention: each attention probability
-- is dropped by the step's RNG (rt_attention_lowmem_packed_dropout_*, no mask stored), the
-- same masks on every backend. Head dim 16 takes the CUDA backend's tensor-core flash
-- kernels, and the sequence (40) ends inside a key tile. cuDNN is refused (its masks are
-- its own), as the .schedule's attention line says. SGD: the CUDA-vs-CPU comparison of a few
-- steps' parameters is not at the mercy of Adam's near-zero gradients (whose updates flip
-- sign with the summation order).
local fsdp, models = require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = models.Transformer{ n_layers = 2, vocab_size = 64, dim = 64, n_heads = 4,
                                  max_seq_len = 40, dropout_p = 0.1 }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { mp_policy = mp }) end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{
  name = "transformer_attn_dropout_bf16", model = model, world_size = 2,
  input = { batch = 2, seq_len = 40 }, loss = "cross_entropy", optimizer = { "sgd", lr = 0.05 },
}
