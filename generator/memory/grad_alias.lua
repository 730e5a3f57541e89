-- Residual adds whose backward is no copy (st.grad_alias): their inputs' gradients share
-- the output's gradient buffer. memory.lua's mark runs it over the step.
local trace = require("spec.trace")
local views = require("memory.views")

local M = {}

local base = views.base

-- Residual adds whose backward is no copy (`st.grad_alias` on the step): out = a + b gives
-- da = db = dout, so a's and b's gradients can be the output's gradient buffer itself, as
-- PyTorch's autograd hands AddBackward's gradient on to both inputs without a copy (on a
-- Llama residual stream, two 16-bit copies per add saved; one buffer carries the stream's
-- gradient through every block). The bits are the add's kernel's when
--   * a, b and the output (and their buffers' tensors, M.base) have one dtype and one
--     storage of their gradients, and a and b are distinct activations of the output's
--     size that need a gradient;
--   * neither a's nor b's gradient was begun before (the add's contribution is the first,
--     as when its kernel assigned them);
--   * each tensor sharing the buffer is read (its producer's backward) before any other
--     gets a further contribution: the buffer holds one gradient for all of them until then.
-- A view cast's backward rounds the shared buffer in place, so it counts as a contribution;
-- a folded scale's (scaled_linears.lua) does nothing, and is not one.
local function grad_alias_candidate(op)
  if op.kind ~= "add" or not op.outs[1].requires_grad then return nil end
  local o, a, b = op.outs[1], op.ins[1], op.ins[2]
  local A, B, O = base(a), base(b), base(o)
  if A == B or trace.numel(a.shape) ~= trace.numel(o.shape) or trace.numel(b.shape) ~= trace.numel(o.shape) then
    return nil
  end
  for _, t in ipairs({ a, b, A, B, O }) do
    if t.dtype ~= o.dtype or not t.requires_grad or t.is_param or not t.producer then return nil end
  end
  local function packed(t) return t.grad_packed == true end
  if packed(A) ~= packed(O) or packed(B) ~= packed(O) then return nil end
  return A, B, O
end

-- Within one backward pass (steps lo..hi, from its loss_grad).
local function mark_grad_alias_adds_in(steps, lo, hi)
  -- Steps that read (output) and write (input) each activation's gradient, in order.
  local reads, writes = {}, {}
  local function note(tbl, t, i)
    local l = tbl[t] or {}
    tbl[t] = l
    l[#l + 1] = i
  end
  for i = lo, hi do
    local st = steps[i]
    if (st.op == "backward" or st.op == "loss_grad") and not (st.node.original or st.node).folded then
      for _, t in ipairs(st.node.outs) do note(reads, base(t), i) end
      for _, t in ipairs(st.node.ins) do
        if t.requires_grad and not t.is_param then note(writes, base(t), i) end
      end
    end
  end
  local function first_after(l, k)
    for _, i in ipairs(l or {}) do
      if i > k then return i end
    end
  end
  local sharing = {}  -- tensor -> the tensors whose gradients share its buffer
  for k = lo, hi do
    local st = steps[k]
    local A, B, O
    if st.op == "backward" then A, B, O = grad_alias_candidate(st.node) end
    local ok = A and not (writes[A][1] < k or writes[B][1] < k)
    local group = {}
    if ok then
      -- The members are distinct (A's and B's first contributions are here, so neither
      -- shares O's buffer yet); x's next contribution must come after the last read of
      -- every other member, the latest (top1, of top1_of) or, for top1_of, the next.
      for _, t in ipairs(sharing[O] or { O }) do group[#group + 1] = t end
      group[#group + 1] = A
      group[#group + 1] = B
      local top1, top1_of, top2 = 0, nil, 0
      for _, y in ipairs(group) do
        local r = reads[y] and reads[y][#reads[y]] or 0
        if r > top1 then
          top1, top1_of, top2 = r, y, top1
        elseif r > top2 then
          top2 = r
        end
      end
      for _, x in ipairs(group) do
        local w = first_after(writes[x], k)
        if w and (x == top1_of and top2 or top1) >= w then ok = false end
      end
    end
    if ok then
      st.grad_alias = true
      for _, t in ipairs(group) do sharing[t] = group end
    end
  end
end

function M.mark(steps)
  local lo = 1
  for i = 2, #steps + 1 do
    if i > #steps or steps[i].op == "loss_grad" then
      mark_grad_alias_adds_in(steps, lo, i - 1)
      lo = i
    end
  end
end

return M
