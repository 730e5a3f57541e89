-- World size 1: FSDP2 reduces with SUM (no division) and all-gathers are copies;
-- activation checkpointing of every block, dropout (the same masks in recompute),
-- weight tying, cross-entropy, AdamW with gradient clipping.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2, vocab_size = 32, max_seq_len = 16, dim = 32,
                                  n_heads = 4, dropout_p = 0.1, checkpoint_activations = true }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)
return fsdp.spec{
  name = "transformer_w1_ckpt", model = model, world_size = 1,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 3e-3 }, grad_clip = 0.5,
}
