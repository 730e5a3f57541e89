-- Symbolic tensors and the op graph. Forward functions run on symbolic tensors; every op
-- is recorded in creation order (its id is PyTorch autograd's sequence number, which is
-- what orders the backward pass). Module calls go through hooks so the FSDP planner can
-- act exactly where PyTorch's forward hooks fire.
local errors = require("spec.errors")

local M = {}

-- ---------------------------------------------------------------------------- dtypes

M.dtype_names = { "bf16", "fp16", "fp32", "int32", "int64" }
local dtype_alias = {
  fp32 = "fp32", float32 = "fp32", float = "fp32",
  bf16 = "bf16", bfloat16 = "bf16",
  fp16 = "fp16", float16 = "fp16", half = "fp16",
  int32 = "int32", int64 = "int64",
}
M.dtype_bytes = { fp32 = 4, bf16 = 2, fp16 = 2, int32 = 4, int64 = 8 }

function M.dtype(name, what, line)
  local d = type(name) == "string" and dtype_alias[name]
  if not d then
    errors.raise(string.format("unsupported dtype %s for %s; allowed: %s",
      type(name) == "string" and name or ("(a " .. type(name) .. ")"), what,
      table.concat(M.dtype_names, ", ")), line)
  end
  return d
end

function M.is_float(d) return d == "fp32" or d == "bf16" or d == "fp16" end

-- ---------------------------------------------------------------------------- tensors

local Tensor = {}
Tensor.__index = Tensor
M.Tensor = Tensor

local function shape_str(shape) return "[" .. table.concat(shape, ", ") .. "]" end
M.shape_str = shape_str

-- Tensors larger than this are refused where they are made (M.check_numel), so that sizes
-- and byte counts (sums of many tensors) stay exact in Lua's 64-bit integers.
M.MAX_NUMEL = 1 << 48

function M.numel(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return n
end

-- Raises a spec error for a shape of more than MAX_NUMEL elements (positive sizes).
function M.check_numel(shape, what)
  if type(shape) ~= "table" then
    errors.raise(string.format("%s must be a list of sizes { d1, d2, ... }, got %s", what, type(shape)))
  end
  -- A nil size leaves a hole Lua's # and ipairs do not see: { nil, 16 }.
  local keys = 0
  for _ in pairs(shape) do keys = keys + 1 end
  if keys ~= #shape or (keys > 0 and shape[#shape] == nil) then
    errors.raise(string.format("%s must be a list of sizes { d1, d2, ... } with no nil size", what))
  end
  local n = 1
  for i, d in ipairs(shape) do
    if math.type(d) ~= "integer" or d < 1 then
      errors.raise(string.format("%s must have positive integer sizes, got %s at %d", what, tostring(d), i))
    end
    if n > M.MAX_NUMEL // d then
      errors.raise(string.format("%s %s has more than 2^48 elements, the most fsdpgen plans for one tensor",
        what, shape_str(shape)))
    end
    n = n * d
  end
end

function Tensor:numel() return M.numel(self.shape) end
function Tensor:dim() return #self.shape end
function Tensor:size(i)
  if i == nil then return self.shape end
  if math.type(i) ~= "integer" or i == 0 or i > #self.shape or i < -#self.shape then
    errors.raise(string.format("size(%s): a dimension of %s is 1..%d or -%d..-1 (Lua counts from 1)", tostring(i),
      shape_str(self.shape), #self.shape, #self.shape))
  end
  if i < 0 then i = #self.shape + i + 1 end
  return self.shape[i]
end
Tensor.__tostring = function(t) return string.format("tensor%s %s", shape_str(t.shape), t.dtype) end

function M.is_tensor(x) return getmetatable(x) == Tensor end

-- ---------------------------------------------------------------------------- tracer

-- The active trace. `graph.ops` holds ops in creation order; `recompute` is set while an
-- activation-checkpointed region is replayed inside backward (ops are then not part of the
-- autograd graph and hooks see PyTorch's is_bw() == true).
local state = {
  graph = nil,
  next_tensor = 0,
  scope = {},            -- stack of modules being called
  ckpt = nil,            -- current checkpoint region
  recompute = false,
  hooks = nil,           -- { pre_forward(module, args) -> args, post_forward(module, args, outs), on_op(op) }
  grad_enabled = true,   -- false: torch.no_grad() (no output requires grad)
  training = true,       -- false: model.eval() (dropout is the identity)
}
M.state = state

function M.new_graph()
  return { ops = {}, regions = {}, forwards = {} }
end

-- Starts (graph) or ends (nil) a trace. opts.eval: the eval program's forward, under
-- model.eval() and torch.no_grad().
function M.begin(graph, hooks, opts)
  state.graph = graph
  state.hooks = hooks
  state.grad_enabled = not (opts and opts.eval)
  state.training = not (opts and opts.eval)
  state.scope = {}
  state.ckpt = nil
  state.recompute = false
end

local function new_tensor(shape, dtype, requires_grad, producer, index)
  M.check_numel(shape, "tensor")
  state.next_tensor = state.next_tensor + 1
  return setmetatable({
    id = state.next_tensor, shape = shape, dtype = dtype,
    requires_grad = requires_grad and true or false,
    producer = producer, out_index = index,
  }, Tensor)
end
M.new_tensor = new_tensor

-- Records one op. `outs` is a list of { shape, dtype } (optionally `no_grad = true`);
-- returns the output tensors. Output tensors require grad when any input does.
function M.record(kind, ins, outs, attrs)
  local g = state.graph
  if not g then errors.raise("tensor op '" .. kind .. "' used outside a traced forward") end
  local rg = false
  for _, t in ipairs(ins) do
    if t.requires_grad then rg = true end
  end
  rg = rg and state.grad_enabled
  local op = {
    kind = kind, ins = ins, attrs = attrs or {}, outs = {},
    scope = { table.unpack(state.scope) },
    region = state.ckpt, recompute = state.recompute,
    line = errors.current_line(),
  }
  if not state.recompute then
    g.ops[#g.ops + 1] = op
    op.id = #g.ops
  else
    op.id = -1
  end
  for i, o in ipairs(outs) do
    op.outs[i] = new_tensor(o.shape, o.dtype, rg and not o.no_grad, op, i)
  end
  op.requires_grad = rg
  if state.hooks and state.hooks.on_op then state.hooks.on_op(op) end
  return table.unpack(op.outs)
end

-- ---------------------------------------------------------------------------- module calls

-- Calls `module.forward` with FSDP-style hooks around it. A module marked with
-- nn.checkpoint_module (composable `checkpoint(module)`) runs as a checkpointed region.
local call_hooked
local region_call
function M.call_module(module, args)
  if rawget(module, "_checkpoint") and state.graph and not state.recompute then
    return region_call(function(...) return call_hooked(module, table.pack(...)) end, args, module)
  end
  return call_hooked(module, args)
end

-- More arguments than module's forward takes is an error, as Python's TypeError (a Lua
-- function drops the extra ones, and the PyTorch twin could not call it so).
local function check_arity(module, args)
  local f = module.forward
  local info = type(f) == "function" and debug.getinfo(f, "u")
  local n = args.n or #args
  if info and not info.isvararg and n > info.nparams - 1 then
    errors.raise(string.format("%s called with %d arguments; its forward takes %d", tostring(module), n,
      info.nparams - 1))
  end
end

call_hooked = function(module, args)
  check_arity(module, args)
  local hooks = state.hooks
  if hooks and hooks.pre_forward then args = hooks.pre_forward(module, args) end
  state.scope[#state.scope + 1] = module
  local outs = table.pack(module:forward(table.unpack(args, 1, args.n or #args)))
  state.scope[#state.scope] = nil
  if hooks and hooks.post_forward then hooks.post_forward(module, args, outs) end
  return table.unpack(outs, 1, outs.n)
end

-- Activation checkpointing: ops inside `fn(...)` form a region that backward recomputes.
function M.checkpoint(fn, ...)
  local mt = getmetatable(fn)
  if type(fn) ~= "function" and not (type(mt) == "table" and mt.__call) then
    errors.raise("checkpoint expects a function or a module (checkpoint(fn, ...)), got " .. type(fn))
  end
  if state.recompute or not state.graph then return fn(...) end
  return region_call(fn, table.pack(...))
end

-- fn(args) as a checkpointed region; module: the module nn.checkpoint_module marked
-- (composable checkpoint(module)), whose region the planner recomputes once at most.
region_call = function(fn, args, module)
  local g = state.graph
  local region = { id = #g.regions + 1, fn = fn, args = args, first = #g.ops + 1, parent = state.ckpt,
    module = module }
  g.regions[region.id] = region
  local outer = state.ckpt
  state.ckpt = region
  local outs = table.pack(fn(table.unpack(args, 1, args.n or #args)))
  state.ckpt = outer
  region.last = #g.ops
  return table.unpack(outs, 1, outs.n)
end

-- The outermost checkpointed region containing `region`: nested regions are recomputed
-- together with their outermost one.
function M.outermost(region)
  while region.parent do region = region.parent end
  return region
end

-- Replays a checkpointed region inside backward: hooks fire (with is_bw), ops are not
-- recorded in the autograd graph.
function M.replay(region)
  local was = state.recompute
  state.recompute = true
  region.fn(table.unpack(region.args, 1, region.args.n))
  state.recompute = was
end

function M.in_recompute() return state.recompute end
function M.training() return state.training end

return M
