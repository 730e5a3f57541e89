-- A learning-rate schedule: linear warmup over 3 optimizer steps, then a cosine decay to
-- min_lr at step 8, with two training iterations (two optimizer.step() calls) per step,
-- so the lr changes inside a step and the conformance test's 10 steps pass the end of
-- the decay. The CUDA backend reads each step's lr from device memory (one captured graph).
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2, dropout_p = 0, weight_tying = false }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)
return fsdp.spec{
  name = "lr_schedule_warmup_cosine", model = model, world_size = 2,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 1e-2, weight_decay = 0.1 },
  lr_schedule = { "cosine", warmup_steps = 3, total_steps = 8, min_lr = 1e-3 },
  step = { "forward", "backward", "optimizer", "forward", "backward", "optimizer" },
}
