-- plan == build: a repository spec that plans (planning runs the check pass,
-- generator/check.lua, as every command does) also emits its step C and its reference's,
-- as `fsdpgen build` does short of compiling, without an error: the specs that no other
-- suite emits (tests/specs/review, tests/torch), and with FSDPGEN_SLOW=1 every spec
-- (mp_rounding.lua, grad_init.lua, device_pointers.lua, ... emit the step C of the others;
-- step_fuzz.lua, with FSDPGEN_SLOW=1, that of its random step programs). And every bad spec
-- in tests/specs/errors/ that only the check pass refuses (the planner alone accepts it)
-- is one the emitter refuses too, with its internal error: what check.lua refuses is what
-- could not be emitted.
-- Run from the repository root: lua5.4 tests/generator/plan_builds.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local errors = require("errors")
local util = require("tests.generator.step_c")
local check = util.check

local function ls(pattern)
  local out = {}
  local p = io.popen("ls " .. pattern .. " 2>/dev/null")
  for f in p:lines() do out[#out + 1] = f end
  p:close()
  return out
end

local function message(e)
  if type(e) == "table" then return tostring(e.internal or e.msg) end
  return tostring(e)
end

-- The repository's specs plan and emit.
local specs = os.getenv("FSDPGEN_SLOW") == "1" and util.all_specs() or {}
for _, pattern in ipairs({ "tests/specs/review/*.lua", "tests/torch/specs/*.lua", "tests/torch/step_programs/*.lua" }) do
  for _, f in ipairs(ls(pattern)) do specs[#specs + 1] = f end
end
for _, path in ipairs(specs) do
  local ok, err = pcall(function()
    local plan = util.plan(path)
    errors.track_spec_lines(false)
    util.emit_c(path, plan)
  end)
  errors.track_spec_lines(false)
  check(ok, string.format("%s plans and emits its step C%s", path, ok and "" or (": " .. message(err))))
end

-- The bad specs that only the check pass refuses (their second line says `-- check pass:`):
-- the planner accepts them, check.lua refuses them, and the emitter asserts the same.
local by_check = 0
for _, path in ipairs(ls("tests/specs/errors/*.lua")) do
  local h = io.open(path)
  h:read("l")
  local marked = (h:read("l") or ""):match("^%-%- check pass:")
  h:close()
  if marked then
    by_check = by_check + 1
    local loader = require("loader")
    local planned, plan = pcall(function()
      local spec = loader.load(path)
      return loader.protect(spec.line, require("planner").plan, spec)
    end)
    errors.track_spec_lines(false)
    local refused, e = pcall(util.plan, path)
    errors.track_spec_lines(false)
    local emitted, ee = true, nil
    if planned then emitted, ee = pcall(require("emit_step").render, plan, "spec.lua", "spec") end
    local internal = not emitted and message(ee):find("the check pass let through", 1, true) ~= nil
    check(planned and not refused and errors.is_spec_error(e) and not e.internal and internal,
      string.format("%s: the planner accepts it (%s), the check pass refuses it (%s) and the emitter "
        .. "asserts it (%s)", path, planned and "yes" or message(plan), message(e),
        emitted and "emitted!" or message(ee):match("[^\n]*")))
  end
end
check(by_check >= 4, string.format("%d bad specs of the check pass (at least one for each of its four "
  .. "refusals that a spec can reach)", by_check))
util.finish()
