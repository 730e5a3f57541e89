-- Bad specs: every file in tests/specs/errors/ starts with `-- expect: [LINE: ]error: TEXT`.
-- `fsdpgen events` must exit 2 and print exactly one line, `FILE:LINE: error: ...`,
-- beginning with that text, and never a Lua traceback.
-- Run from the repository root: lua5.4 tests/generator/spec_errors.lua
local passed, failed = 0, 0
local dir = "tests/specs/errors/"
local p = io.popen("ls " .. dir)
local files = {}
for f in p:lines() do
  if f:match("%.lua$") then files[#files + 1] = f end
end
p:close()

for _, f in ipairs(files) do
  local path = dir .. f
  local first = io.open(path):read("l")
  local expect = first:match("^%-%- expect: (.*)$")
  local h = io.popen("./fsdpgen events " .. path .. " 2>&1 >/dev/null; echo \"rc=$?\"")
  local out = h:read("a")
  h:close()
  local rc = tonumber(out:match("rc=(%d+)%s*$"))
  local msg = out:gsub("rc=%d+%s*$", "")
  local lines = select(2, msg:gsub("\n", ""))
  local want = expect:match("^%d") and (path .. ":" .. expect) or (path .. ": " .. expect)
  local ok = rc == 2 and lines == 1 and msg:sub(1, #want) == want and not msg:find("traceback")
  if ok then
    passed = passed + 1
    print("PASS " .. f .. ": exit 2, " .. msg:gsub("\n", ""))
  else
    failed = failed + 1
    print(string.format("FAIL %s: exit %s, %d line(s): %s\n  want prefix: %s", f, tostring(rc), lines, msg, want))
  end
end
print(string.format("%d passed, %d failed", passed, failed))
os.exit(failed == 0 and 0 or 1)
