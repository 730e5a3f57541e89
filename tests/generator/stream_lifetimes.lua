-- Buffers that the CUDA backend's side streams use stay in the memory plan until compute
-- waits for that work, so no later buffer is placed on bytes a side stream may still read
-- or write (runtime/cuda/step/backend.c orders the streams; the plan must not undo that):
--   * an all-gather's output (a direct one's: the unsharded parameters) and, for a
--     post-forward all-gather, the post-forward shard its copy-in reads: until the
--     all_gather_wait or all_gather_drop of that all-gather (compute waits for the
--     all-gather there);
--   * a reduce-scatter's input and output, and the unsharded gradients a direct (one-rank)
--     reduction reads: until the next reduce_scatter step, or to the end of the step
--     program after the last one (compute waits for the reduction in flight at the next
--     one, and for all of them before clipping and the optimizer); an in-place one's
--     unsharded gradients are the sharded ones, which live through the step program.
-- And an all-gather's output starts no later than the all-gather streams' last wait for
-- compute before it (all_gather_sync, all_gather_wait or reshard_post_forward; there must
-- be one): the all-gather runs ahead of the compute issued since, so it must not sit on a
-- buffer that compute still uses.
-- Checked on every spec of the repository; before the post-forward shard's rule, a
-- backward gradient was planned on a shard that a prefetched copy-in had yet to read
-- (found by the emulator's lazy mode, tests/cuda/emu).
-- Run from the repository root: lua5.4 tests/generator/stream_lifetimes.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path

local util = require("tests.generator.step_c")
local check = util.check

local function name(plan, i)
  local st = plan.steps[i]
  return st and string.format("step %d (%s%s)", i, st.op, st.group and (' "' .. st.group.name .. '"') or "") or "the end"
end

-- Problems of one plan, as strings.
local function problems(plan)
  local out = {}
  local steps = plan.steps
  local synced
  local syncs = { all_gather_sync = true, all_gather_wait = true, reshard_post_forward = true }
  local function need(b, until_i, what, i)
    if b and b.last < until_i then
      out[#out + 1] = string.format("%s of %s ends at %s, before %s", what, name(plan, i), name(plan, b.last),
        name(plan, until_i))
    end
  end
  for i, st in ipairs(steps) do
    if syncs[st.op] then synced = i end
    if st.op == "all_gather" then
      local ob = st.bufs.out or st.bufs.unsharded
      if not synced then
        out[#out + 1] = name(plan, i) .. " has no all-gather sync before it"
      elseif ob and ob.first > synced then
        out[#out + 1] = string.format("the output of %s starts at %s, after the last sync, %s", name(plan, i),
          name(plan, ob.first), name(plan, synced))
      end
      local wait
      for j = i + 1, #steps do
        local o = steps[j]
        if (o.op == "all_gather_wait" or o.op == "all_gather_drop") and o.ag == st.ag then wait = j break end
      end
      if not wait then
        out[#out + 1] = name(plan, i) .. " is never waited for or dropped"
      else
        local out = st.direct and "the unsharded params" or "the output"
        need(st.bufs.out or st.bufs.unsharded, wait, out, i)
        if st.from_post_forward then
          need(st.bufs.post_forward_shard, wait, "the post-forward shard read by the copy-in", i)
        end
      end
    elseif st.op == "reduce_scatter" then
      local next_rs = #steps + 1
      for j = i + 1, #steps do
        if steps[j].op == "reduce_scatter" then next_rs = j break end
      end
      if st.in_place then
        -- the optimizer stream reads the sharded grads themselves, whenever it runs
        local sharded = st.bufs.ugrad and st.bufs.ugrad.alias
        if not (sharded and sharded.kind == "persistent") then
          out[#out + 1] = string.format("the in-place reduction of %s reads no persistent sharded grads", name(plan, i))
        end
        need(sharded, #steps, "the sharded grads an in-place reduction leaves to the optimizer", i)
      elseif st.direct then
        need(st.bufs.acc or st.bufs.ugrad, math.min(next_rs, #steps), "the unsharded grads read by the direct "
          .. "reduction", i)
      else
        need(st.bufs.rs_in, math.min(next_rs, #steps), "the input", i)
        need(st.bufs.rs_out, math.min(next_rs, #steps), "the output", i)
      end
    end
  end
  return out
end

local n_specs, n_sub = 0, 0
for _, path in ipairs(util.all_specs()) do
  local ok, plan = pcall(util.plan, path)
  if not ok then
    check(false, path .. ": plan failed: " .. tostring(type(plan) == "table" and plan.msg or plan))
  else
    n_specs = n_specs + 1
    for _, st in ipairs(plan.steps) do
      if st.op == "all_gather" and st.from_post_forward then n_sub = n_sub + 1 end
    end
    local p = problems(plan)
    if #p > 0 then check(false, path .. ": " .. p[1] .. (#p > 1 and string.format(" (and %d more)", #p - 1) or "")) end
  end
end
check(n_specs > 0 and n_sub > 0, string.format("%d specs: side-stream buffers live until compute waits for their "
  .. "work (%d post-forward all-gathers among them)", n_specs, n_sub))

-- The check itself: a post-forward shard that ends at its all-gather's issue is reported.
local fake_group = { name = "g" }
local pf = { last = 2 }
local ag_out = { first = 1, last = 4 }
local fake = { steps = {
  { op = "all_gather_sync", bufs = {} },
  { op = "all_gather", ag = 1, from_post_forward = true, group = fake_group,
    bufs = { out = ag_out, post_forward_shard = pf } },
  { op = "backward", bufs = {} },
  { op = "all_gather_wait", ag = 1, group = fake_group, bufs = {} },
} }
local p = problems(fake)
check(#p == 1 and p[1]:find("post%-forward shard") ~= nil,
  "a post-forward shard freed at its all-gather's issue is reported: " .. tostring(p[1]))
pf.last = 4
check(#problems(fake) == 0, "and not once it lives until the wait")
ag_out.first = 2
p = problems(fake)
check(#p == 1 and p[1]:find("after the last sync") ~= nil,
  "an all-gather output that starts at its issue, after the streams' last sync, is reported: " .. tostring(p[1]))
ag_out.first = 1
table.remove(fake.steps, 1)
p = problems(fake)
check(#p >= 1 and p[1]:find("no all%-gather sync") ~= nil, "an all-gather with no sync before it is reported: "
  .. tostring(p[1]))

util.finish()
