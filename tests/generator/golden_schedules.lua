-- Golden schedules: `fsdpgen plan` of every spec in tests/specs/ (seed scenarios and the
-- feature specs) must equal tests/golden/<name>.schedule byte for byte, and a second plan
-- must leave it and <name>.layout (the arena offsets, not reviewed) unchanged. FSDPGEN_UPDATE_GOLDEN=1 rewrites the goldens.
-- Run from the repository root: lua5.4 tests/generator/golden_schedules.lua
local passed, failed = 0, 0
local update = os.getenv("FSDPGEN_UPDATE_GOLDEN") == "1"
local tmp = os.tmpname()
os.remove(tmp)
os.execute("mkdir -p " .. tmp)

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local specs = {}
local p = io.popen("ls tests/specs/seed/*.lua tests/specs/features/*.lua 2>/dev/null")
for f in p:lines() do
  if not f:match("/make%.lua$") then specs[#specs + 1] = f end
end
p:close()

for _, spec in ipairs(specs) do
  local h = io.popen("./fsdpgen plan " .. spec .. " -o " .. tmp .. " 2>&1")
  local out = h:read("a")
  local ok = h:close()
  local name = out:match("([%w_%-]+)%.schedule")
  local got = name and read(tmp .. "/" .. name .. ".schedule")
  if not ok or not got then
    failed = failed + 1
    print("FAIL " .. spec .. ": plan failed: " .. out)
  else
    local h2 = io.popen("./fsdpgen plan " .. spec .. " -o " .. tmp .. " 2>&1")
    local again = h2:read("a")
    h2:close()
    local golden_path = "tests/golden/" .. name .. ".schedule"
    if update then
      local f = io.open(golden_path, "wb")
      f:write(got)
      f:close()
    end
    local want = read(golden_path)
    if got ~= want then
      failed = failed + 1
      print(string.format("FAIL %s: differs from %s (diff %s/%s.schedule %s)", spec, golden_path, tmp, name, golden_path))
    elseif again:match("wrote ") or not again:match("unchanged [^\n]*%.layout") then
      failed = failed + 1
      print("FAIL " .. spec .. ": a second plan rewrote a file (or wrote no .layout): " .. again)
    else
      passed = passed + 1
      print(string.format("PASS %s: %d lines equal the golden, replan leaves .schedule and .layout unchanged", name, select(2, got:gsub("\n", ""))))
    end
  end
end
if failed == 0 then os.execute("rm -rf " .. tmp) end
print(string.format("%d passed, %d failed", passed, failed))
os.exit(failed == 0 and 0 or 1)
