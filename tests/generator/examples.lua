-- The examples: every examples/*.lua plans (the GPU-sized ones too), has a header saying
-- what it shows, its size (`-- Size: small` ones are trained by tests/examples/run.sh and
-- tested by tests/conformance) and a `-- Run:` command naming its own file, and no two
-- share a spec name (they would share build/<name>/). The benchmark's configs
-- (bench/specs/*.lua) are links to examples, so the two never drift apart. The README's
-- tour quotes lines of examples/tiny.lua's .schedule: each is one of its lines.
-- Run from the repository root: lua5.4 tests/generator/examples.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local errors = require("spec.errors")
local util = require("tests.generator.step_c")
local check = util.check

local p = io.popen("ls examples/*.lua")
local files = {}
for f in p:lines() do files[#files + 1] = f end
p:close()
check(#files >= 6, string.format("examples/ holds %d specs (tiny, gpt_bytes, mixed precision, HSDP with "
  .. "checkpointing, GPT-2 124M, Llama 1B)", #files))

local names, small = {}, 0
for _, path in ipairs(files) do
  local header = {}
  for line in io.lines(path) do
    if not line:match("^%-%-") then break end
    header[#header + 1] = line
  end
  local text = table.concat(header, "\n")
  local size = text:match("%-%- Size: (%a+)")
  if size == "small" then small = small + 1 end
  check(#header >= 3 and text:find("^%-%- " .. path:gsub("%p", "%%%0") .. ": ") ~= nil,
    path .. ": the header starts `-- " .. path .. ": what it shows`")
  check(size == "small" or size == "large", path .. ": the header says `-- Size: small` or `-- Size: large` ("
    .. tostring(size) .. ")")
  check(text:find("%-%- Run:%s+%./fsdpgen %a+ " .. path:gsub("%p", "%%%0")) ~= nil,
    path .. ": the header has a `-- Run:  ./fsdpgen CMD " .. path .. "` line")
  local t0 = os.clock()
  local ok, plan = pcall(util.plan, path)
  errors.track_spec_lines(false)
  check(ok, string.format("%s: plans (%.2f s)%s", path, os.clock() - t0,
    ok and "" or (": " .. tostring(errors.is_spec_error(plan) and errors.format(plan, path) or plan))))
  if ok then
    local name = plan.spec.name
    check(not names[name], string.format("%s: its name '%s' is no other example's%s", path, name,
      names[name] and (" (" .. names[name] .. ")") or ""))
    names[name] = path
  end
end
check(small >= 3, string.format("%d examples are small enough to train in CI (at least 3)", small))

-- The README's excerpt of tiny.schedule: each line (its columns' spaces squeezed, "..."
-- standing for any text) is a line of the schedule `fsdpgen plan` writes.
local schedule = require("emit.schedule")
local function squeeze(l) return (l:gsub("%s+", " "):gsub("^ ", ""):gsub(" $", "")) end
local tiny = util.plan("examples/tiny.lua")
local lines = {}
for l in (schedule.render(tiny, "tiny.lua") .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = squeeze(l) end
local readme = io.open("README.md"):read("a")
local excerpt = readme:match("%*%*3%. The `%.schedule`%.%*%*.-```\n(.-)```")
local quoted, missing = 0, {}
for l in (excerpt or ""):gmatch("([^\n]*)\n") do
  local want = squeeze(l)
  if want ~= "..." and want ~= "" then
    quoted = quoted + 1
    local pat = "^" .. want:gsub("%p", "%%%0"):gsub("%%%.%%%.%%%.", ".-") .. "$"
    local found = false
    for _, have in ipairs(lines) do
      if have:find(pat) then found = true break end
    end
    if not found then missing[#missing + 1] = l end
  end
end
check(quoted >= 5 and #missing == 0, string.format("README's tour quotes %d lines of tiny.schedule, each "
  .. "as fsdpgen writes it%s", quoted, #missing > 0 and (": not so: " .. table.concat(missing, " | ")) or ""))

-- The benchmark configs are the examples, not copies.
for _, b in ipairs({ "gpt2_124m", "llama_1b" }) do
  local h = io.popen("readlink bench/specs/" .. b .. ".lua")
  local target = h:read("l")
  h:close()
  check(target == "../../examples/" .. b .. ".lua", "bench/specs/" .. b .. ".lua links to examples/" .. b
    .. ".lua (" .. tostring(target) .. ")")
end
util.finish()
