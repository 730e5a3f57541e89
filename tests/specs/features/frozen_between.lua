-- Frozen parameters between trainable ones in one group, as LoRA-style fine-tuning freezes
-- base weights beside small trainable ones: each block's first weight, a middle weight and
-- its last bias are frozen, so the group's sharded gradients and optimizer state hold the
-- other parameters alone, one after another, and its reduce-scatter carries their
-- gradients alone. Odd sizes pad the shards (5 and 7 rows on 2 ranks). AdamW with weight
-- decay and clipping: a frozen parameter is neither decayed nor in the norm.
-- tests/conformance/run.sh resumes a checkpoint of it.
local nn, fsdp = require("nn"), require("fsdp")

local Block = {}
function Block.forward(self, x)
  local h = nn.relu(self.a(x))
  h = nn.relu(self.b(h))
  return self.c(h) + x
end

local function block()
  local m = nn.new_module("Block", Block)
  m.a = nn.Linear(5, 7)
  m.b = nn.Linear(7, 7)
  m.c = nn.Linear(7, 5)
  m.a.weight.requires_grad = false  -- the group's first parameter
  m.b.weight.requires_grad = false  -- a middle one
  m.c.bias.requires_grad = false    -- its last
  return m
end

local model = nn.Sequential{ block(), block(), nn.Linear(5, 3) }
fsdp.fully_shard(model[1])
fsdp.fully_shard(model[2])
fsdp.fully_shard(model)
return fsdp.spec{
  name = "frozen_between", model = model, world_size = 2,
  input = { shape = { 4, 5 } }, loss = "sum",
  optimizer = { "adamw", lr = 1e-2, weight_decay = 0.1 }, grad_clip = 0.5,
}
