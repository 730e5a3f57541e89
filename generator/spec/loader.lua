-- Loads a spec file: runs it in a sandbox with the nn/fsdp/models API and turns every
-- failure into a one-line spec error (never a traceback).
--
-- The sandbox makes a spec a pure build input, like a BUILD file: no os, io, debug,
-- package, load/loadfile/dofile/loadstring, string.dump, collectgarbage or
-- math.random; `require` gives nn, fsdp, models (and models.*) and the Lua modules of
-- the spec's own directory, each run in a sandbox of its own. Coroutines get the line
-- limit's hook too, and pcall, xpcall and coroutines cannot swallow the line limit or
-- the time budget. The same spec always plans the same way.
local errors = require("spec.errors")
local fsdp = require("spec.fsdp")
local nn = require("spec.nn")

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

local BASE = { "assert", "error", "ipairs", "next", "pairs", "rawequal", "rawget", "rawlen", "rawset", "select",
  "tonumber", "tostring", "type", "_VERSION" }

-- getmetatable/setmetatable see only the metatables specs made: the string metatable (the
-- real string library) and the generator's (modules, tensors) stay out of reach, so a spec
-- cannot change how the generator itself runs.
local spec_mts = setmetatable({}, { __mode = "k" })
local function sandbox_getmetatable(x)
  local mt = getmetatable(x)
  if mt ~= nil and spec_mts[mt] then return mt end
  return nil
end
local function sandbox_setmetatable(t, mt)
  if type(t) ~= "table" then errors.raise("setmetatable expects a table, got " .. type(t)) end
  local old = getmetatable(t)
  if old ~= nil and not spec_mts[old] then
    errors.raise("setmetatable: this table is fsdpgen's (a module, tensor or parameter); its metatable is not "
      .. "the spec's to change")
  end
  if mt ~= nil and type(mt) ~= "table" then errors.raise("setmetatable expects a table or nil as the metatable") end
  if mt ~= nil then spec_mts[mt] = true end
  return setmetatable(t, mt)
end
local LIBS = { string = { dump = true }, table = {}, math = { random = true, randomseed = true }, utf8 = {} }
local API = { nn = true, fsdp = true, models = true }
-- The generator's modules a spec knows by a bare name (generator/spec/).
local ROOM = { nn = "spec.nn", fsdp = "spec.fsdp" }

-- A copy of a library without the names in `drop`.
local function copy_lib(lib, drop)
  local t = {}
  for k, v in pairs(lib) do
    if not drop[k] then t[k] = v end
  end
  return t
end

-- pcall and friends that let the fatal errors (line limit, time budget) through.
local function rethrow_fatal(ok, ...)
  if not ok and errors.is_fatal((...)) then error((...), 0) end
  return ok, ...
end

local sandbox_coroutine = copy_lib(coroutine, {})
-- debug.sethook is per coroutine: a new coroutine gets the running one's hook.
sandbox_coroutine.create = function(f)
  if type(f) ~= "function" then errors.raise("coroutine.create expects a function, got " .. type(f)) end
  local co = coroutine.create(f)
  local hook, mask, count = debug.gethook()
  if hook then debug.sethook(co, hook, mask, count) end
  return co
end
sandbox_coroutine.resume = function(co, ...)
  if type(co) ~= "thread" then errors.raise("coroutine.resume expects a coroutine, got " .. type(co)) end
  return rethrow_fatal(coroutine.resume(co, ...))
end
sandbox_coroutine.wrap = function(f)
  local co = sandbox_coroutine.create(f)
  return function(...)
    local res = table.pack(coroutine.resume(co, ...))
    if res[1] then return table.unpack(res, 2, res.n) end
    error(res[2], 0)
  end
end

-- What the sandbox leaves out, named when a spec uses it (any other unknown global is nil,
-- as in Lua).
local REMOVED = { os = true, io = true, debug = true, package = true, load = true, loadfile = true, dofile = true,
  loadstring = true, collectgarbage = true }
local sandbox_mt = {
  __index = function(_, k)
    if REMOVED[k] then
      errors.raise(string.format("'%s' is not available in a spec: specs run in a sandbox without os, io, debug, "
        .. "package, load, loadfile, dofile and collectgarbage (docs/spec.md: the spec sandbox)", k))
    end
  end,
}
local math_mt = {
  __index = function(_, k)
    if k == "random" or k == "randomseed" then
      errors.raise("math." .. k .. " is not available in a spec: planning is deterministic (write the numbers out)")
    end
  end,
}

local new_env

-- `require` of a spec (or of a module it required) whose directory is `dir`.
local function make_require(dir, cache)
  return function(name)
    if type(name) ~= "string" then
      errors.raise("require expects a module name (a string), got " .. type(name))
    end
    local top = name:match("^[^.]+")
    if API[top] and (name == top or top == "models") then
      if name ~= top and not package.searchpath(name, package.path) then
        errors.raise(string.format("no module '%s' (a spec may require nn, fsdp, models or a module of its "
          .. "own directory)", name))
      end
      return require(ROOM[name] or name)
    end
    if not name:match("^[%a_][%w_]*$") then
      errors.raise(string.format("cannot require '%s': a spec may require nn, fsdp, models or a module of its "
        .. "own directory by its name (letters, digits, '_')", name))
    end
    local path = dir .. name .. ".lua"
    if cache[path] ~= nil then return cache[path] end
    local f = io.open(path, "r")
    if not f then
      errors.raise(string.format("no module '%s' (no %s; a spec may require nn, fsdp, models or a module of its "
        .. "own directory)", name, path))
    end
    f:close()
    local chunk, err = loadfile(path, "t", new_env(dir, cache))
    if not chunk then
      local ln, msg = tostring(err):match(":(%d+): (.*)$")
      local e = errors.new("syntax error: " .. (msg or tostring(err)), tonumber(ln))
      e.file = path
      error(e, 0)
    end
    errors.spec_sources["@" .. path] = path
    cache[path] = true -- a module that requires itself gets true, as Lua's require gives
    local res = chunk(name)
    if res == nil then res = true end
    cache[path] = res
    return res
  end
end

-- A fresh global table for a spec or one of its modules.
new_env = function(dir, cache)
  local env = {}
  for _, k in ipairs(BASE) do env[k] = _G[k] end
  for lib, drop in pairs(LIBS) do env[lib] = copy_lib(_G[lib], drop) end
  setmetatable(env.math, math_mt)
  env.coroutine = sandbox_coroutine
  env.getmetatable, env.setmetatable = sandbox_getmetatable, sandbox_setmetatable
  env.pcall = function(f, ...) return rethrow_fatal(pcall(f, ...)) end
  env.xpcall = function(f, h, ...) return rethrow_fatal(xpcall(f, h, ...)) end
  -- print goes to stderr: stdout is the command's output (events, counts).
  env.print = function(...)
    local t = table.pack(...)
    for i = 1, t.n do
      local ok, str = pcall(tostring, t[i])
      if not ok or type(str) ~= "string" then errors.raise("print: argument " .. i .. " has no string form") end
      t[i] = str
    end
    io.stderr:write(table.concat(t, "\t", 1, t.n), "\n")
  end
  env.require = make_require(dir, cache)
  env._G = env
  return setmetatable(env, sandbox_mt)
end

-- The spec file's path is checked before anything reads it: it reaches comments of the
-- generated C and build.ninja, and shell commands.
local function check_path(path)
  if path:find("[%c\\]") then
    error(errors.new("the spec file's path has a control character (a newline?) or a backslash; rename the file"), 0)
  end
end

function M.load(path)
  errors.spec_path = path
  errors.spec_sources = { ["@" .. path] = true }
  fsdp._reset()
  nn._reset()
  check_path(path)
  local f = io.open(path, "r")
  if not f then
    error(errors.new("cannot open spec file (does it exist?)"), 0)
  end
  -- A directory opens but cannot be read.
  local _, rerr = f:read(0)
  f:close()
  if rerr then
    error(errors.new("cannot read it (" .. rerr:gsub("^.-: ", "") .. "): give a spec file, e.g. examples/tiny.lua"), 0)
  end
  local dir = path:match("^(.*/)") or "./"
  local chunk, err = loadfile(path, "t", new_env(dir, {}))
  if not chunk then
    local ln, msg = tostring(err):match(":(%d+): (.*)$")
    error(errors.new("syntax error: " .. (msg or tostring(err)), tonumber(ln)), 0)
  end
  errors.track_spec_lines(true)
  local spec = M.protect(nil, chunk)
  -- rawget: a table of the spec's own may have an __index that raises
  local is_spec = type(spec) == "table" and rawget(spec, "_spec")
  if is_spec then spec.line = spec.line or errors.last_spec_line end
  if not is_spec then
    error(errors.new(spec == nil and "the spec returns nothing; it must end with `return fsdp.spec{ ... }`"
      or "the spec must return fsdp.spec{ ... }, got a " .. type(spec), errors.last_spec_line or M.last_line(path)), 0)
  end
  return spec
end

-- The last non-blank line of a file (where a missing `return fsdp.spec{...}` belongs).
function M.last_line(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local last, n = nil, 0
  for l in f:lines() do
    n = n + 1
    if l:find("%S") then last = n end
  end
  f:close()
  return last or math.max(n, 1)
end

return M
