-- Gradient dataflow through the memory plan's buffers. Simulates every spec's backward steps
-- over symbolic buffer contents (which backward step's contribution to which tensor's
-- gradient each buffer holds) and checks that
--   * each gradient read (an op's backward reading its output's gradient) finds that
--     tensor's whole gradient and nothing else: the contribution of every backward step
--     that writes it, each once, and none to another tensor;
--   * no backward kernel reads and writes one buffer.
-- Independent of how memory.lua decides to share gradient buffers (view casts, FSDP's
-- hooks, adds that pass their output's buffer on: their step's one contribution counts for
-- both inputs), so a contribution that lands on a shared buffer before another tensor's
-- read shows here. Controls: small hand-made plans where sharing is wrong, which the
-- simulation reports and memory.lua's rule refuses.
-- Run from the repository root: lua5.4 tests/generator/grad_flow.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local memory = require("memory.memory")
local grad_alias = require("memory.grad_alias")
local step_ops = require("memory.step_ops")

local util = require("tests.generator.step_c")
local check = util.check

local function is_backward(st) return st.op == "backward" or st.op == "loss_grad" end

-- Activation gradients (by memory.base) op's backward writes: one per input position.
local function written(op)
  local ws = {}
  for _, t in ipairs(op.ins) do
    if t.requires_grad and not t.is_param then ws[#ws + 1] = memory.base(t) end
  end
  return ws
end

local function name(t) return t.label or (t.producer and t.producer.label) or "?" end

-- The gradients a backward step writes: its call's ops' (step_ops.lua), but a stack's one
-- call (stacked_linears.lua) writes its input's once.
local function step_written(st)
  if st.stack then return written(st.stack.ops[1]) end
  local ws = {}
  for _, op in ipairs(step_ops.ops(st)) do
    for _, x in ipairs(written(op)) do ws[#ws + 1] = x end
  end
  return ws
end

-- Tensor x's gradient storage at a step: its buffer, or for a slice of a stack's rows one
-- key per buffer and column (a slice is its own storage).
local slices = setmetatable({}, { __mode = "k" })
local function storage(grads, x)
  local b = grads[x]
  local sl = x.grad_slice
  if not (b and sl) then return b end
  slices[b] = slices[b] or {}
  slices[b][sl.col] = slices[b][sl.col] or { slice_of = b }
  return slices[b][sl.col]
end

-- Simulates steps; returns the errors (strings) and the number of reads checked and of
-- those through a buffer shared by an add's inputs and output. A backward pass (from its
-- loss_grad) computes its own activation gradients.
local function simulate(steps)
  -- Every contribution each tensor's gradient gets in each pass: step index -> count.
  local want, pass_of = { [0] = {} }, {}  -- pass -> tensor -> step -> count
  for i, st in ipairs(steps) do
    if st.op == "loss_grad" then want[#want + 1] = {} end
    pass_of[i] = #want
    if is_backward(st) and not memory.is_view(st.node) then
      local w = want[#want]
      for _, x in ipairs(step_written(st)) do
        w[x] = w[x] or {}
        w[x][i] = (w[x][i] or 0) + 1
      end
    end
  end
  local content, shared = {}, {}  -- buffer -> tokens { step, targets }; buffer -> true
  local errs, nreads, nshared = {}, 0, 0
  local function err(i, msg) errs[#errs + 1] = string.format("step %d (%s): %s", i, steps[i].label or "?", msg) end
  -- A token is one step's contribution in a buffer: targets maps each tensor it is a
  -- contribution to onto the step it counts as, its own step or the no-copy add that passed
  -- it on (that add's one contribution, however many tokens its output's gradient had).
  local function read(i, x, b)
    nreads = nreads + 1
    if shared[b] then nshared = nshared + 1 end
    local got, passed, w = {}, {}, want[pass_of[i]][x] or {}
    for _, tok in ipairs(content[b] or {}) do
      local s = tok.targets[x]
      if not s then
        err(i, string.format("the gradient of %s holds step %d's contribution to another tensor", name(x), tok.step))
      elseif s == tok.step then
        got[s] = (got[s] or 0) + 1
      elseif not passed[s] then
        passed[s] = true
        got[s] = (got[s] or 0) + 1
      end
    end
    for s, n in pairs(w) do
      if (got[s] or 0) ~= n then err(i, string.format("the gradient of %s lacks step %d's contribution", name(x), s)) end
    end
    for s, n in pairs(got) do
      if n > (w[s] or 0) then err(i, string.format("the gradient of %s holds step %d's contribution wrongly", name(x), s)) end
    end
  end
  for i, st in ipairs(steps) do
    local op = st.node
    if is_backward(st) and not memory.is_view(op) then
      local grads, rbufs = st.bufs.grads, {}
      -- the buffers this step begins: zeroed before the kernel, or assigned by it
      for _, z in ipairs(st.bufs.zero) do content[z] = {} end
      for _, sop in ipairs(step_ops.ops(st)) do
        for _, t in ipairs(sop.outs) do
          local x = memory.base(t)
          local b = storage(grads, x)
          if t.requires_grad and b then
            read(i, x, b)
            rbufs[b] = true  -- a slice: its columns (a kernel may write another slice)
            if b.slice_of then rbufs[b.slice_of] = rbufs[b.slice_of] or "slice" end
          end
        end
      end
      if st.grad_alias then
        -- no kernel: the output's gradient, just read whole, is now each input's too,
        -- its contributions counting as this step's one for them
        local b = storage(grads, memory.base(op.outs[1]))
        for _, x in ipairs(written(op)) do
          if storage(grads, x) ~= b then err(i, "an input's gradient is not the output's buffer") end
          for _, tok in ipairs(content[b] or {}) do tok.targets[x] = i end
        end
        shared[b] = true
      else
        for _, x in ipairs(step_written(st)) do
          local b = storage(grads, x)
          if not b then
            err(i, "no gradient buffer for " .. name(x))
          else
            -- a slice may be written beside another slice read, nothing else beside a read
            if rbufs[b] or (b.slice_of and rbufs[b.slice_of] == true) then
              err(i, "reads and writes the buffer of " .. name(x))
            end
            content[b] = content[b] or {}
            table.insert(content[b], { step = i, targets = { [x] = i } })
          end
        end
      end
    end
  end
  return errs, nreads, nshared
end

local total_shared = 0
for _, path in ipairs(util.all_specs()) do
  local ok, plan = pcall(util.plan, path)
  if not ok then
    check(false, path .. ": planned (" .. tostring(type(plan) == "table" and plan.msg or plan) .. ")")
  else
    local errs, nreads, nshared = simulate(plan.steps)
    total_shared = total_shared + nshared
    check(#errs == 0, string.format("%s: %d gradient reads whole and exclusive, %d through shared buffers%s",
      plan.spec.name, nreads, nshared, errs[1] and (" (" .. errs[1] .. ")") or ""))
  end
end
check(total_shared > 0, string.format("the specs read %d gradients through shared buffers", total_shared))

-- Controls: out = a + b with a = pa(input) and b read only by the add, plus the one change
-- each case names; steps in backward order (the loss, the add, the rest). `alias` shares
-- a's and b's gradient buffers with out's as memory.lua would.
local function tensor(label, producer)
  return { label = label, producer = producer, requires_grad = true, dtype = "bf16", shape = { 4, 8 } }
end
local function control(case)
  local input = { label = "input", dtype = "bf16", shape = { 4, 8 } }
  local pa = { kind = "linear", label = "pa", ins = { input } }
  local a = tensor("a", pa)
  pa.outs = { a }
  local pb = { kind = "relu", label = "pb", ins = { case == "b_of_a" and a or input } }
  local b = tensor("b", pb)
  pb.outs = { b }
  local add = { kind = "add", label = "add", ins = { a, b } }
  local out = tensor("out", add)
  add.outs = { out }
  local loss = { kind = "sum", label = "loss", ins = { out } }
  loss.outs = { tensor("loss", loss) }
  local r = { kind = "relu", label = "r", ins = { a } }  -- a's other reader, before the add
  r.outs = { tensor("r_out", r) }
  local steps = { { op = "loss_grad", node = loss, label = "loss" }, { op = "backward", node = add, label = "add" } }
  local rest = { pb, r, pa }
  if case == "early_write" then rest = { r, pb, pa } end
  if case == "b_of_a" then rest = { pb, pa } end
  for _, op in ipairs(rest) do steps[#steps + 1] = { op = "backward", node = op, label = op.label } end
  local gout, grout = { name = "out grad" }, { name = "r_out grad" }
  if case ~= "b_of_a" then loss.ins[2] = r.outs[1] end  -- r's output gradient, from the loss
  for _, st in ipairs(steps) do
    st.bufs = { grads = { [out] = gout, [a] = gout, [b] = gout, [r.outs[1]] = grout }, zero = {} }
  end
  steps[1].bufs.zero = { gout, grout }
  steps[2].grad_alias = true
  return steps
end
local errs = simulate(control("ok"))
check(#errs == 0, "control: b read before r adds to a, then a read: whole and exclusive" ..
  (errs[1] and (" (" .. errs[1] .. ")") or ""))
errs = simulate(control("early_write"))
check(errs[1] ~= nil and errs[1]:find("another tensor", 1, true) ~= nil,
  "control: r adds to a before b is read: reported (" .. tostring(errs[1]) .. ")")
errs = simulate(control("b_of_a"))
check(errs[1] ~= nil and errs[1]:find("reads and writes", 1, true) ~= nil,
  "control: b = pb(a), whose backward reads b's gradient and writes a's: reported (" .. tostring(errs[1]) .. ")")

-- Nested: out = a2 + a4 and a4 = A + B, both adds passing one buffer on, and A read
-- after a2 ("nested") or also written by its other reader r before a2 is read
-- ("nested_early_write").
local function nested(case)
  local input = { label = "input", dtype = "bf16", shape = { 4, 8 } }
  local function op(kind, label, ins)
    local o = { kind = kind, label = label, ins = ins }
    o.outs = { tensor(label .. "_out", o) }
    return o
  end
  local pA, pB, p2 = op("linear", "pA", { input }), op("relu", "pB", { input }), op("relu", "p2", { input })
  local A, B, a2 = pA.outs[1], pB.outs[1], p2.outs[1]
  local add4 = op("add", "add4", { A, B })
  local add5 = op("add", "add5", { a2, add4.outs[1] })
  local r = op("relu", "r", { A })
  local loss = op("sum", "loss", { add5.outs[1], r.outs[1] })
  local order = case == "nested" and { p2, pB, r, pA } or { r, p2, pB, pA }
  local steps = { { op = "loss_grad", node = loss, label = "loss" } }
  for _, o in ipairs({ add5, add4, table.unpack(order) }) do
    steps[#steps + 1] = { op = "backward", node = o, label = o.label }
  end
  local g, gr = { name = "out grad" }, { name = "r_out grad" }
  local grads = { [r.outs[1]] = gr }
  for _, t in ipairs({ add5.outs[1], add4.outs[1], a2, A, B }) do grads[t] = g end
  for _, st in ipairs(steps) do st.bufs = { grads = grads, zero = {} } end
  steps[1].bufs.zero = { g, gr }
  steps[2].grad_alias, steps[3].grad_alias = true, true
  return steps
end
errs = simulate(nested("nested"))
check(#errs == 0, "control: nested adds, a2 read before r adds to A: whole and exclusive" ..
  (errs[1] and (" (" .. errs[1] .. ")") or ""))
errs = simulate(nested("nested_early_write"))
check(errs[1] ~= nil and errs[1]:find("another tensor", 1, true) ~= nil,
  "control: nested adds, r adds to A before a2 is read: reported (" .. tostring(errs[1]) .. ")")

-- memory.lua's rule on the same plans: shares the first, refuses the other two.
for _, case in ipairs({ "ok", "early_write", "b_of_a" }) do
  local steps = control(case)
  steps[2].grad_alias = nil
  grad_alias.mark(steps)
  local want = case == "ok"
  check((steps[2].grad_alias == true) == want, string.format("memory.lua %s the add's buffer in control '%s'",
    want and "shares" or "does not share", case))
end
for _, case in ipairs({ "nested", "nested_early_write" }) do
  local steps = nested(case)
  steps[2].grad_alias, steps[3].grad_alias = nil, nil
  grad_alias.mark(steps)
  local want = case == "nested"
  check(steps[2].grad_alias == true and (steps[3].grad_alias == true) == want,
    string.format("memory.lua shares the outer add's buffer and %s the inner's in control '%s'",
      want and "shares" or "does not share", case))
end

util.finish()
