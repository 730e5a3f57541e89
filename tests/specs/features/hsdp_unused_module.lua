-- HSDP on a 2 x 2 mesh with a group whose second module never runs: each reduce-scatter of
-- that group and of the root carries only the parameters with gradients (FSDP2's
-- fsdp_params_with_grad), and so does the all-reduce across the replicas after it. The
-- [5, 6] head's rows split 3 + 2 over the shard ranks (padded).
local nn, fsdp = require("nn"), require("fsdp")
local model = nn.Module{ name = "Net" }
model.a = nn.Linear(6, 6)
model.spare = nn.Linear(6, 6)
model.head = nn.Linear(6, 5)
model.idle = nn.Linear(6, 5)
rawset(model, "_class", { forward = function(self, x)
  return self.head(nn.relu(self.a(x)))
end })
fsdp.fully_shard({ model.a, model.spare })
fsdp.fully_shard(model)
return fsdp.spec{
  name = "hsdp_unused_module", model = model, mesh = { replicate = 2, shard = 2 },
  input = { shape = { 4, 6 } }, loss = "sum", optimizer = { "adamw", lr = 0.01, weight_decay = 0.1 },
}
