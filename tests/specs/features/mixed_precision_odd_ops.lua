-- Mixed precision through every kernel that rounds its own outputs (linear, silu, gelu,
-- mul, residual and broadcast add, swiglu, dropout, rmsnorm, layernorm, relu), including
-- the cases where the generator must round explicitly instead (generator/emit/kernels_c.lua):
-- a tensor used twice by one op (x * x, x + x, swiglu(x, x)), bf16 parameters as
-- elementwise operands (full size and broadcast), a parameter as a linear's input, and an
-- fp32 root (no mp_policy) over a bf16 child through a cast. Sum loss over a [4, 16] input.
local nn, fsdp = require("nn"), require("fsdp")
local F = nn.functional

local Child = {}
function Child.forward(self, x)
  local h = self.lin(x)
  local m = nn.silu(h) * nn.gelu(h)
  local sq = m * m
  local r = sq + sq
  local q = (r + self.scale) * self.gain
  local b = q + self.bias
  local s = nn.dropout(nn.swiglu(b, b), 0.25)
  local n = F.layer_norm(F.rms_norm(s, self.nw, 1e-6), self.lw, self.lb, 1e-5)
  return nn.relu(n) + F.linear(self.pin, self.lin2.weight)
end

local Root = {}
function Root.forward(self, x)
  local h = self.child(x):float()
  return nn.gelu(self.head(h)) * h
end

local child = nn.new_module("Child", Child)
child.lin = nn.Linear(16, 16)
child.lin2 = nn.Linear(16, 16, { bias = false })
child.scale = nn.Parameter({ 4, 16 }, { kind = "normal", std = 0.1 })
child.gain = nn.Parameter({ 4, 16 }, { kind = "normal", std = 1.0 })
child.bias = nn.Parameter({ 16 }, { kind = "normal", std = 0.1 })
child.nw = nn.Parameter({ 16 }, { kind = "normal", std = 1.0 })
child.lw = nn.Parameter({ 16 }, { kind = "normal", std = 1.0 })
child.lb = nn.Parameter({ 16 }, { kind = "normal", std = 0.1 })
child.pin = nn.Parameter({ 4, 16 }, { kind = "normal", std = 0.5 })
local root = nn.new_module("Root", Root)
root.child = child
root.head = nn.Linear(16, 16)
fsdp.fully_shard(child, { mp_policy = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" } })
fsdp.fully_shard(root)
return fsdp.spec{
  name = "mixed_precision_odd_ops", model = root, world_size = 2,
  input = { shape = { 4, 16 } }, loss = "sum", optimizer = { "adamw", lr = 1e-2 },
}
