-- A Llama-style model (grouped-query attention, RMSNorm, rotary embeddings with theta 10,
-- SwiGLU), world 2, cross-entropy on token data, SGD, against PyTorch's autograd
-- (tests/torch/step_programs/check.py).
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Llama{ n_layers = 2, dim = 32, n_heads = 4, n_kv_heads = 2, vocab_size = 256,
                            max_seq_len = 16, norm_eps = 0.05, rope_theta = 10.0 }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)
return fsdp.spec{
  name = "llama_sgd", model = model, world_size = 2,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy", optimizer = { "sgd", lr = 0.1 },
}
