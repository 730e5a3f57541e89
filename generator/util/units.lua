-- Byte counts as a person reads them: binary units (KiB = 1024 bytes, MiB = 1024^2,
-- GiB = 1024^3) with at most three digits, next to the exact bytes where a test or a
-- script needs them.
local M = {}

local UNITS = { { 2 ^ 30, "GiB" }, { 2 ^ 20, "MiB" }, { 2 ^ 10, "KiB" } }

-- "27.8 MiB", "386 KiB", "1.50 GiB", "0.98 GiB", "96 B".
function M.bytes(n)
  local a = math.abs(n)
  for _, u in ipairs(UNITS) do
    if a >= u[1] * 999.5 / 1024 then -- never four digits: 1000 KiB and up is 0.98 MiB
      local v = n / u[1]
      local fmt = math.abs(v) >= 99.95 and "%.0f %s" or math.abs(v) >= 9.995 and "%.1f %s" or "%.2f %s"
      return string.format(fmt, v, u[2])
    end
  end
  return string.format("%d B", n)
end

-- A signed change: "+184 KiB", "-1.50 MiB", "+0 B".
function M.delta(n)
  return (n < 0 and "-" or "+") .. M.bytes(math.abs(n))
end

-- "29146624 (27.8 MiB)".
function M.exact(n) return string.format("%d (%s)", n, M.bytes(n)) end

return M
