-- Random step programs on a 3-block Transformer with a cross-entropy loss (bounded, so
-- that training their conformance tests does not diverge; seeded, so every run plans the
-- same ones), over world sizes 1, 2, 4 and an HSDP 2 x 2 mesh, reshard_after_forward true,
-- false, nil and 2, with and without activation checkpointing and explicit prefetching:
--   * microbatch programs built as FSDP2 users write them (optional explicit unshard, a
--     setter per microbatch set back on the last, set_is_last_backward, one or two
--     forwards, an optional manual reshard, or reshard and optimizer step, between
--     microbatches) must all plan, and their memory plans must place no two live buffers
--     on the same bytes;
--   * programs of arbitrary items must plan or fail with a spec error, never an internal
--     error (a Lua error inside the generator) and never a hang;
--   * with FSDPGEN_SLOW=1, every program that plans (planning runs the check pass) emits
--     its step C and its reference's without an error, as `fsdpgen build` does short of
--     compiling (plan == build; tests/generator/plan_builds.lua).
-- Run from the repository root: lua5.4 tests/generator/step_fuzz.lua
-- `--write DIR N` writes the first N microbatch programs into DIR as spec files instead
-- (tests/conformance/run.sh builds and runs their conformance tests); `--write-any DIR N`
-- the first N programs of arbitrary items that plan (fuzz_any1.lua ...: about one in 100
-- plans; the FSDP2 oracle's --all runs them in FSDP2).
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path

local util = require("tests.generator.step_c")
local errors = require("spec.errors")
local check = util.check

local tmp = os.tmpname()
local MODS = { '""', '"layers.0"', '"layers.1"', '"layers.2"' }
local SETTERS = { "set_requires_gradient_sync", "set_reshard_after_backward", "set_requires_all_reduce" }

local function pick(t) return t[math.random(#t)] end

local function spec_text(name, items)
  local raf = pick({ "true", "false", "nil", "2" })
  local mesh = pick({ "world_size = 1", "world_size = 2", "world_size = 4", "mesh = { replicate = 2, shard = 2 }" })
  if raf == "2" and mesh == "world_size = 1" then raf = "true" end
  return string.format([[
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 3, dropout_p = 0, checkpoint_activations = %s }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { reshard_after_forward = %s }) end
fsdp.fully_shard(model)
%sreturn fsdp.spec{ name = "%s", model = model, %s, input = { batch = 2, seq_len = 8 },
  loss = "cross_entropy", optimizer = %s, step = { %s } }
]], pick({ "false", "true" }), raf,
    math.random(3) == 1 and "model.layers[3]:set_modules_to_backward_prefetch({ model.layers[1] })\n" or "",
    name, mesh, pick({ '{ "sgd", lr = 1e-2, momentum = 0.9 }', '{ "adamw", lr = 1e-2 }' }), table.concat(items, ", "))
end

local function microbatch_program()
  local items = {}
  local function add(s) items[#items + 1] = s end
  if math.random(3) == 1 then add('{ "unshard"' .. (math.random(2) == 1 and ", async_op = true" or "") .. " }") end
  local setter = math.random(4) > 1 and pick(SETTERS)
  local target, recurse = pick(MODS), math.random(3) == 1 and ", recurse = false" or ""
  local n = math.random(1, 3)
  for k = 1, n do
    local last = tostring(k == n)
    if setter then add(string.format('{ "%s", %s, module = %s%s }', setter, last, target, recurse)) end
    if n > 1 then add(string.format('{ "set_is_last_backward", %s }', last)) end
    for _ = 1, math.random(1, 2) do add('"forward"') end
    if k < n and math.random(4) == 1 then add('{ "reshard" }') end
    add('"backward"')
    if k < n and math.random(5) == 1 then
      add('{ "reshard" }') -- an optimizer step on unsharded groups is refused (stale parameters)
      add('"optimizer"')
    end
  end
  add('"optimizer"')
  return items
end

local function any_item()
  local r, m, v = math.random(12), pick(MODS), pick({ "true", "false" })
  if r <= 3 then return '"forward"' end
  if r <= 5 then
    return string.format('{ "backward", is_last_backward = %s, retain_graph = %s }', v, pick({ "true", "false" }))
  end
  if r == 6 then return '"optimizer"' end
  if r == 7 then return '{ "forward", module = ' .. m .. " }" end
  if r == 8 then return '{ "unshard", module = ' .. m .. ", async_op = " .. v .. " }" end
  if r == 9 then return '{ "reshard", module = ' .. m .. " }" end
  if r == 10 then return '{ "set_is_last_backward", ' .. v .. " }" end
  return string.format('{ "%s", %s, module = %s }', pick(SETTERS), v, m)
end

local function any_program()
  local items = {}
  for k = 1, math.random(1, 9) do items[k] = any_item() end
  return items
end

local EMIT = os.getenv("FSDPGEN_SLOW") == "1"
local emitted, emit_failed = 0, {}

-- Plans `text`: the plan, or nil and the spec error (an internal error stays raised).
-- With EMIT, a program that plans also emits its step C (a failure is kept in emit_failed).
local function plan_text(text)
  local f = assert(io.open(tmp, "w"))
  f:write(text)
  f:close()
  local ok, res = pcall(util.plan, tmp)
  errors.track_spec_lines(false)
  if ok and EMIT then
    local eok, err = pcall(util.emit_c, tmp, res)
    errors.track_spec_lines(false)
    emitted = emitted + 1
    if not eok then
      local msg = tostring(type(err) == "table" and (err.internal or err.msg) or err)
      emit_failed[#emit_failed + 1] = msg .. "\n" .. text
    end
  end
  if ok then return res end
  if errors.is_spec_error(res) and not res.internal then return nil, res end
  error(res.internal or tostring(res.msg or res), 0)
end

-- Buffers alive at one step on the same bytes (the first such pair), or nil.
local function overlap(buffers)
  for i = 1, #buffers do
    local a = buffers[i]
    for j = i + 1, #buffers do
      local b = buffers[j]
      if a.first <= b.last and b.first <= a.last and a.offset < b.offset + b.bytes and b.offset < a.offset + a.bytes then
        return a.name .. " and " .. b.name
      end
    end
  end
end

math.randomseed(24)
if arg[1] == "--write" then
  for i = 1, tonumber(arg[3]) do
    local f = assert(io.open(string.format("%s/fuzz_mb%d.lua", arg[2], i), "w"))
    f:write("-- Written by tests/generator/step_fuzz.lua --write.\n", spec_text("fuzz_mb" .. i, microbatch_program()))
    f:close()
  end
  os.exit(0)
end

if arg[1] == "--write-any" then
  local want, n, tries = tonumber(arg[3]), 0, 0
  while n < want and tries < 1000 * want do  -- about one in 100 plans
    tries = tries + 1
    local text = spec_text("fuzz_any" .. (n + 1), any_program())
    local ok, plan = pcall(plan_text, text)
    if ok and plan then
      n = n + 1
      local f = assert(io.open(string.format("%s/fuzz_any%d.lua", arg[2], n), "w"))
      f:write("-- Written by tests/generator/step_fuzz.lua --write-any.\n", text)
      f:close()
    end
  end
  os.remove(tmp)
  os.exit(n == want and 0 or 1)
end

local planned, refused, internal = 0, 0, {}
for i = 1, 40 do
  local text = spec_text("fuzz_mb" .. i, microbatch_program())
  local ok, plan, err = pcall(plan_text, text)
  local bad = not ok and plan or err and ("spec error: " .. err.msg) or overlap(plan.memory.buffers)
  check(not bad, string.format("microbatch program %d plans, no two live buffers share bytes%s", i,
    bad and (": " .. bad .. "\n" .. text) or ""))
end
for i = 1, 300 do
  local text = spec_text("fuzz_any" .. i, any_program())
  local ok, plan = pcall(plan_text, text)
  if not ok then
    internal[#internal + 1] = plan .. "\n" .. text
  elseif plan then
    planned = planned + 1
  else
    refused = refused + 1
  end
end
check(#internal == 0, string.format("300 programs of arbitrary items: %d planned, %d refused with a spec error, "
  .. "%d internal errors%s", planned, refused, #internal, internal[1] and (": " .. internal[1]) or ""))
if EMIT then
  local first = emit_failed[1] and (": " .. #emit_failed .. " failed, the first: " .. emit_failed[1])
  check(#emit_failed == 0, string.format("the %d programs that plan emit their step C (plan == "
    .. "build)%s", emitted, first or ""))
end
os.remove(tmp)
util.finish()
