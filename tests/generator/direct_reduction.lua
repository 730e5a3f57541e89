-- Direct reductions (generator/plan/reductions.lua direct_reduction): at one rank, a reduction
-- that changes no value (no divide factor, a reduce dtype that holds the gradients' values)
-- is planned direct: its schedule line says so, the memory plan has no reduce-scatter input
-- or output for it, and the step C calls rt_step_reduce_direct instead of
-- rt_step_reduce_scatter. Every other reduction keeps its buffers. Checked on small specs
-- that each vary one thing, and on every spec of the repository (direct exactly at world 1).
-- Run from the repository root: lua5.4 tests/generator/direct_reduction.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local emit_step = require("emit.emit_step")
local schedule = require("emit.schedule")

local util = require("tests.generator.step_c")
local check = util.check

-- Plans a spec file: its reduce_scatter steps, reduce-scatter buffers and step C.
local function plan_of(path)
  local plan = util.plan(path)
  local r = { steps = {}, rs_bufs = 0, world = plan.spec.world_size, shard = plan.spec.mesh.shard,
    counts = plan.counts }
  for _, st in ipairs(plan.steps) do
    if st.op == "reduce_scatter" then r.steps[#r.steps + 1] = st end
  end
  for _, b in ipairs(plan.memory.buffers) do
    if b.kind == "reduce_scatter" then r.rs_bufs = r.rs_bufs + 1 end
  end
  r.c = util.flat(emit_step.render(plan, path, plan.spec.name))
  r.lines = {}
  for _, st in ipairs(r.steps) do r.lines[#r.lines + 1] = schedule.step_line(st, plan) end
  return r
end

local function count(text, pat) return select(2, text:gsub(pat, "")) end

local tmp = os.tmpname()

-- A two-block MLP spec at `world` ranks; `extra` is Lua run after the groups are made
-- (the model is `model`, the blocks `layers`).
local function mlp_spec(world, param_dtype, reduce_dtype, extra, step)
  local f = assert(io.open(tmp, "w"))
  f:write(string.format([[
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = %q, reduce_dtype = %q }
local layers = { models.MLP(8), models.MLP(8) }
local model = nn.Sequential(layers)
fsdp.fully_shard(layers[1], { mp_policy = mp })
fsdp.fully_shard(model, { mp_policy = mp })
%s
return fsdp.spec{ name = "direct_probe", model = model, world_size = %d,
  input = { shape = { 4, 8 } }, loss = "sum", optimizer = { "sgd", lr = 0.1 }%s }
]], param_dtype, reduce_dtype, extra or "", world, step and (", step = " .. step) or ""))
  f:close()
  return plan_of(tmp)
end

-- Every reduction of r direct (want true) or none (want false), in the plan, the buffers
-- and the C.
local function expect(r, want, what)
  local direct = 0
  for _, st in ipairs(r.steps) do
    if st.direct then direct = direct + 1 end
  end
  local n = #r.steps
  local calls_direct, calls_rs = count(r.c, "rt_step_reduce_direct%("), count(r.c, "rt_step_reduce_scatter%(")
  if want then
    check(n > 0 and direct == n and r.rs_bufs == 0 and calls_direct == n and calls_rs == 0,
      string.format("%s: all %d reductions direct (%d), no reduce-scatter buffers (%d), %d rt_step_reduce_direct "
        .. "and %d rt_step_reduce_scatter calls", what, n, direct, r.rs_bufs, calls_direct, calls_rs))
    local said = true
    for _, l in ipairs(r.lines) do
      said = said and (l:find("straight into the sharded grads", 1, true)
        or l:find("in place: the backward wrote the sharded grads", 1, true)) ~= nil
    end
    check(said, what .. ": the schedule lines say the gradients go straight into the sharded grads, "
      .. "or that the backward wrote them there (in place)")
  else
    check(n > 0 and direct == 0 and r.rs_bufs == 2 * n and calls_direct == 0 and calls_rs == n,
      string.format("%s: none of %d reductions direct (%d), an input and output each (%d buffers), %d "
        .. "rt_step_reduce_scatter calls", what, n, direct, r.rs_bufs, calls_rs))
  end
end

expect(mlp_spec(1, "fp32", "fp32"), true, "world 1, fp32")
expect(mlp_spec(1, "bf16", "fp32"), true, "world 1, bf16 params, fp32 reduce")
expect(mlp_spec(1, "bf16", "bf16"), true, "world 1, bf16 params, bf16 reduce")
expect(mlp_spec(1, "bf16", "fp16"), false, "world 1, bf16 params, fp16 reduce (rounds every gradient)")
expect(mlp_spec(1, "fp32", "fp32", "model:set_gradient_divide_factor(2); layers[1]:set_gradient_divide_factor(2)"), false,
  "world 1, a divide factor of 2")
expect(mlp_spec(1, "fp32", "fp32", "model:set_gradient_divide_factor(1); layers[1]:set_gradient_divide_factor(1)"), false,
  "world 1, a divide factor of 1 (planned as a division: FSDP2 applies custom factors)")
expect(mlp_spec(2, "fp32", "fp32"), false, "world 2")

-- Accumulated gradients are held in the reduce dtype: with fp16 reduction of bf16 params,
-- the synced microbatch's reduction reads them and changes nothing.
local acc = mlp_spec(1, "bf16", "fp16", nil, [[{ { "set_requires_gradient_sync", false }, "forward", "backward",
  { "set_requires_gradient_sync", true }, "forward", "backward", "optimizer" }]])
expect(acc, true, "world 1, bf16 params, fp16 reduce of accumulated gradients")
os.remove(tmp)

-- The counted collectives follow FSDP2 2.11: over a shard group of one rank no all-gather
-- and no reduce-scatter is issued (the events stay), and HSDP's all-reduce still is.
local function collectives(r, op)
  local n = 0
  for k, v in pairs(r.counts) do
    if k:match(" " .. op .. "$") then n = n + v end
  end
  return n
end
do
  local f = assert(io.open(tmp, "w"))
  f:write([[
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local layers = { models.MLP(8), models.MLP(8) }
local model = nn.Sequential(layers)
fsdp.fully_shard(layers[1])
fsdp.fully_shard(model)
return fsdp.spec{ name = "direct_probe", model = model, mesh = { replicate = 2, shard = 1 },
  input = { shape = { 4, 8 } }, loss = "sum", optimizer = { "sgd", lr = 0.1 } }
]])
  f:close()
  local r = plan_of(tmp)
  os.remove(tmp)
  check(#r.steps == 2 and collectives(r, "all_gather") == 0 and collectives(r, "reduce_scatter") == 0
    and collectives(r, "all_reduce") == 2, string.format("HSDP 2 x 1: %d reductions, counted %d all-gathers, %d "
    .. "reduce-scatters, %d all-reduces (FSDP2 2.11: 0, 0, 2)", #r.steps, collectives(r, "all_gather"),
    collectives(r, "reduce_scatter"), collectives(r, "all_reduce")))
end

-- Every spec of the repository: direct reductions only at world 1, and there for every
-- group that sets no divide factor and reduces in fp32 or its param dtype; a reduce-scatter
-- counted for each reduction exactly where the shard group has more than one rank.
local n_specs, n_direct, n_counts = 0, 0, 0

for _, path in ipairs(util.all_specs()) do
  local ok, r = pcall(plan_of, path)
  if not ok then
    check(false, path .. ": plan failed: " .. tostring(type(r) == "table" and r.msg or r))
  else
    n_specs = n_specs + 1
    for _, st in ipairs(r.steps) do
      local g = st.group
      local want = r.world == 1 and g.state.divide_factor == nil
        and (g.reduce_dtype == "fp32" or g.reduce_dtype == g.param_dtype or st.bufs.acc ~= nil)
      if (st.direct or false) ~= want then
        check(false, string.format("%s: reduction of %q planned %s", path, g.name, st.direct and "direct" or "as a reduce-scatter"))
      end
      if st.direct then n_direct = n_direct + 1 end
    end
    local want_rs = r.shard > 1 and #r.steps or 0
    if collectives(r, "reduce_scatter") ~= want_rs or (r.shard == 1 and collectives(r, "all_gather") > 0) then
      check(false, string.format("%s: %d reduce-scatters and %d all-gathers counted over a shard group of %d "
        .. "(%d reductions)", path, collectives(r, "reduce_scatter"), collectives(r, "all_gather"), r.shard, #r.steps))
    else
      n_counts = n_counts + 1
    end
  end
end
check(n_counts == n_specs, string.format("%d of %d specs: reduce-scatters counted only over shard groups of more than one rank, no all-gather at one rank",
  n_counts, n_specs))
check(n_specs > 0 and n_direct > 0, string.format("%d specs: direct reductions exactly where one rank reduces without changing a value (%d)",
  n_specs, n_direct))

util.finish()
