-- expect: 5: error: op 'swiglu': a bf16/fp16 parameter operand: its kernel rounds every input gradient to the op's dtype
-- check pass: swiglu of a bf16 parameter traces; its kernel would round the param's gradient.
local nn, fsdp = require("nn"), require("fsdp")
local M = {}
function M.forward(self, x) return nn.swiglu(self.lin(x), self.gate) end
local m = nn.new_module("M", M)
m.lin = nn.Linear(16, 16)
m.gate = nn.Parameter({ 4, 16 }, { kind = "normal", std = 1.0 })
fsdp.fully_shard(m, { mp_policy = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16" } })
return fsdp.spec{ name = "x", model = m, world_size = 2, input = { shape = { 4, 16 } },
  loss = "sum" }
