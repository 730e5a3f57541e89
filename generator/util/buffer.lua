-- One output buffer for every emitter: line/indent/dedent, and files written only when
-- their content changes (so regenerating an unchanged spec rewrites nothing).
local M = {}
M.__index = M

function M.new(indent_str)
  return setmetatable({ lines = {}, depth = 0, unit = indent_str or "  " }, M)
end

function M:line(fmt, ...)
  local s = select("#", ...) > 0 and string.format(fmt, ...) or fmt
  if s == "" then
    self.lines[#self.lines + 1] = ""
  else
    s = string.rep(self.unit, self.depth) .. s
    self.lines[#self.lines + 1] = (s:gsub("%s+$", ""))
  end
end

function M:indent() self.depth = self.depth + 1 end
function M:dedent() self.depth = math.max(0, self.depth - 1) end

function M:text() return table.concat(self.lines, "\n") .. "\n" end

local function mkdir_p(dir)
  return os.execute("mkdir -p '" .. dir:gsub("'", "'\\''") .. "' 2>/dev/null")
end

-- The whole file at path (the templates, a file's old text), or nil and io.open's message.
function M.read(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local s = f:read("a")
  f:close()
  return s
end

-- Returns path, changed; or nil, message.
function M.write_if_changed(path, text)
  if M.read(path) == text then return path, false end
  local dir = path:match("^(.*)/[^/]+$")
  if dir and not mkdir_p(dir) then return nil, "cannot create directory " .. dir end
  local tmp = path .. ".tmp"
  local f = io.open(tmp, "wb")
  if not f then return nil, "cannot write " .. tmp end
  f:write(text)
  f:close()
  local ok, err = os.rename(tmp, path)
  if not ok then
    os.remove(tmp)
    return nil, "cannot write " .. path .. ": " .. tostring(err)
  end
  return path, true
end

return M
