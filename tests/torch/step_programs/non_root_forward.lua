-- FSDP2's test_non_root_forward_backward: three MLPs, each sharded, and a root without
-- parameters; a training iteration through the root, then one through the first MLP alone
-- (the other groups get no gradient: torch.optim skips them, so their Adam step counts fall
-- behind the first MLP's). tests/torch/step_programs/check.py checks the numbers.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ models.MLP(8), models.MLP(8), models.MLP(8) }
for i = 1, 3 do fsdp.fully_shard(model[i]) end
fsdp.fully_shard(model)
return fsdp.spec{
  name = "non_root_forward", model = model, world_size = 2,
  input = { shape = { 4, 8 } }, loss = "sum", optimizer = { "adam", lr = 1e-2 },
  step = { "forward", "backward", "optimizer", { "forward", module = "0" }, "backward", "optimizer" },
}
