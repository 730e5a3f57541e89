-- generator/plan/keep.lua: at one rank, reshards that keep the unsharded parameters for
-- the group's next all-gather, which then copies nothing.
--
-- Over a shard group of one rank an all-gather is a copy of the rank's own shards into the
-- unsharded parameters (planner.lua direct_all_gather): FSDP2 frees them at the reshard and
-- copies the same values again at the next unshard unless an optimizer step changed the
-- shards between. Where it did not, the reshard keeps the buffer (st.keep) and that
-- all-gather copies nothing (st.kept): Llama's blocks are copied once a step, not twice
-- (once for the forward, once for the backward). The events, counts and values are
-- FSDP2's; the memory is not: the buffer lives from the reshard to the all-gather
-- (memory.lua), as if the group were not resharded. The spec's keep_unsharded = false
-- frees it as FSDP2 does.
local M = {}

-- The index of the step after i that copies group g's shards again (a direct all-gather)
-- with no optimizer step of g before it, or nil.
local function next_copy(steps, i, g)
  for j = i + 1, #steps do
    local st = steps[j]
    if st.group == g then
      if st.op == "optimizer" then return nil end
      if st.op == "all_gather" then return st.direct and j or nil end
    end
  end
  return nil
end

-- Marks the plan's keeping reshards, and the all-gathers they serve with their waits (at
-- one rank every reshard is from unsharded: no post-forward shard group has one rank).
function M.mark(plan)
  if not plan.spec.keep_unsharded then return end
  local steps = plan.steps
  local kept = {}  -- the kept all-gathers, by their sequence number (st.ag)
  for i, st in ipairs(steps) do
    if st.op == "reshard" and st.group.shard == 1 then
      local j = next_copy(steps, i, st.group)
      if j then
        st.keep, steps[j].kept = true, true
        kept[steps[j].ag] = true
      end
    elseif (st.op == "all_gather_wait" or st.op == "all_gather_drop") and kept[st.ag] then
      st.kept = true
    end
  end
end

return M
