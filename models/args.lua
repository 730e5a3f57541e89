-- Model argument tables: defaults, unknown-name suggestions, type and range checks.
local errors = require("spec.errors")

local M = {}
M.MAX_LAYERS = 512

-- `schema` maps name -> { default, kind } with kind "posint", "nonneg", "prob", "bool",
-- "number". Returns a filled copy of `given`.
function M.resolve(given, schema, what)
  given = given or {}
  if type(given) ~= "table" then errors.raise(what .. " expects a table of arguments") end
  local names = {}
  for k in pairs(schema) do names[#names + 1] = k end
  table.sort(names)
  errors.check_keys(given, names, what .. " argument")
  local out = {}
  for _, k in ipairs(names) do
    local spec = schema[k]
    local v = given[k]
    if v == nil then v = spec[1] end
    local kind = spec[2]
    local ok = true
    if v == nil then
      ok = spec.optional
    elseif kind == "posint" then
      ok = math.type(v) == "integer" and v >= 1
    elseif kind == "prob" then
      ok = type(v) == "number" and v >= 0 and v < 1
    elseif kind == "bool" then
      ok = type(v) == "boolean"
    elseif kind == "number" then
      ok = type(v) == "number" and v > 0
    end
    if not ok then
      local want = ({ posint = "a positive integer", prob = "a number in [0, 1)", bool = "true or false",
        number = "a positive number" })[kind]
      errors.raise(string.format("%s: %s must be %s, got %s", what, k, want, tostring(v)))
    end
    -- A runaway layer count is refused at once, not after planning for minutes (the
    -- deepest models have about 130 layers; 512 plan in about 20 s of CPU, under the 30 s budget).
    if k == "n_layers" and v > M.MAX_LAYERS then
      errors.raise(string.format("%s: n_layers must be at most %d, got %d", what, M.MAX_LAYERS, v))
    end
    out[k] = v
  end
  return out
end

return M
