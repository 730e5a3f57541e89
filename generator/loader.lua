-- Loads a spec file: runs it with the nn/fsdp/models API available and turns every
-- failure into a one-line spec error (never a traceback).
local errors = require("errors")
local fsdp = require("fsdp")
local nn = require("nn")

local M = {}

-- Runs `fn(...)` so that any error becomes a spec error attributed to a spec line.
-- `fallback_line` is used when no spec frame is on the stack (e.g. while planning).
function M.protect(fallback_line, fn, ...)
  local res = table.pack(xpcall(fn, errors.handler, ...))
  if res[1] then return table.unpack(res, 2, res.n) end
  local e = res[2]
  if not e.line and not e.internal then e.line = fallback_line end
  error(e, 0)
end

function M.load(path)
  errors.spec_path = path
  fsdp._reset()
  nn._reset()
  local f = io.open(path, "r")
  if not f then
    error(errors.new("cannot open spec file (does it exist?)"), 0)
  end
  f:close()
  local chunk, err = loadfile(path, "t")
  if not chunk then
    local ln, msg = tostring(err):match(":(%d+): (.*)$")
    error(errors.new("syntax error: " .. (msg or tostring(err)), tonumber(ln)), 0)
  end
  errors.track_spec_lines(true)
  local spec = M.protect(nil, chunk)
  if type(spec) == "table" and spec._spec then spec.line = spec.line or errors.last_spec_line end
  if type(spec) ~= "table" or not spec._spec then
    error(errors.new(spec == nil and "the spec returns nothing; it must end with `return fsdp.spec{ ... }`"
      or "the spec must return fsdp.spec{ ... }, got a " .. type(spec)), 0)
  end
  return spec
end

return M
