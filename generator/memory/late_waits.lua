-- One shard rank's all-gathers waited for where compute first reads them. Over one shard
-- rank (one GPU, or HSDP's replicas of one) an all-gather is a copy of the shards
-- (planner.lua direct_all_gather), and FSDP2's wait for it in the group's pre-forward only
-- orders compute after that copy. Where the group's first reader comes later (Llama's
-- root: its embedding is looked up in the fp32 shard, packing.lua mark_params, so the
-- final norm is the first to read the root's unsharded parameters, the output head's
-- 1.6 GB of copy; GPT-2's, whose tied embedding is copied for the head alone, likewise),
-- compute waits there instead (the wait `late`), and the copy runs beside the blocks'
-- forward rather than before it. Its all-gather is marked `beside`: it runs on a stream
-- of its own (CUDA: the all-gather collective stream, idle over one shard rank), so that
-- the blocks' copies issued after it do not queue behind it. The events
-- and counts are unchanged, and so are the unsharded parameters' lifetimes (from the
-- issue on, as every direct all-gather's); the next groups' copies may start at the sync
-- before the issue rather than at the moved wait (memory.lua `synced`), at the step's
-- start, where little is live.
local packing = require("memory.packing")

local M = {}

-- Whether step st acts on group g, or reads one of its parameters from the unsharded ones
-- (params: g's parameter tensors).
local function uses(st, g, params)
  if st.group == g then return true end
  local op = st.node
  if not op then return false end
  for _, t in ipairs(op.ins) do
    if params[t] and not packing.reads_shard(op, t) then return true end
  end
  return false
end

-- Moves each direct all-gather's wait down to the first step of its section that uses the
-- group, where compute waits for another all-gather before that step (else the move would
-- gain nothing: in the backward, the next group's prefetch is issued before the group's
-- first use but waited for after it), and marks the all-gather beside. A fused residual
-- add and norm (memory.lua add_with_norm) is one call: a wait for the norm's weight goes
-- before the add. Returns the number moved.
function M.mark(plan)
  local steps, moved = plan.steps, 0
  local issued = {}  -- ag sequence number -> its all_gather step
  local i = 1
  while i <= #steps do
    local st = steps[i]
    if st.op == "all_gather" then issued[st.ag] = st end
    local at
    if st.op == "all_gather_wait" and st.direct and issued[st.ag] then
      local g, params, others = st.group, {}, false
      for _, l in ipairs(g.layout.params) do params[l.param] = true end
      for j = i + 1, #steps do
        local s = steps[j]
        if s.section ~= st.section or uses(s, g, params) then
          if s.section == st.section and others then at = j end
          break
        end
        others = others or s.op == "all_gather_wait"
      end
    end
    if at and steps[at].fused_add then at = at - 1 end
    if at then
      table.remove(steps, i)
      table.insert(steps, at - 1, st)
      st.late, issued[st.ag].beside = true, true
      moved = moved + 1
    else
      i = i + 1
    end
  end
  return moved
end

return M
