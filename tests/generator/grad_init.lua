-- Initialisation of activation-gradient buffers in the emitted step C: backward kernels
-- accumulate (rt_kernels.h), so a gradient buffer's first contribution must land on zeros
-- (an rt_zero before it) or be assigned (the kernel's assign bit, rt_kernels.h "Assign").
-- Checks, on the step C of every spec (tests/specs, examples), following each
-- activation-gradient buffer of the memory plan through the backward steps in order:
--   * its first contribution has exactly one of: an rt_zero of the buffer earlier in the
--     same step, or the assign bit of the kernel output that writes it;
--   * no later contribution assigns it or zeroes it;
--   * no call assigns an output that is also another gradient output of the call (x + x);
-- and following each unsharded parameter-gradient buffer through its life:
--   * its rt_zero ranges and the parameters that linear and norm backward calls assign
--     (RT_ASSIGN_DWEIGHT: their weights and biases) tile it exactly (no element twice,
--     none left out, padding included), or where a part of a split reduction (one rank)
--     ends it, tile that part's parameters (the part reads no other element);
--   * a parameter's gradient is assigned only by its first contribution, and every other
--     contribution lands on elements already zeroed or assigned; a packed buffer's (16-bit
--     elements: grad_assigns.packed_groups) are all assigned;
--   * an in-place buffer's (one rank) parameters whose looked-up rows' optimizer step
--     (RT_ROWS_LOOKED_UP) leaves their gradients zero count as zeroed from the start, where
--     the step C has that call for their group.
-- Run from the repository root: lua5.4 tests/generator/grad_init.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local emit_step = require("emit.emit_step")
local memory = require("memory.memory")
local step_ops = require("memory.step_ops")
local optimizer = require("plan.optimizer")
local trace = require("spec.trace")

local util = require("tests.generator.step_c")
local check, args_of = util.check, util.args_of
local check_param_grads

-- The kernels with an `assign` argument (their last) and, by bit, the argument position of
-- the gradient output it names (RT_ASSIGN_k is the k-th argument for all of them).
local ASSIGN_KERNELS = { linear = 1, layernorm = 1, rmsnorm = 1, gelu = 1, relu = 1, silu = 1, swiglu = 2,
  rope = 1, residual = 2, mul = 2, scale = 1, broadcast_add = 1, dropout = 1, sum_loss = 1, cross_entropy = 1,
  cross_entropy_forward = 1, cross_entropy_packed_forward = 1, linear_packed = 1, attention_lowmem = 3,
  gelu_packed = 1, relu_packed = 1, silu_packed = 1, swiglu_packed = 2, rope_packed = 1, attention_lowmem_packed = 3,
  residual_packed = 2, layernorm_packed = 1, rmsnorm_packed = 1, scale_packed = 1, linear_scaled = 1,
  linear_scaled_packed = 1 }

-- The kernels whose RT_ASSIGN_DWEIGHT assigns their parameter-gradient outputs, by argument
-- position (whatever buffer they are: a parameter's gradient, or an activation's where the
-- weight or bias is computed).
local PARAM_GRAD_KERNELS = { linear = { 2, 3 }, linear_packed = { 2, 3 }, layernorm = { 2, 3 },
  layernorm_packed = { 2, 3 }, rmsnorm = { 2 }, rmsnorm_packed = { 2 }, linear_scaled = { 2 },
  linear_scaled_packed = { 2 } }

-- The kernels whose assign argument is followed by their gradients' row lengths (rt_kernels.h
-- "Gradient row lengths"), and how many.
local LD_ARGS = { rope_packed = 1, attention_lowmem_packed = 3, linear_packed = 2, swiglu_packed = 3,
  linear_scaled_packed = 2 }

-- Argument positions (1-based) whose assign bit the call sets. An attention site's backward
-- (rt_step_attention_backward(R, site, dq, dk, dv, ...)) assigns those of the three it is
-- given (a NULL one cuDNN writes to the site's spare scratch); a rotary pair's
-- (dinp_a, dout_a, NH_a, packed_a, assign_a, ld_a, dinp_b, ...) each dinp by its own bit.
local function assigned_args(call)
  if call:match("^rt_step_attention_backward%(") then
    local a, set = args_of(call), {}
    for at = 3, 5 do set[at] = a[at] ~= "NULL" or nil end
    return set
  end
  if call:match("^rt_rope_pair_packed_backward%(") then
    local a, set = args_of(call), {}
    for _, at in ipairs({ 1, 7 }) do
      local bits = a[at + 4]
      if bits == "RT_ASSIGN_1" then set[at] = true elseif bits ~= "RT_ACCUMULATE" then set.bad = true end
    end
    return set
  end
  local k = call:match("^rt_([%w_]+)_backward%(")
  local nbits = k and ASSIGN_KERNELS[k]
  if not nbits then return {} end
  local a = args_of(call)
  local bits = a[#a - (LD_ARGS[k] or 0)]
  local set = {}
  if bits ~= "RT_ACCUMULATE" then
    for b in bits:gmatch("RT_ASSIGN_(%d)") do set[tonumber(b)] = true end
  end
  for b in pairs(set) do
    if b > nbits then set[b] = nil; set.bad = true end
  end
  if bits:find("RT_ASSIGN_DWEIGHT", 1, true) then  -- one bit for all of them, NULL ones too
    for _, i in ipairs(PARAM_GRAD_KERNELS[k] or {}) do set[i] = a[i] ~= "NULL" and "param" or nil end
  end
  return set
end

local function F(bf) return string.format("F(%d, %d)", bf.offset, bf.size) end

-- The storage of t's gradient at step st: its buffer, or where it is a slice of a stack's
-- rows (stacked_linears.lua) one key per buffer and column, and the view the call gets.
local slices = {}
local function storage(st, t)
  local x = memory.base(t)
  local b = st.bufs.grads[x]
  local sl = b and x.grad_slice
  if not sl then return b, b and F(b) end
  slices[b] = slices[b] or {}
  slices[b][sl.col] = slices[b][sl.col] or { kind = b.kind }
  return slices[b][sl.col], string.format("F(%d, %d)", b.offset + 2 * sl.col, b.size - 2 * sl.col)
end

-- The inputs of the ops a backward step's call computes (step_ops.lua).
local function step_inputs(st)
  local ins = {}
  for _, op in ipairs(step_ops.ops(st)) do
    for _, t in ipairs(op.ins) do ins[#ins + 1] = t end
  end
  return ins
end

-- Backward steps' sections of the step C, in order.
local function backward_sections(text)
  local secs = {}
  for _, st in ipairs(util.compute_steps(text, true)) do
    if st.kind == "backward" or st.kind == "loss_grad" then secs[#secs + 1] = st end
  end
  return secs
end

-- Byte ranges [lo, hi) of parameter-gradient buffers: whether r overlaps any of rs, and
-- whether rs covers r.
local function overlaps(rs, r)
  for _, x in ipairs(rs) do
    if x[1] < r[2] and r[1] < x[2] then return true end
  end
  return false
end
local function covered(rs, r)
  local at = r[1]
  local sorted = {}
  for i, x in ipairs(rs) do sorted[i] = x end
  table.sort(sorted, function(a, b) return a[1] < b[1] end)
  for _, x in ipairs(sorted) do
    if x[1] <= at and x[2] > at then at = x[2] end
  end
  return at >= r[2]
end

-- Bytes per element of an unsharded gradient buffer: 2 where its group's are packed
-- (grad_assigns.packed_groups).
local function es(bf) return bf.packed_grads and 2 or 4 end

-- The unsharded parameter-gradient buffers (see the top of the file), from the calls of
-- each backward step and the memory plan's buffers.
check_param_grads = function(name, plan, secs, bsteps, text)
  local inits, order, bad = {}, {}, {}
  local nassign, nacc, nparts = 0, 0, 0
  local function param_range(g, p)
    for _, l in ipairs(g.layout.params) do
      if l.param == p then return { l.grad_offset * g.shard, trace.numel(p.shape) } end
    end
  end
  -- in-place gradients the last step's looked-up rows' optimizer left zero, by group buffer:
  -- of the parameters whose unused rows are stepped with a zero gradient (not a tied
  -- embedding's, whose unused rows keep the output head's)
  local consumed, unused = {}, {}
  for _, st in ipairs(plan.steps) do
    if st.op == "optimizer" and st.rows == "unused" then
      for _, p in ipairs(optimizer.stepped_params(st)) do unused[p] = true end
    end
  end
  for _, st in ipairs(plan.steps) do
    local g = st.group
    local call = g and string.format("rt_step_optimizer_rows(R, %d, ", g.index - 1)
    if st.op == "optimizer" and st.rows == "looked_up" and text:find(call, 1, true)
        and text:find("RT_ROWS_LOOKED_UP", 1, true) then
      for _, p in ipairs(optimizer.stepped_params(st)) do
        if unused[p] then
          consumed[g.grads_buf] = consumed[g.grads_buf] or {}
          table.insert(consumed[g.grads_buf], param_range(g, p))
        end
      end
    end
  end
  -- in place, a tied embedding's gradient that its "final" part leaves for the lookups to
  -- add to: the buffer its "looked_up" part ends starts with it (memory.lua part_reads)
  local continued = {}
  for _, st in ipairs(plan.steps) do
    if st.op == "reduce_scatter" and st.reduction.rows == "looked_up" and st.bufs.ugrad then
      for _, k in ipairs(st.reduction.params) do
        continued[st.bufs.ugrad] = continued[st.bufs.ugrad] or {}
        table.insert(continued[st.bufs.ugrad], param_range(st.group, st.group.params[k]))
      end
    end
  end
  local function init_of(bf)
    if not inits[bf] then
      inits[bf] = {}
      for _, from in ipairs({ bf.alias and consumed[bf.alias] or {}, continued[bf] or {} }) do
        for _, c in ipairs(from) do
          table.insert(inits[bf], { bf.offset + es(bf) * c[1], bf.offset + es(bf) * (c[1] + c[2]) })
        end
      end
    end
    return inits[bf]
  end
  for k, st in ipairs(bsteps) do
    local calls = secs[k].calls
    local function fail(msg) bad[#bad + 1] = secs[k].head:match("^%s*(.-)%s*$") .. ": " .. msg end
    local function buffer_of(lo)
      for _, bf in pairs(st.bufs.ugrad) do
        if lo >= bf.offset and lo < bf.offset + bf.size then return bf end
      end
    end
    for _, call in ipairs(calls) do
      if call:match("^rt_zero%(") then
        local off, bytes = args_of(call)[1]:match("^F%((%d+), (%d+)%)$")
        local r = { tonumber(off), tonumber(off) + tonumber(bytes) }
        local bf = buffer_of(r[1])
        if bf then
          if not inits[bf] then order[#order + 1] = bf end
          if overlaps(init_of(bf), r) then fail("zeroes elements already zeroed or assigned: " .. call) end
          inits[bf][#inits[bf] + 1] = r
        end
      end
    end
    -- the parameter gradients the step's calls write, each with its elements: a stack's
    -- (stacked_linears.lua) all its weights' from the first one's in one call, or (split)
    -- each weight's in its own
    local writes, s = {}, st.stack
    for _, t in ipairs(st.stacked and {} or st.node.ins) do
      if s and t == st.node.ins[2] then
        for _, op in ipairs(s.split and s.ops or { s.ops[1] }) do
          local w = op.ins[2]
          writes[#writes + 1] = { w, s.split and trace.numel(w.shape) or s.ld * w.shape[2] }
        end
      else
        writes[#writes + 1] = { t, trace.numel(t.shape) }
      end
    end
    for _, wr in ipairs(writes) do
      local t, n = wr[1], wr[2]
      local g = t.requires_grad and t.is_param and plan.owner[t]
      local bf = g and st.bufs.ugrad[g.index]
      if bf then
        local off
        for _, l in ipairs(g.layout.params) do
          if l.param == t then off = l.grad_offset * g.shard end  -- layout.lua grad_offset
        end
        local r = { bf.offset + es(bf) * off, bf.offset + es(bf) * (off + n) }
        local e = string.format("F(%d, %d)", r[1], r[2] - r[1])
        local assigned = false
        for _, call in ipairs(calls) do  -- (dinp, dweight[, dbias], ...): arguments 2 and 3
          local k = call:match("^rt_([%w_]+)_backward%(")
          local a = PARAM_GRAD_KERNELS[k] and args_of(call)
          for _, i in ipairs(a and PARAM_GRAD_KERNELS[k] or {}) do
            if a[i] == e and a[#a - (LD_ARGS[k] or 0)]:find("RT_ASSIGN_DWEIGHT", 1, true) then assigned = true end
          end
        end
        if not inits[bf] then order[#order + 1] = bf end
        init_of(bf)
        if assigned then
          nassign = nassign + 1
          if overlaps(inits[bf], r) then fail(t.fqn .. "'s gradient assigned onto zeroed or written elements") end
          inits[bf][#inits[bf] + 1] = r
        else
          nacc = nacc + 1
          if not covered(inits[bf], r) then fail(t.fqn .. "'s gradient accumulates onto elements never zeroed") end
          -- a 16-bit sum would round at every contribution: packed ones are only assigned
          if bf.packed_grads then fail(t.fqn .. "'s packed gradient accumulates") end
        end
      end
    end
  end
  -- A buffer that parts of a split reduction end (one, or several one after another): their
  -- parameters' elements.
  local parts_of = {}
  for _, st in ipairs(plan.steps) do
    if st.op == "reduce_scatter" and st.reduction.part and st.bufs.ugrad then
      parts_of[st.bufs.ugrad] = parts_of[st.bufs.ugrad] or {}
      table.insert(parts_of[st.bufs.ugrad], st)
    end
  end
  for _, bf in ipairs(order) do
    if parts_of[bf] then
      nparts = nparts + 1
      for _, st in ipairs(parts_of[bf]) do
        for _, k in ipairs(st.reduction.params) do
          local t = st.group.params[k]
          local r = param_range(st.group, t)
          if not covered(inits[bf], { bf.offset + es(bf) * r[1], bf.offset + es(bf) * (r[1] + r[2]) }) then
            bad[#bad + 1] = bf.name .. ": not every element of " .. t.fqn .. " (its part) zeroed or assigned"
          end
        end
      end
    elseif not covered(inits[bf], { bf.offset, bf.offset + bf.size }) then
      bad[#bad + 1] = bf.name .. ": not every element zeroed or assigned"
    end
  end
  check(#bad == 0, string.format("%s: %d unsharded gradient buffers tiled by their zeros and assigned weights "
    .. "(%d of them only their part's parameters); %d parameter contributions assign, %d accumulate%s", name,
    #order, nparts, nassign, nacc, bad[1] and (" (" .. bad[1] .. ")") or ""))
end

-- The C of one program of the file: the step's (up to the eval program's sections), or
-- the step after an eval's (from its sections on).
local function program_text(text, after_eval)
  if after_eval then return text:match("\n(// %-%-%-%- after_eval_.*)$") or "" end
  return util.step_part(text)
end

local function check_program(name, plan, text)
  local secs = backward_sections(text)
  local bsteps = {}
  for _, st in ipairs(plan.steps) do
    if st.op == "backward" or st.op == "loss_grad" then bsteps[#bsteps + 1] = st end
  end
  if #secs ~= #bsteps then
    check(false, string.format("%s: %d backward sections for %d backward steps", name, #secs, #bsteps))
    return
  end
  local state = {}  -- activation-gradient buffer -> "init" after its first contribution
  local bad = {}
  local nbuf, nassigned, nzeroed, nlater, npzero, nalias = 0, 0, 0, 0, 0, 0
  local function fail(k, msg) bad[#bad + 1] = secs[k].head:match("^%s*(.-)%s*$") .. ": " .. msg end
  for k, st in ipairs(bsteps) do
    local op, calls = st.node, secs[k].calls
    if st.grad_alias then
      -- no call: the inputs' gradients are the output's buffer, begun by its readers
      nalias = nalias + 1
      local b = storage(st, op.outs[1])  -- a slice's too: LoRA's add (stacked_linears.lua)
      if calls[1] then fail(k, "calls in a step whose gradients share the output's buffer") end
      if not (b and state[b]) then fail(k, "the output's gradient buffer was never begun") end
      for _, t in ipairs(op.ins) do
        if storage(st, t) ~= b then fail(k, "an input's gradient is not the output's buffer") end
      end
      goto continue
    end
    if #step_ops.ops(st) == 0 then  -- computed by a later step's call (a stack's, a pair's)
      if calls[1] then fail(k, "calls in a step whose op a later step's call computes") end
      goto continue
    end
    -- rt_zero lines (before the kernel) and the gradient outputs each call assigns
    local zeroed, assigned, kernel_at = {}, {}, nil
    for ci, call in ipairs(calls) do
      if call:match("^rt_zero%(") then
        local e = args_of(call)[1]
        zeroed[e] = ci
      elseif call:match("^rt_[%w_]+_backward%(") or call:match("^rt_accumulate%(") then
        kernel_at = kernel_at or ci
        local a = args_of(call)
        local set = assigned_args(call)
        if set.bad then fail(k, "assign bit without a gradient output: " .. call) end
        for pos in pairs(set) do
          if pos ~= "bad" then
            local e = a[pos]
            for j, x in ipairs(a) do
              if j ~= pos and x == e then fail(k, "assigns an output that is also argument " .. j .. ": " .. call) end
            end
            if e == "NULL" then fail(k, "assign bit on a NULL output: " .. call) end
            assigned[e] = set[pos]
          end
        end
      end
    end
    -- every activation-gradient buffer the call's ops' backwards write
    local seen = {}
    for _, t in ipairs(step_inputs(st)) do
      local b, e = storage(st, t)
      if t.is_param then b = nil end
      if b and b.kind == "activation_grad" and not seen[b] then
        seen[b] = e
        local written = false
        for _, call in ipairs(calls) do
          if not call:match("^rt_zero%(") and call:find(e, 1, true) then written = true end
        end
        local z, as = zeroed[e], assigned[e]
        if not state[b] then
          if written or z then
            nbuf = nbuf + 1
            if z and as then fail(k, e .. " zeroed and assigned") end
            if not z and not as then fail(k, e .. " first contribution neither zeroed nor assigned") end
            if z and kernel_at and z > kernel_at then fail(k, e .. " zeroed after the kernel") end
            if as then nassigned = nassigned + 1 else nzeroed = nzeroed + 1 end
            state[b] = "init"
          end
        elseif written or z then
          nlater = nlater + 1
          if as then fail(k, e .. " assigned by a later contribution") end
          if z then fail(k, e .. " zeroed after its first contribution") end
        end
      end
    end
    -- only activation-gradient buffers are assigned by the RT_ASSIGN_k bits (parameter
    -- gradients by RT_ASSIGN_DWEIGHT, whose other outputs the loop above checked)
    for e, how in pairs(assigned) do
      local isact = how == "param"
      for _, f in pairs(seen) do if f == e then isact = true end end
      if not isact then fail(k, e .. " assigned but not an activation gradient of the op") end
    end
    for e in pairs(zeroed) do
      local isact = false
      for _, f in pairs(seen) do if f == e then isact = true end end
      if not isact then npzero = npzero + 1 end
    end
    ::continue::
  end
  check(#bad == 0, string.format("%s: %d activation-gradient buffers, %d assigned and %d zeroed at their first "
    .. "contribution, %d later contributions accumulate; %d other buffers zeroed; %d adds pass the output's "
    .. "buffer on%s", name, nbuf, nassigned, nzeroed, nlater, npzero, nalias, bad[1] and (" (" .. bad[1] .. ")") or ""))
  check_param_grads(name, plan, secs, bsteps, text)
end

local function check_spec(path)
  local plan = util.plan(path)
  local ok, text = pcall(emit_step.render, plan, path, plan.spec.name)
  if not ok then
    check(false, path .. ": step C emitted: " .. tostring(type(text) == "table" and text.msg or text))
    return
  end
  text = util.flat(text)  -- views as F(offset, bytes), one line per call
  check_program(plan.spec.name, plan, program_text(text, false))
  if plan.after_eval_plan then
    check_program(plan.spec.name .. " (the step after an eval)", plan.after_eval_plan, program_text(text, true))
  end
end

for _, spec in ipairs(util.all_specs()) do check_spec(spec) end

util.finish()
