-- Three microbatches as FSDP2's test_1f1b_microbatching: explicit async unshards up front,
-- groups kept unsharded (reshard_after_forward false, reshard_after_backward only on the
-- last microbatch), gradients synced on the last. tests/torch/step_programs/check.py
-- checks the numbers.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ nn.Linear(8, 8), models.MLP(8) }
fsdp.fully_shard(model[2], { reshard_after_forward = false })
fsdp.fully_shard(model, { reshard_after_forward = false })
local step = { { "unshard", async_op = true } }
for k = 1, 3 do
  local last = k == 3
  for _, item in ipairs({ { "set_requires_gradient_sync", last }, { "set_is_last_backward", last },
                          { "set_reshard_after_backward", last }, "forward", "backward" }) do
    step[#step + 1] = item
  end
end
step[#step + 1] = "optimizer"
return fsdp.spec{
  name = "torch_microbatch_1f1b", model = model, world_size = 2,
  input = { shape = { 4, 8 } }, loss = "sum", optimizer = { "sgd", lr = 0.01 },
  step = step,
}
