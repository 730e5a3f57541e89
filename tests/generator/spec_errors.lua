-- Bad specs: every file in tests/specs/errors/ starts with `-- expect: [LINE: ]error: TEXT`.
-- `fsdpgen plan` must exit 2, print exactly one line, `FILE:LINE: error: ...`, beginning
-- with that text, and never a Lua traceback, and write no .schedule (events, counts and
-- build plan the same way; the errors of the check pass, generator/emit/check.lua, included).
-- Run from the repository root: lua5.4 tests/generator/spec_errors.lua
local passed, failed = 0, 0
local dir = "tests/specs/errors/"
local p = io.popen("ls " .. dir)
local files = {}
for f in p:lines() do
  if f:match("%.lua$") then files[#files + 1] = f end
end
p:close()

local out_dir = os.tmpname()
os.remove(out_dir)
for _, f in ipairs(files) do
  local path = dir .. f
  local first = io.open(path):read("l")
  local expect = first:match("^%-%- expect: (.*)$")
  local cmd = "./fsdpgen plan " .. path .. " -o " .. out_dir
  local h = io.popen(cmd .. " 2>&1 >/dev/null; echo \"rc=$?\"")
  local out = h:read("a")
  h:close()
  local rc = tonumber(out:match("rc=(%d+)%s*$"))
  local msg = out:gsub("rc=%d+%s*$", "")
  local lines = select(2, msg:gsub("\n", ""))
  local want = expect:match("^%d") and (path .. ":" .. expect) or (path .. ": " .. expect)
  local ls = io.popen("ls " .. out_dir .. " 2>/dev/null")
  local wrote = ls:read("a")
  ls:close()
  local ok = rc == 2 and lines == 1 and msg:sub(1, #want) == want and not msg:find("traceback")
    and wrote == ""
  if ok then
    passed = passed + 1
    print("PASS " .. f .. ": exit 2, " .. msg:gsub("\n", ""))
  else
    failed = failed + 1
    print(string.format("FAIL %s: exit %s, %d line(s): %s\n  want prefix: %s%s", f, tostring(rc),
      lines, msg, want, wrote ~= "" and ("\n  wrote: " .. wrote:gsub("\n", " ")) or ""))
    os.execute("rm -rf " .. out_dir)
  end
end
print(string.format("%d passed, %d failed", passed, failed))
os.exit(failed == 0 and 0 or 1)
