-- tests/torch: built-in Transformer, tied output, no dropout, world 4, cross-entropy on
-- token data. Trained, saved, and reloaded into PyTorch by tests/torch/check_load.py.
-- check_load: --model transformer --data --batch 2 --seq-len 16 --n-heads 4
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2, vocab_size = 256, max_seq_len = 16, dim = 16,
                                  n_heads = 4, dropout_p = 0, weight_tying = true }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer)
end
fsdp.fully_shard(model)
return fsdp.spec{
  name = "torch_transformer_w4", model = model, world_size = 4,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy", optimizer = { "adamw", lr = 1e-2 },
}
