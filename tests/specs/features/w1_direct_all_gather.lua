-- One rank: every all-gather is direct (the copy-in writes the unsharded params, no
-- all-gather buffer, no copy-out), including one whose result is dropped: the head's
-- backward prefetches a module that never runs, so the final callback drops it. bf16
-- params, so the copy-in's cast and the packed linear weights are exercised.
local nn, fsdp = require("nn"), require("fsdp")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = nn.Module{ name = "Net" }
model.a = nn.Linear(16, 16)
model.never = nn.Linear(16, 16)
model.head = nn.Linear(16, 8)
rawset(model, "_class", { forward = function(self, x)
  return self.head(nn.relu(self.a(x)))
end })
for _, m in ipairs({ model.a, model.never, model.head }) do fsdp.fully_shard(m, { mp_policy = mp }) end
fsdp.fully_shard(model, { mp_policy = mp })
model.head:set_modules_to_backward_prefetch({ model.never, model.a })
return fsdp.spec{
  name = "w1_direct_all_gather", model = model, world_size = 1,
  input = { shape = { 4, 16 }, dtype = "bf16" }, loss = "sum", optimizer = { "adamw", lr = 1e-2 },
}
