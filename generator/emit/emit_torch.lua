-- `fsdpgen torch`: writes a spec's twin, one standalone PyTorch FSDP2 program with the
-- spec's model (its parameter names, shapes and traced math in torch.nn), the same
-- fully_shard calls and setters, the step program as PyTorch calls, the optimizer, its
-- schedule and clipping, and the binary's inputs and initial weights. An emit stage: it
-- reads the planned spec and traces its forwards again with the planner's own hooks (so
-- dtypes are the planned ones), recording module calls; it changes nothing it is given.
-- The runtime part of the twin (data, init, event and collective recording, the ranks)
-- is templates/torch_twin.py, copied in after the spec's part.
local attention = require("memory.attention")
local buffer = require("util.buffer")
local emit_step = require("emit.emit_step")
local errors = require("spec.errors")
local planner = require("plan.planner")
local trace = require("spec.trace")

local M = {}

local TORCH_DTYPE = { fp32 = "torch.float32", bf16 = "torch.bfloat16", fp16 = "torch.float16",
  int32 = "torch.int32", int64 = "torch.int64" }

-- A construct the twin cannot express: one line naming it.
local function cannot(what)
  errors.raise("fsdpgen torch: cannot express " .. what .. " in PyTorch")
end

local function pynum(v)
  if math.type(v) == "integer" then return tostring(v) end
  if v == math.huge then return "float('inf')" end
  for digits = 15, 17 do  -- the shortest form that reads back as v
    local s = string.format("%." .. digits .. "g", v)
    if tonumber(s) == v then return s:find("[%.eni]") and s or (s .. ".0") end
  end
  return string.format("%.17g", v)
end

local function pystr(s) return '"' .. tostring(s):gsub("\\", "\\\\"):gsub('"', '\\"') .. '"' end

local function pybool(b) return b and "True" or "False" end

-- ---------------------------------------------------------------------------- tracing

-- Traces `target(inp)` with the planner's hooks of a fresh simulation (MP casts, FSDP
-- bookkeeping), recording module enters/exits and ops outside the hooks. Ops made inside
-- a hook (input/output casts, the post-backward function) are FSDP's: their outputs alias
-- their inputs in the twin, where FSDP2 makes them itself.
local function trace_forward(spec, target)
  local sim = planner.new(spec)
  sim.phase, sim.section, sim.forward_index = "forward", 1, 1
  local inner = sim:trace_hooks()
  local events, alias, in_hook = {}, {}, 0
  local hooks = {
    pre_forward = function(module, args)
      local copy = {}
      for i = 1, args.n or #args do copy[i] = args[i] end
      events[#events + 1] = { kind = "enter", module = module, args = copy, n = args.n or #args,
        region = trace.state.ckpt }
      in_hook = in_hook + 1
      local out = inner.pre_forward(module, args)
      in_hook = in_hook - 1
      return out
    end,
    post_forward = function(module, args, outs)
      local copy = {}
      for i = 1, outs.n or #outs do copy[i] = outs[i] end
      events[#events + 1] = { kind = "exit", module = module, outs = copy, n = outs.n or #outs }
      in_hook = in_hook + 1
      inner.post_forward(module, args, outs)
      in_hook = in_hook - 1
    end,
    on_op = function(op)
      inner.on_op(op)
      if in_hook > 0 then
        for i, t in ipairs(op.outs) do alias[t] = op.ins[i] end
      else
        events[#events + 1] = { kind = "op", op = op, region = op.region }
      end
    end,
  }
  local inp = trace.new_tensor(spec.input.shape, spec.input.dtype, false, nil)
  inp.is_input = true
  trace.begin(sim.graph, hooks)
  local ok, res = pcall(function() return table.pack(target(inp)) end)
  trace.begin(nil, nil)
  if not ok then error(res, 0) end
  return events, alias, inp, res
end

-- Builds the call tree of a traced forward: each call holds its module, args, outs and
-- items (ops and nested calls) in order.
local function call_tree(events)
  local pos = 1
  local function parse(enter)
    local node = { module = enter.module, args = enter.args, n = enter.n, region = enter.region, items = {} }
    while true do
      local e = events[pos]
      pos = pos + 1
      if not e then errors.raise("fsdpgen torch: internal error: unbalanced module calls") end
      if e.kind == "exit" then
        node.outs, node.nouts = e.outs, e.n
        return node
      elseif e.kind == "enter" then
        node.items[#node.items + 1] = { call = parse(e), region = e.region }
      else
        node.items[#node.items + 1] = { op = e.op, region = e.region }
      end
    end
  end
  local roots = {}
  while pos <= #events do
    local e = events[pos]
    pos = pos + 1
    if e.kind ~= "enter" then cannot("an op outside every module call (" .. e.op.kind .. ")") end
    roots[#roots + 1] = parse(e)
  end
  return roots
end

-- ---------------------------------------------------------------------------- modules

local function is_ident(s) return s:match("^[%a_][%w_]*$") ~= nil end

-- Python expression of the attribute path `rel` (dot-separated) under `base`, the
-- expression of module `m`: list containers are indexed, other names are attributes.
local function path_expr(base, rel, m)
  if rel == "" then return base end
  local e = base
  for part in rel:gmatch("[^%.]+") do
    local ty = m and rawget(m, "_type")
    if (ty == "ModuleList" or ty == "Sequential") and part:match("^%d+$") then
      e = e .. "[" .. part .. "]"
    elseif is_ident(part) then
      e = e .. "." .. part
    else
      e = e .. string.format('.get_submodule("%s")', part)
    end
    m = m and rawget(m, "_modules_by_name")[part]
  end
  return e
end

-- Leaf layers that map to torch.nn layers (Dropout to the twin's, which draws the binary's
-- masks), with the one op their forward records.
local LEAF = {
  Linear = function(m)
    return string.format("nn.Linear(%d, %d, bias=%s)", rawget(m, "in_features"), rawget(m, "out_features"),
      pybool(rawget(m, "_params_by_name").bias ~= nil))
  end,
  Embedding = function(m)
    local w = rawget(m, "_params_by_name").weight
    return string.format("nn.Embedding(%d, %d)", w.shape[1], w.shape[2])
  end,
  LayerNorm = function(m)
    return string.format("nn.LayerNorm(%d, eps=%s)", rawget(m, "_params_by_name").weight.shape[1], pynum(rawget(m, "eps")))
  end,
  RMSNorm = function(m)
    return string.format("nn.RMSNorm(%d, eps=%s)", rawget(m, "_params_by_name").weight.shape[1], pynum(rawget(m, "eps")))
  end,
  Dropout = function(m) return string.format("Dropout(%s)", pynum(rawget(m, "p"))) end,
  ReLU = function() return "nn.ReLU()" end,
  GELU = function() return "nn.GELU()" end,
  SiLU = function() return "nn.SiLU()" end,
  ModuleList = function() return "nn.ModuleList()" end,
}

-- ---------------------------------------------------------------------------- forward code

-- Generates the forward body of one call. `fqn_of[module]` is its FQN; parameters are
-- named through `param_names[p]` (every FQN of p). Returns the lines (without the def).
local function gen_body(node, ctx)
  local names, counter, lines = {}, 0, {}
  local alias = ctx.alias
  local prefix = ctx.fqn_of[node.module]
  local function real(t)
    while alias[t] do t = alias[t] end
    return t
  end
  local function rel(fqn)
    if prefix == "" then return fqn end
    if fqn == prefix then return "" end
    if fqn:sub(1, #prefix + 1) == prefix .. "." then return fqn:sub(#prefix + 2) end
    return nil
  end
  local function ref(t)
    t = real(t)
    if t.is_param then
      for _, fqn in ipairs(ctx.param_names[t] or {}) do
        local r = rel(fqn)
        if r then return path_expr("self", r, node.module) end
      end
      cannot(string.format("module '%s' using parameter '%s' of a module outside it", prefix, t.fqn or "?"))
    end
    local n = names[t]
    if not n then
      cannot(string.format("module '%s' using a tensor made outside its forward (pass it as an argument)", prefix))
    end
    return n
  end
  local function new_name(t)
    counter = counter + 1
    local n = "h" .. counter
    names[real(t)] = n
    return n
  end
  local params = {}
  for i = 1, node.n do
    local a = node.args[i]
    if not trace.is_tensor(a) then cannot(string.format("module '%s' called with a %s argument", prefix, type(a))) end
    params[i] = "x" .. (i - 1)
    names[real(a)] = params[i]
  end
  local function op_expr(op)
    local k, a = op.kind, op.attrs
    local i = {}
    for j, t in ipairs(op.ins) do i[j] = ref(t) end
    if k == "linear" then return string.format("F.linear(%s)", table.concat(i, ", "))
    elseif k == "embedding" then return string.format("F.embedding(%s, %s)", i[1], i[2])
    elseif k == "layer_norm" then
      return string.format("F.layer_norm(%s, (%d,), %s, %s, %s)", i[1], op.ins[2].shape[1], i[2], i[3], pynum(a.eps))
    elseif k == "rms_norm" then
      return string.format("F.rms_norm(%s, (%d,), %s, %s)", i[1], op.ins[2].shape[1], i[2], pynum(a.eps))
    elseif k == "relu" or k == "gelu" or k == "silu" then return string.format("F.%s(%s)", k, i[1])
    elseif k == "add" then return string.format("%s + %s", i[1], i[2])
    elseif k == "mul" then return string.format("%s * %s", i[1], i[2])
    elseif k == "scale" then return string.format("%s * %s", i[1], pynum(a.scale))
    elseif k == "swiglu" then return string.format("F.silu(%s) * %s", i[1], i[2])
    elseif k == "dropout" then return string.format("dropout(%s, %s, self.training)", i[1], pynum(a.p))
    elseif k == "attention" then
      local drop = a.dropout_p and string.format(", dropout_p=%s if self.training else 0.0", pynum(a.dropout_p)) or ""
      return string.format("attention(%s, %s, %s, n_heads=%d, n_kv_heads=%d, causal=%s%s)", i[1], i[2], i[3],
        a.n_heads, a.n_kv_heads, pybool(a.causal), drop)
    elseif k == "rotary" then return string.format("rotary(%s, n_heads=%d, theta=%s)", i[1], a.n_heads, pynum(a.theta))
    elseif k == "cast" then return string.format("%s.to(%s)", i[1], TORCH_DTYPE[a.to])
    elseif k == "sum" then return string.format("%s.sum()", i[1])
    elseif k == "arange" then return string.format("torch.arange(%d)", op.outs[1].shape[1])
    end
    cannot(string.format("the op '%s' (in module '%s')", k, prefix))
  end
  local region_count = 0
  -- The outermost region of r strictly inside `base` (nil when r is base or outside).
  local function top_region(r, base)
    if r == base or r == nil then return nil end
    while r.parent ~= base do
      r = r.parent
      if r == nil then return nil end
    end
    return r
  end
  local function outs_of(item)
    if item.op then return item.op.outs end
    local o = {}
    for j = 1, item.call.nouts do o[j] = item.call.outs[j] end
    return o
  end
  local function ins_of(item)
    if item.op then return item.op.ins end
    local o = {}
    for j = 1, item.call.n do o[j] = item.call.args[j] end
    return o
  end
  local emit_items
  local function emit_item(item, ind)
    local lhs = {}
    local outs = outs_of(item)
    local rhs
    if item.op then
      rhs = op_expr(item.op)
    else
      local c = item.call
      local f = ctx.fqn_of[c.module]
      local r = f and rel(f)
      if not r or r == "" then cannot(string.format("module '%s' calling '%s', which is not below it", prefix, f or "?")) end
      local args = {}
      for j = 1, c.n do args[j] = ref(c.args[j]) end
      rhs = string.format("%s(%s)", path_expr("self", r, node.module), table.concat(args, ", "))
    end
    for j, t in ipairs(outs) do
      if trace.is_tensor(t) then lhs[j] = new_name(t) else cannot("a module returning a non-tensor") end
    end
    if #lhs == 0 then lines[#lines + 1] = ind .. rhs
    else lines[#lines + 1] = ind .. table.concat(lhs, ", ") .. " = " .. rhs end
  end
  -- Items [a, b] at region `base`: runs of items in a region below base become a nested
  -- function under torch.utils.checkpoint (except a module's composable checkpoint).
  emit_items = function(items, a, b, base, ind, later_uses)
    local k = a
    while k <= b do
      local r = top_region(items[k].region, base)
      if not r then
        emit_item(items[k], ind)
        k = k + 1
      else
        local e = k
        while e + 1 <= b and top_region(items[e + 1].region, base) == r do e = e + 1 end
        local it = items[k]
        if e == k and it.call and rawget(it.call.module, "_checkpoint") then
          emit_item(it, ind)   -- checkpoint(module), applied where the model is built
        else
          -- Tensors made in the region and used after it are its outputs.
          local made, outs, seen = {}, {}, {}
          for j = k, e do
            for _, t in ipairs(outs_of(items[j])) do made[real(t)] = true end
            -- nested calls' outputs are all listed as the call's outs
          end
          local function use(t)
            t = real(t)
            if made[t] and not seen[t] then
              seen[t] = true
              outs[#outs + 1] = t
            end
          end
          for j = e + 1, #items do
            for _, t in ipairs(ins_of(items[j])) do if trace.is_tensor(t) then use(t) end end
          end
          for _, t in ipairs(later_uses) do use(t) end
          local args = {}
          for j = 1, r.args.n or #r.args do
            local v = r.args[j]
            if trace.is_tensor(v) then args[#args + 1] = ref(v) end
          end
          region_count = region_count + 1
          local fname = "_checkpointed" .. region_count
          lines[#lines + 1] = ind .. string.format("def %s(%s):", fname, table.concat(args, ", "))
          emit_items(items, k, e, r, ind .. "    ", later_uses)
          local rets = {}
          for j, t in ipairs(outs) do rets[j] = names[t] end
          lines[#lines + 1] = ind .. "    return " .. (#rets == 1 and rets[1] or "(" .. table.concat(rets, ", ") .. ")")
          local call = string.format("checkpoint(%s%s, use_reentrant=False)", fname,
            #args > 0 and (", " .. table.concat(args, ", ")) or "")
          if #rets == 1 then lines[#lines + 1] = ind .. rets[1] .. " = " .. call
          elseif #rets > 1 then lines[#lines + 1] = ind .. table.concat(rets, ", ") .. " = " .. call
          else lines[#lines + 1] = ind .. call end
        end
        k = e + 1
      end
    end
  end
  local final = {}
  for j = 1, node.nouts do final[j] = node.outs[j] end
  emit_items(node.items, 1, #node.items, node.region, "", final)
  local rets = {}
  for j, t in ipairs(final) do
    if not trace.is_tensor(t) then cannot(string.format("module '%s' returning a %s", prefix, type(t))) end
    rets[j] = ref(t)
  end
  lines[#lines + 1] = "return " .. table.concat(rets, ", ")
  return params, lines
end

-- ---------------------------------------------------------------------------- the twin

-- The step's dropouts in the order its forwards trace them, as "(site, elements)": the
-- binary draws each from its RNG site (the op's id; a recomputed forward its original's),
-- and the twin's DropoutSites hands them out in this order.
local function dropout_sites(plan)
  local out = {}
  for _, op in ipairs(plan.graph.ops) do
    local n
    if op.kind == "dropout" and op.attrs.p > 0 then n = trace.numel(op.ins[1].shape)
    elseif op.attrs.dropout_p then
      local B, T = attention.dims(op)
      n = B * op.attrs.n_heads * T * T
    end
    if n and not op.original then out[#out + 1] = string.format("(%d, %d)", op.id, n) end
  end
  return out
end

-- Returns the twin's text.
function M.text(plan, spec_path, root)
  local spec = plan.spec
  local model = spec.model
  local fqn_of, modules = {}, model:named_modules()
  for _, e in ipairs(modules) do fqn_of[e[2]] = e[1] end
  local param_names, params = {}, model:named_parameters()
  for _, e in ipairs(params) do param_names[e[2]] = e[3] end
  local ctx = { fqn_of = fqn_of, param_names = param_names, alias = {} }

  -- Trace every distinct forward target of the step (the root, or a sharded module).
  local targets, seen_t = {}, {}
  for _, item in ipairs(spec.step) do
    if item.kind == "forward" then
      local m = item.module_obj or model
      if not seen_t[m] then
        seen_t[m] = true
        targets[#targets + 1] = m
      end
    end
  end
  local bodies = {}   -- module -> { params, lines, text }
  for _, target in ipairs(targets) do
    local events, alias = trace_forward(spec, target)
    for k, v in pairs(alias) do ctx.alias[k] = v end
    local function walk(node)
      local p, lines = gen_body(node, ctx)
      local text = table.concat(p, ",") .. "\n" .. table.concat(lines, "\n")
      local prev = bodies[node.module]
      if prev and prev.text ~= text then
        cannot(string.format("module '%s' called with two different forwards", fqn_of[node.module]))
      end
      bodies[node.module] = { params = p, lines = lines, text = text }
      for _, it in ipairs(node.items) do
        if it.call then walk(it.call) end
      end
    end
    for _, r in ipairs(call_tree(events)) do walk(r) end
  end

  local b = buffer.new("    ")
  b:line("#!/usr/bin/env python3")
  b:line('"""The PyTorch FSDP2 twin of %s (spec "%s"), written by `fsdpgen torch`.', spec_path, spec.name)
  b:line("")
  b:line("The model in torch.nn with the spec's parameter names, shapes and math, the spec's")
  b:line("fully_shard calls and setters, its step program, optimizer, lr schedule and clipping,")
  b:line("on the training binary's inputs and initial weights. Run: python3 THIS.py --world N")
  b:line("(spawns gloo CPU ranks) or torchrun --nproc-per-node N THIS.py; --help for options.")
  b:line("It prints the FSDP events and collective counts of each step as `fsdpgen events` and")
  b:line("`fsdpgen counts` do, and `step N loss X` as the binary does.")
  b:line('"""')
  b:line("import math")
  b:line("")
  b:line("import torch")
  b:line("import torch.nn as nn")
  b:line("import torch.nn.functional as F")
  b:line("from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard")
  b:line("from torch.distributed.tensor import Shard")
  b:line("from torch.utils.checkpoint import checkpoint")
  b:line("")
  b:line("")

  -- The spec's numbers.
  local inp = spec.input
  local shape = {}
  for i, d in ipairs(inp.shape) do shape[i] = tostring(d) end
  local vocab = inp.tokens and emit_step.vocab(plan) or 0
  local o = spec.optimizer
  local opt
  if o.kind == "sgd" then
    opt = string.format('dict(kind="sgd", lr=%s, momentum=%s, dampening=%s, weight_decay=%s, nesterov=%s)', pynum(o.lr),
      pynum(o.momentum), pynum(o.dampening), pynum(o.weight_decay), pybool(o.nesterov))
  else
    opt = string.format('dict(kind="%s", lr=%s, betas=(%s, %s), eps=%s, weight_decay=%s)', o.kind, pynum(o.lr),
      pynum(o.beta1), pynum(o.beta2), pynum(o.eps), pynum(o.weight_decay))
  end
  local ls = spec.lr_schedule
  local n_forward = 0
  for _, item in ipairs(spec.step) do if item.kind == "forward" then n_forward = n_forward + 1 end end
  local any_bf16 = false
  for _, s in ipairs(spec.states) do
    if s.mp.param_dtype and s.mp.param_dtype ~= "fp32" then any_bf16 = true end
  end
  b:line("SPEC = dict(")
  b:indent()
  b:line("name=%s, world=%d, mesh=(%d, %d), seed=%d,", pystr(spec.name), spec.world_size, spec.mesh.replicate,
    spec.mesh.shard, spec.seed)
  b:line("tokens=%s, input_shape=(%s,), input_dtype=%s, vocab=%d, n_forward=%d,", pybool(inp.tokens),
    table.concat(shape, ", "), TORCH_DTYPE[inp.dtype], vocab, n_forward)
  b:line("loss=%s, grad_clip=%s,", pystr(spec.loss), spec.grad_clip and pynum(spec.grad_clip) or "None")
  b:line("optimizer=%s,", opt)
  if ls then
    b:line('lr_schedule=dict(decay="%s", warmup_steps=%d, total_steps=%d, min_lr=%s),', ls.decay, ls.warmup_steps,
      ls.total_steps, pynum(ls.min_lr))
  else
    b:line("lr_schedule=None,")
  end
  b:line("replicate=%s, low_precision=%s,", pybool(spec.mesh.replicate > 1), pybool(any_bf16))
  -- eight to a line, so that a deep model's list stays readable
  local sites = dropout_sites(plan)
  if #sites == 0 then b:line("dropout_sites=[],") else
    b:line("dropout_sites=[")
    for i = 1, #sites, 8 do b:line("    %s,", table.concat(sites, ", ", i, math.min(i + 7, #sites))) end
    b:line("],")
  end
  b:dedent()
  b:line(")")
  b:line("")
  -- What fsdpgen planned, for checking the twin's report against (tests/fsdp2): the
  -- step's events and counts, the eval program's (None where it is not available) and
  -- the events of a step that follows an eval.
  local function pylist(lines)
    local q = {}
    for i, l in ipairs(lines) do q[i] = pystr(l) end
    return "[" .. table.concat(q, ", ") .. "]"
  end
  local ev, after = plan.eval_plan, plan.after_eval_plan or plan
  b:line("# What fsdpgen planned (`fsdpgen events` / `fsdpgen counts`, and the eval program's):")
  b:line("# print_report marks where this FSDP2 run differs.")
  b:line("FSDPGEN = dict(")
  b:indent()
  b:line("events=%s,", pylist(planner.event_lines(plan)))
  b:line("counts=%s,", pylist(planner.count_lines(plan)))
  b:line("eval_events=%s,", ev and pylist(planner.event_lines(ev)) or "None")
  b:line("eval_counts=%s,", ev and pylist(planner.count_lines(ev)) or "None")
  b:line("after_eval_events=%s,", ev and pylist(planner.event_lines(after)) or "None")
  b:line("after_eval_counts=%s,", ev and pylist(planner.count_lines(after)) or "None")
  b:dedent()
  b:line(")")
  b:line("")
  -- Parameters: FQN, every name (tied ones), shape, the binary's init (rt_train.h).
  b:line("# Every parameter: its FQN, all its names, shape, and the binary's initialization")
  b:line("# (rt_train_init_param: kind and scale, from the parameter's FQN and the seed).")
  b:line("PARAMS = [")
  b:indent()
  for _, e in ipairs(params) do
    local p = e[2]
    local kind, scale = p.init.kind, p.init.bound or p.init.std or 0
    local names = {}
    for i, n in ipairs(e[3]) do names[i] = pystr(n) end
    local sh = {}
    for i, d in ipairs(p.shape) do sh[i] = tostring(d) end
    b:line("(%s, [%s], (%s,), %s, %s),", pystr(e[1]), table.concat(names, ", "), table.concat(sh, ", "), pystr(kind),
      pynum(scale))
  end
  b:dedent()
  b:line("]")
  b:line("")
  b:line("")

  -- Classes: one per distinct forward body; leaves map to torch.nn layers.
  b:line("class Container(nn.Module):")
  b:line('    """A module without a forward of its own (ModuleList, or never called)."""')
  b:line("")
  b:line("")
  local class_of, class_names, class_seq = {}, {}, {}
  local ctor = {}
  for _, e in ipairs(modules) do
    local m = e[2]
    local ty = rawget(m, "_type")
    local body = bodies[m]
    local leaf = LEAF[ty]
    local leaf_ok = leaf ~= nil
    if leaf and body and ty ~= "ModuleList" then
      -- A leaf maps to torch.nn's layer only when its forward is that layer's one op.
      local t = table.concat(body.lines, "\n")
      local expect = {
        Linear = "^h1 = F%.linear%(x0, self%.weight[^\n]*%)\nreturn h1$",
        Embedding = "^h1 = F%.embedding%(x0, self%.weight%)\nreturn h1$",
        LayerNorm = "^h1 = F%.layer_norm%(x0, %(%d+,%), self%.weight, self%.bias, [^\n]*%)\nreturn h1$",
        RMSNorm = "^h1 = F%.rms_norm%(x0, %(%d+,%), self%.weight, [^\n]*%)\nreturn h1$",
        Dropout = "^h1 = dropout%(x0, [^\n]*%)\nreturn h1$",
        ReLU = "^h1 = F%.relu%(x0%)\nreturn h1$", GELU = "^h1 = F%.gelu%(x0%)\nreturn h1$",
        SiLU = "^h1 = F%.silu%(x0%)\nreturn h1$",
      }
      leaf_ok = (t == "return x0" and (ty == "Dropout")) or (expect[ty] and t:match(expect[ty]) ~= nil)
    end
    if leaf_ok then
      ctor[m] = leaf(m)
    elseif not body then
      ctor[m] = "Container()"
    else
      local key = ty .. "\n" .. body.text
      if not class_of[key] then
        local base = ty:gsub("[^%w_]", "_")
        if not base:match("^%a") then base = "M" .. base end
        local n = (class_seq[base] or 0) + 1
        class_seq[base] = n
        local cname = n == 1 and base or (base .. n)
        if cname == "Container" then cname = "Container_" .. n end
        class_of[key] = cname
        class_names[#class_names + 1] = cname
        b:line("class %s(%s):", cname, ty == "Sequential" and "nn.Sequential" or "nn.Module")
        b:line("    def forward(self%s):", #body.params > 0 and (", " .. table.concat(body.params, ", ")) or "")
        for _, l in ipairs(body.lines) do b:line("        %s", l) end
        b:line("")
        b:line("")
      end
      ctor[m] = class_of[key] .. "()"
    end
  end

  -- build_model(): the module tree in the spec's registration order.
  b:line("def build_model():")
  b:line('    """The spec\'s model: every module, parameter (tied ones shared), checkpoint(module) and')
  b:line('    requires_grad_(False) on its frozen parameters."""')
  local var_of, nvar = {}, 0
  local first_param = {}
  local function build(m, var)
    local ty = rawget(m, "_type")
    -- Parameters of non-leaf modules (leaf torch.nn layers make their own).
    for _, pn in ipairs(rawget(m, "_params")) do
      local p = rawget(m, "_params_by_name")[pn]
      local own = not (LEAF[ty] and ctor[m] ~= "Container()")
      if first_param[p] then
        b:line("    %s.%s = %s", var, pn, first_param[p])
      elseif own then
        local sh = {}
        for i, d in ipairs(p.shape) do sh[i] = tostring(d) end
        b:line('    %s.register_parameter("%s", nn.Parameter(torch.empty(%s)))', var, pn, table.concat(sh, ", "))
        first_param[p] = var .. "." .. pn
      else
        first_param[p] = var .. "." .. pn
      end
    end
    for _, c in ipairs(m:named_children()) do
      local cm = c[2]
      if var_of[cm] then
        b:line('    %s.add_module("%s", %s)', var, c[1], var_of[cm])
      else
        nvar = nvar + 1
        local cv = "m" .. nvar
        var_of[cm] = cv
        b:line("    %s = %s", cv, ctor[cm])
        b:line('    %s.add_module("%s", %s)', var, c[1], cv)
        build(cm, cv)
        if rawget(cm, "_checkpoint") then b:line("    checkpoint_module(%s)", cv) end
      end
    end
  end
  b:line("    model = %s", ctor[model])
  var_of[model] = "model"
  build(model, "model")
  if rawget(model, "_checkpoint") then b:line("    checkpoint_module(model)") end
  for _, e in ipairs(params) do   -- frozen parameters (tied ones once)
    if not e[2].requires_grad then b:line('    model.get_parameter("%s").requires_grad_(False)', e[1]) end
  end
  b:line("    return model")
  b:line("")
  b:line("")

  -- shard(): the fully_shard calls in the spec's order, then the setters.
  local function mod_expr(m)
    local f = fqn_of[m]
    if f == nil then cannot("a sharded module outside the model") end
    return f == "" and "model" or string.format('model.get_submodule("%s")', f)
  end
  b:line("def shard(model, mesh):")
  b:line('    """The spec\'s fully_shard calls, in its order, and the FSDPModule setters it calls."""')
  for _, s in ipairs(spec.states) do
    local target
    if #s.modules == 1 then target = mod_expr(s.modules[1])
    else
      local l = {}
      for i, m in ipairs(s.modules) do l[i] = mod_expr(m) end
      target = "[" .. table.concat(l, ", ") .. "]"
    end
    local opts = { "mesh=mesh" }
    if s.mesh and (s.mesh.replicate ~= spec.mesh.replicate or s.mesh.shard ~= spec.mesh.shard) then
      cannot("a fully_shard mesh other than the spec's")
    end
    if not s.reshard_after_forward_unset then
      local v = s.reshard_after_forward
      opts[#opts + 1] = "reshard_after_forward=" .. (type(v) == "boolean" and pybool(v) or tostring(v))
    end
    if s.placement == "largest_dim" then opts[#opts + 1] = "shard_placement_fn=largest_dim" end
    local mp = s.mp
    local mpo = {}
    if mp.param_dtype then mpo[#mpo + 1] = "param_dtype=" .. TORCH_DTYPE[mp.param_dtype] end
    if mp.reduce_dtype then mpo[#mpo + 1] = "reduce_dtype=" .. TORCH_DTYPE[mp.reduce_dtype] end
    if mp.output_dtype then mpo[#mpo + 1] = "output_dtype=" .. TORCH_DTYPE[mp.output_dtype] end
    if not mp.cast_forward_inputs then mpo[#mpo + 1] = "cast_forward_inputs=False" end
    if #mpo > 0 then opts[#opts + 1] = "mp_policy=MixedPrecisionPolicy(" .. table.concat(mpo, ", ") .. ")" end
    if s.offload then
      -- Pinned memory needs an accelerator; on CPU ranks the policy moves nothing.
      opts[#opts + 1] = "offload_policy=CPUOffloadPolicy(pin_memory=False)"
    end
    b:line("    fully_shard(%s, %s)", target, table.concat(opts, ", "))
  end
  for _, s in ipairs(spec.states) do
    local m = mod_expr(s.modules[1])
    local function list(states)
      local l = {}
      for i, t in ipairs(states) do l[i] = mod_expr(t.modules[1]) end
      return "[" .. table.concat(l, ", ") .. "]"
    end
    if #s.fwd_prefetch > 0 then b:line("    %s.set_modules_to_forward_prefetch(%s)", m, list(s.fwd_prefetch)) end
    if #s.bwd_prefetch > 0 then b:line("    %s.set_modules_to_backward_prefetch(%s)", m, list(s.bwd_prefetch)) end
  end
  b:line("")
  b:line("")

  -- The state setters the spec called before training: their values at the step's start.
  b:line("def set_flags(model):")
  b:line('    """The FSDPModule setters of the spec (their values at the start of each step)."""')
  local n_flags = 0
  for _, s in ipairs(spec.states) do
    local m = mod_expr(s.modules[1])
    local function flag(cond, call)
      if cond then
        b:line("    %s.%s", m, call)
        n_flags = n_flags + 1
      end
    end
    flag(not s.reshard_after_backward, "set_reshard_after_backward(False, recurse=False)")
    flag(not s.reduce_grads, "set_requires_gradient_sync(False, recurse=False)")
    flag(not s.all_reduce_grads, "set_requires_all_reduce(False, recurse=False)")
    flag(s.divide_factor ~= nil, string.format("set_gradient_divide_factor(%s)", s.divide_factor and pynum(s.divide_factor)))
    flag(s.force_sum, "set_force_sum_reduction_for_comms(True)")
    flag(not s.unshard_in_backward, "set_unshard_in_backward(False)")
  end
  if n_flags == 0 then b:line("    pass") end
  b:line("")
  b:line("")

  -- train_step(): the step program.
  b:line("def train_step(model, t):")
  b:line('    """One training step: the spec\'s step program (t: the run, templates/torch_twin.py)."""')
  local fwd = 0
  for i, item in ipairs(spec.step) do
    local k = item.kind
    local target = (item.module and item.module ~= "") and string.format('model.get_submodule("%s")', item.module)
      or "model"
    if k == "forward" then
      b:line("    with t.phase(\"forward\"):")
      b:line("        t.forward(%s, %d)  # out = module(inp) on forward item %d's batch", target, fwd, fwd)
      fwd = fwd + 1
    elseif k == "backward" then
      local a = {}
      if item.output then a[#a + 1] = "output=" .. (item.output - 1) end
      if item.retain_graph then a[#a + 1] = "retain_graph=True" end
      if item.is_last_backward ~= nil then a[#a + 1] = "is_last_backward=" .. pybool(item.is_last_backward) end
      b:line("    with t.phase(\"backward\"):")
      b:line("        t.backward(model%s)  # (l1 + l2 + ...).backward()", #a > 0 and (", " .. table.concat(a, ", ")) or "")
    elseif k == "set_is_last_backward" then
      b:line("    model.set_is_last_backward(%s)", pybool(item.value))
    elseif item.field then
      b:line("    %s.%s(%s%s)", target, k, pybool(item.value), item.recurse and "" or ", recurse=False")
    elseif k == "unshard" then
      b:line("    with t.phase(\"unshard\"):")
      if item.module then
        b:line("        %s.unshard(async_op=%s)", target, pybool(item.async_op))
      else
        b:line("        for m in fsdp_modules(model):")
        b:line("            m.unshard(async_op=%s)", pybool(item.async_op))
      end
    elseif k == "reshard" then
      b:line("    with t.phase(\"reshard\"):")
      if item.module then
        b:line("        %s.reshard()", target)
      else
        b:line("        for m in fsdp_modules(model):")
        b:line("            m.reshard()")
      end
    elseif k == "optimizer" then
      b:line("    t.optimizer_step()  # clip, optimizer.step(), scheduler.step(), zero_grad(set_to_none=True)")
    else
      cannot("the step item '" .. k .. "'")
    end
    local _ = i
  end
  b:line("")
  b:line("")
  b:line("# ---- the twin's runtime (templates/torch_twin.py) " .. string.rep("-", 36))
  b:line("")
  local tail = assert(buffer.read(root .. "/templates/torch_twin.py"))
  -- Drop the template's own docstring header (the part before its first import).
  tail = tail:gsub("^.-\nimport ", "import ", 1)
  return b:text() .. tail
end

return M
