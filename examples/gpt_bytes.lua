-- The default example: a small byte-level GPT (vocab 256), four sharded blocks plus the
-- root, 4 ranks, AdamW. Trains on any text file (default: a license text every Debian
-- machine has).
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")

local model = models.Transformer{
  n_layers = 4, vocab_size = 256, max_seq_len = 64, dim = 128, n_heads = 4,
  dropout_p = 0, weight_tying = false,
}
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { reshard_after_forward = true })
end
fsdp.fully_shard(model)
-- Overlap: each block asks for the next one's parameters as soon as it starts.
for i = 1, #model.layers - 1 do
  model.layers[i]:set_modules_to_forward_prefetch({ model.layers[i + 1] })
end

return fsdp.spec{
  name = "gpt_bytes", model = model, world_size = 4,
  input = { batch = 8, seq_len = 64 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 1e-3 }, grad_clip = 1.0,
}
