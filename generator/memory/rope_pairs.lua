-- Rotary embeddings in pairs: two rotations at the same positions (an attention's q and k)
-- computed in one call on the later of their steps (rt_rope_pair_packed_forward and
-- _backward: on the GPU one launch, each position's angles computed once for both, where
-- each rotation was a launch). M.mark finds them after the stacks and the moved waits
-- (memory.lua; its marks hold step indices):
--   * two rotary ops of one 16-bit dtype (inputs and outputs), one batch, sequence, head
--     dim and theta, whose four tensors are four buffers (a rotation of the other's output,
--     or two of one input, stay apart);
--   * forward (or recompute) steps: the steps between them are steps of that kind whose
--     ops read nothing of the earlier one's output (Llama: q's rotation, k's linear, k's
--     rotation), so it may be written later;
--   * backward steps, the inputs needing gradients, no parameter: the steps between them
--     make no call of their own (linears stacked into a later call: Llama's k linear between
--     k's rotation and q's), so nothing reads the earlier one's input gradient before the
--     later step writes it.
-- Marks: the same pair { a = the earlier step's op, b = the later's, call = the later step,
-- at = its index } as `st.rope_pair` on both steps. memory.lua keeps a forward's input to
-- the call and moves a backward's buffers to it (step_ops.lua); the emitter writes one call
-- on `call` and a comment on the other step; the simulator prices one launch.
local packing = require("memory.packing")

local M = {}

-- The most steps a pair's two may be apart (Llama's: 2).
local WINDOW = 4

local function rotary_ok(op, dtype)
  local x, y = op.ins[1], op.outs[1]
  return op.kind == "rotary" and packing.sixteen(x) and x.dtype == (dtype or x.dtype)
    and y.dtype == x.dtype
end

-- Whether rotary ops a and b can share a call (the first rule above).
local function compatible(a, b, base)
  if not (rotary_ok(a) and rotary_ok(b, a.ins[1].dtype)) then return false end
  local sa, sb = a.ins[1].shape, b.ins[1].shape
  if sa[1] ~= sb[1] or sa[2] ~= sb[2] or a.attrs.head_dim ~= b.attrs.head_dim or a.attrs.theta ~= b.attrs.theta then
    return false
  end
  local seen = {}
  for _, t in ipairs({ a.ins[1], a.outs[1], b.ins[1], b.outs[1] }) do
    local k = base(t)
    if seen[k] then return false end
    seen[k] = true
  end
  return true
end

local function reads(op, t, base)
  for _, u in ipairs(op.ins) do
    if base(u) == t then return true end
  end
  return false
end

-- Whether steps i < j may be a pair: their kinds and the steps between (the rules above).
local function between_ok(steps, i, j, base)
  local kind = steps[i].op
  local a = steps[i].node
  for k = i + 1, j - 1 do
    local st = steps[k]
    if st.op ~= kind or st.rope_pair then return false end
    if kind == "backward" then
      if not st.stacked then return false end
    elseif reads(st.node, base(a.outs[1]), base) then
      return false
    end
  end
  return true
end

local function side_ok(st)
  if st.op == "forward" or st.op == "recompute" then return true end
  local x = st.node.ins[1]
  return st.op == "backward" and not st.grad_alias and x.requires_grad and not x.is_param
end

-- Marks the pairs of plan's steps (the rules above), each step in at most one, earliest
-- first. base: memory.base.
function M.mark(plan, base)
  local steps = plan.steps
  for _, st in ipairs(steps) do st.rope_pair = nil end
  for i, st in ipairs(steps) do
    if not st.rope_pair and st.node and st.node.kind == "rotary" and side_ok(st) then
      for j = i + 1, math.min(#steps, i + WINDOW) do
        local nx = steps[j]
        if nx.op == st.op and nx.node and nx.node.kind == "rotary" and side_ok(nx)
            and compatible(st.node, nx.node, base) and between_ok(steps, i, j, base) then
          local pair = { a = st.node, b = nx.node, call = nx, at = j }
          st.rope_pair, nx.rope_pair = pair, pair
          break
        end
      end
    end
  end
end

-- The pair's name in the schedule: its rotations' labels.
function M.label(pair) return (pair.a.label or "?") .. " + " .. (pair.b.label or "?") end

return M
