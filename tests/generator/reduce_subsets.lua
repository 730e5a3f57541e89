-- Reduce-scatters of the parameters with gradients (generator/plan/reductions.lua
-- reduction): FSDP2's post-backward reduces only the gradients that exist, packed as a
-- group of just those.
-- On small step programs over Linear(8, 8) then DoubleLinear(8) with the DoubleLinear in
-- one group "1" (lin1 and lin2), checks each reduce-scatter of group "1": which
-- parameters it carries, its sizes in the plan, its buffers and its schedule line, and
-- the step C's reduction index and rt_model_reduction table. Then, on every spec of the
-- repository, that each reduction's layout is that of the parameters it lists (index 0
-- exactly when that is all of them). Run from the repository root:
-- lua5.4 tests/generator/reduce_subsets.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local layout = require("plan.layout")
local schedule = require("emit.schedule")

local util = require("tests.generator.step_c")
local check = util.check

local function plan_program(step, world)
  return util.plan_source(string.format([[
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ nn.Linear(8, 8), models.DoubleLinear(8) }
fsdp.fully_shard(model[2])
fsdp.fully_shard(model)
return fsdp.spec{ name = "subset_probe", model = model, world_size = %d,
  input = { shape = { 4, 8 } }, loss = "sum", optimizer = { "sgd", lr = 0.1 }, step = %s }
]], world, step))
end

-- The reduce-scatters of group "1": per step, the FQNs it carries.
local function group1_reductions(plan)
  local out = {}
  for _, st in ipairs(plan.steps) do
    if st.op == "reduce_scatter" and st.group.name == "1" then
      local names = {}
      for i, k in ipairs(st.reduction.params) do names[i] = st.group.params[k].fqn end
      out[#out + 1] = { st = st, names = table.concat(names, " "), line = schedule.step_line(st, plan) }
    end
  end
  return out
end

local LIN1, LIN2 = "1.lin1.weight 1.lin1.bias", "1.lin2.weight 1.lin2.bias"
local cases = {
  { "one backward through both outputs", [[{ "forward", "backward", "optimizer" }]], { LIN1 .. " " .. LIN2 } },
  { "backward through output 2, then output 1",
    [[{ "forward", { "backward", output = 2, is_last_backward = false, retain_graph = true }, { "backward", output = 1 }, "optimizer" }]],
    { LIN2, LIN1 } },
  { "output 1 without gradient sync, then output 2 with it",
    [[{ { "set_requires_gradient_sync", false }, "forward", { "backward", output = 1 },
        { "set_requires_gradient_sync", true }, "forward", { "backward", output = 2 }, "optimizer" }]],
    { LIN1 .. " " .. LIN2 } },
  { "output 1 twice", [[{ "forward", { "backward", output = 1 }, "forward", { "backward", output = 1 }, "optimizer" }]],
    { LIN1, LIN1 } },
}

for _, world in ipairs({ 2, 1 }) do
  for _, c in ipairs(cases) do
    local what, step, want = c[1], c[2], c[3]
    local plan, code = plan_program(step, world)
    local got = group1_reductions(plan)
    local names = {}
    for i, r in ipairs(got) do names[i] = r.names end
    check(table.concat(names, " | ") == table.concat(want, " | "),
      string.format("world %d, %s: group \"1\" reduces [%s] (want [%s])", world, what,
        table.concat(names, " | "), table.concat(want, " | ")))
    local g = got[1] and got[1].st.group
    local subsets = 0
    for _, r in ipairs(got) do
      local st, L = r.st, r.st.reduction.layout
      local whole = #st.reduction.params == #g.params
      -- 2 params of 72 elements each (8x8 + 8) when half the group; padded to the world
      local want_numel = (whole and 144 or 72)
      check(L.padded_numel == want_numel and (st.reduction.index == 0) == whole,
        string.format("world %d, %s: reduction [%s] has %d elements, index %d", world, what, r.names,
          L.padded_numel, st.reduction.index))
      check((r.line:find("no grad:", 1, true) ~= nil) ~= whole,
        string.format("world %d, %s: its schedule line names what it leaves out only if it leaves some: %s",
          world, what, r.line:gsub("%s+", " ")))
      if not whole then subsets = math.max(subsets, st.reduction.index) end
    end
    local call = world == 1 and "rt_step_reduce_direct%(R, 1, (%d+)," or "rt_step_reduce_scatter%(R, 1, (%d+),"
    local ks = {}
    for k in code:gmatch(call) do ks[#ks + 1] = tonumber(k) end
    local want_ks = {}
    for i, r in ipairs(got) do want_ks[i] = r.st.reduction.index end
    check(table.concat(ks, ",") == table.concat(want_ks, ","),
      string.format("world %d, %s: the step C reduces group 1 with reductions %s (want %s)", world, what,
        table.concat(ks, ","), table.concat(want_ks, ",")))
    local table_line = code:match("{%.name = \"1\",[^\n]*")
    local listed = table_line
      and table_line:match("%.nreductions = (%d+), %.reductions = group1_reductions[,}]")
    local none = table_line and not table_line:find(".nreductions", 1, true)
    check(table_line and (subsets > 0 and tonumber(listed) == subsets or subsets == 0 and none),
      string.format("world %d, %s: group \"1\" lists %d reductions of fewer params: %s", world, what, subsets,
        tostring(table_line)))
  end
end

-- Every spec: each reduction's layout is that of the parameters it lists.
for _, path in ipairs(util.all_specs()) do
  local plan = util.plan(path)
  local bad = {}
  for _, st in ipairs(plan.steps) do
    if st.op == "reduce_scatter" then
      local g, r = st.group, st.reduction
      local ps = {}
      for i, k in ipairs(r.params) do ps[i] = g.params[k] end
      local L = layout.group(ps, g.shard, g.state.placement)
      if L.padded_numel ~= r.layout.padded_numel or L.shard_numel ~= r.layout.shard_numel
        or (r.index == 0) ~= (#ps == #g.params) then
        bad[#bad + 1] = g.name
      end
    end
  end
  check(#bad == 0, string.format("%s: every reduction's layout is its parameters' (%s)", path,
    #bad == 0 and "ok" or table.concat(bad, ", ")))
end

util.finish()
