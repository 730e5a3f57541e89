-- examples/tiny.lua: the smallest useful spec. A two-block byte-level transformer (dim 32,
-- vocab 256), each block its own FSDP group plus the root, sharded over 2 ranks, AdamW on
-- a cross-entropy loss. Builds and trains in seconds; start here to see what fsdpgen
-- prints. Without --data the tokens are synthetic (random: the loss, about 22 at first from
-- the initial weights' large logits, falls toward ln 256 = 5.5 and no lower); give it any
-- text file to watch it learn.
-- Size: small (trains on a CPU in seconds; tests/examples/run.sh trains it)
-- Run:  ./fsdpgen run examples/tiny.lua -- --steps 200 --log-every 50 --data README.md --val-data tests/README.md
--       ./fsdpgen events examples/tiny.lua     (the FSDP2 events of one step)
local fsdp, models = require("fsdp"), require("models")

local model = models.Transformer{ n_layers = 2, vocab_size = 256, max_seq_len = 32, dim = 32, n_heads = 2,
                                  dropout_p = 0 }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer)
end
fsdp.fully_shard(model)

return fsdp.spec{
  name = "tiny", model = model, world_size = 2,
  input = { batch = 4, seq_len = 32 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 3e-3 },
}
