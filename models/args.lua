-- Model argument tables: defaults, unknown-name suggestions, type and range checks.
local errors = require("errors")

local M = {}

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
    -- A runaway layer count is refused at once, not after building layers up to the
    -- parameter limit (every block makes at least 4 parameters).
    if k == "n_layers" then
      local most = require("nn").MAX_PARAMS // 4
      if v > most then
        errors.raise(string.format("%s: n_layers must be at most %d (a spec makes at most %d parameters), got %d",
          what, most, require("nn").MAX_PARAMS, v))
      end
    end
    out[k] = v
  end
  return out
end

return M
