-- w1_keep_microbatch with keep_unsharded = false: every reshard frees the unsharded
-- parameters and every all-gather copies the shards again, as FSDP2 does at one rank.
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
  name = "w1_keep_off", model = model, world_size = 1, keep_unsharded = false,
  input = { shape = { 4, 16 }, dtype = "bf16" }, loss = "sum", optimizer = { "adamw", lr = 1e-2 },
  step = { "forward", "backward", "forward", "backward", "optimizer", "forward", "backward", "optimizer" },
}
