-- expect: 7: error: parameter shape {} has no dimension; fully_shard shards a parameter's dim 0 (allowed: at least one size, e.g. { 1 })
-- A 0-dim parameter (a learned scalar): FSDP2 refuses it too ("Shard dim 0 is invalid for 0D tensor").
local nn, fsdp = require("nn"), require("fsdp")
local M = {}
function M.forward(self, x) return self.lin(x) end
local m = nn.new_module("M", M)
m.scale = nn.Parameter({})
m.lin = nn.Linear(16, 16)
fsdp.fully_shard(m)
return fsdp.spec{ name = "x", model = m, world_size = 2, input = { shape = { 4, 16 } }, loss = "sum" }
