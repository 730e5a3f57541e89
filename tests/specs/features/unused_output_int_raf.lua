-- Two groups with reshard_after_forward = 2 and a backward through the first output
-- only: the second group's pre-backward never fires, so it is still sharded post-forward
-- when the root's final callback runs its post-backward, whose reshard takes it back to
-- its full sharding (event POST_BACKWARD reshard "b", as FSDP2 records it) with no
-- gradient to reduce.
local nn, fsdp = require("nn"), require("fsdp")
local model = nn.Module{ name = "TwoHeads" }
model.a = nn.Linear(8, 8)
model.b = nn.Linear(8, 8)
rawset(model, "_class", { forward = function(self, x)
  return self.a(x), self.b(x)
end })
fsdp.fully_shard(model.a, { reshard_after_forward = 2 })
fsdp.fully_shard(model.b, { reshard_after_forward = 2 })
fsdp.fully_shard(model)
return fsdp.spec{
  name = "unused_output_int_raf", model = model, world_size = 4,
  input = { shape = { 4, 8 } }, loss = "sum", optimizer = { "adam", lr = 1e-2 },
  step = { "forward", { "backward", output = 1 }, "optimizer" },
}
