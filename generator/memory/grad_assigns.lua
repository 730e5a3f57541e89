-- Which backward calls assign parameter gradients instead of adding onto zeros, and which
-- groups may then store their gradients in 16 bits (packed). Both are the memory stage's:
-- packing changes the gradients' bytes, so it is decided before buffers are placed, and
-- the emitter only reads the result (emit_step.lua zero, kernels_c.lua RT_ASSIGN_DWEIGHT
-- and RT_PACKED_DWEIGHT).
local step_ops = require("memory.step_ops")

local M = {}

-- The inputs whose gradients a backward kernel's RT_ASSIGN_DWEIGHT assigns (rt_kernels.h):
-- the parameters' of linear and the norms. The same kernels write them packed
-- (RT_PACKED_DWEIGHT).
local PARAM_GRADS = { linear = { [2] = true, [3] = true }, layer_norm = { [2] = true, [3] = true },
  rms_norm = { [2] = true } }

-- Whether the gradient of op's input i is one that its backward kernel's RT_ASSIGN_DWEIGHT
-- assigns, whatever the input is (a parameter or not).
function M.param_grad_output(op, i) return (PARAM_GRADS[op.kind] or {})[i] == true end

-- Whether op's backward kernel can assign the gradient of its input i, a parameter
-- (RT_ASSIGN_DWEIGHT), unless another input is the same tensor and adds to that gradient
-- in the same call.
function M.assigns_param(op, i)
  if not M.param_grad_output(op, i) then return false end
  for j, u in ipairs(op.ins) do
    if j ~= i and u == op.ins[i] then return false end
  end
  return true
end

-- The parameter gradients whose first contribution in the life of their group's unsharded
-- gradient buffer assigns them instead of adding onto the zeroed buffer: by backward step,
-- the set of parameters it assigns. The buffer lives from a group's first contribution to
-- its next reduction (memory.lua's walk: reduce_scatter and accumulate_unsharded_grads end
-- it). A call's one bit assigns all of its parameter-gradient outputs, so a step assigns
-- them only where each is a parameter's first contribution: not where one is an
-- activation's gradient (a computed weight or bias), or the gradient of an input that is
-- another of the call's inputs too.
function M.by_step(plan)
  local by_step, seen = {}, {}  -- seen[g][t]: t contributed to g's buffer in its life
  for _, st in ipairs(plan.steps) do
    if st.op == "reduce_scatter" or st.op == "accumulate_unsharded_grads" then
      seen[st.group] = nil
    elseif st.op == "backward" or st.op == "loss_grad" then
      local firsts, all_first = {}, true
      for _, op in ipairs(step_ops.ops(st)) do  -- a stack's linears: one call, one bit
        for i, t in ipairs(op.ins) do
          local g = t.requires_grad and t.is_param and plan.owner[t]
          if t.requires_grad and M.param_grad_output(op, i) and not (g and M.assigns_param(op, i)) then
            all_first = false
          end
          if g then
            seen[g] = seen[g] or {}
            if M.assigns_param(op, i) then
              if seen[g][t] then all_first = false else firsts[#firsts + 1] = t end
            end
            seen[g][t] = true
          end
        end
      end
      if all_first and #firsts > 0 then
        local set = {}
        for _, t in ipairs(firsts) do set[t] = true end
        by_step[st] = set
      end
    end
  end
  return by_step
end

local sixteen = { bf16 = true, fp16 = true }

-- Whether parameter p's gradient can sit packed in its group's gradients: a kernel writes it
-- in dense 16-bit rows (a weight's rows and count multiples of 8), from an offset of a
-- multiple of 8 elements (16 bytes, as cuBLAS and the optimizer's vector loads want).
local function packable(p, l, g)
  local s = p.shape
  local rows = (#s == 1 and s[1] % 8 == 0) or (#s == 2 and s[1] % 8 == 0 and s[2] % 8 == 0)
  return rows and (l.offset * g.shard) % 8 == 0
end

-- The groups whose gradients are stored in param_dtype's 16 bits (packed), as a set of
-- group indices: in place (memory.lua in_place_groups: one rank, no clipping, each
-- reduction direct and assigning), 16-bit parameters, and every contribution to every
-- parameter's gradient assigned by a kernel that can write it packed (by_step). Then the
-- gradient is one rounding of one fp32 sum, the value the optimizer would read rounded
-- from fp32 storage (FSDP2's unsharded gradient is param_dtype too): the bits are the
-- same, with half the bytes written by the backward and read by the optimizer (Llama 1B:
-- 1.9 GB less in the plan). in_place: by group; by_step: M.by_step(plan).
function M.packed_groups(plan, in_place, by_step)
  local contributions, assigned = {}, {}
  for _, st in ipairs(plan.steps) do
    if st.op == "backward" or st.op == "loss_grad" then
      for _, op in ipairs(step_ops.ops(st)) do
        for _, t in ipairs(op.ins) do
          if t.is_param and t.requires_grad then contributions[t] = (contributions[t] or 0) + 1 end
        end
      end
      for t in pairs(by_step[st] or {}) do assigned[t] = (assigned[t] or 0) + 1 end
    end
  end
  local packed = {}
  for _, g in ipairs(plan.groups) do
    local ok = in_place[g] and sixteen[g.param_dtype] or false
    for _, l in ipairs(g.layout.params) do
      local p = l.param   -- a frozen parameter has no gradient to store
      ok = ok and (not p.requires_grad
        or packable(p, l, g) and (contributions[p] or 0) > 0 and assigned[p] == contributions[p])
    end
    if ok then packed[g.index] = true end
  end
  return packed
end

return M
