-- Shared by the generator tests: the pass/fail count (unit tests too) and, for the tests
-- that plan specs or read the emitted step C (mp_rounding.lua, grad_init.lua,
-- direct_reduction.lua, stream_lifetimes.lua, ...), the list of every spec, a spec's plan,
-- the step C's compute sections and a C call's arguments.
local M = {}

local passed, failed = 0, 0

function M.check(ok, msg)
  print((ok and "PASS " or "FAIL ") .. msg)
  if ok then passed = passed + 1 else failed = failed + 1 end
end

-- Prints the closing `N passed, N failed` line and exits (1 on any failure).
function M.finish()
  print(string.format("%d passed, %d failed", passed, failed))
  os.exit(failed == 0 and 0 or 1)
end

-- Every spec with a step program: tests/specs (seed, features, conformance) and examples
-- (the benchmark configs among them: bench/specs/*.lua link to examples/).
function M.all_specs()
  local specs = {}
  local p = io.popen("ls tests/specs/seed/*_*.lua tests/specs/features/*.lua tests/specs/conformance/*.lua "
    .. "examples/*.lua 2>/dev/null")
  for f in p:lines() do specs[#specs + 1] = f end
  p:close()
  return specs
end

-- The plan of a spec file, as the generator makes it: planned and checked (check.lua; a
-- spec error is raised as its table). `transform` adjusts the loaded spec (reference.lua).
function M.plan(path, transform)
  local loader = require("loader")
  local spec = loader.load(path)
  if transform then transform(spec) end
  return loader.protect(spec.line, function(s) return require("check").run(require("planner").plan(s)) end,
    spec)
end

-- What `fsdpgen build` emits for the spec at `path`, planned as `plan`, short of compiling it:
-- the step C of the plan and of its non-sharded reference (reference.lua; the rest of
-- build's files are templates). Raises what planning the reference or emitting raises.
function M.emit_c(path, plan)
  local emit_step = require("emit_step")
  local ref = M.plan(path, require("reference").transform)
  require("errors").track_spec_lines(false)
  return emit_step.render(plan, "spec.lua", "spec"), emit_step.render(ref, "spec.lua", "spec_reference", true)
end

-- The compute steps of a step C, in order: { kind (forward, backward, loss_grad, ...),
-- head (the schedule comment), dtype (the output's, when the line names one), calls }.
function M.compute_steps(text)
  local steps, cur = {}, nil
  for line in text:gmatch("[^\n]+") do
    local kind, rest = line:match("^%s*// compute%s+([%w_]+)%s+(.*)$")
    if kind then
      cur = { kind = kind, dtype = rest:match("%] (%w+) <%-") or rest:match("%] (%w+)$"), calls = {},
        head = line }
      steps[#steps + 1] = cur
    elseif line:match("^%s*//") then
      cur = nil
    elseif cur then
      local call = line:match("^%s*(rt_[%w_]+%(.*%);)$")
      if call then cur.calls[#cur.calls + 1] = call end
    end
  end
  return steps
end

-- Top-level arguments of a C call "name(a, F(x, y), ...);".
function M.args_of(call)
  local inner = call:match("^[%w_]+%((.*)%);$")
  local out, depth, cur = {}, 0, {}
  for ch in inner:gmatch(".") do
    if ch == "(" then depth = depth + 1 elseif ch == ")" then depth = depth - 1 end
    if ch == "," and depth == 0 then
      out[#out + 1] = table.concat(cur):match("^%s*(.-)%s*$")
      cur = {}
    else
      cur[#cur + 1] = ch
    end
  end
  out[#out + 1] = table.concat(cur):match("^%s*(.-)%s*$")
  return out
end

return M
