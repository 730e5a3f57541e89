-- Frozen parameters (requires_grad_(false)), as in fine-tuning: an embedding group frozen
-- whole (token ids need no gradient, so FSDP2 gathers it for the forward only), the first
-- block frozen whole (its input needs no gradient either: no backward at all), the second
-- block's attention frozen beside a trainable feed-forward (its reduce-scatter carries the
-- feed-forward's gradients alone), and the root's positions frozen beside its norm and head.
-- AdamW with weight decay and clipping: frozen parameters have grad None, so the optimizer
-- skips them (no decay) and the norm leaves them out, as torch.optim does.
local fsdp, models = require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 3, vocab_size = 32, max_seq_len = 16, dim = 16, n_heads = 4,
                                  dropout_p = 0, weight_tying = false }
model.tok_embeddings:requires_grad_(false)
model.pos_embeddings.weight.requires_grad = false
model.layers[1]:requires_grad_(false)
model.layers[2].attention:requires_grad_(false)
fsdp.fully_shard(model.tok_embeddings)
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)
return fsdp.spec{
  name = "frozen_params", model = model, world_size = 2,
  input = { batch = 2, seq_len = 8 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 1e-2, weight_decay = 0.1 }, grad_clip = 0.5,
}
