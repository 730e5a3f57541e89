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
      for _, x in ipairs(written(st.node)) do
        w[x] = w[x] or {}
        w[x][i] = (w[x][i] or 0) + 1
      end
    end
  end
  local content, shared = {}, {}  -- buffer -> tokens { step, targets }; buffer -> true
  local errs, nreads, nshared = {}, 0, 0
  local function err(i, msg) errs[#errs + 1] = string.format("step %d (%s): %s", i, steps[i].label or "?", msg) end
  local function read(i, x, b)
    nreads = nreads + 1
    if shared[b] then nshared = nshared + 1 end
    local got, w = {}, want[pass_of[i]][x] or {}
    for _, tok in ipairs(content[b] or {}) do
      if not tok.targets[x] then
        err(i, string.format("the gradient of %s holds step %d's contribution to another tensor", name(x), tok.step))
      end
      got[tok.step] = (got[tok.step] or 0) + 1
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
      for _, t in ipairs(op.outs) do
        local x = memory.base(t)
        if t.requires_grad and grads[x] then
          read(i, x, grads[x])
          rbufs[grads[x]] = true
        end
      end
      if st.grad_alias then
        -- one contribution for both inputs, in place of the output's gradient
        local b = grads[memory.base(op.outs[1])]
        local targets = {}
        for _, x in ipairs(written(op)) do
          targets[x] = true
          if grads[x] ~= b then err(i, "an input's gradient is not the output's buffer") end
        end
        content[b] = { { step = i, targets = targets } }
        shared[b] = true
      else
        for _, x in ipairs(written(op)) do
          local b = grads[x]
          if not b then
            err(i, "no gradient buffer for " .. name(x))
          else
            if rbufs[b] then err(i, "reads and writes the buffer of " .. name(x)) end
            content[b] = content[b] or {}
            table.insert(content[b], { step = i, targets = { [x] = true } })
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

-- memory.lua's rule on the same plans: shares the first, refuses the other two.
for _, case in ipairs({ "ok", "early_write", "b_of_a" }) do
  local steps = control(case)
  steps[2].grad_alias = nil
  memory.mark_grad_alias_adds(steps)
  local want = case == "ok"
  check((steps[2].grad_alias == true) == want, string.format("memory.lua %s the add's buffer in control '%s'",
    want and "shares" or "does not share", case))
end

util.finish()
