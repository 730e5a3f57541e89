-- A warmup-then-cosine learning-rate schedule over a step of two training iterations
-- (FSDP2's test_non_root_forward_backward: the second steps only the first MLP). The lr
-- advances once per optimizer.step(), for every group, as PyTorch's SequentialLR of
-- LinearLR and CosineAnnealingLR; tests/torch/step_programs/check.py checks the numbers.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ models.MLP(8), models.MLP(8), models.MLP(8) }
for i = 1, 3 do fsdp.fully_shard(model[i]) end
fsdp.fully_shard(model)
return fsdp.spec{
  name = "lr_schedule_cosine", model = model, world_size = 2,
  input = { shape = { 4, 8 } }, loss = "sum", optimizer = { "adam", lr = 1e-2 },
  lr_schedule = { "cosine", warmup_steps = 3, total_steps = 8, min_lr = 1e-3 },
  step = { "forward", "backward", "optimizer", { "forward", module = "0" }, "backward", "optimizer" },
}
