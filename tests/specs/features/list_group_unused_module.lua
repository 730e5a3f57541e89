-- A list group whose second module never runs forward (so the group never reaches
-- post-forward and stays unsharded until backward), plus a sharded module that is never
-- called at all (post-backward only in the final callback, no reduce-scatter). The unused
-- parameters keep grad None, so AdamW leaves them undecayed (tests/torch/step_programs).
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Module{ name = "Net" }
model.a = nn.Linear(8, 8)
model.b = nn.Linear(8, 8)
model.spare = nn.Linear(8, 8)
model.never = nn.Linear(8, 8)
model.head = nn.Linear(8, 4)
rawset(model, "_class", { forward = function(self, x)
  return self.head(nn.relu(self.a(x)))
end })
fsdp.fully_shard({ model.a, model.spare })
fsdp.fully_shard(model.never)
fsdp.fully_shard(model)
return fsdp.spec{
  name = "list_group_unused_module", model = model, world_size = 2,
  input = { shape = { 4, 8 } }, loss = "sum", optimizer = { "adamw", lr = 0.01, weight_decay = 0.1 },
}
