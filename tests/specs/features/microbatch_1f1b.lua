-- Three microbatches as FSDP2's test_1f1b_microbatching (use_explicit_unshard, and
-- reshard_after_backward only on the last): every group all-gathered once up front by
-- explicit async unshards, kept unsharded through all three forwards and backwards, the
-- gradients kept unsharded until the last backward reduce-scatters them.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2, dropout_p = 0 }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { reshard_after_forward = false }) end
fsdp.fully_shard(model, { reshard_after_forward = false })
local function microbatch(last)
  return { "set_requires_gradient_sync", last }, { "set_is_last_backward", last },
    { "set_reshard_after_backward", last }, "forward", "backward"
end
local step = { { "unshard", async_op = true } }
for k = 1, 3 do
  for _, item in ipairs({ microbatch(k == 3) }) do step[#step + 1] = item end
end
step[#step + 1] = "optimizer"
return fsdp.spec{
  name = "microbatch_1f1b", model = model, world_size = 2,
  input = { batch = 2, seq_len = 16 }, loss = "sum", optimizer = { "adamw", lr = 1e-2 },
  step = step,
}
