-- examples/gpt_bytes.lua: the README's main example. A small byte-level GPT (vocab 256),
-- four sharded blocks plus the root, 4 ranks, AdamW, and explicit forward prefetch of
-- the next block. Trains on any text file (here a license text every Debian machine has).
-- Size: small (a step takes a fraction of a second on a CPU; the 300 steps below, under
-- two minutes on 2 cores; tests/examples/run.sh trains a few)
-- Run:  ./fsdpgen run examples/gpt_bytes.lua -- --data /usr/share/common-licenses/GPL-3 --val-data /usr/share/common-licenses/GPL-2 --steps 300 --log-every 25
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
