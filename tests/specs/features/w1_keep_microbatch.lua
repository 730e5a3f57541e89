-- One rank, bf16 parameters, two microbatches and then a second iteration: where a
-- reshard's group is all-gathered again before its next optimizer step, the reshard keeps
-- the unsharded parameters and that all-gather copies nothing (generator/plan/keep.lua):
-- each forward's reshard for its backward, the first backward's for the second forward.
-- The second backward's reshards free them: an optimizer step follows, and the third
-- forward copies the stepped shards. Events, counts and values are FSDP2's.
local nn, fsdp = require("nn"), require("fsdp")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = nn.Module{ name = "Net" }
model.a = nn.Linear(16, 32)
model.b = nn.Linear(32, 16)
model.head = nn.Linear(16, 8)
rawset(model, "_class", { forward = function(self, x)
  return self.head(nn.relu(self.b(nn.relu(self.a(x)))))
end })
for _, m in ipairs({ model.a, model.b }) do fsdp.fully_shard(m, { mp_policy = mp }) end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{
  name = "w1_keep_microbatch", model = model, world_size = 1,
  input = { shape = { 4, 16 }, dtype = "bf16" }, loss = "sum", optimizer = { "adamw", lr = 1e-2 },
  step = { "forward", "backward", "forward", "backward", "optimizer", "forward", "backward", "optimizer" },
}
