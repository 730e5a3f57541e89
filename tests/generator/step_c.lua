-- Shared by the generator tests: the pass/fail count (unit tests too) and, for the tests
-- that plan specs or read the emitted step C (mp_rounding.lua, grad_init.lua,
-- direct_reduction.lua, stream_lifetimes.lua, ...), the list of every spec, a spec's plan,
-- its step C (the training step's part), the compute sections and a C call's arguments.
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

-- f(path, plan, c) for every repository spec that plans (M.all_specs), c its step C (M.flat,
-- names kept); returns how many.
function M.each_planned(f)
  local n = 0
  for _, path in ipairs(M.all_specs()) do
    local ok, plan = pcall(M.plan, path)
    require("spec.errors").track_spec_lines(false)
    if ok then
      n = n + 1
      f(path, plan, M.flat(require("emit.emit_step").render(plan, path, plan.spec.name), true))
    end
  end
  return n
end

-- The plan of a spec file, as the generator makes it: planned and checked (check.lua; a
-- spec error is raised as its table). `transform` adjusts the loaded spec (reference.lua).
function M.plan(path, transform)
  local loader = require("spec.loader")
  local spec = loader.load(path)
  if transform then transform(spec) end
  local function plan_checked(s)
    local check, memory = require("emit.check"), require("memory.memory")
    return check.run(memory.plan_all(require("plan.planner").plan(s)))
  end
  return loader.protect(spec.line, plan_checked, spec)
end

-- The plan of a spec given as its Lua source (M.plan of a temporary file, removed after),
-- and its step C (M.flat).
function M.plan_source(src)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(src)
  f:close()
  local ok, plan = pcall(M.plan, path)
  local code = ok and M.flat(require("emit.emit_step").render(plan, path, plan.spec.name))
  os.remove(path)
  if not ok then error(plan, 0) end
  return plan, code
end

-- The Lua source of a one-module spec `name` (for M.plan_source): module m with the `members`
-- (lines such as "m.lin = nn.Linear(16, 16)") and forward(self, x) the `body` lines, sharded
-- under param dtype `mp` with fp32 reduction (nil: no policy), world 2, a [4, 16] input, a sum
-- loss and SGD.
function M.module_spec(name, members, body, mp)
  local policy = mp and string.format(
    ", { mp_policy = fsdp.MixedPrecisionPolicy{ param_dtype = %q, reduce_dtype = \"fp32\" } }", mp) or ""
  local lines = { 'local nn, fsdp = require("nn"), require("fsdp")', "local M = {}", "function M.forward(self, x)" }
  for _, l in ipairs(body) do lines[#lines + 1] = "  " .. l end
  lines[#lines + 1] = "end"
  lines[#lines + 1] = 'local m = nn.new_module("M", M)'
  for _, l in ipairs(members) do lines[#lines + 1] = l end
  lines[#lines + 1] = "fsdp.fully_shard(m" .. policy .. ")"
  lines[#lines + 1] = string.format('return fsdp.spec{ name = %q, model = m, world_size = 2, input = { shape = { 4, 16 } },', name)
  lines[#lines + 1] = '  loss = "sum", optimizer = { "sgd", lr = 1e-2 } }'
  return table.concat(lines, "\n") .. "\n"
end

-- What `fsdpgen build` emits for the spec at `path`, planned as `plan`, short of compiling it:
-- the step C of the plan and of its non-sharded reference (reference.lua; the rest of
-- build's files are templates). Raises what planning the reference or emitting raises.
function M.emit_c(path, plan)
  local emit_step = require("emit.emit_step")
  local ref = M.plan(path, require("spec.reference").transform)
  require("spec.errors").track_spec_lines(false)
  return emit_step.render(plan, "spec.lua", "spec"),
    emit_step.render(ref, "spec.lua", "spec_reference", true)
end

-- The training step's part of a step C text: up to the eval program's sections (the eval
-- and the step after one follow it, where the spec has them).
function M.step_part(c) return c:match("^(.-)\n// %-%-%-%- eval_") or c end

-- The step C of plan, flat (M.flat: keep_names keeps the arena's names): the training
-- step's part (M.step_part), and the whole text.
function M.step_c(plan, keep_names)
  local c = M.flat(require("emit.emit_step").render(plan, plan.spec.name .. ".lua", plan.spec.name), keep_names)
  return M.step_part(c), c
end

-- Brackets a line of C opens and does not close (outside strings).
local function open_brackets(line)
  local depth = 0
  for ch in line:gsub('"[^"]*"', '""'):gmatch("[%(%){}]") do
    depth = depth + ((ch == "(" or ch == "{") and 1 or -1)
  end
  return depth
end

-- The step C with one line per call, table entry and comment (the emitter wraps them at
-- 100 columns: generator/emit/c_text.lua) and every arena name replaced by its byte offset
-- from the arena's #defines, so a view reads F(offset, bytes) and a buffer argument its
-- offset: what the suites compare with the memory plan (an error in the #defines shows
-- there too); with keep_names, the names stay. Idempotent.
function M.flat(text, keep_names)
  local defs = {}
  for name, off in text:gmatch("\n#define ([%w_]+)%s+(%d+)") do defs[name] = off end
  local out, depth = {}, 0
  for line in (text:sub(-1) == "\n" and text or text .. "\n"):gmatch("(.-)\n") do
    local cont = line:match("^%s*//    (.*)$")
    if cont and out[#out] and out[#out]:match("^%s*//") then
      out[#out] = out[#out] .. " " .. cont
    elseif depth > 0 then
      local sep = out[#out]:match("[%({]$") and "" or " "  -- a call's head alone on its line
      out[#out] = out[#out] .. sep .. line:match("^%s*(.-)$")
      depth = depth + open_brackets(line)
    else
      -- a wrapped call or table entry opens brackets; a block or a table ends its line with {
      if not line:match("^%s*[/#]") and not line:match("{%s*$") then
        depth = math.max(0, open_brackets(line))
      end
      out[#out + 1] = line
    end
  end
  for i, line in ipairs(out) do
    if not keep_names and not line:match("^#define") and not line:match("^%s*//") then
      line = line:gsub("%f[%w_]([%a_][%w_]*)%f[^%w_]", function(n) return defs[n] end)
      out[i] = line:gsub("([FI])%((%d+) %+ (%d+),", function(f, a, b)
        return string.format("%s(%d,", f, tonumber(a) + tonumber(b))
      end)
    end
  end
  return table.concat(out, "\n") .. "\n"
end

-- An attention dropout call as its plain call, the RNG arguments dropped
-- (rt_attention_lowmem_[packed_]dropout_X(..., p, seed, stream) is
-- rt_attention_lowmem_[packed_]X(...)); any other call as it is.
function M.without_dropout(call)
  local head, dir = call:match("^(rt_attention_lowmem_[%w_]-)dropout_(%a+)%(")
  if not head then return call end
  local a = M.args_of(call)
  return string.format("%s%s(%s);", head, dir, table.concat(a, ", ", 1, #a - 3))
end

-- The compute steps of a step C, in order: { kind (forward, backward, loss_grad, ...),
-- head (the schedule comment), dtype (the output's, when the line names one), calls }.
-- plain: attention dropout calls as their plain calls (M.without_dropout), for the suites
-- that read buffers, dtypes and assign bits by argument position.
function M.compute_steps(text, plain)
  text = M.flat(text)
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
      if call then cur.calls[#cur.calls + 1] = plain and M.without_dropout(call) or call end
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
