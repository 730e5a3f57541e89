-- One sharded module applied twice in a forward (its group unshards, reshards and
-- post-backwards twice; its gradient is complete, and reduced, at the second
-- post-backward). tests/torch/step_programs/check.py checks the numbers.
local nn, fsdp = require("nn"), require("fsdp")
local model = nn.Module{ name = "Twice" }
model.a = nn.Linear(8, 8)
model.head = nn.Linear(8, 4)
rawset(model, "_class", { forward = function(self, x)
  return self.head(nn.relu(self.a(nn.relu(self.a(x)))))
end })
fsdp.fully_shard(model.a)
fsdp.fully_shard(model)
return fsdp.spec{
  name = "module_twice", model = model, world_size = 2,
  input = { shape = { 4, 8 } }, loss = "sum", optimizer = { "sgd", lr = 0.01 },
}
