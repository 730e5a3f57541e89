-- The check pass: everything the code emitters (emit_step.lua, kernels_c.lua) need of a
-- plan, checked right after planning and memory planning by every command (plan, events,
-- counts, torch, diff, build, test, run), so that a spec gets a .schedule only if it
-- builds. A refusal is a spec error at the line that declared the thing refused; the
-- emitters assert the same conditions, so reaching one there is an internal error.
local errors = require("spec.errors")
local kernels = require("emit.kernels_c")
local memory = require("memory.memory")
local trace = require("spec.trace")

local M = {}

-- A condition this pass refuses, reached in an emitter: a bug (an internal error, never a
-- spec error).
function M.internal(fmt, ...)
  error("internal: the check pass let through: " .. string.format(fmt, ...))
end

-- The rows of the embeddings the token input feeds (the smallest), or nil if none does.
function M.vocab(plan)
  local v
  for _, op in ipairs(plan.graph.ops) do
    if op.kind == "embedding" and op.ins[1].is_input then
      local rows = op.ins[2].shape[1]
      v = v and math.min(v, rows) or rows
    end
  end
  return v
end

local function op_line(op) return (op.original or op).line end

-- A key of t's gradient buffer at backward step st, equal for equal buffers, or "NULL":
-- the same answer as emit_step's Walker:grad, without its C.
local function grad_key(plan, st, t)
  if not t.requires_grad or t.is_input or t.is_target then return "NULL" end
  if t.is_param then
    local g = plan.owner[t]
    local ug = g and st.bufs.ugrad[g.index]
    if not ug then return "missing " .. tostring(t.fqn) end  -- an emitter bug, not the spec's
    for _, l in ipairs(g.layout.params) do
      if l.param == t then return string.format("%d+%d", ug.offset, l.grad_offset * g.shard * 4) end
    end
  end
  local b = memory.base(t)
  local gb = st.bufs.grads[b]
  return gb and string.format("%d+%d", gb.offset, b.grad_slice and 2 * b.grad_slice.col or 0) or "NULL"
end

-- The kernels of every forward and backward step of one program (the step or the eval).
local function check_ops(plan)
  for i, st in ipairs(plan.steps) do
    local op = st.op
    local fused = memory.forward_with_loss_grad(plan.steps, i)  -- emitted by the loss gradient
    if (op == "forward" or op == "recompute") and not fused then
      local why = kernels.forward_refusal(st.node)
      if why then errors.raise(why, op_line(st.node)) end
    elseif (op == "backward" or op == "loss_grad") and not st.grad_alias and not st.stacked then
      local why = kernels.backward_refusal(st.node, function(t) return grad_key(plan, st, t) end)
      if why then errors.raise(why, op_line(st.node)) end
    end
  end
end

-- The generated program runs once per call: every group sharded when it ends.
local function check_resharded(plan, what)
  local unsharded = {}
  for _, st in ipairs(plan.steps) do
    local op = st.op
    if op == "all_gather_wait" then unsharded[st.group.index] = true
    elseif op == "reshard" or op == "reshard_post_forward" then unsharded[st.group.index] = nil end
  end
  for _, g in ipairs(plan.groups) do
    if unsharded[g.index] then
      local msg = "group '%s' is still unsharded at the end of the %s; the generated code assumes "
        .. "every group sharded between steps (reshard it, or keep reshard_after_backward = true)"
      errors.raise(string.format(msg, g.name, what), plan.spec.line)
    end
  end
end

-- Raises the first thing in `plan` (and its eval programs) that the emitters cannot emit.
function M.run(plan)
  local spec = plan.spec
  for _, e in ipairs(plan.params) do
    if not plan.owner[e[2]] then
      local msg = "parameter '%s' is in no fully_shard group; call fully_shard on the root "
        .. "module too"
      errors.raise(string.format(msg, e[1]), spec.line)
    end
  end
  for _, g in ipairs(plan.groups) do
    if g.shard ~= spec.mesh.shard or g.replicate ~= spec.mesh.replicate then
      local msg = "group '%s' has its own mesh %dx%d; fsdpgen's generated code runs one mesh per "
        .. "spec (allowed: no mesh, or the spec's, %dx%d)"
      errors.raise(string.format(msg, g.name, g.replicate, g.shard, spec.mesh.replicate,
        spec.mesh.shard), g.state.line)
    end
  end
  if spec.input.tokens and not M.vocab(plan) then
    errors.raise("the token input feeds no embedding (allowed: an embedding of the input; "
      .. "input = { shape = { ... } } for float models)", spec.line)
  end
  check_ops(plan)
  check_resharded(plan, "step")
  if plan.eval_plan then
    check_ops(plan.eval_plan)
    check_resharded(plan.eval_plan, "eval")
  end
  if plan.after_eval_plan then
    check_ops(plan.after_eval_plan)
    check_resharded(plan.after_eval_plan, "step")
  end
  return plan
end

return M
