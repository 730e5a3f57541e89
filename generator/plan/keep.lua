-- generator/plan/keep.lua: at one rank, reshards that keep the unsharded parameters for
-- the group's next all-gather, which then copies nothing.
--
-- Over a shard group of one rank an all-gather is a copy of the rank's own shards into the
-- unsharded parameters (planner.lua direct_all_gather): FSDP2 frees them at the reshard and
-- copies the same values again at the next unshard unless an optimizer step changed the
-- shards between. Where it did not, the reshard keeps the buffer (st.keep) and that
-- all-gather copies nothing (st.kept): a block is copied once a step, not twice (once for
-- the forward, once for the backward), where it is not kept across steps (below; in the
-- repository, w1_offload_keep's blocks). The events, counts and values are FSDP2's; the
-- memory is not: the buffer lives from the reshard to the all-gather (memory.lua), as if
-- the group were not resharded. The spec's keep_unsharded = false frees it as FSDP2 does.
--
-- Across steps (M.persist): a group at one rank that is stepped while resharded, and by
-- token rows only where lookups read the parameter from the shards, keeps its unsharded
-- parameters for good. Its optimizer step writes each new value into them too (st.across),
-- as llm.c's AdamW writes its bf16 copy (on the GPU in the optimizer's kernel, beside the
-- backward), so no all-gather of it in any program (step, eval, step after an eval) copies
-- anything. The buffer is a persistent one of the memory plan (memory.lua), which the
-- runtime fills before the first step and after anything writes the parameters
-- (rt_step_refresh_kept).
local optimizer = require("plan.optimizer")

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

-- Whether optimizer step st steps only parameters that no all-gather copies (read from
-- the shards: memory/packing.lua mark_params, `from_shard`).
local function steps_shard_reads(st)
  for _, p in ipairs(optimizer.stepped_params(st)) do
    if not p.from_shard then return false end
  end
  return true
end

-- Whether group g of a training program can keep its unsharded parameters across steps:
-- one rank, no offload (persistent buffers there live in host memory), and every optimizer
-- step of it taken while it is resharded (an unsharded group computes with the values of
-- its last all-gather until its reshard, as in FSDP2), none by rows of a parameter that
-- the all-gathers copy (the rows no token looks up are stepped from the step's start,
-- before the forward reads the parameters: optimizer.lua Sim:split_token_rows; Llama's
-- untied embedding is read from the shards, GPT-2's tied one is not).
local function persists(plan, g)
  if g.shard ~= 1 or g.state.offload then return false end
  local unsharded = false
  for _, st in ipairs(plan.steps) do
    if st.group == g then
      if st.op == "all_gather" then unsharded = true
      elseif st.op == "reshard" or st.op == "all_gather_drop" then unsharded = false
      elseif st.op == "optimizer" and (unsharded or st.rows and not steps_shard_reads(st)) then
        return false
      end
    end
  end
  return true
end

-- Marks the groups that keep their unsharded parameters across steps (kept_across, by
-- group index, on the step program and on its eval and step after an eval where given)
-- and, in each program, their steps (st.across): the all-gathers kept, the reshards
-- keeping, the optimizer steps casting into them. The memory stage calls it, once it knows
-- which parameters are read from the shards.
function M.persist(plan, ev, after)
  local across = {}
  if plan.spec.keep_unsharded then
    for _, g in ipairs(plan.groups) do
      local ok = persists(plan, g)
      if ok and after then ok = persists(after, after.groups[g.index]) end
      across[g.index] = ok or nil
    end
  end
  for _, p in ipairs({ plan, ev or false, after or false }) do
    if p then
      p.kept_across = across
      for _, st in ipairs(p.steps) do
        if st.group and across[st.group.index] then
          local op = st.op
          st.across = true
          if op == "all_gather" or op == "all_gather_wait" or op == "all_gather_drop" then
            st.kept = true
          elseif op == "reshard" then
            st.keep = true
          end
        end
      end
    end
  end
end

return M
