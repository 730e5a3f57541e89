-- Parameter-gradient outputs that a linear's backward must not assign (RT_ASSIGN_DWEIGHT
-- assigns all of a call's, emit_step.lua param_assigns): a computed bias also added to the
-- output (its gradient holds the add's contribution first), a computed weight also
-- multiplied into the output, and a linear whose input is its own weight (dinp and dweight
-- are one gradient). Each of them accumulates; tests/generator/grad_init.lua follows every
-- contribution.
local nn, fsdp = require("nn"), require("fsdp")
local F = nn.functional
local Root = {}
function Root.forward(self, x)
  local bb = self.b + self.c
  local shared_bias = F.linear(x, self.w, bb) + bb
  local ww = self.u + self.v
  local shared_weight = F.linear(x, ww, self.d) + x * ww
  return shared_bias * shared_weight + F.linear(self.s, self.s, self.e)
end
local root = nn.new_module("Root", Root)
for _, n in ipairs({ "w", "u", "v", "s" }) do root[n] = nn.Parameter({ 16, 16 }, { kind = "normal", std = 0.5 }) end
for _, n in ipairs({ "b", "c", "d", "e" }) do root[n] = nn.Parameter({ 16 }, { kind = "normal", std = 0.5 }) end
fsdp.fully_shard(root)
return fsdp.spec{
  name = "assign_param_grads", model = root, world_size = 2,
  input = { shape = { 16, 16 } }, loss = "sum", optimizer = { "sgd", lr = 1e-3 },
}
