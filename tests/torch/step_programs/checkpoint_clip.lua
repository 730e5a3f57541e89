-- Activation checkpointing of the MLP (recomputed in backward: the same numbers) and
-- global-norm gradient clipping. tests/torch/step_programs/check.py checks the numbers.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ nn.Linear(8, 8), nn.checkpoint_module(models.MLP(8)) }
fsdp.fully_shard(model[2])
fsdp.fully_shard(model)
return fsdp.spec{
  name = "checkpoint_clip_sgd", model = model, world_size = 2,
  input = { shape = { 4, 8 } }, loss = "sum", optimizer = { "sgd", lr = 0.01 }, grad_clip = 0.5,
}
