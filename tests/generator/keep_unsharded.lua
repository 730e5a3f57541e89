-- One rank's kept unsharded parameters (generator/plan/keep.lua): a reshard keeps them where
-- the group's next all-gather comes before its next optimizer step, and that all-gather
-- copies nothing. Checked on the benchmark's Llama (each block copied once a step, not
-- twice), on w1_keep_microbatch (which reshards keep, step by step), against the same
-- plans with keep_unsharded = false (same events and counts, no keeps, less memory), on
-- every repository spec (keeps only at one rank, each paired), in the step C and the
-- simulator, and on the spec key's errors.
-- Run from the repository root: lua5.4 tests/generator/keep_unsharded.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local planner = require("plan.planner")
local sim = require("simulate.sim")
local gpu = require("simulate.gpu")
local util = require("tests.generator.step_c")
local check = util.check

local function off(spec) spec.keep_unsharded = false end

-- The plan's keeping reshards and kept all-gathers, as "phase op group" lines.
local function marks(plan)
  local out = {}
  for _, st in ipairs(plan.steps) do
    if st.keep or st.kept then
      out[#out + 1] = string.format("%s%d %s %s", st.phase, st.section, st.op, st.group.name)
    end
  end
  return out
end

local function same_lines(a, b)
  return table.concat(a, "\n") == table.concat(b, "\n")
end

-- Llama 1B as benchmarked: every block's forward reshard keeps, its backward all-gather is
-- kept; the root is not resharded after forward, so it has nothing to keep.
local llama = util.plan("examples/llama_1b.lua")
local llama_off = util.plan("examples/llama_1b.lua", off)
local n_keep, n_kept, blocks = 0, 0, {}
for _, st in ipairs(llama.steps) do
  if st.keep then
    n_keep = n_keep + 1
    blocks[st.group.name] = st.phase == "forward" and st.event.state == "FORWARD"
  end
  if st.kept and st.op == "all_gather" then n_kept = n_kept + 1 end
end
local all_blocks = true
for i = 0, 15 do all_blocks = all_blocks and blocks["layers." .. i] == true end
check(n_keep == 16 and n_kept == 16 and all_blocks,
  string.format("Llama 1B: the 16 blocks' forward reshards keep, their 16 backward all-gathers copy nothing (%d, %d)",
    n_keep, n_kept))
check(#marks(llama_off) == 0, "Llama 1B with keep_unsharded = false: no reshard keeps")
check(same_lines(planner.event_lines(llama), planner.event_lines(llama_off))
  and same_lines(planner.count_lines(llama), planner.count_lines(llama_off)),
  "Llama 1B: the events and counts are the same with and without keeping")
-- The kept blocks live from their forward to their backward: at most all 16 at once.
local block_bytes = 4 * llama.groups[2].unsharded_words
local grown = llama.memory.peak - llama_off.memory.peak
check(grown > 0 and grown <= 16 * block_bytes,
  string.format("Llama 1B: keeping costs %.2f GiB at the peak, at most the 16 blocks' unsharded params (%.2f GiB)",
    grown / 2 ^ 30, 16 * block_bytes / 2 ^ 30))

-- The copies beside compute: one a block, not two (the simulator's copies line).
local h100 = assert(gpu.load(".", "h100"))
local function copies(plan)
  return sim.run(plan, { gpu = h100, kernels = "fsdpgen", gpus_per_node = 1, nodes = 1,
    net_gbps = 400 }).copies_s
end
local c_on, c_off = copies(llama), copies(llama_off)
check(c_on > 0 and c_on < c_off,
  string.format("Llama 1B simulated: %.2f ms of FSDP copies beside compute, %.2f ms without keeping",
    c_on * 1e3, c_off * 1e3))

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
check(c0 and s0 and tonumber(c1) < tonumber(c0) and s0 == s1,
  string.format("diff --gpu from keep_unsharded = false: FSDP copies %s -> %s ms beside compute, the step the same",
    tostring(c0), tostring(c1)))

-- The step C: a keeping reshard and a kept all-gather name the same buffer.
local c = util.step_c(llama)
local kept_at = c:match("rt_step_reshard_keep%(R, 1, \"FORWARD\", ([^)]+)%);")
check(kept_at ~= nil and c:find("rt_step_all_gather_kept(R, 1, \"PRE_BACKWARD\", " .. kept_at .. ");", 1, true) ~= nil,
  "Llama 1B step C: layers.0's keeping reshard and kept all-gather pass one arena offset")
check(not util.step_c(llama_off):find("_kept(", 1, true) and not util.step_c(llama_off):find("reshard_keep", 1, true),
  "Llama 1B step C with keep_unsharded = false: no kept call")

-- w1_keep_microbatch: two microbatches, an optimizer step, a second iteration.
local mb = util.plan("tests/specs/features/w1_keep_microbatch.lua")
local want = {
  "forward1 reshard a", "forward1 reshard b",                         -- for the backward
  "backward2 all_gather b", "backward2 all_gather_wait b", "backward2 all_gather a",
  "backward2 reshard b", "backward2 all_gather_wait a", "backward2 reshard ", "backward2 reshard a",
  "forward3 all_gather ", "forward3 all_gather a", "forward3 all_gather_wait a",  -- the second microbatch
  "forward3 reshard a", "forward3 all_gather b", "forward3 all_gather_wait b", "forward3 reshard b",
  "forward3 all_gather_wait ",
  "backward4 all_gather b", "backward4 all_gather_wait b", "backward4 all_gather a",
  "backward4 all_gather_wait a",
  -- backward4 frees: the optimizer steps before the next all-gathers
  "forward6 reshard a", "forward6 reshard b",
  "backward7 all_gather b", "backward7 all_gather_wait b", "backward7 all_gather a",
  "backward7 all_gather_wait a",
}
local got = marks(mb)
check(same_lines(got, want), "w1_keep_microbatch: a reshard keeps exactly where the group's next all-gather "
  .. "precedes its next optimizer step" .. (same_lines(got, want) and "" or ":\n  " .. table.concat(got, "\n  ")))
local mb_off = util.plan("tests/specs/features/w1_keep_microbatch.lua", off)
check(same_lines(planner.event_lines(mb), planner.event_lines(mb_off)),
  "w1_keep_microbatch: the same events with keep_unsharded = false")

-- Every repository spec: keeps only at one rank, each keeping reshard followed by its kept
-- all-gather with no optimizer step of the group between.
local bad, at_one, n = {}, 0, 0
n = util.each_planned(function(path, plan)
  local open = {}
  for _, st in ipairs(plan.steps) do
    local g = st.group
    if st.keep then
      if g.shard ~= 1 or open[g] then bad[#bad + 1] = path .. ": " .. g.name end
      open[g] = true
      at_one = at_one + 1
    elseif st.op == "all_gather" and st.kept then
      if not open[g] then bad[#bad + 1] = path .. ": kept all-gather of " .. g.name .. " with no keep" end
      open[g] = nil
    elseif st.op == "optimizer" and open[g] then
      bad[#bad + 1] = path .. ": optimizer step of " .. g.name .. " while kept"
    end
  end
  for g in pairs(open) do bad[#bad + 1] = path .. ": " .. g.name .. " kept at the step's end" end
end)
check(#bad == 0 and at_one > 0, string.format("%d repository specs: %d keeping reshards, each at one rank and "
  .. "paired with the next all-gather%s", n, at_one, #bad == 0 and "" or ": " .. table.concat(bad, "; ")))

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
