-- The `nn` API specs build models with: modules (PyTorch names and FQNs), parameters, and
-- functional ops on symbolic tensors. Shapes and dtypes are checked as they flow; a
-- mismatch is a spec error at the line that caused it.
local errors = require("spec.errors")
local trace = require("spec.trace")

local nn = {}
local Tensor = trace.Tensor
local shape_str = trace.shape_str

-- ---------------------------------------------------------------------------- parameters

local Parameter = {}
Parameter.__index = Parameter
setmetatable(Parameter, { __index = Tensor })
Parameter.__tostring = function(p)
  return string.format("Parameter %s%s", p.fqn or "?", shape_str(p.shape))
end

local next_param, first_param = 0, 1
-- The most parameters one spec may make (Llama 3 405B has about 1,100): more means a
-- runaway loop or size, refused within a second instead of after hours of planning.
nn.MAX_PARAMS = 20000

-- A new spec's parameters are counted from here (uids stay unique).
function nn._reset() first_param = next_param + 1 end

-- A parameter's init, as the training binary draws it (rt_train_init_param): each kind
-- with the one number it takes (std defaults to 1, as torch.nn.init.normal_'s).
local INIT_KINDS = { zeros = {}, ones = {}, normal = { std = 1.0 }, uniform = { bound = false } }
local INIT_ALLOWED = 'allowed: { kind = "zeros" }, { kind = "ones" }, { kind = "normal", std = S }, '
  .. '{ kind = "uniform", bound = B }, S and B finite and >= 0'

-- A value as an error shows it: a string quoted, a number (nan as such), else its type.
local function shown(v)
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) == "number" then return v ~= v and "nan" or tostring(v) end
  return type(v)
end

-- init, checked; a table of its own (the spec's table is not kept).
local function check_init(init)
  if init == nil then return { kind = "normal", std = 1.0 } end
  local function bad(what) errors.raise("nn.Parameter's init: " .. what .. " (" .. INIT_ALLOWED .. ")") end
  if type(init) ~= "table" then bad(shown(init) .. " is not an initialization fsdpgen draws") end
  local takes = INIT_KINDS[init.kind]
  if not takes then bad("kind " .. shown(init.kind) .. " is not one fsdpgen draws") end
  local keys = { "kind" }
  for k in pairs(takes) do keys[#keys + 1] = k end
  table.sort(keys)
  errors.check_keys(init, keys, "nn.Parameter init key")  -- the kind's keys
  local out = { kind = init.kind }
  for k, default in pairs(takes) do
    local v = init[k]
    if v == nil then v = default or nil end
    if type(v) ~= "number" or v ~= v or v < 0 or v == math.huge then
      bad(string.format("kind %q needs %s, a finite number >= 0, got %s", init.kind, k, shown(v)))
    end
    out[k] = v
  end
  return out
end

-- `init` records how PyTorch initializes it (the training binary reproduces the kind).
function nn.Parameter(shape, init)
  next_param = next_param + 1
  if next_param - first_param >= nn.MAX_PARAMS then
    errors.raise(string.format("the spec makes more than %d parameters, the most fsdpgen plans", nn.MAX_PARAMS))
  end
  trace.check_numel(shape, "parameter shape") -- positive integer sizes, at most 2^48 elements
  if #shape == 0 then  -- FSDP2's FSDPParam refuses it: "Shard dim 0 is invalid for 0D tensor"
    errors.raise("parameter shape {} has no dimension; fully_shard shards a parameter's dim 0 "
      .. "(allowed: at least one size, e.g. { 1 })")
  end
  return setmetatable({
    uid = next_param, shape = shape, dtype = "fp32", requires_grad = true,
    is_param = true, init = check_init(init), id = -next_param,
  }, Parameter)
end
nn.Parameter_mt = Parameter
function nn.is_parameter(x) return getmetatable(x) == Parameter end

-- torch.nn.init's in-place initializers, for the kinds the training binary draws
-- (rt_train_init_param): constants, and zero-mean normal and symmetric uniform draws.
nn.init = {}
local function init_param(p, what)
  if not nn.is_parameter(p) then errors.raise("nn.init." .. what .. " expects a parameter") end
  return p
end
local function init_number(v, what, arg)
  if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge then
    errors.raise(string.format("nn.init.%s: %s must be a finite number, got %s", what, arg, tostring(v)))
  end
  return v
end
function nn.init.zeros_(p) init_param(p, "zeros_").init = { kind = "zeros" }; return p end
function nn.init.ones_(p) init_param(p, "ones_").init = { kind = "ones" }; return p end
function nn.init.normal_(p, mean, std)
  init_param(p, "normal_")
  mean, std = init_number(mean or 0, "normal_", "mean"), init_number(std or 1, "normal_", "std")
  if mean ~= 0 or std < 0 then
    errors.raise(string.format("nn.init.normal_: mean %s, std %s: fsdpgen draws mean 0 and std >= 0",
      tostring(mean), tostring(std)))
  end
  p.init = { kind = "normal", std = std }
  return p
end
-- kaiming_uniform_(p, a): uniform in gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2))
-- (PyTorch's leaky_relu default; fan_in: the product of the dims after the first), as
-- torchtune initializes lora_a with a = sqrt(5), which is a Linear's own initialization.
function nn.init.kaiming_uniform_(p, a)
  init_param(p, "kaiming_uniform_")
  a = init_number(a or 0, "kaiming_uniform_", "a")
  if #p.shape < 2 then
    errors.raise("nn.init.kaiming_uniform_: fan in cannot be computed for a tensor with fewer "
      .. "than 2 dimensions (PyTorch's error)")
  end
  local fan_in = 1
  for i = 2, #p.shape do fan_in = fan_in * p.shape[i] end
  p.init = { kind = "uniform", bound = math.sqrt(2 / (1 + a * a)) * math.sqrt(3 / fan_in) }
  return p
end
function nn.init.uniform_(p, a, b)
  init_param(p, "uniform_")
  a, b = init_number(a or 0, "uniform_", "a"), init_number(b or 1, "uniform_", "b")
  if a ~= -b or b < 0 then
    errors.raise(string.format("nn.init.uniform_: [%s, %s]: fsdpgen draws symmetric bounds [-b, b]",
      tostring(a), tostring(b)))
  end
  p.init = { kind = "uniform", bound = b }
  return p
end

-- A parameter's requires_grad: true, or false for a frozen one (PyTorch's p.requires_grad =
-- False, or p.requires_grad_(False)): no gradient, so FSDP2 leaves it out of the group's
-- reduce-scatter and the optimizer skips it (grad None); it is still sharded and gathered.
local function check_requires_grad(v, what)
  if v == nil then return true end
  if type(v) ~= "boolean" then
    errors.raise(string.format("%s expects true or false, got %s", what,
      type(v) == "string" and string.format("%q", v) or tostring(v)))
  end
  return v
end

function Parameter:requires_grad_(v)
  self.requires_grad = check_requires_grad(v, "requires_grad_")
  return self
end

-- ---------------------------------------------------------------------------- modules

local Module = {}
nn.Module_methods = Module

local module_mt = {}

function nn.is_module(x) return getmetatable(x) == module_mt end

module_mt.__index = function(self, k)
  local m = rawget(self, "_modules_by_name")[k]
  if m then return m end
  local p = rawget(self, "_params_by_name")[k]
  if p then return p end
  local cls = rawget(self, "_class")
  if cls and cls[k] ~= nil then return cls[k] end
  if type(k) == "number" then
    return rawget(self, "_modules_by_name")[tostring(k - 1)]
  end
  return Module[k]
end

module_mt.__newindex = function(self, k, v)
  if nn.is_module(v) then
    self:add_module(k, v)
  elseif nn.is_parameter(v) then
    self:register_parameter(k, v)
  else
    rawset(self, k, v)
  end
end

module_mt.__call = function(self, ...)
  return trace.call_module(self, table.pack(...))
end

module_mt.__len = function(self) return #rawget(self, "_modules") end

module_mt.__tostring = function(self)
  local fqn = rawget(self, "_fqn")
  return fqn and string.format("%s(%s)", rawget(self, "_type"), fqn) or rawget(self, "_type")
end

-- A module of class `class` (its methods: forward(self, ...) and others), named type_name
-- as its Python class is (the twin's class name: emit_torch.lua).
local function new_module(type_name, class)
  if type(type_name) ~= "string" then
    errors.raise("nn.new_module(name, class): name must be a string (the module's class name), got " .. type(type_name))
  end
  if class ~= nil and type(class) ~= "table" then
    errors.raise("nn.new_module(name, class): class must be a table of its methods ({ forward = function(self, x) "
      .. "... end }), got " .. type(class))
  end
  local m = {
    _type = type_name, _class = class,
    _modules = {}, _modules_by_name = {},
    _params = {}, _params_by_name = {},
    _line = errors.current_line(),
  }
  return setmetatable(m, module_mt)
end
nn.new_module = new_module

-- Child and parameter names become FQNs, which reach the generated C (strings and
-- comments) and the .schedule: letters, digits and '_' only, as PyTorch's attribute names.
local function check_child_name(name, what)
  if type(name) ~= "string" and math.type(name) ~= "integer" then
    errors.raise(string.format("%s name must be a string, got %s", what, type(name)))
  end
  name = tostring(name)
  if not name:match("^[%w_]+$") or #name > 128 then
    errors.raise(string.format("%s name %s must be letters, digits and '_' (at most 128), as a Python attribute",
      what, (string.format("%q", name):gsub("\\\n", "\\n"))))
  end
  return name
end

function Module:add_module(name, m)
  name = check_child_name(name, "module")
  if not rawget(self, "_modules_by_name")[name] then
    local list = rawget(self, "_modules")
    list[#list + 1] = name
  end
  rawget(self, "_modules_by_name")[name] = m
  return m
end

function Module:register_parameter(name, p)
  name = check_child_name(name, "parameter")
  if not rawget(self, "_params_by_name")[name] then
    local list = rawget(self, "_params")
    list[#list + 1] = name
  end
  rawget(self, "_params_by_name")[name] = p
  return p
end

-- Direct children in registration order: { name, module } pairs.
function Module:named_children()
  local out = {}
  for _, n in ipairs(rawget(self, "_modules")) do
    out[#out + 1] = { n, rawget(self, "_modules_by_name")[n] }
  end
  return out
end

-- All modules, pre-order, deduplicated, with PyTorch FQNs ("" for self).
function Module:named_modules()
  local out, seen = {}, {}
  local function walk(m, prefix)
    if seen[m] then return end
    seen[m] = true
    out[#out + 1] = { prefix, m }
    for _, c in ipairs(m:named_children()) do
      walk(c[2], prefix == "" and c[1] or (prefix .. "." .. c[1]))
    end
  end
  walk(self, "")
  return out
end

-- Parameters with every name they have (tied parameters have several), in PyTorch's
-- named_parameters order (first occurrence wins).
function Module:named_parameters()
  local out, index = {}, {}
  for _, e in ipairs(self:named_modules()) do
    local prefix, m = e[1], e[2]
    for _, pn in ipairs(rawget(m, "_params")) do
      local p = rawget(m, "_params_by_name")[pn]
      local fqn = prefix == "" and pn or (prefix .. "." .. pn)
      if index[p] then
        local names = out[index[p]][3]
        names[#names + 1] = fqn
      else
        out[#out + 1] = { fqn, p, { fqn } }
        index[p] = #out
      end
    end
  end
  return out
end

-- Also collects tied names that appear under modules visited more than once (a module
-- shared by two parents still yields one FQN, as PyTorch's remove_duplicate=True).
function Module:parameters()
  local out = {}
  for _, e in ipairs(self:named_parameters()) do out[#out + 1] = e[2] end
  return out
end

-- PyTorch's Module.requires_grad_: every parameter below the module (tied ones once).
function Module:requires_grad_(v)
  v = check_requires_grad(v, "requires_grad_")
  for _, p in ipairs(self:parameters()) do p.requires_grad = v end
  return self
end

function Module:get(path)
  local m = self
  for part in tostring(path):gmatch("[^%.]+") do
    local c = rawget(m, "_modules_by_name")[part]
    if not c then
      local p = rawget(m, "_params_by_name")[part]
      if p then return p end
      local names = {}
      for _, ch in ipairs(m:named_children()) do names[#names + 1] = ch[1] end
      local hint = errors.closest(part, names)
      errors.raise(string.format("no submodule '%s' in '%s'%s", part, path,
        hint and (" (did you mean '" .. hint .. "'?)") or ""))
    end
    m = c
  end
  return m
end

function Module:fqn() return rawget(self, "_fqn") or "?" end

function Module:forward(...)  -- any arguments: this error, not an arity error (trace.lua)
  errors.raise(string.format("module %s has no forward function", rawget(self, "_type")))
end

-- ---------------------------------------------------------------------------- checks

local function check_tensor(x, what, optional)
  if optional and x == nil then return end
  if not trace.is_tensor(x) and not nn.is_parameter(x) then
    errors.raise(string.format("%s expects a tensor, got %s", what,
      nn.is_module(x) and ("the module " .. tostring(x) .. " (call it: m(x))") or type(x)))
  end
end

-- Options tables of functional ops: nil or a table.
local function check_opts(opts, what)
  if opts ~= nil and type(opts) ~= "table" then
    errors.raise(string.format("%s expects its options as a table { ... }, got %s", what, type(opts)))
  end
  return opts or {}
end

local function float_dtype(what, ...)
  local d
  for _, t in ipairs({ ... }) do
    if t then
      if not trace.is_float(t.dtype) then
        errors.raise(string.format("%s expects floating-point tensors, got %s", what, t.dtype))
      end
      if d and d ~= t.dtype then
        errors.raise(string.format("%s got mixed dtypes %s and %s (cast one, or give every group the same mp_policy)",
          what, d, t.dtype))
      end
      d = t.dtype
    end
  end
  return d
end

local function copy(shape) return { table.unpack(shape) } end

-- ---------------------------------------------------------------------------- functional ops

local F = {}
nn.functional = F

function F.linear(x, w, b)
  check_tensor(x, "linear")
  check_tensor(w, "linear (weight)")
  check_tensor(b, "linear (bias)", true)
  local in_f = w.shape[2]
  if x.shape[#x.shape] ~= in_f then
    errors.raise(string.format("linear: input %s does not match weight %s (last input dim must be %d)",
      shape_str(x.shape), shape_str(w.shape), in_f))
  end
  local d = float_dtype("linear", x, w, b)
  local s = copy(x.shape)
  s[#s] = w.shape[1]
  return trace.record("linear", b and { x, w, b } or { x, w }, { { shape = s, dtype = d } })
end

function F.embedding(idx, w)
  check_tensor(idx, "embedding")
  check_tensor(w, "embedding (weight)")
  if trace.is_float(idx.dtype) then
    errors.raise("embedding expects integer token ids, got " .. idx.dtype .. " (use input = { batch, seq_len } for token models)")
  end
  local s = copy(idx.shape)
  s[#s + 1] = w.shape[2]
  return trace.record("embedding", { idx, w }, { { shape = s, dtype = w.dtype } })
end

local function norm_check(name, x, w, b)
  check_tensor(x, name)
  check_tensor(w, name .. " (weight)")
  check_tensor(b, name .. " (bias)", true)
  if #w.shape ~= 1 then
    errors.raise(string.format("%s: weight %s must be one-dimensional", name, shape_str(w.shape)))
  end
  if x.shape[#x.shape] ~= w.shape[1] then
    errors.raise(string.format("%s: input %s does not match normalized shape [%d]", name,
      shape_str(x.shape), w.shape[1]))
  end
end

function F.layer_norm(x, w, b, eps)
  norm_check("layer_norm", x, w, b)
  local d = float_dtype("layer_norm", x, w, b)
  return trace.record("layer_norm", { x, w, b }, { { shape = copy(x.shape), dtype = d } }, { eps = eps })
end

function F.rms_norm(x, w, eps)
  norm_check("rms_norm", x, w)
  local d = float_dtype("rms_norm", x, w)
  return trace.record("rms_norm", { x, w }, { { shape = copy(x.shape), dtype = d } }, { eps = eps })
end

local function unary(kind)
  return function(x)
    check_tensor(x, kind)
    local d = float_dtype(kind, x)
    return trace.record(kind, { x }, { { shape = copy(x.shape), dtype = d } })
  end
end
F.relu, F.gelu, F.silu = unary("relu"), unary("gelu"), unary("silu")

-- Elementwise binary ops broadcast `b` over the leading dims of `a` (b's shape must be a
-- suffix of a's), as pos-embeddings [T, C] broadcast over a batch [B, T, C].
local function binary(kind)
  return function(a, b)
    check_tensor(a, kind)
    check_tensor(b, kind)
    if #b.shape > #a.shape then a, b = b, a end
    local off = #a.shape - #b.shape
    for i = 1, #b.shape do
      if b.shape[i] ~= a.shape[off + i] then
        errors.raise(string.format("%s: shapes %s and %s do not broadcast", kind,
          shape_str(a.shape), shape_str(b.shape)))
      end
    end
    local d = float_dtype(kind, a, b)
    return trace.record(kind, { a, b }, { { shape = copy(a.shape), dtype = d } })
  end
end
F.add, F.mul = binary("add"), binary("mul")

-- silu(a) * b as one op (one kernel, and no silu(a) buffer kept for backward), with the
-- numerics of the two ops (rt_swiglu_*).
function F.swiglu(a, b)
  check_tensor(a, "swiglu")
  check_tensor(b, "swiglu")
  if shape_str(a.shape) ~= shape_str(b.shape) then
    errors.raise(string.format("swiglu: shapes %s and %s differ (gate and value must match)",
      shape_str(a.shape), shape_str(b.shape)))
  end
  local d = float_dtype("swiglu", a, b)
  return trace.record("swiglu", { a, b }, { { shape = copy(a.shape), dtype = d } })
end

-- Dropout draws from a counter-based RNG keyed by (seed, site) so sharded and unsharded
-- runs draw the same mask. p = 0, and model.eval() (the eval program), record nothing.
local function dropout_p(p)
  p = p or 0.5
  if type(p) ~= "number" or not (p >= 0 and p < 1) then
    errors.raise("dropout probability must be in [0, 1), got " .. tostring(p))
  end
  return p
end

function F.dropout(x, p)
  check_tensor(x, "dropout")
  p = dropout_p(p)
  if p == 0 or not trace.training() then return x end
  local d = float_dtype("dropout", x)
  return trace.record("dropout", { x }, { { shape = copy(x.shape), dtype = d } }, { p = p })
end

-- Scaled dot-product attention over heads. q: [B, T, NH*HD]; k, v: [B, T, NKV*HD].
-- dropout_p (scaled_dot_product_attention's, default 0) drops attention probabilities in
-- training, drawn as F.dropout draws (keyed by the op's site); model.eval() turns it off.
function F.attention(q, k, v, opts)
  check_tensor(q, "attention (query)")
  check_tensor(k, "attention (key)")
  check_tensor(v, "attention (value)")
  opts = check_opts(opts, "attention")
  errors.check_keys(opts, { "causal", "n_heads", "n_kv_heads", "dropout_p" }, "attention option")
  local drop = dropout_p(opts.dropout_p or 0)
  if not trace.training() then drop = 0 end
  local nh = opts.n_heads
  if math.type(nh) ~= "integer" or nh < 1 then
    errors.raise("attention needs n_heads (a positive integer)")
  end
  local nkv = opts.n_kv_heads or nh
  local C = q.shape[#q.shape]
  if C % nh ~= 0 then
    errors.raise(string.format("attention: n_heads %d does not divide the model dim %d", nh, C))
  end
  local hd = C // nh
  if math.type(nkv) ~= "integer" or nkv < 1 or nh % nkv ~= 0 then
    errors.raise(string.format("attention: n_kv_heads %s must divide n_heads %d", tostring(nkv), nh))
  end
  for _, t in ipairs({ k, v }) do
    if t.shape[#t.shape] ~= nkv * hd or #t.shape ~= #q.shape then
      errors.raise(string.format("attention: key/value %s must be [..., %d] for %d kv heads of dim %d",
        shape_str(t.shape), nkv * hd, nkv, hd))
    end
  end
  local d = float_dtype("attention", q, k, v)
  return trace.record("attention", { q, k, v }, { { shape = copy(q.shape), dtype = d } },
    { causal = opts.causal ~= false, n_heads = nh, n_kv_heads = nkv, head_dim = hd,
      dropout_p = drop > 0 and drop or nil })
end

-- Rotary position embeddings over heads of x: [B, T, NH*HD] (consecutive pairs rotated).
function F.rotary(x, opts)
  check_tensor(x, "rotary")
  opts = check_opts(opts, "rotary")
  local nh = opts.n_heads
  local C = x.shape[#x.shape]
  if math.type(nh) ~= "integer" or C % nh ~= 0 or (C // nh) % 2 ~= 0 then
    errors.raise(string.format("rotary: n_heads %s must divide dim %d into even head dims", tostring(nh), C))
  end
  local theta = opts.theta or 10000.0
  if type(theta) ~= "number" or not (theta > 0 and theta < math.huge) then
    errors.raise("rotary: theta must be a positive number, got " .. tostring(theta))
  end
  local d = float_dtype("rotary", x)
  return trace.record("rotary", { x }, { { shape = copy(x.shape), dtype = d } },
    { n_heads = nh, head_dim = C // nh, theta = theta })
end

function F.cast(x, dtype)
  check_tensor(x, "cast")
  dtype = trace.dtype(dtype, "cast")
  if x.dtype == dtype then return x end
  -- As in PyTorch, an integer result has no gradient.
  return trace.record("cast", { x }, { { shape = copy(x.shape), dtype = dtype, no_grad = not trace.is_float(dtype) } },
    { to = dtype })
end

function F.sum(x)
  check_tensor(x, "sum")
  return trace.record("sum", { x }, { { shape = {}, dtype = x.dtype } })
end

function F.cross_entropy(logits, targets)
  check_tensor(logits, "cross_entropy (logits)")
  check_tensor(targets, "cross_entropy (targets)")
  local V = logits.shape[#logits.shape]
  if #targets.shape ~= #logits.shape - 1 then
    errors.raise(string.format("cross_entropy: targets %s do not match logits %s",
      shape_str(targets.shape), shape_str(logits.shape)))
  end
  return trace.record("cross_entropy", { logits, targets }, { { shape = {}, dtype = "fp32" } }, { vocab = V })
end

-- Token positions 0..T-1 (no gradient), for learned position embeddings.
function F.arange(n)
  if math.type(n) ~= "integer" or n < 1 then errors.raise("arange: n must be a positive integer, got " .. tostring(n)) end
  return trace.record("arange", {}, { { shape = { n }, dtype = "int64", no_grad = true } })
end

nn.relu, nn.gelu, nn.silu, nn.swiglu = F.relu, F.gelu, F.silu, F.swiglu
nn.attention, nn.rotary, nn.dropout = F.attention, F.rotary, F.dropout
nn.linear, nn.embedding, nn.cross_entropy = F.linear, F.embedding, F.cross_entropy
nn.checkpoint = trace.checkpoint

-- Composable activation checkpointing of a module, like
-- torch.distributed._composable.checkpoint(module) or apply_activation_checkpointing:
-- every call of the module becomes a recomputed region.
function nn.checkpoint_module(m)
  if not nn.is_module(m) then errors.raise("checkpoint_module expects a module") end
  rawset(m, "_checkpoint", true)
  return m
end

-- A tensor times a number (PyTorch's x * 2.0 or 2 * x): the op "scale", the number as a
-- float in attrs.scale. PyTorch multiplies by it rounded to fp32 (kernels_c), so it must be
-- finite there; the output has the tensor's dtype.
local FP32_MAX = 3.4028234663852886e38
local function scale(x, s)
  if type(s) ~= "number" or s ~= s or math.abs(s) > FP32_MAX then
    local got = type(s) ~= "number" and type(s) or s ~= s and "nan" or tostring(s)
    errors.raise("tensor * x: x must be a tensor or a finite number within fp32's range "
      .. "(|x| <= 3.4028235e38), got " .. got)
  end
  local d = float_dtype("tensor * number", x)
  return trace.record("scale", { x }, { { shape = copy(x.shape), dtype = d } }, { scale = s + 0.0 })
end

local function is_tensor(x) return trace.is_tensor(x) or nn.is_parameter(x) end

-- Tensor methods and operators.
Tensor.__add = function(a, b) return F.add(a, b) end
Tensor.__mul = function(a, b)
  -- a module stays mul's operand, whose error says to call it
  if is_tensor(a) and not is_tensor(b) and not nn.is_module(b) then return scale(a, b) end
  if is_tensor(b) and not is_tensor(a) and not nn.is_module(a) then return scale(b, a) end
  return F.mul(a, b)
end
Tensor.__len = function(t) return t.shape[1] end
function Tensor:float() return F.cast(self, "fp32") end
function Tensor:to(dtype) return F.cast(self, dtype) end
function Tensor:sum() return F.sum(self) end
Parameter.__add, Parameter.__mul = Tensor.__add, Tensor.__mul

-- ---------------------------------------------------------------------------- layers

local function posint(v, what, type_name)
  if math.type(v) ~= "integer" or v < 1 then
    errors.raise(string.format("%s: %s must be a positive integer, got %s", type_name, what, tostring(v)))
  end
  return v
end

local function eps_of(opts, default, type_name)
  local eps = opts.eps or default
  if type(eps) ~= "number" or not (eps > 0 and eps < math.huge) then
    errors.raise(string.format("%s: eps must be a positive number, got %s", type_name, tostring(eps)))
  end
  return eps
end

local function opts_of(opts, allowed, type_name)
  opts = opts or {}
  if type(opts) ~= "table" then errors.raise(type_name .. " options must be a table") end
  errors.check_keys(opts, allowed, type_name .. " option")
  return opts
end

local Linear = {}
function Linear.forward(self, x) return F.linear(x, self.weight, self.bias) end
function nn.Linear(in_f, out_f, opts)
  opts = opts_of(opts, { "bias" }, "Linear")
  posint(in_f, "in_features", "Linear")
  posint(out_f, "out_features", "Linear")
  if opts.bias ~= nil and type(opts.bias) ~= "boolean" then
    errors.raise("Linear: bias must be true or false, got " .. tostring(opts.bias))
  end
  local m = new_module("Linear", Linear)
  rawset(m, "in_features", in_f)
  rawset(m, "out_features", out_f)
  local bound = 1 / math.sqrt(in_f)
  m.weight = nn.Parameter({ out_f, in_f }, { kind = "uniform", bound = bound })
  if opts.bias ~= false then m.bias = nn.Parameter({ out_f }, { kind = "uniform", bound = bound }) end
  return m
end

-- LoRA (torchtune's LoRALinear, Hu et al. 2021): a linear plus a low-rank update,
-- out = x W^T + b + (alpha / rank) * lora_b(lora_a(dropout(x))). lora_a is initialized as a
-- Linear's weight (kaiming uniform), lora_b with zeros, so the update starts at zero.
-- Freezing the base weights is the spec's (nn.adapter_params).
local LoRALinear = {}
function LoRALinear.forward(self, x)
  local out = F.linear(x, self.weight, self.bias)
  local a_in = self.dropout and self.dropout(x) or x
  return out + (self.alpha / self.rank) * self.lora_b(self.lora_a(a_in))
end
function nn.LoRALinear(in_f, out_f, opts)
  opts = opts_of(opts, { "bias", "rank", "alpha", "dropout" }, "LoRALinear")
  local rank = posint(opts.rank, "rank", "LoRALinear")
  local alpha = opts.alpha
  if type(alpha) ~= "number" or not (alpha > 0 and alpha < math.huge) then
    errors.raise("LoRALinear: alpha must be a positive number, got " .. tostring(alpha))
  end
  local base = nn.Linear(in_f, out_f, { bias = opts.bias })
  local m = new_module("LoRALinear", LoRALinear)
  rawset(m, "in_features", in_f)
  rawset(m, "out_features", out_f)
  rawset(m, "rank", rank)
  rawset(m, "alpha", alpha)
  m.weight = base.weight
  if base.bias then m.bias = base.bias end
  m.lora_a = nn.Linear(in_f, rank, { bias = false })
  m.lora_b = nn.Linear(rank, out_f, { bias = false })
  nn.init.zeros_(m.lora_b.weight)
  local p = opts.dropout == nil and 0 or dropout_p(opts.dropout)
  if p > 0 then m.dropout = nn.Dropout(p) end  -- torchtune's Identity otherwise
  return m
end

-- The LoRA parameters below module m (torchtune's get_adapter_params), in named_parameters
-- order: a fine-tuning spec freezes the model and makes these trainable.
function nn.adapter_params(m)
  if not nn.is_module(m) then errors.raise("adapter_params expects a module") end
  local ps = {}
  for _, e in ipairs(m:named_modules()) do
    if rawget(e[2], "_type") == "LoRALinear" then
      ps[#ps + 1] = e[2].lora_a.weight
      ps[#ps + 1] = e[2].lora_b.weight
    end
  end
  return ps
end

local Embedding = {}
function Embedding.forward(self, idx) return F.embedding(idx, self.weight) end
function nn.Embedding(n, dim)
  posint(n, "num_embeddings", "Embedding")
  posint(dim, "embedding_dim", "Embedding")
  local m = new_module("Embedding", Embedding)
  m.weight = nn.Parameter({ n, dim }, { kind = "normal", std = 1.0 })
  return m
end

local LayerNorm = {}
function LayerNorm.forward(self, x) return F.layer_norm(x, self.weight, self.bias, self.eps) end
function nn.LayerNorm(dim, opts)
  opts = opts_of(opts, { "eps" }, "LayerNorm")
  posint(dim, "normalized_shape", "LayerNorm")
  local m = new_module("LayerNorm", LayerNorm)
  rawset(m, "eps", eps_of(opts, 1e-5, "LayerNorm"))
  m.weight = nn.Parameter({ dim }, { kind = "ones" })
  m.bias = nn.Parameter({ dim }, { kind = "zeros" })
  return m
end

local RMSNorm = {}
function RMSNorm.forward(self, x) return F.rms_norm(x, self.weight, self.eps) end
function nn.RMSNorm(dim, opts)
  opts = opts_of(opts, { "eps" }, "RMSNorm")
  posint(dim, "normalized_shape", "RMSNorm")
  local m = new_module("RMSNorm", RMSNorm)
  rawset(m, "eps", eps_of(opts, 1e-6, "RMSNorm"))
  m.weight = nn.Parameter({ dim }, { kind = "ones" })
  return m
end

local Dropout = {}
function Dropout.forward(self, x) return F.dropout(x, self.p) end
function nn.Dropout(p)
  local m = new_module("Dropout", Dropout)
  rawset(m, "p", dropout_p(p))
  return m
end

local function activation(name, fn)
  local cls = { forward = function(_, x) return fn(x) end }
  return function() return new_module(name, cls) end
end
nn.ReLU, nn.GELU, nn.SiLU = activation("ReLU", F.relu), activation("GELU", F.gelu), activation("SiLU", F.silu)

local function add_list(m, mods, type_name)
  if type(mods) ~= "table" then errors.raise(type_name .. " expects a list of modules") end
  for i, c in ipairs(mods) do
    if not nn.is_module(c) then
      errors.raise(string.format("%s: element %d is not a module", type_name, i))
    end
    m:add_module(tostring(i - 1), c)
  end
end

local Sequential = {}
function Sequential.forward(self, ...)
  local out = table.pack(...)
  for i = 1, #self do
    out = table.pack(self[i](table.unpack(out, 1, out.n)))
  end
  return table.unpack(out, 1, out.n)
end
function nn.Sequential(mods)
  local m = new_module("Sequential", Sequential)
  add_list(m, mods, "Sequential")
  return m
end

local ModuleList = {}
function ModuleList.forward()
  errors.raise("ModuleList has no forward; call its elements")
end
function ModuleList.append(self, c)
  self:add_module(tostring(#self), c)
  return self
end
function nn.ModuleList(mods)
  local m = new_module("ModuleList", ModuleList)
  add_list(m, mods or {}, "ModuleList")
  return m
end

-- Custom modules: nn.Module{ lin = nn.Linear(16, 16), forward = function(self, x) ... end }.
-- Children and parameters given in the table are registered in sorted name order (a Lua
-- table has no order); assign them afterwards (m.a = ...; m.b = ...) for a chosen order.
function nn.Module(def)
  if type(def) ~= "table" then errors.raise("nn.Module expects a table { ..., forward = function(self, ...) end }") end
  if def.name ~= nil and type(def.name) ~= "string" then
    errors.raise("nn.Module: name must be a string (the module's class name), got " .. type(def.name))
  end
  local cls = { forward = def.forward }
  local m = new_module(def.name or "Module", cls)
  local keys = {}
  for k in pairs(def) do
    if k ~= "forward" and k ~= "name" then keys[#keys + 1] = k end
  end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do m[k] = def[k] end
  if def.forward ~= nil and type(def.forward) ~= "function" then
    errors.raise("nn.Module: forward must be a function")
  end
  return m
end

return nn
