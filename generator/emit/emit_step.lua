-- Emits `<name>_step.c`: the model description (model_c.lua: parameters, groups with their
-- planned layouts and persistent buffers, expected events and counts) and the training step as
-- straight-line C, one runtime call per schedule line, each under a comment with the line
-- it implements. The walk over the schedule tracks which buffer holds each group's
-- unsharded parameters and gradients at every step; the memory plan gives the offsets.
-- What it cannot emit, check.lua refused after planning; here it is asserted (`internal`).
local buffer = require("util.buffer")
local attention = require("memory.attention")
local c_text = require("emit.c_text")
local check = require("emit.check")
local flops = require("plan.flops")
local hf = require("emit.hf")
local kernels = require("emit.kernels_c")
local model_c = require("emit.model_c")
local memory = require("memory.memory")
local packing = require("memory.packing")
local schedule = require("emit.schedule")
local step_ops = require("memory.step_ops")
local trace = require("spec.trace")

local M = {}

local internal = check.internal

local C_DTYPE = c_text.DTYPE
local C_OPTIM = { sgd = "RT_OPTIM_SGD", adam = "RT_OPTIM_ADAM", adamw = "RT_OPTIM_ADAMW" }
local C_ATTENTION = { auto = "RT_ATTENTION_AUTO", cudnn = "RT_ATTENTION_CUDNN", fsdpgen = "RT_ATTENTION_FSDPGEN" }
local C_LR_DECAY = { constant = "RT_LR_CONSTANT", linear = "RT_LR_LINEAR", cosine = "RT_LR_COSINE" }
local C_ROWS = c_text.ROWS

-- A C identifier from a spec name.
function M.ident(name)
  local s = tostring(name):gsub("[^%w_]", "_")
  if s:match("^%d") then s = "_" .. s end
  return s
end

local cstr, note, string_field, shape_init = c_text.cstr, c_text.note, c_text.string_field, c_text.shape_init
local num, code = c_text.num, c_text.code

-- ---------------------------------------------------------------------------- the step

-- Walks the schedule and returns the C of each step, with the state it tracks.
local Walker = {}
Walker.__index = Walker

-- The names of the buffers of the program being emitted (c_text.arena_names), and of the
-- parameters' byte offsets in their group's unsharded parameters and unsharded gradients
-- (c_text.param_names).
local current_step, current_index, current_names, param_names, grad_names
-- The file's attention sites (rt_model_attention), in order of first use, and their index
-- by shape and gradients' row lengths (and by shape alone: the first such); filled while
-- the programs are emitted.
local attention_sites, site_index

-- A buffer's byte offset in the arena, by name.
local function at(bf) return current_names[bf] or internal("buffer '%s' has no name", bf.name) end

-- The view of buffer bf (elements [elem, elem + n)), checked against its planned
-- lifetime: a buffer used outside it would be overwritten by another. packed16: n 16-bit
-- values (a packed parameter). name: the named byte offset to use for elem (a parameter's).
local function F(bf, elem, n, int, packed16, name)
  if current_index and (current_index < bf.first or current_index > bf.last) then
    error(string.format("buffer '%s' (live %d..%d) used at step %d (%s)", bf.name, bf.first, bf.last,
      current_index, schedule.step_name(current_step)))
  end
  -- a packed buffer (memory.lua) is passed whole: its bytes are not 4 per element
  local bytes = packed16 and 2 * n or n and not bf.packed and 4 * n or bf.size
  local k = 4 * (elem or 0)
  local from = name and (" + " .. name) or k > 0 and (" + " .. k) or ""
  return string.format("%s(%s%s, %d)", int and "I" or "F", at(bf), from, bytes)
end

-- The parameters whose gradients a backward step assigns (memory.lua's plan.grad_assigns,
-- grad_assigns.by_step), by the gradient buffer they are assigned in: those it need not
-- zero.
local function assigns_by_buf(plan)
  local by_buf = {}
  for _, st in ipairs(plan.steps) do
    local set = plan.grad_assigns[st]
    if set then
      for _, op in ipairs(step_ops.ops(st)) do  -- in order: the generated C is deterministic
        for _, t in ipairs(op.ins) do
          if set[t] then
            local ug = st.bufs.ugrad[plan.owner[t].index]
            by_buf[ug] = by_buf[ug] or {}
            if not by_buf[ug][t] then
              by_buf[ug][t] = true
              by_buf[ug][#by_buf[ug] + 1] = t
            end
          end
        end
      end
    end
  end
  return by_buf
end

function Walker.new(plan)
  local w = setmetatable({ plan = plan, unsharded = {}, loss = nil, nbackward = 0 }, Walker)
  w.assigns_by_buf = assigns_by_buf(plan)
  return w
end

-- A parameter's group and its offset in the group's unsharded gradients (elements).
function Walker:grad_offset(p)
  local g, l = model_c.param_layout(self.plan, p)
  if not l.grad_offset then internal("frozen parameter '%s' given a gradient", p.fqn) end
  return g, l.grad_offset * g.shard
end

-- t's value as op `reader` reads it (saved_by: the op whose backward, at step st, reads it).
function Walker:val(t, saved_by, reader, st)
  if t.is_param then
    local g, l = model_c.param_layout(self.plan, t)
    -- one shard rank: the sharded layout is the unsharded one, and lookups read the shards
    -- (packing.lua mark_params), before the group's wait where that comes at its
    -- first unsharded reader (late_waits.lua)
    if t.from_shard or (reader and packing.reads_shard(reader, t)) then
      return F(g.params_buf, l.offset, trace.numel(t.shape))
    end
    local un = self.unsharded[g.index]
    if not un then error("parameter " .. t.fqn .. " read while its group is not unsharded") end
    return F(un, nil, trace.numel(t.shape), false, t.packed, param_names[t])
  end
  if t.is_input then
    return string.format("rt_step_%s(R, %d)", t.dtype:match("^int") and "tokens" or "inputs", t.forward_index - 1)
  end
  if t.is_target then return string.format("rt_step_targets(R, %d)", t.forward_index - 1) end
  local s = saved_by and memory.saved(t, saved_by, st) or memory.base(t)
  if not s.buf then error("no buffer for " .. tostring(s.label)) end
  return F(s.buf, 0, trace.numel(s.shape), not trace.is_float(s.dtype))
end

-- Tensor b's gradient in buffer gb: all of it, or where it is a slice of a stack's packed
-- rows (stacked_linears), the buffer from the slice's first column to its end.
local function grad_view(gb, b)
  local sl = b.grad_slice
  if sl then return F(gb, sl.col // 2, gb.size // 2 - sl.col, false, true) end
  return F(gb, 0, trace.numel(b.shape))
end

function Walker:grad(t, st)
  if not t.requires_grad or t.is_input or t.is_target then return "NULL" end
  if t.is_param then
    local g = model_c.param_layout(self.plan, t)
    local ug = st.bufs.ugrad[g.index]
    if not ug then error("no unsharded gradient buffer for " .. t.fqn) end
    return F(ug, nil, trace.numel(t.shape), false, t.packed_grad ~= nil, grad_names[t])
  end
  local b = memory.base(t)
  local gb = st.bufs.grads[b]
  if not gb then return "NULL" end
  return grad_view(gb, b)
end

-- The row length of t's gradient where it is a slice of a stack's rows (stacked_linears),
-- else 0 (dense rows): rt_kernels.h ld_dinp, ld_dq, ld_dk, ld_dv.
local function grad_ld(t)
  local sl = memory.base(t).grad_slice
  return sl and sl.stack.ld or 0
end

-- The gradient buffer of a backward step's output t (n elements of it, or its slice).
local function output_grad(st, t, n)
  local b = memory.base(t)
  local gb = st.bufs.grads[b]
  if not gb then error("no gradient for output " .. tostring(b.label)) end
  return b.grad_slice and grad_view(gb, b) or F(gb, 0, n)
end

function Walker:ctx(st, saved)
  local w = self
  local node = saved and st.node
  local function stats(op)
    local sop = saved and memory.saved_op(op, st) or op
    local sb = sop.scratch_buf
    if not sb then error("no saved statistics for " .. tostring(op.label)) end
    local s = op.ins[1].shape
    local n = trace.numel(s) // s[#s]
    local floats = sb.size // 4
    return F(sb, 0, floats), F(sb, n, floats - n)
  end
  return {
    val = function(t) return w:val(t, node, st.node, st) end,
    grad = function(t) return w:grad(t, st) end,
    grad_ld = grad_ld,
    -- a stack's stacked operands (stacked_linears): its weights and (unless split) their
    -- gradients from the first one's, and its output gradients' rows
    stack = function(s)
      local p = s.ops[1].ins[2]
      local g = model_c.param_layout(w.plan, p)
      local n = s.ld * p.shape[2]
      local gb = st.bufs.grads[memory.base(s.ops[1].outs[1])]
      local dw = s.split and "NULL"
        or F(st.bufs.ugrad[g.index], nil, n, false, p.packed_grad ~= nil, grad_names[p])
      return F(w.unsharded[g.index], nil, n, false, true, param_names[p]), dw, F(gb, 0, s.rows * s.ld, false, true)
    end,
    -- a device pointer: the gradient of a loss summed with others is computed on the GPU
    dout = function(t)
      if t == w.loss then return "rt_step_one(R)" end
      return output_grad(st, t, trace.numel(t.shape))
    end,
    stats = stats,
    scratch = st.bufs.scratch and F(st.bufs.scratch) or "NULL",
    fresh = function(t)  -- t's gradient buffer if this backward step creates it (u.zero)
      local b = not t.is_param and st.bufs.grads[memory.base(t)]
      if not b or b.kind ~= "activation_grad" or not memory.creates(st, b) then return nil end
      return b
    end,
    site = function(op) return (op.original or op).id end,
    attention_site = function(op)
      local B, T = attention.dims(op)
      local a = op.attrs
      local q, k, v = table.unpack(op.ins)
      local shape = string.format("{.B = %d, .T = %d, .NH = %d, .NKV = %d, .HD = %d, .causal = %d, .dtype = %s, "
        .. ".scratch_bytes = %d", B, T, a.n_heads, a.n_kv_heads, a.head_dim, a.causal and 1 or 0,
        C_DTYPE[op.outs[1].dtype], st.bufs.scratch.size)
      -- the eval runs no backward: any site of its shape serves (no plan built for it alone)
      if w.eval and site_index[shape] then return site_index[shape] end
      local spare = attention.spare_bytes(op)  -- where cuDNN writes the gradients none needs
      local site = string.format("%s, .ld_dq = %d, .ld_dk = %d, .ld_dv = %d%s}", shape, grad_ld(q), grad_ld(k),
        grad_ld(v), spare > 0 and string.format(", .spare_bytes = %d", spare) or "")
      if not site_index[site] then
        attention_sites[#attention_sites + 1] = site
        site_index[site] = #attention_sites - 1
        site_index[shape] = site_index[shape] or site_index[site]
      end
      return site_index[site]
    end,
  }
end

-- rt_zero of each buffer in bufs but those in `skip` (a set); of an unsharded gradient
-- buffer, only the elements around the parameters `assigned[bf]` whose gradients are
-- assigned later and those that an in-place buffer's optimizer left zero (memory.lua
-- consumed_grads), in order of offset: the gaps, padding included; of one that a part of a
-- split reduction ends, only its parameters' elements that are neither. A packed group's
-- gradients (grad_assigns.packed_groups) are 2-byte elements, zeroed as whole words: their
-- parameters start and end on multiples of 8 elements.
local function zero(calls, bufs, skip, assigned, w)
  local function emit(bf, elem, n)
    if bf.packed_grads then
      if elem % 2 ~= 0 or n % 2 ~= 0 then internal("odd range of packed gradients '%s'", bf.name) end
      elem, n = elem // 2, n // 2
    end
    if n > 0 then calls[#calls + 1] = string.format("rt_zero(%s, %d);", F(bf, elem, n), n) end
  end
  for _, bf in ipairs(bufs or {}) do
    local keep = {}
    for _, p in ipairs(assigned and assigned[bf] or {}) do keep[#keep + 1] = p end
    local consumed = w and bf.alias and w.plan.consumed_grads[bf.alias]
    for _, p in ipairs(consumed or {}) do keep[#keep + 1] = p end
    local reads = w and w.plan.part_reads[bf]
    if reads then
      local set = {}
      for _, p in ipairs(keep) do set[p] = true end
      for _, p in ipairs(reads) do
        if not set[p] and not (skip and skip[bf]) then
          local _, off = w:grad_offset(p)
          emit(bf, off, trace.numel(p.shape))
        end
      end
    elseif #keep > 0 then
      local ranges = {}
      for _, p in ipairs(keep) do
        local _, off = w:grad_offset(p)
        ranges[#ranges + 1] = { off, trace.numel(p.shape) }
      end
      table.sort(ranges, function(a, b) return a[1] < b[1] end)
      local at = 0
      for _, r in ipairs(ranges) do
        emit(bf, at, r[1] - at)
        at = r[1] + r[2]
      end
      emit(bf, at, bf.size // (bf.packed_grads and 2 or 4) - at)
    elseif not (skip and skip[bf]) then
      emit(bf, 0, bf.size // (bf.packed_grads and 2 or 4))
    end
  end
end

-- The arena offset of a step's unsharded parameters: their buffer's, or 0 where every
-- parameter of group g is read from the shards (packing.lua place_unsharded_params: no
-- buffer, nothing to write).
local function unsharded_at(u, g)
  if u.unsharded then return at(u.unsharded) end
  if g.unsharded_words == 0 then return "0" end
  internal("group '%s' has unsharded parameters but no buffer for them", g.name)
end

-- C statements implementing one schedule step.
function Walker:step(st, index)
  current_step, current_index = st, index
  local g = st.group
  local gi = g and (g.index - 1)
  local u = st.bufs
  local state = st.state and cstr(st.state) or "NULL"
  local calls = {}
  local op = st.op
  if op == "all_gather" and st.kept then
    calls[1] = string.format("rt_step_all_gather_kept(R, %d, %s, %s);", gi, state, unsharded_at(u, g))
  elseif op == "all_gather" and st.direct then
    calls[1] = string.format("rt_step_all_gather_direct(R, %d, %s, %s, %s);", gi, state,
      unsharded_at(u, g), st.beside and "RT_AG_BESIDE" or "RT_AG_IN_ORDER")
  elseif op == "all_gather" then
    calls[1] = string.format("rt_step_all_gather(R, %d, %d, %s, %s, %s);", gi,
      st.from_post_forward and 1 or 0, state, at(u.out),
      u.post_forward_shard and at(u.post_forward_shard) or "0")
  elseif op == "all_gather_wait" then
    calls[1] = string.format("rt_step_all_gather_wait(R, %d, %s);", gi, unsharded_at(u, g))
    self.unsharded[g.index] = u.unsharded
  elseif op == "all_gather_drop" then
    calls[1] = string.format("rt_step_all_gather_drop(R, %d);", gi)
  elseif op == "reshard" and st.keep then
    calls[1] = string.format("rt_step_reshard_keep(R, %d, %s, %s);", gi, state, unsharded_at(u, g))
    self.unsharded[g.index] = nil
  elseif op == "reshard" then
    calls[1] = string.format("rt_step_reshard(R, %d, %s);", gi, state)
    self.unsharded[g.index] = nil
  elseif op == "reshard_post_forward" then
    calls[1] = string.format("rt_step_reshard_post_forward(R, %d, %s, %s, %s);", gi, state,
      unsharded_at(u, g), at(u.post_forward_shard))
    self.unsharded[g.index] = nil
  elseif op == "accumulate_unsharded_grads" then
    if u.acc_new then zero(calls, { u.acc }) end
    calls[#calls + 1] = string.format("rt_step_accumulate_grads(R, %d, %s, %s);", gi, at(u.ugrad),
      at(u.acc))
  elseif op == "reduce_scatter" then
    local src, dt = u.ugrad, g.param_dtype
    if u.acc then
      if u.ugrad then
        calls[#calls + 1] = string.format("rt_step_accumulate_grads(R, %d, %s, %s);", gi,
          at(u.ugrad), at(u.acc))
      end
      src, dt = u.acc, g.reduce_dtype
    end
    local k = st.reduction.index
    if st.direct then
      calls[#calls + 1] = string.format("rt_step_reduce_direct(R, %d, %d, %s, %s);", gi, k, at(src),
        C_DTYPE[dt])
    else
      calls[#calls + 1] = string.format("rt_step_reduce_scatter(R, %d, %d, %s, %s, %s, %s);", gi, k,
        at(src), C_DTYPE[dt], at(u.rs_in), at(u.rs_out))
    end
  elseif op == "all_reduce" then
    calls[1] = string.format("rt_step_all_reduce(R, %d);", gi)
  elseif op == "post_backward" then
    calls[1] = string.format("rt_step_post_backward(R, %d, %s);", gi, state)
  elseif op == "all_gather_sync" then
    calls[1] = "rt_step_all_gather_sync(R);"
  elseif op == "clip_grad_norm" then
    calls[1] = "rt_step_clip_grad_norm(R);"
  elseif op == "optimizer" then
    local r = st.reduction and st.reduction.index or 0
    if st.rows then  -- optimizer.lua Sim:split_token_rows, reductions.lua Sim:reduce_parts
      calls[1] = string.format("rt_step_optimizer_rows(R, %d, %d, %d, %d, %d, %s);", gi, r,
        st.opt_k, st.opt_per, st.opt_item, C_ROWS[st.rows])
    else
      calls[1] = string.format("rt_step_optimizer(R, %d, %d, %d, %d, %d);", gi, r, st.opt_k,
        st.opt_per, st.opt_item)
    end
  elseif op == "recompute_begin" then
    -- a marker: the recompute steps follow
  elseif op == "eval_loss" then
    calls[1] = string.format("rt_step_eval_loss(R, %s);", F(memory.base(st.node.outs[1]).buf, 0, 1))
  elseif st.rope_pair and st ~= st.rope_pair.call then  -- forward or backward
    calls[1] = "// (computed with " .. st.rope_pair.b.label .. " below, in its call)"
  elseif op == "forward" or op == "recompute" then
    local node = st.node
    local o = node.outs[1]
    local out = F(memory.base(o).buf, 0, trace.numel(o.shape), not trace.is_float(o.dtype))
    if memory.forward_with_loss_grad(self.plan.steps, index) then
      self.loss_out = out  -- computed with its gradient, by the next step's one call
      calls[1] = "// (computed with its gradient below)"
    elseif st.fused_norm then
      calls[1] = "// (computed with the " .. st.fused_norm.node.kind .. " below, in its call)"
    elseif st.fused_add then
      local add = st.fused_add.node
      local y = add.outs[1]
      calls = kernels.residual_norm(add, node, self:ctx(st, false),
        F(memory.base(y).buf, 0, trace.numel(y.shape)), out)
    elseif st.rope_pair then
      local a = st.rope_pair.a.outs[1]
      calls = kernels.rope_pair_forward(st.rope_pair, self:ctx(st, false),
        F(memory.base(a).buf, 0, trace.numel(a.shape)), out)
    else
      calls = kernels.forward(node, self:ctx(st, false), out)
    end
    if self.eval and node.kind == "cross_entropy" and node.ins[1].dtype == "fp32" then
      -- the eval's logits, for --logits (a no-op unless the driver asked for them)
      local lg = node.ins[1]
      table.insert(calls, 1, string.format("rt_step_eval_logits(R, %s, %d);", self:val(lg),
        trace.numel(lg.shape)))
    end
  elseif st.grad_alias then
    -- nothing to run: the inputs' gradients are the output's buffer (the schedule says so)
  elseif st.stacked then
    calls[1] = "// (computed with " .. st.stacked.call.label .. " below, in its call)"
  elseif op == "loss_grad" or op == "backward" then
    local node = st.node
    if op == "loss_grad" then
      self.loss = node.outs[1]
      self.nbackward = self.nbackward + 1
    end
    -- New gradient buffers are zeroed before the kernel, except those its first (and only)
    -- contribution in this step assigns, and the parameters' gradients that their first
    -- contribution (here or later) assigns.
    local c = self:ctx(st, true)
    c.loss_out, self.loss_out = self.loss_out, nil
    local params = self.plan.grad_assigns[st] or {}
    c.assign_param = function(t) return params[t] == true end
    local bcalls, assigned
    if st.stack then bcalls, assigned = kernels.backward_stacked(st.stack, c)
    elseif st.rope_pair then bcalls, assigned = kernels.rope_pair_backward(st.rope_pair, c)
    else bcalls, assigned = kernels.backward(node, c) end
    local skip = {}
    for _, bf in ipairs(assigned) do skip[bf] = true end
    for _, bf in ipairs(u.zero) do  -- a stack's slices are assigned, never zeroed (stacked_linears)
      if bf.stack and not skip[bf] then internal("'%s' would zero the stacked gradients '%s'", st.label, bf.name) end
    end
    zero(calls, u.zero, skip, self.assigns_by_buf, self)
    for _, c in ipairs(bcalls) do calls[#calls + 1] = c end
    if op == "loss_grad" then
      calls[#calls + 1] = string.format("rt_step_loss(R, %d, %s);", self.nbackward - 1, F(self.loss.buf, 0, 1))
    end
  else
    error("unknown schedule op " .. tostring(op))
  end
  return calls
end

local function section_name(st, prefix) return prefix .. st.phase .. st.section end

-- The C of one program (the training step or the eval program): a function per schedule
-- section, then `name`, which runs them between rt_step_begin and rt_step_end. Returns
-- the walker (its backward count).
local function emit_program(b, plan, name, prefix, what, names)
  current_names = names
  local w = Walker.new(plan)
  w.eval = what == "eval"
  local sections, current = {}, nil
  for i, st in ipairs(plan.steps) do
    local sname = section_name(st, prefix)
    if sname ~= current then
      current = sname
      sections[#sections + 1] = sname
      b:line("")
      b:line("// ---- %s (%s item %d: %s)", sname, what, st.section, st.phase)
      b:line("static void %s(rt_rank* R) {", sname)
      b:indent()
      b:line("rt_step_section(R, %s);", cstr(st.phase))
    end
    local calls = w:step(st, i)
    note(b, "%s", (schedule.step_line(st, plan):gsub("^%s+", "")))
    for _, c in ipairs(calls) do code(b, "%s", c) end
    local nxt = plan.steps[i + 1]
    if not nxt or section_name(nxt, prefix) ~= sname then
      b:dedent()
      b:line("}")
    end
  end
  for _, g in ipairs(plan.groups) do
    if w.unsharded[g.index] then
      internal("group '%s' unsharded at the end of the %s", g.name, what)
    end
  end
  b:line("")
  b:line("static void %s(rt_rank* R) {", name)
  b:indent()
  b:line("rt_step_begin(R);")
  for _, s in ipairs(sections) do b:line("%s(R);", s) end
  b:line("rt_step_end(R);")
  b:dedent()
  b:line("}")
  return w
end

-- The eval program and the step after one share the arena's persistent buffers with the
-- step.
local function check_persistent(plan, other)
  local function persistent(p)
    local t = {}
    for _, buf in ipairs(p.memory.buffers) do
      if buf.kind == "persistent" then t[#t + 1] = buf.name .. "@" .. buf.offset .. "+" .. buf.bytes end
    end
    return table.concat(t, ",")
  end
  if persistent(plan) ~= persistent(other) then
    error("the persistent buffers of the eval program or the step after it differ from the step's")
  end
end

-- ---------------------------------------------------------------------------- file

-- The #define of every buffer of one program's memory plan (the .layout's section
-- `title`), named `prefix` and the buffer's name there; returns the map buffer -> name.
local function arena(b, mem, prefix, title, spec_name, shared)
  local names, lines = c_text.arena_names(mem, prefix, shared)
  b:line("")
  note(b, "---- arena: %s (%s.layout): each buffer's byte offset, bytes and kind", title, spec_name)
  for _, l in ipairs(lines) do b:line("%s", l) end
  return names
end

function M.render(plan, spec_file, prefix, is_reference)
  local spec = plan.spec
  local ev = plan.eval_plan        -- set only where the eval is available
  local after = plan.after_eval_plan
  local b = buffer.new("    ")
  local opt_states = memory.optimizer_states(spec.optimizer)
  local list, index = model_c.param_table(plan)
  b:line("// %s_step.c: generated by %s from %s; do not edit.", prefix, schedule.VERSION, spec_file)
  note(b, "The model description, the training step and the eval program of spec '%s' (%d ranks "
    .. "= replicate %d x shard %d), one runtime call per line of %s.schedule.", spec.name,
    spec.world_size, spec.mesh.replicate, spec.mesh.shard, spec.name)
  b:line("#include <stddef.h>")
  b:line("")
  b:line('#include "rt_kernels.h"')
  b:line('#include "rt_model.h"')
  b:line('#include "rt_step.h"')
  b:line("")
  b:line("// Views of this rank's arena: F(off, bytes) of fp32, I(off, bytes) of int32, at byte")
  b:line("// offset off, which is a buffer's name below (B_x + k: k bytes into buffer x), added")
  b:line("// up in size_t (two int offsets can add up past INT_MAX).")
  b:line("#define F(off, bytes) RT_F32(R, (size_t)0 + off, (bytes))")
  b:line("#define I(off, bytes) RT_I32(R, (size_t)0 + off, (bytes))")
  local names = arena(b, plan.memory, "B_", "step memory", spec.name)
  local persistent = {}
  for _, bf in ipairs(plan.memory.buffers) do
    if bf.kind == "persistent" then persistent[bf.name] = names[bf] end
  end
  local eval_names = ev and arena(b, ev.memory, "EVAL_", "eval memory", spec.name, persistent)
  local after_names = after and arena(b, after.memory, "AFTER_", "step after an eval memory",
    spec.name, persistent)
  b:line("")
  b:line("// ---- parameters and groups")
  local lines, grad_lines
  param_names, lines = c_text.param_names(list, "P_", function(p)
    local _, l = model_c.param_layout(plan, p)
    return not p.from_shard and 4 * l.unsharded_word or nil
  end)
  grad_names, grad_lines = c_text.param_names(list, "G_", function(p)
    local g, l = model_c.param_layout(plan, p)
    return l.grad_offset and (p.packed_grad and 2 or 4) * l.grad_offset * g.shard
  end)
  b:line("")
  b:line("// Each parameter's byte offset in its group's unsharded parameters (none: read from")
  b:line("// the shards), ...")
  for _, l in ipairs(lines) do b:line("%s", l) end
  b:line("// ... and in its group's unsharded gradients.")
  for _, l in ipairs(grad_lines) do b:line("%s", l) end
  model_c.params(b, plan, list)
  model_c.groups(b, plan, index, opt_states, names)
  b:line("")
  b:line("// ---- what the planner expects (checked by %s_test)", prefix)
  local expect = model_c.expectations(b, plan, "")
  local eval_expect = ev and model_c.expectations(b, ev, "eval_")
  local after_expect = after and model_c.expectations(b, after, "after_eval_")
  local hf_field, hf_unavailable
  if not is_reference then
    local index_of = {}
    for i, p in ipairs(list) do index_of[p.fqn] = i - 1 end
    hf_field, hf_unavailable = hf.emit(b, plan, index_of)
  end

  -- The step, the eval program and the step after one: a function per schedule section.
  attention_sites, site_index = {}, {}
  local w = emit_program(b, plan, "step", "", "step", names)
  if ev then
    check_persistent(plan, ev)
    emit_program(b, ev, "eval", "eval_", "eval", eval_names)
  end
  if after then
    check_persistent(plan, after)
    emit_program(b, after, "step_after_eval", "after_eval_", "step", after_names)
  end

  if #attention_sites > 0 then
    b:line("")
    note(b, "---- attention sites: the shapes whose ops may run on cuDNN (.schedule `attention`)")
    b:line("static const rt_model_attention attention[] = {")
    b:indent()
    for _, site in ipairs(attention_sites) do code(b, "%s,", site) end
    b:dedent()
    b:line("};")
  end

  -- The model.
  local inp = spec.input
  local o = spec.optimizer
  local n_forward = 0
  for _, it in ipairs(spec.step) do
    if it.kind == "forward" then n_forward = n_forward + 1 end
  end
  local input_shape = inp.shape
  b:line("")
  b:line("const rt_model %s_model = {", prefix)
  b:indent()
  b:line(".name = %s,", cstr(spec.name))
  b:line(".spec_file = %s,", cstr(spec_file))
  b:line(".generator = %s,", cstr(schedule.VERSION))
  b:line(".world = %d, .replicate = %d, .shard = %d,", spec.world_size, spec.mesh.replicate, spec.mesh.shard)
  b:line(".nparams = %d, .params = params,", #list)
  b:line(".ngroups = %d, .groups = groups,", #plan.groups)
  if inp.tokens then
    b:line(".tokens = 1, .batch = %d, .seq_len = %d, .vocab = %d,", input_shape[1], input_shape[2], M.vocab(plan))
  else
    b:line(".tokens = 0,")
  end
  b:line(".input_ndim = %d, .input_shape = %s,", #input_shape, shape_init(input_shape))
  b:line(".loss = %s,", spec.loss == "sum" and "RT_LOSS_SUM" or "RT_LOSS_CROSS_ENTROPY")
  b:line(".n_forward = %d, .n_backward = %d,", n_forward, w.nbackward)
  local fl = flops.count(plan)
  code(b, ".flops_per_step = %d, .tokens_per_step = %d,  // model FLOPs (%s), all ranks",
    fl.step_flops, fl.step_tokens, flops.human(fl.step_flops))
  code(b, ".optim = {.kind = %s, .lr = %s, .beta1 = %s, .beta2 = %s, .eps = %s, "
    .. ".weight_decay = %s, .momentum = %s, .dampening = %s, .nesterov = %d, .nstates = %d},",
    C_OPTIM[o.kind], num(o.lr), num(o.beta1 or 0.9), num(o.beta2 or 0.999), num(o.eps or 1e-8),
    num(o.weight_decay or 0), num(o.momentum or 0), num(o.dampening or 0), o.nesterov and 1 or 0,
    opt_states)
  local sched = spec.lr_schedule
  if sched then
    code(b, ".lr_schedule = {.decay = %s, .warmup_steps = %d, .total_steps = %d, .min_lr = %s},",
      C_LR_DECAY[sched.decay], sched.warmup_steps, sched.total_steps, num(sched.min_lr))
  end
  b:line(".n_optimizer = %d,", plan.n_optimizer)
  for _, st in ipairs(plan.steps) do
    if st.rows then  -- optimizer.lua Sim:split_token_rows (the step after an eval splits alike)
      b:line(".optimizer_rows = 1,")
      break
    end
  end
  b:line(".grad_clip = %s,", num(spec.grad_clip or 0))
  b:line(".seed = %d,", spec.seed)
  local draws_rng = false
  for _, op in ipairs(plan.graph.ops) do
    if (op.kind == "dropout" and op.attrs.p > 0) or op.attrs.dropout_p then draws_rng = true end
  end
  b:line(".draws_rng = %d,", draws_rng and 1 or 0)
  if #attention_sites > 0 then
    b:line(".attention_choice = %s, .nattention = %d, .attention = attention,", C_ATTENTION[spec.attention],
      #attention_sites)
  end
  b:line(".arena_bytes = %d,", math.max(plan.memory.arena, ev and ev.memory.arena or 0,
    after and after.memory.arena or 0))
  b:line(".reference = %d,", is_reference and 1 or 0)
  code(b, ".step = step, .expect = %s,", expect)
  if ev then
    code(b, ".eval = eval, .eval_expect = %s,", eval_expect)
    if after then
      code(b, ".step_after_eval = step_after_eval, .after_eval_expect = %s,", after_expect)
    end
  else
    string_field(b, "eval_unavailable", plan.eval_unavailable)
  end
  if hf_field then code(b, "%s", hf_field) end
  if hf_unavailable then string_field(b, "hf_unavailable", hf_unavailable) end
  b:dedent()
  b:line("};")
  return b:text()
end

-- Token vocabulary: rows of the embedding(s) the input feeds.
function M.vocab(plan)
  return check.vocab(plan) or internal("a token input that feeds no embedding")
end

return M
