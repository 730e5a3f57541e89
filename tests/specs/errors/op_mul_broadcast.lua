-- expect: 5: error: op 'mul': multiplies [4, 16] by [16]; the mul kernel does not broadcast (allowed: operands of one shape; add broadcasts)
-- check pass: nn broadcasts mul as it does add; the mul kernel does not.
local nn, fsdp = require("nn"), require("fsdp")
local M = {}
function M.forward(self, x) return self.lin(x) * self.gain end
local m = nn.new_module("M", M)
m.lin = nn.Linear(16, 16)
m.gain = nn.Parameter({ 16 }, { kind = "normal", std = 1.0 })
fsdp.fully_shard(m)
return fsdp.spec{ name = "x", model = m, world_size = 2, input = { shape = { 4, 16 } },
  loss = "sum" }
