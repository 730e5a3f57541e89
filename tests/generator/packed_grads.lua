-- Gradients stored in param_dtype (generator/memory/grad_assigns.lua packed_groups): at one
-- rank, a group whose gradients are in place and whose every parameter-gradient contribution
-- a linear or norm kernel assigns keeps its sharded gradients in 16 bits. Checked on small
-- specs that each vary one thing, and on every spec of the repository:
--   * packed only where allowed: in place, bf16/fp16 parameters, every contribution assigned;
--   * the sharded gradients buffer holds 2 bytes per element of the parameters that
--     require grad (layout.lua grad_numel), the schedule line says bf16;
--   * the step C marks exactly those groups (.grads_packed = 1), and every backward call that
--     writes one of their gradients has RT_PACKED_DWEIGHT and RT_ASSIGN_DWEIGHT; no other
--     call has RT_PACKED_DWEIGHT.
-- Run from the repository root: lua5.4 tests/generator/packed_grads.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local emit_step = require("emit.emit_step")
local schedule = require("emit.schedule")

local util = require("tests.generator.step_c")
local check = util.check

local function count(text, pat) return select(2, text:gsub(pat, "")) end

-- The plan of a spec file, its packed groups by name and its step C.
local function plan_of(path)
  local plan = util.plan(path)
  local r = { plan = plan, packed = {} }
  for _, g in ipairs(plan.groups) do
    if g.packed_grads then r.packed[#r.packed + 1] = g.name end
  end
  r.c = util.flat(emit_step.render(plan, path, plan.spec.name))
  return r
end

-- The invariants of the top of the file on one plan; returns a failure or nil.
local function invariants(r)
  local plan = r.plan
  local npacked = 0
  for _, g in ipairs(plan.groups) do
    if g.packed_grads then
      npacked = npacked + 1
      if not plan.in_place[g] then return g.name .. ": packed but not in place" end
      if g.param_dtype ~= "bf16" and g.param_dtype ~= "fp16" then return g.name .. ": packed " .. g.param_dtype end
      local want = g.layout.grad_numel * 2
      if g.grads_buf.size ~= want then
        return string.format("%s: sharded grads of %d bytes, want %d", g.name, g.grads_buf.size, want)
      end
    end
  end
  local marked = count(r.c, "%.grads_packed = 1")
  if marked ~= npacked then return string.format("%d groups packed, %d marked in the C", npacked, marked) end
  for _, st in ipairs(plan.steps) do
    if st.op == "reduce_scatter" and st.in_place and st.group.packed_grads then
      local line = schedule.step_line(st, plan)
      if not line:find("wrote the sharded grads in " .. st.group.param_dtype, 1, true) then
        return "schedule line does not say packed: " .. line
      end
    end
  end
  -- every call with an argument in a packed group's gradients (util.flat: F(offset, bytes)):
  -- the bit and the assign
  local ranges = {}
  for _, g in ipairs(plan.groups) do
    if g.packed_grads then ranges[#ranges + 1] = { g.grads_buf.offset, g.grads_buf.offset + g.grads_buf.size } end
  end
  for call in r.c:gmatch("rt_[%w_]+_backward%b()") do
    local dw = call:find("RT_PACKED_DWEIGHT", 1, true) ~= nil
    local writes_packed = false
    for off in call:gmatch("F%((%d+), %d+%)") do
      for _, rg in ipairs(ranges) do
        if tonumber(off) >= rg[1] and tonumber(off) < rg[2] then writes_packed = true end
      end
    end
    if writes_packed ~= dw then return "RT_PACKED_DWEIGHT " .. (dw and "on" or "missing from") .. ": " .. call end
    if dw and not call:find("RT_ASSIGN_DWEIGHT", 1, true) then return "packed without assigning: " .. call end
  end
end

local tmp = os.tmpname()

-- A two-block MLP of width `dim` at `world` ranks; `fields` is Lua added to the spec table.
local function mlp_spec(world, param_dtype, dim, fields)
  local f = assert(io.open(tmp, "w"))
  f:write(string.format([[
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = %q, reduce_dtype = "fp32" }
local layers = { models.MLP(%d), models.MLP(%d) }
local model = nn.Sequential(layers)
fsdp.fully_shard(layers[1], { mp_policy = mp })
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{ name = "packed_probe", model = model, world_size = %d,
  input = { shape = { 4, %d } }, loss = "sum", optimizer = { "adamw", lr = 0.1 }%s }
]], param_dtype, dim, dim, world, dim, fields or ""))
  f:close()
  return plan_of(tmp)
end

local function expect(r, want, what)
  local bad = invariants(r)
  check(bad == nil and #r.packed == want, string.format("%s: %d groups packed (want %d)%s", what, #r.packed,
    want, bad and ("; " .. bad) or ""))
end

expect(mlp_spec(1, "bf16", 8), 2, "world 1, bf16")
expect(mlp_spec(1, "fp16", 16), 2, "world 1, fp16")
expect(mlp_spec(1, "fp32", 8), 0, "world 1, fp32 (nothing to halve)")
expect(mlp_spec(2, "bf16", 8), 0, "world 2 (reduce-scattered, not in place)")
expect(mlp_spec(1, "bf16", 8, ", grad_clip = 1.0"), 0, "world 1, clipped (the norm reads fp32 gradients)")
expect(mlp_spec(1, "bf16", 12), 0, "world 1, width 12 (rows not multiples of 8)")
expect(mlp_spec(1, "bf16", 8, [[, step = { "forward", "forward", "backward", "optimizer" }]]), 0,
  "world 1, two forwards before one backward (each weight's second contribution adds)")
expect(mlp_spec(1, "bf16", 8, [[, step = { { "set_requires_gradient_sync", false }, "forward", "backward",
  { "set_requires_gradient_sync", true }, "forward", "backward", "optimizer" }]]), 0,
  "world 1, gradients accumulated over two microbatches")
os.remove(tmp)

-- Llama at one rank: the blocks packed, the root (the embedding's lookups add) not.
do
  local r = plan_of("tests/specs/conformance/llama_w1_bf16.lua")
  local bad = invariants(r)
  check(bad == nil and table.concat(r.packed, ",") == "layers.0,layers.1",
    string.format("llama_w1_bf16: packed groups %s (want layers.0,layers.1)%s", table.concat(r.packed, ","),
      bad and ("; " .. bad) or ""))
end

-- Every spec of the repository.
local n_specs, n_packed = 0, 0
for _, path in ipairs(util.all_specs()) do
  local ok, r = pcall(plan_of, path)
  if not ok then
    check(false, path .. ": plan failed: " .. tostring(type(r) == "table" and r.msg or r))
  else
    n_specs = n_specs + 1
    if #r.packed > 0 then n_packed = n_packed + 1 end
    local bad = invariants(r)
    if bad then check(false, path .. ": " .. bad) end
  end
end
check(n_specs > 0 and n_packed > 0, string.format("%d specs planned, %d with packed gradients; each "
  .. "as the top of the file says", n_specs, n_packed))
util.finish()
