-- Sharding layout of one FSDP group: torch.chunk-style shards, padding, all-gather and
-- reduce-scatter element counts. Everything the runtime later checks is computed here.
local trace = require("spec.trace")

local M = {}

local function ceil_div(a, b) return (a + b - 1) // b end

-- Layout of one parameter over `ws` shard ranks. `placement` is "dim0" or "largest_dim"
-- (the first dim of maximal size, as Python's max over range(ndim)).
function M.param(p, ws, placement)
  local shape = p.shape
  local dim = 1
  if placement == "largest_dim" then
    for i = 2, #shape do
      if shape[i] > shape[dim] then dim = i end
    end
  end
  local d = shape[dim]
  local numel = trace.numel(shape)
  local inner = numel // d                   -- elements per index of the sharded dim
  local chunk = ceil_div(d, ws)              -- torch.chunk size; trailing ranks may be empty
  -- Rows of the sharded dim on rank r (rows[r + 1]), computed when read: a list of ws
  -- entries per parameter, remade each time a group's layout is, made planning a 65536-rank
  -- world take 12 s.
  local rows = setmetatable({}, {
    __index = function(_, i)
      if math.type(i) ~= "integer" or i < 1 or i > ws then return nil end
      return math.max(0, math.min(chunk, d - (i - 1) * chunk))
    end,
    __len = function() return ws end,
  })
  return {
    param = p, fqn = p.fqn, shape = shape, dim = dim - 1, numel = numel,
    chunk = chunk, inner = inner, rows = rows,
    shard_numel = chunk * inner,             -- every rank's shard padded to chunk 0's size
    padded_numel = chunk * inner * ws,       -- unsharded size with padding (reduce-scatter input)
    pad_rank0 = chunk * inner - rows[1] * inner,
  }
end

-- Layout of a group: its params in order with offsets inside one rank's all-gather input.
-- Its gradients (sharded: grad_numel per rank, each parameter's at grad_offset; unsharded:
-- ws times that) and optimizer state hold the parameters that require grad alone, in the
-- same order, as torch.optim keeps state only for parameters with a gradient: a frozen
-- one has no grad_offset. A group whose parameters are all frozen has no gradients at all
-- (memory.lua), and its offsets stay the parameters'.
function M.group(params, ws, placement)
  local g = { params = {}, shard_numel = 0, numel = 0, padded_numel = 0, grad_numel = 0 }
  for i, p in ipairs(params) do
    local l = M.param(p, ws, placement)
    l.offset = g.shard_numel
    if p.requires_grad ~= false then
      l.grad_offset = g.grad_numel
      g.grad_numel = g.grad_numel + l.shard_numel
    end
    g.params[i] = l
    g.shard_numel = g.shard_numel + l.shard_numel
    g.numel = g.numel + l.numel
    g.padded_numel = g.padded_numel + l.padded_numel
  end
  if g.grad_numel == 0 then
    for _, l in ipairs(g.params) do l.grad_offset = l.offset end
    g.grad_numel = g.shard_numel
  end
  g.ag_out_numel = g.shard_numel * ws
  return g
end

-- Gradient divide factors (PyTorch's _get_gradient_divide_factors): returns
-- { op = "avg"|"sum"|"premul_sum", premul = x, pre = f|nil, post = f|nil }.
function M.divide_factors(rs_size, dp_size, reduce_dtype, factor, force_sum)
  local overflow_risk = reduce_dtype ~= "fp32" and reduce_dtype ~= "bf16"
  if not overflow_risk and not force_sum then
    if factor == nil then
      if dp_size == 1 then return { op = "sum", ar_op = "sum" } end
      return { op = "avg", ar_op = "avg" }
    end
    if factor == rs_size then return { op = "avg", ar_op = "sum" } end
    return { op = "premul_sum", premul = 1.0 / factor, ar_op = "sum" }
  end
  factor = factor or dp_size
  if overflow_risk then
    local pre = 1
    while factor % pre == 0 and factor / pre > pre do pre = pre * 2 end
    return { op = "sum", ar_op = "sum", pre = pre, post = factor / pre }
  end
  return { op = "sum", ar_op = "sum", post = factor }
end

return M
