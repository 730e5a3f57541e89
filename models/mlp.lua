-- MLP and DoubleLinear (PyTorch's FSDP test helpers).
local nn = require("spec.nn")
local errors = require("spec.errors")

local M = {}

local MLP = {}
function MLP.forward(self, x)
  local z = nn.relu(self.in_proj(x))
  return nn.relu(self.out_proj(z))
end

function M.MLP(dim, opts)
  opts = opts or {}
  errors.check_keys(opts, { "bias", "dim_multiplier" }, "MLP option")
  local mult = opts.dim_multiplier or 4
  if math.type(dim) ~= "integer" or dim < 1 then errors.raise("MLP: dim must be a positive integer") end
  if math.type(mult) ~= "integer" or mult < 1 then errors.raise("MLP: dim_multiplier must be a positive integer") end
  local m = nn.new_module("MLP", MLP)
  m.in_proj = nn.Linear(dim, mult * dim, { bias = opts.bias })
  m.out_proj = nn.Linear(mult * dim, dim, { bias = opts.bias })
  return m
end

local DoubleLinear = {}
function DoubleLinear.forward(self, x)
  if self.use_second_linear then
    return self.relu(self.lin1(x)), self.relu(self.lin2(x))
  end
  return self.relu(self.lin1(x))
end

function M.DoubleLinear(dim, opts)
  opts = opts or {}
  errors.check_keys(opts, { "use_second_linear" }, "DoubleLinear option")
  if math.type(dim) ~= "integer" or dim < 1 then errors.raise("DoubleLinear: dim must be a positive integer") end
  local m = nn.new_module("DoubleLinear", DoubleLinear)
  m.lin1 = nn.Linear(dim, dim)
  m.lin2 = nn.Linear(dim, dim)
  m.relu = nn.ReLU()
  rawset(m, "use_second_linear", opts.use_second_linear ~= false)
  return m
end

return M
