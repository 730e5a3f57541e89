-- plan == build: a repository spec that plans (planning runs the check pass,
-- generator/emit/check.lua, as every command does) also emits its step C and its reference's,
-- as `fsdpgen build` does short of compiling, without an error: the specs that no other
-- suite emits (tests/specs/review, tests/torch), and with FSDPGEN_SLOW=1 every spec
-- (mp_rounding.lua, grad_init.lua, device_pointers.lua, ... emit the step C of the others;
-- step_fuzz.lua, with FSDPGEN_SLOW=1, that of its random step programs). And every bad spec
-- in tests/specs/errors/ that only the check pass refuses (the planner alone accepts it)
-- is one the emitter refuses too, with its internal error: what check.lua refuses is what
-- could not be emitted. And the emitted C reads as generator/emit/c_text.lua says: no line
-- over 100 columns, every arena view and offset by a buffer's name, the same text twice.
-- Run from the repository root: lua5.4 tests/generator/plan_builds.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local errors = require("spec.errors")
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
-- The arguments of the rt_step_* calls that are arena offsets (rt_step.h), by position.
local OFFSETS = { all_gather = { 5, 6 }, all_gather_wait = { 3 }, all_gather_direct = { 4 },
  reshard_post_forward = { 4, 5 }, accumulate_grads = { 3, 4 }, reduce_direct = { 4 },
  reduce_scatter = { 4, 6, 7 } }

-- How the step C reads, or nil: no line over 100 columns, no view or offset argument by
-- a bare number (F(123, 4), rt_step_all_gather(R, 0, 0, "FORWARD", 123, 0)) but "0", none
-- (a post-forward buffer, or a group's unsharded parameters where it has none).
local function unreadable(c)
  local n = 0
  for line in c:gmatch("[^\n]+") do
    n = n + 1
    if #line > 100 then return string.format("line %d has %d columns: %s", n, #line, line) end
  end
  for line in util.flat(c, true):gmatch("[^\n]+") do
    local code = line:gsub("//.*$", "")
    local k = code:match("^%s*rt_step_([%w_]+)%(")
    local bad = code:find("[FI]%(%d")
    for _, i in ipairs(k and OFFSETS[k] or {}) do
      local a = util.args_of(code:match("^%s*(.-)%s*$"))[i]
      -- "0": no post-forward buffer; no unsharded parameters (all read from the shards)
      local none = a == "0" and ((k == "all_gather" and i == 6)
        or (k == "all_gather_direct" and i == 4) or (k == "all_gather_wait" and i == 3))
      if not (a and (a:match("^[%a_][%w_]*$") or none)) then bad = true end
    end
    if bad then return "an arena offset by number: " .. line end
  end
end

local specs = os.getenv("FSDPGEN_SLOW") == "1" and util.all_specs()
  or { "examples/tiny.lua", "examples/llama_hsdp_ckpt.lua", "examples/mixed_precision.lua" }
for _, pattern in ipairs({ "tests/specs/review/*.lua", "tests/torch/specs/*.lua",
                          "tests/torch/step_programs/*.lua" }) do
  for _, f in ipairs(ls(pattern)) do specs[#specs + 1] = f end
end
for _, path in ipairs(specs) do
  local bad
  local ok, err = pcall(function()
    local plan = util.plan(path)
    errors.track_spec_lines(false)
    local c, ref = util.emit_c(path, plan)
    bad = unreadable(c) or unreadable(ref)
    if not bad and path == "examples/tiny.lua"
      and require("emit.emit_step").render(plan, "spec.lua", "spec") ~= c then
      bad = "a second emission differs"
    end
  end)
  errors.track_spec_lines(false)
  check(ok and not bad, string.format("%s plans and emits readable step C%s", path,
    ok and (bad and (": " .. bad) or "") or (": " .. message(err))))
end

-- A line too long with a trailing comment: the comment goes above the code, whole (wrapped
-- into a continuation line of the code, its rest would become code: examples/llama_1b.lua's
-- `.flops_per_step = ...,  // model FLOPs (67.3 TFLOP), all ranks` did), and `//` inside a
-- string is no comment.
do
  local c_text = require("emit.c_text")
  local long = string.rep("x", 60)
  local code = ".a = f(" .. long .. ", " .. long .. ", 1), .b = 2,"
  local lines = c_text.wrap("    ", code .. "  // why (see g(x, y)), more")
  local rest = table.concat(lines, " ", 2):gsub("%s+", " "):gsub("%( ", "(")
  check(#lines > 2 and lines[1] == "    // why (see g(x, y)), more" and rest == " " .. code,
    "c_text.wrap: a trailing comment above its wrapped code: " .. table.concat(lines, " | "))
  lines = c_text.wrap("", 'g("http://a/' .. long .. '", ' .. long .. ");")
  check(#lines == 2 and lines[1] == 'g("http://a/' .. long .. '",', "c_text.wrap: `//` in a string is "
    .. "no comment: " .. table.concat(lines, " | "))
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
    local loader = require("spec.loader")
    local planned, plan = pcall(function()
      local spec = loader.load(path)
      local memory, planner = require("memory.memory"), require("plan.planner")
      local function plan(s) return memory.plan_all(planner.plan(s)) end
      return loader.protect(spec.line, plan, spec)
    end)
    errors.track_spec_lines(false)
    local refused, e = pcall(util.plan, path)
    errors.track_spec_lines(false)
    local emitted, ee = true, nil
    if planned then emitted, ee = pcall(require("emit.emit_step").render, plan, "spec.lua", "spec") end
    local internal = not emitted and message(ee):find("the check pass let through", 1, true) ~= nil
    check(planned and not refused and errors.is_spec_error(e) and not e.internal and internal,
      string.format("%s: the planner accepts it (%s), the check pass refuses it (%s) and the "
        .. "emitter asserts it (%s)", path, planned and "yes" or message(plan), message(e),
        emitted and "emitted!" or message(ee):match("[^\n]*")))
  end
end
check(by_check >= 4, string.format("%d bad specs of the check pass (at least one for each of its "
  .. "four refusals that a spec can reach)", by_check))
util.finish()
