-- Mutated repository specs: planning never hangs or crashes. Every repository spec plans
-- in the sandbox as it is (the error specs fail as they should); then each mutant of one in
-- tests/specs, tests/torch, examples (numbers, strings and names replaced, lines deleted,
-- duplicated or cut, wrong-type arguments to functional ops, hostile code: endless loops
-- in coroutines and pcall, deep recursion, the sandbox's missing os/io/load, a mistyped
-- require) is loaded and planned in this process, as `fsdpgen events` does, and must
--   * plan, or fail with a spec error: never an internal error (a Lua error of fsdpgen),
--   * print its error as one line `FILE:LINE: error: ...` (every mutant here has a line
--     to blame: the spec file is readable),
--   * finish within SLOW seconds (runaway sizes are refused at once; the planning time
--     budget is armed at BUDGET seconds as a backstop and counts as a failure).
-- A few erroring mutants also run through ./fsdpgen events: exit 2 and one line on stderr.
-- Seeded: every run makes the same mutants.
-- --emit (the slow tier): a mutant that plans must also emit its step C and its reference's,
-- as `fsdpgen build` does short of compiling (plan == build, generator/emit/check.lua), and
-- its PyTorch twin, as `fsdpgen torch` does, or refuse it with a spec error.
-- Run from the repository root:
--   lua5.4 tests/generator/spec_fuzz.lua [--count N] [--seed S] [--verbose] [--emit]
-- (default 1000 mutants; 10000 and more on demand).
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local errors = require("spec.errors")
local util = require("tests.generator.step_c")
local check = util.check

local count, seed, verbose, emit = 1000, 39, false, false
local i = 1
while i <= #arg do
  if arg[i] == "--count" then count = tonumber(arg[i + 1]); i = i + 1
  elseif arg[i] == "--seed" then seed = tonumber(arg[i + 1]); i = i + 1
  elseif arg[i] == "--verbose" then verbose = true
  elseif arg[i] == "--emit" then emit = true
  else
    io.stderr:write("usage: lua5.4 tests/generator/spec_fuzz.lua [--count N] [--seed S] "
      .. "[--verbose] [--emit]\n")
    os.exit(2)
  end
  i = i + 1
end
math.randomseed(seed)

local SLOW, BUDGET, CLI_CHECKS = 5.0, 10, 12
-- CPU time only: the wall-clock backstop would trip on a loaded machine (or under nice).
errors.WALL_FACTOR = 1000

-- The seeds: every spec of the repository (the error specs too: their mutants must fail
-- as well as theirs do).
local seeds = {}
local p = io.popen("ls tests/specs/seed/*_*.lua tests/specs/features/*.lua tests/specs/conformance/*.lua "
  .. "tests/specs/errors/*.lua tests/torch/specs/*.lua tests/torch/step_programs/*.lua examples/*.lua")
for f in p:lines() do
  -- Not the two specs that test the limits themselves: each runs a second or two to reach
  -- its limit, and so would most of their mutants.
  if f:match("too_many_params") or f:match("endless_forward") then goto next end
  local h = io.open(f)
  seeds[#seeds + 1] = { path = f, text = h:read("a") }
  h:close()
  ::next::
end
p:close()

local function pick(t) return t[math.random(#t)] end

local NUMBERS = { "0", "-1", "1", "2", "3", "7", "1e9", "1000000", "2^31", "2^62", "math.maxinteger",
  "math.mininteger", "1e300", "math.huge", "-math.huge", "(0/0)", "0.5", "3.7", "nil", "true", '"x"', "{}",
  "{ 1, 2 }", "50000", "100001" }
local VALUES = { "nil", "0", "-1", "1.5", "true", '"bf16"', '"x"', "{}", "{ nil }", "{ 0 }", "model",
  "math.huge", "function() end", "string", "'\\n'" }
local SNIPPETS = {
  "while true do end",
  "local co = coroutine.wrap(function() while true do end end) co()",
  "local co = coroutine.create(function() while true do pcall(function() while true do end end) end end) coroutine.resume(co)",
  "coroutine.create('x')",
  "coroutine.resume(5)",
  "coroutine.wrap(nil)()",
  "print(setmetatable({}, { __tostring = function() return {} end }))",
  "for _ = 1, 10 do pcall(function() while true do end end) end",
  "local function f(n) return 1 + f(n + 1) end f(1)",
  "local function f(n) return f(n + 1) end f(1)",
  "local t = setmetatable({}, { __index = function(t, k) return t[k .. 'x'] end }) local _ = t.a",
  "os.execute('true')",
  "io.open('/etc/passwd')",
  "dofile('/etc/passwd')",
  "load('return 1')()",
  "require('modles')",
  "require('os')",
  "require('models.nope')",
  "require('../generator/main')",
  "debug.sethook()",
  "package.path = ''",
  "error('a\\nb\\nc')",
  "error({})",
  "error()",
  "error(setmetatable({}, { __tostring = function() return 'x\\ny' end }))",
  "local t = {} for i = 1, 1e8 do t[i] = i end",
  "for i = 1, 1e6 do nn.Linear(4, 4) end",
  "local x = ('x'):rep(100) .. nil",
  "collectgarbage('collect')",
  "math.random(1, 2)",
  "string.dump(print)",
  "nn.functional.rms_norm(nil)",
  "nn.functional.layer_norm(1, 2)",
  "nn.functional.cross_entropy({}, {})",
  "nn.functional.rotary(nil, 3)",
  "nn.functional.sum(5)",
  "nn.functional.attention(nil, nil, nil, 1)",
  "nn.functional.linear({}, nil)",
}
-- Functional ops a mutated forward may call wrongly (in place of an existing call).
local OPS = { "rms_norm", "layer_norm", "cross_entropy", "rotary", "sum", "linear", "attention", "embedding",
  "relu", "add", "mul", "swiglu", "cast", "dropout" }

local function lines_of(text)
  local t = {}
  for l in (text .. "\n"):gmatch("(.-)\n") do t[#t + 1] = l end
  if t[#t] == "" then t[#t] = nil end
  return t
end

local mutators = {
  -- a number literal replaced
  function(text)
    local n = select(2, text:gsub("%f[%w_.]%d[%d.e]*%f[^%w_.]", ""))
    if n == 0 then return nil end
    local k, r = math.random(n), pick(NUMBERS)
    local j = 0
    return (text:gsub("%f[%w_.]%d[%d.e]*%f[^%w_.]", function(m)
      j = j + 1
      if j == k then return r end
    end))
  end,
  -- a string literal replaced
  function(text)
    local n = select(2, text:gsub('"[^"\n]*"', ""))
    if n == 0 then return nil end
    local k, r = math.random(n), pick({ '""', '"rt"', '"int"', '"a-b"', '"x\\ny"', '"layers.99"', '"fp8"', "nil",
      "42", '"bf16"', '"' .. ("n"):rep(100) .. '"', '"_x"', '"main"' })
    local j = 0
    return (text:gsub('"[^"\n]*"', function(m)
      j = j + 1
      if j == k then return r end
    end))
  end,
  -- the value after a `key =` replaced
  function(text)
    local n = select(2, text:gsub("(%w+ = )([^,}\n]+)", ""))
    if n == 0 then return nil end
    local k, r = math.random(n), pick(VALUES)
    local j = 0
    return (text:gsub("(%w+ = )([^,}\n]+)", function(key, v)
      j = j + 1
      if j == k then return key .. r end
    end))
  end,
  -- a line deleted
  function(text)
    local t = lines_of(text)
    table.remove(t, math.random(#t))
    return table.concat(t, "\n") .. "\n"
  end,
  -- a line duplicated
  function(text)
    local t = lines_of(text)
    local k = math.random(#t)
    table.insert(t, k, t[k])
    return table.concat(t, "\n") .. "\n"
  end,
  -- cut at a random byte
  function(text) return text:sub(1, math.random(#text)) end,
  -- a hostile snippet before a random line
  function(text)
    local t = lines_of(text)
    table.insert(t, math.random(#t + 1), pick(SNIPPETS))
    return table.concat(t, "\n") .. "\n"
  end,
  -- a functional op's arguments replaced by wrong types
  function(text)
    local n = select(2, text:gsub("([%w_]+)(%b())", ""))
    if n == 0 then return nil end
    local k, j = math.random(n), 0
    local args = pick({ "nil", "1", "{}", '"x"', "nil, nil", "x, x, x, x, 5" })
    return (text:gsub("([%w_]+)(%b())", function(f, a)
      j = j + 1
      if j == k then return f .. "(" .. args .. ")" end
    end))
  end,
  -- the forward of a model calls an op wrongly
  function(text)
    local t = lines_of(text)
    table.insert(t, math.random(#t + 1), string.format("local _ok = nn.functional.%s(%s)", pick(OPS),
      pick({ "nil", "1", "{}", "nil, nil, nil", '"x", {}' })))
    return table.concat(t, "\n") .. "\n"
  end,
  -- two names swapped somewhere (e.g. model and mp)
  function(text)
    local words = {}
    for w in text:gmatch("%f[%w_][%a_][%w_]*") do words[#words + 1] = w end
    if #words < 2 then return nil end
    local a, b = pick(words), pick(words)
    local k = math.random(select(2, text:gsub("%f[%w_]" .. a .. "%f[^%w_]", "")))
    local j = 0
    return (text:gsub("%f[%w_]" .. a .. "%f[^%w_]", function(m)
      j = j + 1
      if j == k then return b end
    end))
  end,
}

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)
local path = dir .. "/mutant.lua"

-- Plans the file at `path` as `fsdpgen events` does: "ok", or "spec" and the formatted
-- error, or "internal" and the error.
local function plan_file()
  errors.arm_budget(BUDGET)
  local ok, res = pcall(function()
    local loader = require("spec.loader")
    local spec = loader.load(path)
    local function plan_checked(s)
      local check, memory = require("emit.check"), require("memory.memory")
      return check.run(memory.plan_all(require("plan.planner").plan(s)))
    end
    return loader.protect(spec.line, plan_checked, spec)
  end)
  errors.arm_budget(nil)
  if ok then return "ok", res end
  if errors.is_spec_error(res) and not res.internal then return "spec", errors.format(res, path), res end
  return "internal", tostring(type(res) == "table" and (res.internal or res.msg) or res)
end

-- First the seeds themselves, in the sandbox: every spec of the repository plans (those
-- of tests/specs/errors fail with a spec error, as they should).
local seeds_ok, seeds_bad = 0, {}
for _, s in ipairs(seeds) do
  local f = assert(io.open(path, "w"))
  f:write(s.text)
  f:close()
  local kind, msg = plan_file()
  local want = s.path:match("/errors/") and "spec" or "ok"
  if kind == want then seeds_ok = seeds_ok + 1 else seeds_bad[#seeds_bad + 1] = s.path .. ": " .. tostring(msg) end
end
check(#seeds_bad == 0, string.format("%d of %d repository specs plan in the sandbox (the error specs fail)%s",
  seeds_ok, #seeds, #seeds_bad > 0 and (": " .. table.concat(seeds_bad, "; ")) or ""))

-- The time budget stops what the line limit cannot see: lines that each run long in C.
do
  local f = assert(io.open(path, "w"))
  f:write('local s = ("x"):rep(1000000)\nfor i = 1, 1000000 do s = s:gsub("x", "y"):gsub("y", "x") end\n')
  f:close()
  local saved = BUDGET
  BUDGET = 1
  local c0 = os.clock()
  local kind, msg = plan_file()
  BUDGET = saved
  check(kind == "spec" and msg:find("planning took more than 1 seconds", 1, true) ~= nil and os.clock() - c0 < 5,
    string.format("a spec of slow lines stops at a 1 s budget (%.1f s: %s)", os.clock() - c0, tostring(msg)))
end

local stats = { ok = 0, spec = 0, internal = 0 }
local bad, slow, no_line, multi, budget, kept = 0, 0, 0, 0, 0, 0  -- kept: failing mutants written out
local slowest, slowest_what = 0, ""
local cli = {}
local t_all = os.clock()
local made = 0
while made < count do
  local s = pick(seeds)
  local m = pick(mutators)(s.text)
  if m then
    -- Sometimes two mutations.
    if math.random(4) == 1 then m = pick(mutators)(m) or m end
    made = made + 1
    local f = assert(io.open(path, "w"))
    f:write(m)
    f:close()
    local t0 = os.time()
    local c0 = os.clock()
    local kind, msg = plan_file()
    local dt = os.clock() - c0
    local wall = os.time() - t0
    stats[kind] = stats[kind] + 1
    local what = string.format("mutant %d of %s", made, s.path)
    if dt > slowest then slowest, slowest_what = dt, what end
    local fail
    if kind == "ok" and emit then
      local ok, err = pcall(util.emit_c, path, msg)
      errors.track_spec_lines(false)
      if not ok then
        local why = type(err) == "table" and (err.internal or err.msg) or err
        fail = "planned but did not emit: " .. tostring(why)
      else  -- the twin may refuse what PyTorch cannot express, with a spec error
        ok, err = pcall(require("emit.emit_torch").text, msg, path, ".")
        if not ok and not (errors.is_spec_error(err) and not err.internal) then
          fail = "planned but its PyTorch twin did not emit: " .. tostring(type(err) == "table" and err.msg or err)
        end
      end
    end
    if kind == "internal" then
      bad = bad + 1
      fail = "internal error: " .. msg:match("^[^\n]*")
    elseif kind == "spec" then
      if msg:find("\n") then multi = multi + 1; fail = "error of more than one line: " .. msg end
      if not msg:match("^[^:]+:%d+: error: ") then no_line = no_line + 1; fail = "error without FILE:LINE: " .. msg end
      if msg:find("planning took more than", 1, true) then budget = budget + 1; fail = "hit the time budget: " .. msg end
      if #cli < CLI_CHECKS and not fail then cli[#cli + 1] = { text = m, msg = msg, what = what } end
    end
    if dt > SLOW then slow = slow + 1; fail = (fail and (fail .. "; ") or "")
      .. string.format("took %.1f s CPU, %d s wall", dt, wall) end
    if fail then
      check(false, what .. ": " .. fail)
      local keep = string.format("%s/fail_%d.lua", dir, made)
      local g = io.open(keep, "w")
      g:write(m)
      g:close()
      print("  kept as " .. keep)
      kept = kept + 1
    elseif verbose then
      print(string.format("     %s: %s %.2f s %s", what, kind, dt, kind == "spec" and msg or ""))
    end
  end
end
local total = os.clock() - t_all

check(bad == 0, string.format("%d mutants: %d planned, %d spec errors, %d internal errors", made, stats.ok,
  stats.spec, stats.internal))
check(multi == 0 and no_line == 0, string.format("every spec error is one line with FILE:LINE (%d of more than one "
  .. "line, %d without a line)", multi, no_line))
check(slow == 0 and budget == 0, string.format("no mutant took more than %.0f s (slowest %.2f s CPU: %s; %d hit "
  .. "the %d s budget)", SLOW, slowest, slowest_what, budget, BUDGET))
print(string.format("     %.1f s CPU for %d mutants (%.0f ms each)", total, made, 1000 * total / made))

-- The command line says the same: exit 2 and exactly one line on stderr.
for k, c in ipairs(cli) do
  local cpath = string.format("%s/cli_%d.lua", dir, k)
  local f = io.open(cpath, "w")
  f:write(c.text)
  f:close()
  local h = io.popen("./fsdpgen events " .. cpath .. " 2>&1 >/dev/null; echo \"rc=$?\"")
  local out = h:read("a")
  h:close()
  local rc = tonumber(out:match("rc=(%d+)%s*$"))
  local msg = out:gsub("rc=%d+%s*$", "")
  local want = c.msg:gsub("^[^:]*", cpath)
  check(rc == 2 and msg == want .. "\n", string.format("%s: ./fsdpgen events exits 2 with that one line (exit %s: %s)",
    c.what, tostring(rc), msg:gsub("\n", "\\n")))
end
-- The failing mutants stay for a look.
if kept == 0 then os.execute("rm -rf " .. dir) end
util.finish()
