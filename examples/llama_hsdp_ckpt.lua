-- examples/llama_hsdp_ckpt.lua: HSDP with activation checkpointing on a small Llama, as
-- torchtitan applies them: checkpoint each block (composable checkpoint, recomputed in
-- backward), then fully_shard each block and the root on a 2 x 2 mesh (2 replicas, each
-- sharding over 2 ranks): gradients are reduce-scattered within a replica, then
-- all-reduced across replicas. Each block prefetches the next one's parameters in
-- forward (the backward order FSDP2 prefetches by itself). For a real run take
-- models.Llama{ preset = "1B" } and a mesh such as { replicate = 2, shard = 8 }.
-- Size: small (trains on a CPU in seconds; tests/examples/run.sh trains it)
-- Run:  ./fsdpgen run examples/llama_hsdp_ckpt.lua -- --steps 30 --log-every 10
--       ./fsdpgen counts examples/llama_hsdp_ckpt.lua   (backward all_reduce: the replicas)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")

local model = models.Llama{ n_layers = 3, dim = 64, n_heads = 4, n_kv_heads = 2, vocab_size = 256,
                            max_seq_len = 32 }
local mesh = { replicate = 2, shard = 2 }
for _, layer in ipairs(model.layers) do
  nn.checkpoint_module(layer)
  fsdp.fully_shard(layer, { mesh = mesh })
end
fsdp.fully_shard(model, { mesh = mesh })
-- Lua lists start at 1: model.layers[1] is PyTorch's model.layers[0].
for i = 1, #model.layers - 1 do
  model.layers[i]:set_modules_to_forward_prefetch({ model.layers[i + 1] })
end

return fsdp.spec{
  name = "llama_hsdp_ckpt", model = model, mesh = mesh,
  input = { batch = 4, seq_len = 32 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 1e-3 }, grad_clip = 1.0,
}
