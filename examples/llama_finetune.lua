-- examples/llama_finetune.lua: fine-tuning a small Llama with its lower half frozen, as one
-- fine-tunes a pretrained model: the embedding and the first two of four blocks keep their
-- weights (requires_grad_(false), as in PyTorch). FSDP2 still shards them and all-gathers
-- them for the forward, but no gradient flows below the first trainable block: their
-- groups reduce nothing and hold no optimizer state. One of them is still all-gathered in
-- backward: as a block's backward begins, FSDP2 prefetches the group that ran just before
-- it in forward, not knowing that no gradient will reach that one (`fsdpgen events`: PRE_BACKWARD unshard
-- "layers.1"), and fsdpgen does what FSDP2 does. Start from trained weights with
-- --load-hf DIR (a LlamaForCausalLM directory of this size) or --load FILE (a --save of
-- this spec).
-- Size: small (trains on a CPU in seconds; tests/examples/run.sh trains it)
-- Run:  ./fsdpgen run examples/llama_finetune.lua -- --steps 30 --log-every 10
--       ./fsdpgen plan examples/llama_finetune.lua   (the .schedule marks the frozen groups)
local fsdp, models = require("fsdp"), require("models")

local model = models.Llama{ n_layers = 4, dim = 64, n_heads = 4, n_kv_heads = 2, vocab_size = 256,
                            max_seq_len = 32 }
model.tok_embeddings:requires_grad_(false)
model.layers[1]:requires_grad_(false)
model.layers[2]:requires_grad_(false)
fsdp.fully_shard(model.tok_embeddings)
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)

return fsdp.spec{
  name = "llama_finetune", model = model, world_size = 2,
  input = { batch = 4, seq_len = 32 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 1e-3, weight_decay = 0.1 },
}
