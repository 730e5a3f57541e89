-- One rank's kept unsharded parameters (generator/plan/keep.lua). A group that is stepped
-- while resharded, and by rows only where the shards serve the parameter, keeps them across
-- steps: every all-gather of it, in the step, the eval and the step after an eval, copies
-- nothing, every reshard keeps them, and its optimizer steps cast into them (M.persist).
-- Another one-rank group's reshard keeps them where its next all-gather comes before its
-- next optimizer step (M.mark). Checked on the benchmark's Llama (every group cast by its
-- optimizer, none in the forward), on GPT-2 (its tied root stepped by rows: not kept), on
-- w1_keep_microbatch and w1_offload_keep, against the same plans with keep_unsharded =
-- false (same events and counts, no keeps, less memory), on every repository spec, in the
-- step C and the simulator, and on the spec key's errors.
-- Run from the repository root: lua5.4 tests/generator/keep_unsharded.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local planner = require("plan.planner")
local sim = require("simulate.sim")
local gpu = require("simulate.gpu")
local arena_layout = require("memory.arena_layout")
local optimizer = require("plan.optimizer")
local util = require("tests.generator.step_c")
local check = util.check

local function off(spec) spec.keep_unsharded = false end

-- The plan's keeping reshards and kept all-gathers (and their waits), as "phase op group"
-- lines; across: those of groups kept across steps (true), of the others (false), or all.
local function marks(plan, across)
  local out = {}
  for _, st in ipairs(plan.steps) do
    if (st.keep or st.kept) and (across == nil or across == (st.across == true)) then
      out[#out + 1] = string.format("%s%d %s %s", st.phase, st.section, st.op, st.group.name)
    end
  end
  return out
end

local function same_lines(a, b)
  return table.concat(a, "\n") == table.concat(b, "\n")
end

-- Whether optimizer step st steps by rows a parameter that the all-gathers copy.
local function rows_of_copied(st)
  if not st.rows then return false end
  for _, p in ipairs(optimizer.stepped_params(st)) do
    if not p.from_shard then return true end
  end
  return false
end

-- Whether every step of group index gi in program p is marked as a group kept across steps
-- marks it: each all-gather (and wait or drop) kept, each reshard keeping, each optimizer
-- step casting, none by rows of a copied parameter. Returns ok, and the number of its
-- all-gathers.
local function all_across(p, gi)
  local ok, n = true, 0
  for _, st in ipairs(p.steps) do
    if st.group and st.group.index == gi then
      local op = st.op
      if op == "all_gather" then n = n + 1 end
      if op:match("^all_gather") then ok = ok and st.kept and st.across
      elseif op == "reshard" then ok = ok and st.keep and st.across
      elseif op == "optimizer" then ok = ok and st.across and not rows_of_copied(st) end
    end
  end
  return ok == true, n
end

-- Llama 1B as benchmarked: every block keeps its unsharded params across steps (its two
-- all-gathers, forward and backward, copy nothing; its optimizer steps cast into them), and
-- so does the root: only its embedding is stepped by rows, which lookups read from the
-- shards (no copy to keep), and its head's part casts.
local llama = util.plan("examples/llama_1b.lua")
local llama_off = util.plan("examples/llama_1b.lua", off)
local blocks_ok, n_ag, n_across = true, 0, 0
for _, g in ipairs(llama.groups) do
  if g.name:match("^layers%.%d+$") then
    local ok, n = all_across(llama, g.index)
    blocks_ok = blocks_ok and ok and llama.kept_across[g.index] == true
    n_ag, n_across = n_ag + n, n_across + 1
  end
end
local root_ok = all_across(llama, 1) and llama.kept_across[1] == true
check(blocks_ok and root_ok and n_across == 16 and n_ag == 32 and #marks(llama, false) == 0,
  string.format("Llama 1B: the 16 blocks keep their unsharded params across steps (their %d all-gathers "
    .. "copy nothing, their optimizer steps cast), and the root (its embedding's rows read from the shards)", n_ag))
local gpt2 = util.plan("examples/gpt2_124m.lua")
check(not gpt2.kept_across[1] and gpt2.kept_across[2] == true,
  "GPT-2 124M: the root, whose tied embedding is stepped by rows and copied for the head, keeps "
  .. "nothing across steps; its blocks do")
check(#marks(llama_off) == 0 and next(llama_off.kept_across) == nil,
  "Llama 1B with keep_unsharded = false: nothing kept")
check(same_lines(planner.event_lines(llama), planner.event_lines(llama_off))
  and same_lines(planner.count_lines(llama), planner.count_lines(llama_off)),
  "Llama 1B: the events and counts are the same with and without keeping")
check(all_across(llama.eval_plan, 2) and (not llama.after_eval_plan or all_across(llama.after_eval_plan, 2)),
  "Llama 1B: the eval program's all-gathers of layers.0 (and the step after an eval's) copy nothing either")
-- The kept groups are persistent buffers: at most all of them more live at the peak.
local block_bytes = 4 * llama.groups[2].unsharded_words
-- They lie after the sharded state, which the CUDA backend mirrors on the host
-- (rt_step_persistent_end: the sharded params, grads and state).
local kept, kept_persistent, kept_from, state_end, n_kept = 0, true, math.huge, 0, 0
for _, b in ipairs(llama.memory.buffers) do
  if b.name:match("unsharded params %(kept across steps%)$") then
    kept, n_kept = kept + b.bytes, n_kept + 1
    kept_persistent = kept_persistent and b.kind == "persistent"
      and (b.bytes == block_bytes or b.bytes == 4 * llama.groups[1].unsharded_words)
    kept_from = math.min(kept_from, b.offset)
  elseif b.kind == "persistent" then
    state_end = math.max(state_end, b.offset + b.size)
  end
end
local grown = arena_layout.most_live(llama.memory).bytes - arena_layout.most_live(llama_off.memory).bytes
check(n_kept == 17 and kept == 16 * block_bytes + 4 * llama.groups[1].unsharded_words and kept_persistent
  and kept_from >= state_end and grown > 0 and grown <= kept,
  string.format("Llama 1B: 17 persistent buffers of the groups' unsharded params (%.2f GiB), after the "
    .. "sharded state (from byte %d, which ends at %d); %.2f GiB more live at the most (the arena's peak "
    .. "%.2f -> %.2f GiB)", kept / 2 ^ 30, kept_from, state_end, grown / 2 ^ 30,
    llama_off.memory.peak / 2 ^ 30, llama.memory.peak / 2 ^ 30))

-- The copies beside compute: all gone; the optimizer writes the unsharded params instead
-- (2 bytes an element in its one kernel, not a copy's 6).
local h100 = assert(gpu.load(".", "h100"))
local function simulated(plan)
  local r = sim.run(plan, { gpu = h100, kernels = "fsdpgen", gpus_per_node = 1, nodes = 1, net_gbps = 400 })
  local opt = 0
  for _, k in ipairs(r.kinds) do if k.kind == "optimizer" then opt = k.time_s end end
  return r.copies_s, opt
end
local c_on, o_on = simulated(llama)
local c_off, o_off = simulated(llama_off)
check(c_on == 0 and c_off > 0 and o_on > o_off and o_on - o_off < (c_off - c_on) / 2,
  string.format("Llama 1B simulated: FSDP copies beside compute %.2f -> %.2f ms; the optimizer %.2f -> %.2f ms "
    .. "(less than half the copies' time gone)", c_off * 1e3, c_on * 1e3, o_off * 1e3, o_on * 1e3))

-- `fsdpgen diff --gpu` of the change from keep_unsharded = false: fewer copies beside compute.
local freed = os.tmpname() .. ".lua"
local f = assert(io.open(freed, "w"))
f:write((assert(io.open("examples/llama_1b.lua")):read("a"):gsub("world_size = 1,",
  "world_size = 1, keep_unsharded = false,")))
f:close()
local pipe = io.popen("./fsdpgen diff " .. freed .. " examples/llama_1b.lua --gpu h100 2>&1")
local out = pipe:read("a")
pipe:close()
os.remove(freed)
os.remove(freed:sub(1, -5))
local c0, c1 = out:match("\n  FSDP copies%s+([%d.]+) ms %-> ([%d.]+) ms")
local s0, s1 = out:match("simulated step%s+([%d.]+) ms %-> ([%d.]+) ms")
check(c0 and s0 and tonumber(c1) < tonumber(c0) and tonumber(s1) <= tonumber(s0),
  string.format("diff --gpu from keep_unsharded = false: FSDP copies %s -> %s ms beside compute, the step %s -> %s ms",
    tostring(c0), tostring(c1), tostring(s0), tostring(s1)))

-- The step C: the model table says where layers.0 keeps them, and its all-gathers and
-- reshards pass that offset.
local c, c_all = util.step_c(llama)
local kept_offs = {}  -- the model table's, in group order: the root's, then layers.0's
for o in c_all:gmatch("%.kept_across = 1, %.kept_off = (%d+)") do kept_offs[#kept_offs + 1] = o end
local kept_at = kept_offs[2]
check(kept_at ~= nil and c:find("rt_step_all_gather_kept(R, 1, \"FORWARD\", " .. kept_at .. ");", 1, true) ~= nil
  and c:find("rt_step_reshard_keep(R, 1, \"FORWARD\", " .. kept_at .. ");", 1, true) ~= nil
  and c:find("rt_step_all_gather_kept(R, 1, \"PRE_BACKWARD\", " .. kept_at .. ");", 1, true) ~= nil,
  "Llama 1B step C: layers.0's model entry, all-gathers and reshards name one arena offset")
local _, off_all = util.step_c(llama_off)
check(not off_all:find("_kept(", 1, true) and not off_all:find("reshard_keep", 1, true)
  and not off_all:find("kept_across", 1, true),
  "Llama 1B step C with keep_unsharded = false: no kept call or entry")

-- w1_keep_microbatch: two microbatches, an optimizer step, a second iteration. Every group
-- is stepped whole while resharded: all kept across steps, in every program.
local mb = util.plan("tests/specs/features/w1_keep_microbatch.lua")
local mb_ok, mb_ag = true, 0
for _, g in ipairs(mb.groups) do
  for _, p in ipairs({ mb, mb.eval_plan, mb.after_eval_plan or mb }) do
    local ok, n = all_across(p, g.index)
    mb_ok, mb_ag = mb_ok and ok and mb.kept_across[g.index] == true, mb_ag + n
  end
end
check(mb_ok and mb_ag > 0, string.format("w1_keep_microbatch: its %d groups' %d all-gathers (step, eval, "
  .. "step after an eval) copy nothing", #mb.groups, mb_ag))
local mb_off = util.plan("tests/specs/features/w1_keep_microbatch.lua", off)
check(same_lines(planner.event_lines(mb), planner.event_lines(mb_off)),
  "w1_keep_microbatch: the same events with keep_unsharded = false")

-- w1_offload_keep: offloaded state keeps nothing across steps; each block's forward
-- reshard keeps its unsharded params for its backward all-gather within the step.
local ok_plan = util.plan("tests/specs/features/w1_offload_keep.lua")
local within = marks(ok_plan, false)
local within_ok = same_lines(within, { "forward1 reshard layers.0", "forward1 reshard layers.1",
  "backward2 all_gather layers.1", "backward2 all_gather_wait layers.1", "backward2 all_gather layers.0",
  "backward2 all_gather_wait layers.0" })
check(within_ok and next(ok_plan.kept_across) == nil, "w1_offload_keep: nothing kept across steps; the "
  .. "blocks' forward reshards keep them for their backward all-gathers"
  .. (within_ok and "" or ":\n  " .. table.concat(within, "\n  ")))

-- Every repository spec: a group kept across steps at one rank, each of its steps marked
-- in every program; the other keeps at one rank, each keeping reshard followed by its kept
-- all-gather with no optimizer step of the group between.
local bad, n_across_groups, n_within = {}, 0, 0
local n = util.each_planned(function(path, plan)
  for gi in pairs(plan.kept_across) do
    n_across_groups = n_across_groups + 1
    if plan.groups[gi].shard ~= 1 then bad[#bad + 1] = path .. ": " .. plan.groups[gi].name .. " over ranks" end
    for _, p in ipairs({ plan, plan.eval_plan or plan, plan.after_eval_plan or plan }) do
      if not all_across(p, gi) then bad[#bad + 1] = path .. ": a step of " .. plan.groups[gi].name .. " not kept" end
    end
  end
  local open = {}
  for _, st in ipairs(plan.steps) do
    local g = st.group
    if st.across then
      -- above
    elseif st.keep then
      if g.shard ~= 1 or open[g] then bad[#bad + 1] = path .. ": " .. g.name end
      open[g] = true
      n_within = n_within + 1
    elseif st.op == "all_gather" and st.kept then
      if not open[g] then bad[#bad + 1] = path .. ": kept all-gather of " .. g.name .. " with no keep" end
      open[g] = nil
    elseif st.op == "optimizer" and open[g] then
      bad[#bad + 1] = path .. ": optimizer step of " .. g.name .. " while kept"
    end
  end
  for g in pairs(open) do bad[#bad + 1] = path .. ": " .. g.name .. " kept at the step's end" end
end)
check(#bad == 0 and n_across_groups > 0 and n_within > 0, string.format("%d repository specs: %d groups "
  .. "kept across steps, every step of them marked; %d keeping reshards within a step, each at one rank and "
  .. "paired with the next all-gather%s", n, n_across_groups, n_within, #bad == 0 and "" or ": " .. table.concat(bad, "; ")))

-- The spec key: a boolean.
for _, v in ipairs({ '"yes"', "1" }) do
  local ok, err = pcall(util.plan_source, [[
local nn, fsdp = require("nn"), require("fsdp")
local m = nn.Linear(4, 4)
fsdp.fully_shard(m)
return fsdp.spec{ name = "k", model = m, world_size = 1, input = { shape = { 2, 4 } }, keep_unsharded = ]] .. v .. [[ }
]])
  local msg = not ok and type(err) == "table" and err.msg or tostring(err)
  check(not ok and msg:find("keep_unsharded must be true or false, got " .. v, 1, true) ~= nil,
    "keep_unsharded = " .. v .. " is refused: " .. msg)
end

util.finish()
