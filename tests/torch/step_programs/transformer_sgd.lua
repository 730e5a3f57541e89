-- The built-in Transformer (tied output, no dropout), world 2, cross-entropy on token data,
-- SGD: its attention, LayerNorm, GELU, embeddings and the tied weight's two contributions
-- against PyTorch's autograd (tests/torch/step_programs/check.py).
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2, vocab_size = 256, max_seq_len = 16, dim = 16,
                                  n_heads = 4, dropout_p = 0, weight_tying = true }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)
return fsdp.spec{
  name = "transformer_sgd", model = model, world_size = 2,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy", optimizer = { "sgd", lr = 0.1 },
}
