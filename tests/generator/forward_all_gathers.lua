-- FSDP2's forward memory rule, read off the golden schedules: in forward, at most two
-- all-gather outputs are alive (issued, not yet waited for or dropped) unless explicit
-- forward prefetching asks for more, in which case at most 1 + the longest forward
-- prefetch list. The CUDA backend runs each all-gather on its own stream from its issue
-- line to its wait line, so this is also the number of all-gathers in flight there.
-- Run from the repository root: lua5.4 tests/generator/forward_all_gathers.lua
local passed, failed = 0, 0

local function check(ok, msg)
  print((ok and "PASS " or "FAIL ") .. msg)
  if ok then passed = passed + 1 else failed = failed + 1 end
end

-- Returns the most all-gathers alive at once in forward sections, and the longest forward
-- prefetch list in the header.
local function scan(text)
  local longest, alive, most, in_forward = 0, 0, 0, false
  for line in text:gmatch("[^\n]+") do
    local list = line:match("^%s+forward prefetch (.+)$")
    if list then
      local n = select(2, list:gsub('"[^"]*"', ""))
      if n > longest then longest = n end
    end
    local section, kind = line:match("^([%a_]+)%d+ %(%a+ item %d+: (%a+)%)")  -- step and eval sections
    if section then in_forward = kind == "forward" end
    local op = line:match("^  %S+%s+(%S+)")
    if in_forward and op == "all_gather" then
      alive = alive + 1
      if alive > most then most = alive end
    elseif in_forward and (op == "all_gather_wait" or op == "all_gather_drop") then
      alive = alive - 1
    end
  end
  return most, longest
end

local p = io.popen("ls tests/golden/*.schedule")
local n, limited = 0, 0
for path in p:lines() do
  local f = assert(io.open(path, "rb"))
  local most, longest = scan(f:read("a"))
  f:close()
  local limit = math.max(2, 1 + longest)
  n = n + 1
  if longest > 0 then limited = limited + 1 end
  if most > limit then
    check(false, string.format("%s: %d all-gathers alive in forward, at most %d allowed (longest forward prefetch list %d)",
      path, most, limit, longest))
  end
end
p:close()
check(n > 0, string.format("%d golden schedules keep at most two all-gathers alive in forward (%d with explicit "
  .. "forward prefetch: at most 1 + its longest list)", n, limited))

-- The scan itself: a hand-written forward with prefetching two ahead.
local most, longest = scan(table.concat({
  "  group 2 \"a\"", "    forward prefetch \"b\", \"c\"",
  "forward1 (step item 1: forward)",
  "  ag       all_gather             \"a\"", "  ag       all_gather             \"b\"",
  "  ag       all_gather             \"c\"", "  compute  all_gather_wait        \"a\"",
  "backward2 (step item 2: backward)", "  ag       all_gather             \"a\"",
}, "\n"))
check(most == 3 and longest == 2, string.format("scan of a 2-ahead prefetch: %d alive (want 3), longest list %d (want 2)", most, longest))

print(string.format("%d passed, %d failed", passed, failed))
os.exit(failed == 0 and 0 or 1)
