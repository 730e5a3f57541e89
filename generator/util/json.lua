-- JSON text of Lua values, for the files and outputs the generator writes (config.json's
-- fields for --save-hf, `fsdpgen simulate --json`): object keys sorted, so the text is the
-- same every time; integers as integers; strings escaped. A caller picks how floats are
-- written, the separators, and whether an empty table is [] or {}.
local M = {}

M.null = {}  -- JSON null where a Lua nil would mean "none given"

local function quote(s)
  return '"' .. s:gsub('[%c"\\]', function(c) return string.format("\\u%04x", c:byte()) end) .. '"'
end

-- opts: float (number -> text), sep (between items), colon (between key and value),
-- empty ("[]" or "{}": an empty table).
function M.encode(v, opts)
  if v == nil or v == M.null then return "null" end
  local t = type(v)
  if t == "boolean" then return tostring(v) end
  if t == "number" then return math.type(v) == "integer" and tostring(v) or opts.float(v) end
  if t == "string" then return quote(v) end
  if next(v) == nil then return opts.empty end
  local parts = {}
  if #v > 0 then
    for i, x in ipairs(v) do parts[i] = M.encode(x, opts) end
    return "[" .. table.concat(parts, opts.sep) .. "]"
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do parts[#parts + 1] = quote(k) .. opts.colon .. M.encode(v[k], opts) end
  return "{" .. table.concat(parts, opts.sep) .. "}"
end

return M
