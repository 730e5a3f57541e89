-- expect: 5: error: tensor * x: x must be a tensor or a finite number within fp32's range (|x| <= 3.4028235e38), got nan
-- A tensor times NaN (0 / 0): every product would be NaN; refused at the line that multiplies.
local nn, fsdp = require("nn"), require("fsdp")
local M = {}
function M.forward(self, x) return self.lin(x) * (0 / 0) end
local m = nn.new_module("M", M)
m.lin = nn.Linear(16, 16)
fsdp.fully_shard(m)
return fsdp.spec{ name = "x", model = m, world_size = 2, input = { shape = { 4, 16 } },
  loss = "sum" }
