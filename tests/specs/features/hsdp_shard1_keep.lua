-- HSDP over shard groups of one rank (mesh 2 x 1, bf16 parameters): each replica's
-- all-gathers copy its own shards (direct), its reductions all-reduce across the replicas,
-- and a reshard keeps the unsharded parameters where the group's next all-gather precedes
-- its next optimizer step (generator/plan/keep.lua), as at world 1: two microbatches, an
-- optimizer step, a second iteration. Events, counts and values are FSDP2's.
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
  name = "hsdp_shard1_keep", model = model, mesh = { replicate = 2, shard = 1 },
  input = { shape = { 4, 16 }, dtype = "bf16" }, loss = "sum", optimizer = { "adamw", lr = 1e-2 },
  step = { "forward", "backward", "forward", "backward", "optimizer", "forward", "backward", "optimizer" },
}
