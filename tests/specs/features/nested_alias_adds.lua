-- Residual adds nested so that one gradient buffer passes through two of them without a
-- copy (memory.lua's grad_alias adds): a4 = lin2(h) + h * silu(h), then out = a2 + a4. The
-- output's gradient is a2's and a4's, and through a4's add also lin2's output's and the
-- product's, until each is read; tests/generator/grad_flow.lua follows it through the buffer.
local nn, fsdp = require("nn"), require("fsdp")
local Root = {}
function Root.forward(self, x)
  local h = self.lin1(x)
  local a2 = nn.relu(h)
  local a4 = self.lin2(h) + h * nn.silu(h)
  return a2 + a4
end
local root = nn.new_module("Root", Root)
root.lin1 = nn.Linear(16, 16)
root.lin2 = nn.Linear(16, 16)
fsdp.fully_shard(root)
return fsdp.spec{
  name = "nested_alias_adds", model = root, world_size = 2,
  input = { shape = { 8, 16 } }, loss = "sum", optimizer = { "sgd", lr = 1e-3 },
}
