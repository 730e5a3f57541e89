-- Linears that read one input, stacked in backward: q, k and v of an attention, w1 and w3
-- of a SwiGLU feed-forward, and with LoRA their frozen base linears and lora_a's. Each of
-- their backwards would compute a 16-bit input gradient, the second and later ones as an
-- fp32 product added in a second kernel (linear.cu add_packed_kernel: 12 bytes an element
-- moved). Stacked, the gradients of their outputs are column slices of one packed
-- [N, OC_1 + ... + OC_n] matrix, which their readers' backwards (rotary embedding,
-- attention, swiglu, lora_b's linear) write as rows of that length (rt_kernels.h "Gradient
-- row lengths"), and the last of their backward steps makes the calls for all:
-- rt_linear_packed_backward on the stacked weights [OC_1 + ... + OC_n, C], one GEMM for the
-- input gradient (summed in fp32, rounded once), as llm.c computes q, k and v with one
-- weight, and one for the weights' gradients where those lie one after another too (q, k,
-- v), else one per trainable linear on its columns (w1, w3, a stack with a frozen weight:
-- `split`). M.mark finds them after the packing and gradient-aliasing marks (memory.lua):
--   * bias-free linears of one input x, outside checkpointed regions, whose input gradient
--     and output gradients are packed (x's is assigned or added to by the stacked call);
--     x's other linears, if any, keep their own backward;
--   * their weights packed, in one group, with the unsharded parameters one after another
--     (place_unsharded_params puts them so), so that the stacked weights are the first
--     one's start and the sum of their rows; where their unsharded gradients (the
--     reductions' layout, group order) are also consecutive without shard padding and no
--     weight is frozen, one weight-gradient GEMM, else `split`;
--   * each output y read once, and its gradient made and assigned by one backward (the
--     slice is never zeroed): by a rotary embedding, an attention or a swiglu; by a linear
--     as its input (lora_a's output, read by lora_b: its input gradient written in rows of
--     the stack's, ld_dinp); or through LoRA's add of y and lora_b's (scaled) output, whose
--     backward shares its output's gradient (grad_alias.lua), the sum read once by one of
--     the first three: the sum's gradient is the slice, and y's and lora_b's output's are
--     the same columns (lora_b's backward reads them: ld_dout);
--   * at least two of them; between the first and the last of their backward steps, only
--     other backward steps.
-- Marks: `st.stack` on the last backward step (the stack: its linears in unsharded order,
-- `call` the one whose step makes the calls, rows, ld and split), `st.stacked` on the
-- others (no call), and on each tensor whose gradient is a slice (M.base) `grad_slice` =
-- { stack, col }: its gradient's first column in the stack's rows.
local packing = require("memory.packing")
local trace = require("spec.trace")

local M = {}

local WRITERS = { rotary = true, attention = true, swiglu = true }

-- The position of parameter p in group g's layout, or nil.
local function layout_index(g, p)
  for i, l in ipairs(g.layout.params) do
    if l.param == p then return i end
  end
end

-- The one reader of t, or nil.
local function only_reader(t, readers)
  local rs = readers[t] or {}
  return #rs == 1 and rs[1] or nil
end

-- Whether op, outside checkpointed regions, reads t once.
local function reads_once(op, t)
  if not op or op.region then return false end
  local n = 0
  for _, u in ipairs(op.ins) do
    if u == t then n = n + 1 end
  end
  return n == 1
end

-- The tensors whose gradients are linear op's slice of a stack over x (the rules above), or
-- nil where op cannot be a member. aliased: the adds whose backward is no copy.
local function member_slice(op, x, readers, base, aliased)
  if op.region or op.ins[3] or op.ins[1] ~= x then return nil end
  local w, y = op.ins[2], op.outs[1]
  if not (w.is_param and w.packed) then return nil end
  -- a slice's columns: packed, a multiple of 8 (rt_kernels.h "Gradient row lengths")
  if base(y) ~= y or not y.grad_packed or not packing.sixteen(y) or y.shape[#y.shape] % 8 ~= 0 then return nil end
  local r = only_reader(y, readers)
  if not reads_once(r, y) then return nil end
  if WRITERS[r.kind] or (r.kind == "linear" and r.ins[1] == y) then return { y } end
  if r.kind ~= "add" or not aliased[r] then return nil end
  -- LoRA's add: the sum's one reader a writer; the other addend lora_b's output (or its
  -- folded scale, a view), read only here
  local sum, other = r.outs[1], r.ins[1] == y and r.ins[2] or r.ins[1]
  local l, wr = base(other), only_reader(sum, readers)
  local lin = l.producer
  if base(sum) ~= sum or not (wr and WRITERS[wr.kind] and reads_once(wr, sum)) then return nil end
  if not (lin and lin.kind == "linear" and not lin.region and only_reader(other, readers) == r) then return nil end
  if other ~= l and not ((other.producer.original or other.producer).folded and only_reader(l, readers)) then
    return nil
  end
  return { y, sum, l }
end

-- Whether the weights of linears ops (in unsharded order) of group g lie one after
-- another in the unsharded parameters; and whether their gradients do in the unsharded
-- gradients (group order, no shard padding), for one weight-gradient GEMM.
local function adjacent(g, ops)
  local grads = true
  for k = 1, #ops - 1 do
    local i, j = layout_index(g, ops[k].ins[2]), layout_index(g, ops[k + 1].ins[2])
    local l, nxt = g.layout.params[i], g.layout.params[j]
    if l.numel % 8 ~= 0 or nxt.unsharded_word ~= l.unsharded_word + l.numel // 2 then
      return false, false
    end
    grads = grads and j == i + 1 and l.padded_numel == l.numel
  end
  return true, grads
end

local function clear(graph)
  for _, op in ipairs(graph.ops) do
    for _, t in ipairs(op.outs) do t.grad_slice = nil end
  end
end

-- Marks the stacks of plan's backward steps (the rules above). readers: tensor -> the ops
-- that read it; base: memory.base. Needs grad_alias.lua's marks.
function M.mark(plan, readers, base)
  local steps = plan.steps
  clear(plan.graph)
  for _, st in ipairs(steps) do st.stack, st.stacked = nil, nil end
  -- backward steps of linears, by input, in step order; the adds whose backward is no copy
  local by_input, inputs, aliased = {}, {}, {}
  for i, st in ipairs(steps) do
    local op = st.op == "backward" and st.node
    if op and st.grad_alias then aliased[op.original or op] = true end
    if op and not st.grad_alias and op.kind == "linear" then
      local x = op.ins[1]
      if not by_input[x] then
        by_input[x] = {}
        inputs[#inputs + 1] = x
      end
      table.insert(by_input[x], i)
    end
  end
  for _, x in ipairs(inputs) do
    local at, ops, slices = {}, {}, {}
    for _, i in ipairs(by_input[x]) do
      local sl = member_slice(steps[i].node, x, readers, base, aliased)
      for _, t in ipairs(sl or {}) do
        if t.grad_slice then sl = nil end  -- already another stack's
      end
      if sl then
        at[#at + 1], ops[#ops + 1] = i, steps[i].node
        slices[steps[i].node] = sl
      end
    end
    local ok = #at >= 2 and x.requires_grad and base(x).grad_packed == true
    local g = ok and plan.owner[ops[1].ins[2]]
    for _, op in ipairs(ok and ops or {}) do
      ok = ok and plan.owner[op.ins[2]] == g and op.outs[1].dtype == ops[1].outs[1].dtype
    end
    local grads
    if ok then
      local function word(op) return g.layout.params[layout_index(g, op.ins[2])].unsharded_word end
      table.sort(ops, function(a, b) return word(a) < word(b) end)
      ok, grads = adjacent(g, ops)
    end
    if ok then
      for i = at[1] + 1, at[#at] - 1 do ok = ok and steps[i].op == "backward" end
    end
    if ok then
      local s = { ops = ops, ld = 0, split = not grads }
      for _, op in ipairs(ops) do
        local y = op.outs[1]
        for _, t in ipairs(slices[op]) do t.grad_slice = { stack = s, col = s.ld } end
        s.ld = s.ld + y.shape[#y.shape]
        s.split = s.split or not op.ins[2].requires_grad
      end
      s.rows = trace.numel(x.shape) // x.shape[#x.shape]
      s.call = steps[at[#at]].node  -- the linear whose step makes the call
      for k, i in ipairs(at) do
        if k == #at then steps[i].stack = s else steps[i].stacked = s end
      end
    end
  end
end

-- The stack's name: its linears' labels.
function M.label(s)
  local ls = {}
  for k, op in ipairs(s.ops) do ls[k] = op.label or "?" end
  return table.concat(ls, " + ")
end

return M
