-- Linears that read one input, stacked in backward: q, k and v of an attention. Each of
-- their backwards would compute a 16-bit input gradient, the second and third as an fp32
-- product added in a second kernel (linear.cu add_packed_kernel: 12 bytes an element
-- moved). Stacked, the gradients of their outputs are column slices of one packed
-- [N, OC_1 + ... + OC_n] matrix, which their readers' backwards (rotary embedding,
-- attention) write as rows of that length (rt_kernels.h ld_dinp, ld_dq, ...), and the last
-- of their backward steps makes one call for all: rt_linear_packed_backward on the stacked
-- weights [OC_1 + ... + OC_n, C], which is one GEMM for the input gradient (summed in fp32,
-- rounded once) and one for the weights' gradients, as llm.c computes q, k and v with one
-- weight. M.mark finds them after the packing marks (memory.lua):
--   * bias-free linears of one input x, outside checkpointed regions, whose input gradient
--     and output gradients are packed (x's is assigned by the stacked call);
--   * their weights packed, consecutive in one group's parameters, with the unsharded
--     parameters (place_unsharded_params) and the unsharded gradients (the reductions'
--     layout: no shard padding) one after another, so that each stacked matrix is the
--     first one's start and the sum of their rows;
--   * each output read once, by a rotary embedding or an attention, whose backward makes
--     its gradient and assigns it (the slice is never zeroed);
--   * between the first and the last of their backward steps, only other backward steps.
-- Marks: `st.stack` on the last backward step (the stack: its linears in parameter order,
-- `call` the one whose step makes the call, rows and ld), `st.stacked` on the others (no
-- call), and on each output (M.base) `grad_slice` = { stack, col }: its gradient's first
-- column in the stack's rows.
local trace = require("spec.trace")

local M = {}

local WRITERS = { rotary = true, attention = true }

local function sixteen(t) return t.dtype == "bf16" or t.dtype == "fp16" end

-- The position of parameter p in group g's layout, or nil.
local function layout_index(g, p)
  for i, l in ipairs(g.layout.params) do
    if l.param == p then return i end
  end
end

-- Whether linear op may be a member of a stack over x (the rules above, but adjacency).
local function member_ok(op, x, readers, base)
  if op.region or op.ins[3] or op.ins[1] ~= x then return false end
  local w, y = op.ins[2], op.outs[1]
  if not (w.is_param and w.requires_grad and w.packed) then return false end
  if base(y) ~= y or not y.grad_packed or not sixteen(y) then return false end
  local rs = readers[y] or {}
  if #rs ~= 1 or not WRITERS[rs[1].kind] or rs[1].region then return false end
  local n = 0
  for _, t in ipairs(rs[1].ins) do
    if t == y then n = n + 1 end
  end
  return n == 1
end

-- Whether the linears ops (in parameter order) of group g lie one after another, packed
-- parameters and fp32 gradients alike.
local function adjacent(g, ops)
  local i0 = layout_index(g, ops[1].ins[2])
  if not i0 then return false end
  for k = 1, #ops do
    local l = g.layout.params[i0 + k - 1]
    if not l or l.param ~= ops[k].ins[2] then return false end
    if k < #ops then
      local nxt = g.layout.params[i0 + k]
      if l.padded_numel ~= l.numel or l.numel % 8 ~= 0 then return false end
      if nxt.unsharded_word ~= l.unsharded_word + l.numel // 2 then return false end
    end
  end
  return true
end

local function clear(graph)
  for _, op in ipairs(graph.ops) do
    for _, t in ipairs(op.outs) do t.grad_slice = nil end
  end
end

-- Marks the stacks of plan's backward steps (the rules above). readers: tensor -> the ops
-- that read it; base: memory.base.
function M.mark(plan, readers, base)
  local steps = plan.steps
  clear(plan.graph)
  for _, st in ipairs(steps) do st.stack, st.stacked = nil, nil end
  -- backward steps of linears, by input, in step order
  local by_input, inputs = {}, {}
  for i, st in ipairs(steps) do
    local op = st.op == "backward" and not st.grad_alias and st.node
    if op and op.kind == "linear" then
      local x = op.ins[1]
      if not by_input[x] then
        by_input[x] = {}
        inputs[#inputs + 1] = x
      end
      table.insert(by_input[x], i)
    end
  end
  for _, x in ipairs(inputs) do
    local at = by_input[x]
    local ops, ok = {}, #at >= 2 and x.requires_grad and base(x).grad_packed == true
    for _, i in ipairs(at) do
      ok = ok and member_ok(steps[i].node, x, readers, base)
      ops[#ops + 1] = steps[i].node
    end
    local g = ok and plan.owner[ops[1].ins[2]]
    for _, op in ipairs(ok and ops or {}) do
      ok = ok and plan.owner[op.ins[2]] == g and op.outs[1].dtype == ops[1].outs[1].dtype
    end
    if ok then
      table.sort(ops, function(a, b) return layout_index(g, a.ins[2]) < layout_index(g, b.ins[2]) end)
      ok = adjacent(g, ops)
    end
    for i = at[1] + 1, at[#at] - 1 do
      ok = ok and steps[i].op == "backward"
    end
    if ok then
      local s = { ops = ops, ld = 0 }
      for _, op in ipairs(ops) do
        local y = op.outs[1]
        y.grad_slice = { stack = s, col = s.ld }
        s.ld = s.ld + y.shape[#y.shape]
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

-- The ops a backward step computes: a stack's linears on its last step, none on the others.
function M.ops(st)
  if st.stack then return st.stack.ops end
  if st.stacked then return {} end
  return { st.node }
end

return M
