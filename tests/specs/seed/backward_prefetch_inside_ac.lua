-- Seed: TestFullyShardPrefetch.test_set_modules_to_backward_prefetch_inside_ac (its first
-- backward, with default prefetching): blocks and their feed-forwards activation-
-- checkpointed, feed_forward.w1 sharded inside each block, embeddings and norm/output as
-- list groups, a root without parameters.
-- Differs from the seed: weight_tying = false, since the seed's tied output.weight would
-- sit in two groups ("norm, output" and the embeddings), which fsdpgen rejects as PyTorch's
-- _validate_no_duplicate_params does.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 3, weight_tying = false }
for _, layer in ipairs(model.layers) do
  nn.checkpoint_module(layer)
  nn.checkpoint_module(layer.feed_forward)
end
fsdp.fully_shard({ model.tok_embeddings, model.pos_embeddings })
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer.feed_forward.w1, { reshard_after_forward = true })
  fsdp.fully_shard(layer, { reshard_after_forward = true })
end
fsdp.fully_shard({ model.norm, model.output }, { reshard_after_forward = true })
fsdp.fully_shard(model, { reshard_after_forward = true })
return fsdp.spec{
  name = "backward_prefetch_inside_ac", model = model, world_size = 4,
  input = { batch = 2, seq_len = 16 }, loss = "sum",
}
