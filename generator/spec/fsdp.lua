-- The `fsdp` spec API in FSDP2's vocabulary: fully_shard, the FSDPModule setters,
-- MixedPrecisionPolicy, and fsdp.spec{...} which validates a whole spec.
local errors = require("spec.errors")
local nn = require("spec.nn")
local trace = require("spec.trace")

local fsdp = {}

local states = {}      -- every fully_shard call, in call order
fsdp._states = states

function fsdp._reset()
  for i = #states, 1, -1 do states[i] = nil end
end

-- ---------------------------------------------------------------------------- policies

function fsdp.MixedPrecisionPolicy(opts)
  opts = opts or {}
  errors.check_keys(opts, { "cast_forward_inputs", "output_dtype", "param_dtype", "reduce_dtype" },
    "MixedPrecisionPolicy option")
  local p = { _mp_policy = true, cast_forward_inputs = opts.cast_forward_inputs ~= false }
  for _, k in ipairs({ "param_dtype", "reduce_dtype", "output_dtype" }) do
    if opts[k] ~= nil then
      p[k] = trace.dtype(opts[k], k)
      if not trace.is_float(p[k]) then
        errors.raise(string.format("unsupported dtype %s for %s; allowed: bf16, fp16, fp32", opts[k], k))
      end
    end
  end
  return p
end

function fsdp.CPUOffloadPolicy(opts)
  opts = opts or {}
  errors.check_keys(opts, { "pin_memory" }, "CPUOffloadPolicy option")
  return { _offload_policy = true, kind = "cpu", pin_memory = opts.pin_memory ~= false }
end

-- ---------------------------------------------------------------------------- fully_shard

local function check_reshard_after_forward(v, what, line)
  if v == nil or type(v) == "boolean" then return end
  if math.type(v) == "integer" then return end
  errors.raise(string.format("%s must be true, false, nil or an integer divisor of the shard size, got %s",
    what, type(v) == "string" and ("'" .. v .. "'") or tostring(v)), line)
end

-- The most ranks a spec may have: the generated code holds a row of every rank's shard
-- sizes per group, and the CPU backend runs a thread per rank.
fsdp.MAX_WORLD_SIZE = 1 << 16

local function check_mesh(mesh, what, line)
  if type(mesh) ~= "table" then errors.raise(what .. " must be a table { replicate = R, shard = S }", line) end
  errors.check_keys(mesh, { "replicate", "shard" }, what .. " key", line)
  for _, k in ipairs({ "replicate", "shard" }) do
    local v = mesh[k]
    if math.type(v) ~= "integer" or v < 1 then
      errors.raise(string.format("%s.%s must be a positive integer, got %s", what, k, tostring(v)), line)
    end
  end
  if mesh.replicate > fsdp.MAX_WORLD_SIZE // mesh.shard then
    errors.raise(string.format("%s %d x %d has more than %d ranks, the most fsdpgen supports", what,
      mesh.replicate, mesh.shard, fsdp.MAX_WORLD_SIZE), line)
  end
  return { replicate = mesh.replicate, shard = mesh.shard }
end

function fsdp.fully_shard(target, opts)
  local line = errors.current_line()
  opts = opts or {}
  if type(opts) ~= "table" then errors.raise("fully_shard options must be a table") end
  errors.check_keys(opts, { "mesh", "mp_policy", "offload_policy", "reshard_after_forward", "shard_placement" },
    "fully_shard option")
  local modules
  if nn.is_module(target) then
    modules = { target }
  elseif type(target) == "table" and #target > 0 then
    modules = {}
    for i, m in ipairs(target) do
      if not nn.is_module(m) then errors.raise(string.format("fully_shard: list element %d is not a module", i)) end
      modules[i] = m
    end
  else
    errors.raise("fully_shard expects a module or a non-empty list of modules")
  end
  for _, m in ipairs(modules) do
    local prev = rawget(m, "_fsdp_state")
    if prev then
      errors.raise(string.format("module %s is already sharded (fully_shard at line %s); each module may be sharded once",
        rawget(m, "_type"), tostring(prev.line)))
    end
  end
  check_reshard_after_forward(opts.reshard_after_forward, "reshard_after_forward")
  if opts.mp_policy ~= nil and (type(opts.mp_policy) ~= "table" or not opts.mp_policy._mp_policy) then
    errors.raise("mp_policy must be fsdp.MixedPrecisionPolicy{ param_dtype = ..., reduce_dtype = ... }")
  end
  local placement = opts.shard_placement or "dim0"
  if placement ~= "dim0" and placement ~= "largest_dim" then
    errors.raise(string.format("shard_placement must be \"dim0\" or \"largest_dim\", got %s", tostring(placement)))
  end
  local offload = opts.offload_policy
  if offload == "cpu" then offload = fsdp.CPUOffloadPolicy() end
  if offload ~= nil and (type(offload) ~= "table" or not offload._offload_policy) then
    errors.raise("offload_policy must be \"cpu\" or fsdp.CPUOffloadPolicy{}")
  end

  -- The group takes the parameters under these modules that no inner fully_shard owns
  -- (subtrees already sharded are skipped), in module pre-order, deduplicated.
  local params, seen = {}, {}
  local function collect(m, top)
    if not top and rawget(m, "_fsdp_state") then return end
    for _, pn in ipairs(rawget(m, "_params")) do
      local p = rawget(m, "_params_by_name")[pn]
      if not seen[p] then
        seen[p] = true
        params[#params + 1] = p
      end
    end
    for _, c in ipairs(m:named_children()) do collect(c[2], false) end
  end
  for _, m in ipairs(modules) do collect(m, true) end

  local state = {
    index = #states + 1, modules = modules, params = params, line = line,
    reshard_after_forward = opts.reshard_after_forward,
    reshard_after_forward_unset = opts.reshard_after_forward == nil,
    mp = opts.mp_policy or fsdp.MixedPrecisionPolicy{},
    mesh = opts.mesh and check_mesh(opts.mesh, "fully_shard mesh", line),
    placement = placement, offload = offload,
    fwd_prefetch = {}, bwd_prefetch = {},
    reshard_after_backward = true, reduce_grads = true, all_reduce_grads = true,
    divide_factor = nil, force_sum = false, unshard_in_backward = true,
  }
  states[#states + 1] = state
  for _, m in ipairs(modules) do rawset(m, "_fsdp_state", state) end
  return #modules == 1 and modules[1] or modules
end

-- ---------------------------------------------------------------------------- FSDPModule methods

local M = nn.Module_methods

local function state_of(m, method)
  local s = rawget(m, "_fsdp_state")
  if not s then
    errors.raise(string.format("%s: module %s is not sharded; call fsdp.fully_shard on it first", method,
      rawget(m, "_type")))
  end
  return s
end

local function sharded_list(list, method)
  -- A ModuleList or Sequential is a list of its children (Python iterates them); any other
  -- module is one module, which PyTorch refuses as well.
  local kind = nn.is_module(list) and rawget(list, "_type")
  if type(list) ~= "table" or (kind and kind ~= "ModuleList" and kind ~= "Sequential") then
    errors.raise(string.format("%s expects a list of sharded modules, got %s (wrap one module: { m })", method,
      kind and tostring(list) or type(list)))
  end
  -- Lua drops a nil element: `{ model.layers[n + 1] }` (past the end) or `{ model.layers[0] }`
  -- (Lua counts from 1) makes an empty list or one with a hole, not an error.
  local n = 0
  for k in pairs(kind and {} or list) do
    if math.type(k) ~= "integer" or k < 1 then
      errors.raise(string.format("%s expects a list { m1, m2, ... }, got the key %s", method, tostring(k)))
    end
    n = math.max(n, k)
  end
  if kind then n = #list end
  if n == 0 or n ~= #list then
    errors.raise(string.format("%s got %s: an element is nil, e.g. an index past the end or 0 (Lua lists "
      .. "start at 1: model.layers[1] is PyTorch's layers[0], and the last is model.layers[#model.layers])",
      method, n == 0 and "an empty list" or "a list with a hole"))
  end
  for i = 1, n do
    if list[i] == nil then
      errors.raise(string.format("%s: element %d is nil (Lua lists start at 1; an index past the end gives nil)",
        method, i))
    end
  end
  local out = {}
  for i, m in ipairs(list) do
    if not nn.is_module(m) or not rawget(m, "_fsdp_state") then
      errors.raise(string.format("%s: element %d is not a sharded module (prefetch targets must be passed to fully_shard)",
        method, i))
    end
    out[i] = rawget(m, "_fsdp_state")
  end
  return out
end

-- States of this module and (recursively) every sharded module below it, like
-- `[m for m in self.modules() if isinstance(m, FSDPModule)]`.
local function states_below(m, recurse)
  if not recurse then return { state_of(m, "set") } end
  local out, seen = {}, {}
  for _, e in ipairs(m:named_modules()) do
    local s = rawget(e[2], "_fsdp_state")
    if s and not seen[s] then
      seen[s] = true
      out[#out + 1] = s
    end
  end
  return out
end

fsdp._states_below = states_below

local function recurse_opt(opts, method)
  opts = opts or {}
  if type(opts) ~= "table" then errors.raise(method .. ": options must be a table { recurse = true }") end
  errors.check_keys(opts, { "recurse" }, method .. " option")
  return opts.recurse ~= false
end

local function bool_arg(v, method)
  if type(v) ~= "boolean" then errors.raise(string.format("%s expects true or false, got %s", method, tostring(v))) end
end

function M:set_modules_to_forward_prefetch(list)
  state_of(self, "set_modules_to_forward_prefetch").fwd_prefetch = sharded_list(list, "set_modules_to_forward_prefetch")
end

function M:set_modules_to_backward_prefetch(list)
  state_of(self, "set_modules_to_backward_prefetch").bwd_prefetch = sharded_list(list, "set_modules_to_backward_prefetch")
end

-- The boolean setters that apply to this module and, with recurse (the default), every
-- sharded module below it; `apply(state, v)` sets the state's field.
local function recursive_setter(method, apply)
  M[method] = function(self, v, opts)
    state_of(self, method)
    bool_arg(v, method)
    for _, s in ipairs(states_below(self, recurse_opt(opts, method))) do apply(s, v) end
  end
end

recursive_setter("set_reshard_after_forward", function(s, v)
  s.reshard_after_forward, s.reshard_after_forward_unset = v, false
end)
recursive_setter("set_reshard_after_backward", function(s, v) s.reshard_after_backward = v end)
recursive_setter("set_requires_gradient_sync", function(s, v) s.reduce_grads = v end)
recursive_setter("set_requires_all_reduce", function(s, v) s.all_reduce_grads = v end)

function M:set_gradient_divide_factor(f)
  local s = state_of(self, "set_gradient_divide_factor")
  if type(f) ~= "number" or not (f > 0 and f < math.huge) then
    errors.raise("set_gradient_divide_factor expects a positive finite number, got " .. tostring(f))
  end
  s.divide_factor = f
end
M.set_reduce_scatter_divide_factor = M.set_gradient_divide_factor

function M:set_force_sum_reduction_for_comms(v)
  bool_arg(v, "set_force_sum_reduction_for_comms")
  state_of(self, "set_force_sum_reduction_for_comms").force_sum = v
end

function M:set_unshard_in_backward(v)
  bool_arg(v, "set_unshard_in_backward")
  state_of(self, "set_unshard_in_backward").unshard_in_backward = v
end

-- ---------------------------------------------------------------------------- spec

local spec_keys = { "attention", "grad_clip", "input", "keep_unsharded", "loss", "lr_schedule", "mesh", "model",
  "name", "optimizer", "seed", "step", "world_size" }

local optimizer_defaults = {
  sgd = { lr = 1e-3, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false },
  adam = { lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0 },
  adamw = { lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2 },
}

local function check_optimizer(o)
  o = o or { "adam" }
  if type(o) == "string" then o = { o } end
  if type(o) ~= "table" or type(o[1]) ~= "string" then
    errors.raise("optimizer must be { \"adam\" | \"adamw\" | \"sgd\", lr = ... }")
  end
  local kind = o[1]:lower()
  local d = optimizer_defaults[kind]
  if not d then
    errors.raise(string.format("unknown optimizer '%s'; allowed: adam, adamw, sgd", o[1]))
  end
  local allowed = {}
  for k in pairs(d) do allowed[#allowed + 1] = k end
  allowed[#allowed + 1] = "betas"
  table.sort(allowed)
  local rest = {}
  for k, v in pairs(o) do
    if k ~= 1 then rest[k] = v end
  end
  errors.check_keys(rest, allowed, kind .. " option")
  local out = { kind = kind }
  for k, v in pairs(d) do out[k] = v end
  for k, v in pairs(rest) do
    if k == "betas" then
      if type(v) ~= "table" or type(v[1]) ~= "number" or type(v[2]) ~= "number" then
        errors.raise("optimizer betas must be { beta1, beta2 }")
      end
      out.beta1, out.beta2 = v[1], v[2]
    else
      if type(v) ~= type(d[k]) then
        errors.raise(string.format("optimizer %s must be a %s, got %s", k, type(d[k]), tostring(v)))
      end
      out[k] = v
    end
  end
  -- torch.optim's own checks (a positive lr here: a zero one trains nothing), and no NaN
  -- or infinity anywhere.
  local function need(ok, what, v)
    if not ok or v ~= v or v == math.huge or v == -math.huge then
      errors.raise(string.format("optimizer %s, got %s", what, tostring(v)))
    end
  end
  need(out.lr > 0, "lr must be a positive number", out.lr)
  need(out.weight_decay >= 0, "weight_decay must be >= 0", out.weight_decay)
  if kind == "sgd" then
    need(out.momentum >= 0, "momentum must be >= 0", out.momentum)
    need(true, "dampening must be a finite number", out.dampening)
    if out.nesterov and (out.momentum <= 0 or out.dampening ~= 0) then
      errors.raise("optimizer nesterov needs momentum > 0 and dampening = 0 (as torch.optim.SGD)")
    end
  else
    need(out.beta1 >= 0 and out.beta1 < 1, "beta1 must be in [0, 1)", out.beta1)
    need(out.beta2 >= 0 and out.beta2 < 1, "beta2 must be in [0, 1)", out.beta2)
    need(out.eps >= 0, "eps must be >= 0", out.eps)
  end
  return out
end

-- lr_schedule = { "cosine" | "linear" | "constant", warmup_steps = W, total_steps = N,
-- min_lr = x }: the learning rate of the run's i-th optimizer.step() (rt_model.h
-- rt_lr_schedule has the formula). nil: the optimizer's lr throughout.
local lr_decay_keys = {
  constant = { "warmup_steps" },
  cosine = { "min_lr", "total_steps", "warmup_steps" },
  linear = { "min_lr", "total_steps", "warmup_steps" },
}
local MAX_LR_STEPS = 1 << 53  -- exact in the runtime's doubles

local function check_lr_schedule(t, optimizer)
  if t == nil then return nil end
  local usage = 'lr_schedule must be { "cosine" | "linear" | "constant", warmup_steps = W, total_steps = N, min_lr = x }'
  if type(t) ~= "table" or type(t[1]) ~= "string" then errors.raise(usage) end
  local decay = t[1]
  local keys = lr_decay_keys[decay]
  if not keys then
    local hint = errors.closest(decay, { "constant", "cosine", "linear" })
    errors.raise(string.format("unknown lr_schedule '%s'%s; allowed: constant, cosine, linear", decay,
      hint and string.format(" (did you mean '%s'?)", hint) or ""))
  end
  local rest = {}
  for k, v in pairs(t) do
    if k ~= 1 then rest[k] = v end
  end
  errors.check_keys(rest, keys, decay .. " lr_schedule key")
  local function steps(k, v, least, why)
    if math.type(v) ~= "integer" or v < least or v > MAX_LR_STEPS then
      errors.raise(string.format("lr_schedule %s must be an integer from %d%s to 2^53, got %s", k, least, why,
        tostring(v)))
    end
    return v
  end
  local out = { decay = decay, warmup_steps = steps("warmup_steps", t.warmup_steps or 0, 0, ""), total_steps = 0,
    min_lr = 0.0 }
  if decay ~= "constant" then
    if t.total_steps == nil then
      errors.raise(string.format("%s lr_schedule needs total_steps (the optimizer step at which the lr reaches min_lr)",
        decay))
    end
    out.total_steps = steps("total_steps", t.total_steps, out.warmup_steps + 1, " (warmup_steps + 1)")
    local m = t.min_lr or 0.0
    if type(m) ~= "number" or not (m >= 0 and m <= optimizer.lr) then
      errors.raise(string.format("lr_schedule min_lr must be a number from 0 to the optimizer's lr %s, got %s",
        tostring(optimizer.lr), tostring(m)))
    end
    out.min_lr = m
  end
  return out
end

-- The step program's items. The setters and unshard/reshard are FSDPModule calls between
-- forwards and backwards (module = FQN, default the root; setters recurse by default, as
-- PyTorch's); set_is_last_backward is the state context's flag.
local step_kinds = { "backward", "forward", "optimizer", "reshard", "set_is_last_backward",
  "set_requires_all_reduce", "set_requires_gradient_sync", "set_reshard_after_backward", "unshard" }
-- The setters a step item may call, and the state field each sets.
fsdp.step_setters = {
  { kind = "set_requires_gradient_sync", field = "reduce_grads" },
  { kind = "set_requires_all_reduce", field = "all_reduce_grads" },
  { kind = "set_reshard_after_backward", field = "reshard_after_backward" },
}
local setter_fields = {}
for _, s in ipairs(fsdp.step_setters) do setter_fields[s.kind] = s.field end

-- The sharded modules' FQNs, for error messages.
local function sharded_fqns(model)
  local out = {}
  for _, e in ipairs(model:named_modules()) do
    if rawget(e[2], "_fsdp_state") then out[#out + 1] = e[1] == "" and "''" or e[1] end
  end
  return table.concat(out, ", ")
end

-- The sharded module an item names (module = FQN, "" or absent: the root).
local function step_module(model, fqn, where)
  if fqn == nil or fqn == "" then return model, "" end
  if type(fqn) ~= "string" then errors.raise(where .. ": module must be an FQN string such as \"layers.0\"") end
  local ok, m = pcall(model.get, model, fqn)
  if not ok or not nn.is_module(m) then
    errors.raise(string.format("%s: the model has no module '%s' (sharded modules: %s)", where, fqn, sharded_fqns(model)))
  end
  if not rawget(m, "_fsdp_state") then
    errors.raise(string.format("%s: module '%s' is not sharded (sharded modules: %s)", where, fqn, sharded_fqns(model)))
  end
  return m, fqn
end

local function check_step(step, model)
  step = step or { "forward", "backward", "optimizer" }
  if type(step) ~= "table" or nn.is_module(step) or #step == 0 then
    errors.raise("step must be a non-empty list such as { \"forward\", \"backward\", \"optimizer\" }")
  end
  local out = {}
  for i, item in ipairs(step) do
    local where = string.format("step[%d]", i)
    local it = type(item) == "string" and { item } or item
    if type(it) ~= "table" or type(it[1]) ~= "string" then
      errors.raise(where .. " must be a string or a table { \"backward\", ... }")
    end
    local kind = it[1]
    local known = false
    for _, k in ipairs(step_kinds) do known = known or k == kind end
    if not known then
      local hint = errors.closest(kind, step_kinds)
      errors.raise(string.format("%s: unknown step '%s'%s; allowed: %s", where, kind,
        hint and (" (did you mean '" .. hint .. "'?)") or "", table.concat(step_kinds, ", ")))
    end
    local rest = {}
    for k, v in pairs(it) do
      if k ~= 1 and k ~= 2 then rest[k] = v end
    end
    local function flag(name)
      if rest[name] ~= nil and type(rest[name]) ~= "boolean" then
        errors.raise(string.format("%s: %s %s must be true or false, got %s", where, kind, name, tostring(rest[name])))
      end
      return rest[name]
    end
    local function value()
      if type(it[2]) ~= "boolean" then errors.raise(string.format("%s: { \"%s\", true|false }", where, kind)) end
      return it[2]
    end
    if it[2] ~= nil and not (setter_fields[kind] or kind == "set_is_last_backward") then
      errors.raise(string.format("%s: '%s' takes no value (only its options, such as module = ...)", where, kind))
    end
    local e = { kind = kind }
    if kind == "backward" then
      errors.check_keys(rest, { "is_last_backward", "output", "retain_graph" }, "backward option")
      if rest.output ~= nil and (math.type(rest.output) ~= "integer" or rest.output < 1) then
        errors.raise(where .. ": backward output must be a positive integer (1-based)")
      end
      e.output = rest.output
      e.is_last_backward = flag("is_last_backward")
      e.retain_graph = flag("retain_graph") or false
    elseif setter_fields[kind] then
      errors.check_keys(rest, { "module", "recurse" }, kind .. " option")
      local m
      m, e.module = step_module(model, rest.module, where)
      e.value, e.field, e.recurse = value(), setter_fields[kind], flag("recurse") ~= false
      e.states = fsdp._states_below(m, e.recurse)
    elseif kind == "forward" then
      -- module = FQN: that sharded module's forward on the input (non-root forward).
      errors.check_keys(rest, { "module" }, "forward option")
      if rest.module ~= nil then e.module_obj, e.module = step_module(model, rest.module, where) end
    elseif kind == "set_is_last_backward" then
      errors.check_keys(rest, {}, kind .. " option")
      e.value = value()
    elseif kind == "unshard" or kind == "reshard" then
      -- Without a module: every sharded module, in model.modules() order.
      errors.check_keys(rest, kind == "unshard" and { "async_op", "module" } or { "module" }, kind .. " option")
      if rest.module ~= nil then
        local m
        m, e.module = step_module(model, rest.module, where)
        e.states = { rawget(m, "_fsdp_state") }
      else
        e.states = fsdp._states_below(model, true)
      end
      if kind == "unshard" then e.async_op = flag("async_op") or false end
    else
      errors.check_keys(rest, {}, kind .. " option")
    end
    out[i] = e
  end
  return out
end

local function check_input(inp, model)
  if type(inp) ~= "table" or nn.is_module(inp) then
    errors.raise("input must be { batch = B, seq_len = T } for token models or { shape = { ... } } for float inputs")
  end
  if inp.shape ~= nil then
    errors.check_keys(inp, { "dtype", "shape" }, "input key")
    if type(inp.shape) ~= "table" or #inp.shape == 0 then errors.raise("input.shape must be a list of sizes") end
    trace.check_numel(inp.shape, "input.shape") -- no nil size: { nil, 16 }
    for _, d in ipairs(inp.shape) do
      if math.type(d) ~= "integer" or d < 1 then
        errors.raise("input.shape sizes must be positive integers, got " .. tostring(d))
      end
    end
    trace.check_numel(inp.shape, "input.shape")
    return { shape = { table.unpack(inp.shape) }, dtype = trace.dtype(inp.dtype or "fp32", "input"), tokens = false }
  end
  errors.check_keys(inp, { "batch", "seq_len" }, "input key")
  for _, k in ipairs({ "batch", "seq_len" }) do
    if math.type(inp[k]) ~= "integer" or inp[k] < 1 then
      errors.raise(string.format("input.%s must be a positive integer, got %s", k, tostring(inp[k])))
    end
  end
  trace.check_numel({ inp.batch, inp.seq_len }, "input batch x seq_len")
  local max = rawget(model, "max_seq_len")
  if max and inp.seq_len > max then
    errors.raise(string.format("input seq_len %d exceeds the model's max_seq_len %d", inp.seq_len, max))
  end
  return { shape = { inp.batch, inp.seq_len }, dtype = "int64", tokens = true }
end

local C_KEYWORDS = {}
for w in ([[auto break case char const continue default do double else enum extern float for goto if inline
  int long register restrict return short signed sizeof static struct switch typedef union unsigned void volatile
  while _Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn _Static_assert _Thread_local
  bool true false main]]):gmatch("%S+") do C_KEYWORDS[w] = true end
fsdp.MAX_NAME = 64

-- The spec's name names the build directory, the files in it and the C symbols
-- `<name>_model`: a C identifier that clashes with neither C nor the runtime's `rt_`.
function fsdp.check_name(name)
  if type(name) ~= "string" or not name:match("^%a[%w_]*$") or #name > fsdp.MAX_NAME then
    errors.raise(string.format("spec name must be a C identifier (a letter, then letters, digits or '_'; at most "
      .. "%d characters), got %s", fsdp.MAX_NAME, type(name) == "string" and string.format("%q", name):gsub("\\\n", "\\n")
      or tostring(name)))
  end
  local low = name:lower()
  if low == "rt" or low:sub(1, 3) == "rt_" then
    errors.raise(string.format("spec name '%s' clashes with the runtime's symbols (rt, rt_*, RT_*); choose another", name))
  end
  if C_KEYWORDS[name] then
    errors.raise(string.format("spec name '%s' is a C keyword; choose another", name))
  end
end

function fsdp.spec(t)
  local line = errors.current_line()
  if type(t) ~= "table" then errors.raise("fsdp.spec expects a table") end
  errors.check_keys(t, spec_keys, "spec key")
  fsdp.check_name(t.name)
  if t.model == nil then errors.raise("spec is missing 'model' (the root module)") end
  if not nn.is_module(t.model) then errors.raise("spec model must be a module") end
  local mesh
  if t.mesh ~= nil then
    if t.world_size ~= nil then errors.raise("give either world_size or mesh, not both") end
    mesh = check_mesh(t.mesh, "mesh")
  else
    local ws = t.world_size
    if math.type(ws) ~= "integer" or ws < 1 or ws > fsdp.MAX_WORLD_SIZE then
      errors.raise(string.format("world_size must be an integer from 1 to %d, got %s", fsdp.MAX_WORLD_SIZE, tostring(ws)))
    end
    mesh = { replicate = 1, shard = ws }
  end
  local loss = t.loss or "sum"
  if loss ~= "sum" and loss ~= "cross_entropy" then
    errors.raise(string.format("loss must be \"sum\" or \"cross_entropy\", got %s", tostring(loss)))
  end
  local input = check_input(t.input or {}, t.model)
  if loss == "cross_entropy" and not input.tokens then
    errors.raise("loss \"cross_entropy\" needs a token model (input = { batch, seq_len })")
  end
  if t.grad_clip ~= nil and (type(t.grad_clip) ~= "number" or not (t.grad_clip > 0)) then
    errors.raise("grad_clip must be a positive number (max global gradient norm)")
  end
  if t.seed ~= nil and (math.type(t.seed) ~= "integer" or t.seed < 0) then
    errors.raise(string.format("seed must be an integer from 0 to %d, got %s", math.maxinteger, tostring(t.seed)))
  end
  local attention = t.attention or "auto"
  if attention ~= "auto" and attention ~= "cudnn" and attention ~= "fsdpgen" then
    errors.raise(string.format("attention must be \"auto\", \"cudnn\" or \"fsdpgen\", got %s",
      type(attention) == "string" and string.format("%q", attention) or tostring(attention)))
  end
  local keep_unsharded = t.keep_unsharded
  if keep_unsharded == nil then keep_unsharded = true end
  if type(keep_unsharded) ~= "boolean" then
    errors.raise(string.format("keep_unsharded must be true or false, got %s",
      type(keep_unsharded) == "string" and string.format("%q", keep_unsharded) or tostring(keep_unsharded)))
  end
  -- p.requires_grad set by assignment (p.requires_grad = false, as in PyTorch)
  for _, e in ipairs(t.model:named_parameters()) do
    local v = e[2].requires_grad
    if type(v) ~= "boolean" then
      errors.raise(string.format("parameter '%s': requires_grad must be true or false, got %s", e[1],
        type(v) == "string" and string.format("%q", v) or tostring(v)))
    end
  end
  local root_state = rawget(t.model, "_fsdp_state")
  if not root_state then
    errors.raise("the model itself is not sharded; call fsdp.fully_shard(model) last, on the root")
  end
  local spec = {
    _spec = true, line = line, name = t.name, model = t.model, mesh = mesh,
    world_size = mesh.replicate * mesh.shard, input = input, loss = loss,
    optimizer = check_optimizer(t.optimizer), step = check_step(t.step, t.model),
    grad_clip = t.grad_clip, seed = t.seed or 42, attention = attention,
    keep_unsharded = keep_unsharded, states = {},
  }
  spec.lr_schedule = check_lr_schedule(t.lr_schedule, spec.optimizer)
  -- Validate every group against the mesh (integer reshard_after_forward must divide
  -- the shard size), reported at the fully_shard call that set it.
  for _, s in ipairs(states) do
    local m = s.mesh or mesh
    if m.replicate * m.shard ~= spec.world_size then
      errors.raise(string.format("fully_shard mesh %dx%d does not match the world size %d",
        m.replicate, m.shard, spec.world_size), s.line)
    end
    if math.type(s.reshard_after_forward) == "integer" then
      local raf = s.reshard_after_forward
      if raf < 1 or raf > m.shard or m.shard % raf ~= 0 then
        errors.raise(string.format("reshard_after_forward = %d must divide the shard size %d (allowed: %s)",
          raf, m.shard, fsdp._divisors(m.shard)), s.line)
      end
    end
    spec.states[#spec.states + 1] = s
  end
  return spec
end

function fsdp._divisors(n)
  local d = {}
  for i = 1, n do
    if n % i == 0 then d[#d + 1] = tostring(i) end
  end
  return table.concat(d, ", ") .. ", true or false"
end

return fsdp
