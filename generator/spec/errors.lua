-- Spec errors: one line `FILE:LINE: error: what is wrong (and what is allowed)`, never a
-- Lua traceback. The line is the innermost stack frame that belongs to the spec file, so
-- an error raised deep inside a model or the planner still points at the spec line that
-- caused it.
local M = {}

M.spec_path = nil -- set by the loader; frames from this chunk name the error's line
-- Chunk sources ("@path") whose lines count as spec lines: the spec (true) and the modules
-- it required from its directory (their path).
M.spec_sources = {}

local SpecError = {}
SpecError.__index = SpecError
SpecError.__tostring = function(e) return (e.line and ("line " .. e.line .. ": ") or "") .. tostring(e.msg) end
M._SpecError = SpecError

-- The innermost spec frame on the stack; a tail call (`return fsdp.spec{...}`,
-- `return self.down(x)`) erases its caller's frame, so the last spec line the line hook
-- saw running stands in for it.
-- With `any`, a frame of a module the spec required counts too, and its path is returned
-- as well (an error raised there names that file).
local function spec_line(level, any)
  if not M.spec_path then return nil end
  local lvl = level or 2
  while true do
    local info = debug.getinfo(lvl, "Sl")
    if not info then return M.last_spec_line end
    local src = M.spec_sources[info.source]
    if src and (src == true or any) and info.currentline and info.currentline > 0 then
      return info.currentline, src ~= true and src or nil
    end
    lvl = lvl + 1
  end
end

M.last_spec_line = nil

-- Spec lines one spec may run. Real specs run far fewer (under 20,000; a loop making
-- 10,000 layers, half the parameter limit, runs 20,000); more is an endless loop, e.g. a
-- forward that tail-calls itself (`return self:forward(x)`), stopped within a second. Each
-- spec line may run many of the generator's (a module list's lookup), every one through
-- the line hook: a loop of lookups took 5 s of CPU to reach 500,000, 1.7 s to reach this.
M.MAX_SPEC_LINES = 200000

-- Seconds of CPU time one planning may take (`fsdpgen` arms it around loading, planning and
-- emitting): a guard against any loop the line limit cannot see (planning a runaway size,
-- spec code the line hook is off for). Real specs plan in under a second. It counts the
-- process's CPU time: a sandboxed spec cannot block, so a hang burns CPU, and a budget of
-- wall-clock time would fail good specs on a loaded machine.
M.PLAN_SECONDS = 30
-- And a wall-clock backstop, generous so that load on the machine never trips it.
M.WALL_FACTOR = 10
local deadline, wall_deadline, armed = nil, nil, nil
local COUNT = 1000000 -- instructions between two looks at the clock

-- Errors that end the spec however it tries to catch them (the line limit, the time
-- budget): the sandbox's pcall, xpcall and coroutine.resume raise them again.
function M.is_fatal(e) return M.is_spec_error(e) and e.fatal == true end

local function fatal(msg, line)
  debug.sethook()
  error(setmetatable({ msg = msg, line = line, fatal = true }, M._SpecError), 0)
end

local function check_clock()
  if deadline and os.clock() > deadline then
    fatal(string.format("planning took more than %g seconds (a runaway size or an endless loop?)",
      armed), M.last_spec_line)
  end
  if wall_deadline and os.time() > wall_deadline then
    fatal(string.format("planning took more than %g seconds of wall-clock time (a runaway size or an endless "
      .. "loop?)", armed * M.WALL_FACTOR), M.last_spec_line)
  end
end

-- Arms (seconds) or disarms (nil) the planning time budget.
function M.arm_budget(seconds)
  deadline, armed = seconds and (os.clock() + seconds) or nil, seconds
  wall_deadline = seconds and (os.time() + math.ceil(seconds * M.WALL_FACTOR)) or nil
  if deadline then debug.sethook(function() check_clock() end, "", COUNT) else debug.sethook() end
end

-- While spec code runs (loading and tracing), remembers the last spec line executed and
-- stops a spec that runs more than MAX_SPEC_LINES lines. Turning it off keeps only the
-- time budget, when one is armed.
function M.track_spec_lines(on)
  if not on then
    if deadline then debug.sethook(function() check_clock() end, "", COUNT) else debug.sethook() end
    return
  end
  M.last_spec_line = nil
  local lines = 0
  -- Whether each running function is the spec's (the spec file or a module it required),
  -- looked up once per function ("f" is the cheapest getinfo: this hook runs on every
  -- line of the generator while it is on).
  local is_spec = setmetatable({}, { __mode = "k" })
  local ticks = 0
  debug.sethook(function(event, line)
    if event == "count" then return check_clock() end
    -- A line may run long inside one C call (a gsub over a long string), where the count
    -- hook does not fire: look at the clock every 16 lines too.
    ticks = ticks + 1
    if ticks & 15 == 0 and deadline then check_clock() end
    local f = debug.getinfo(2, "f").func
    local spec = is_spec[f]
    if spec == nil then
      spec = M.spec_sources[debug.getinfo(f, "S").source] or false
      is_spec[f] = spec
    end
    if spec then
      if spec == true then M.last_spec_line = line end
      lines = lines + 1
      if lines > M.MAX_SPEC_LINES then
        fatal(string.format("the spec ran %d lines without finishing (an endless loop, or a forward "
          .. "that calls itself?)", M.MAX_SPEC_LINES), M.last_spec_line or line)
      end
    end
  end, "l", deadline and COUNT or 0)
end

function M.new(msg, line)
  return setmetatable({ msg = msg, line = line }, SpecError)
end

-- Raises a spec error. `line` may be given explicitly (e.g. a location remembered when
-- a module was created); otherwise the innermost spec frame on the stack is used.
function M.raise(msg, line)
  local file
  if not line then line, file = spec_line(3, true) end
  error(setmetatable({ msg = msg, line = line, file = file }, SpecError), 0)
end

function M.is_spec_error(e)
  return getmetatable(e) == SpecError
end

-- The spec line currently executing (for remembering where a module or call was made).
function M.current_line()
  return spec_line(3)
end

-- Message handler for xpcall. Spec errors stay as they are; a Lua error raised in the
-- spec file itself (`nil + 1` in a custom forward) becomes a spec error at that line; any
-- other Lua error is a bug of fsdpgen, reported as internal (with the spec line it was
-- working on, and a traceback for FSDPGEN_DEBUG), never blamed on the spec.
function M.handler(e)
  if M.is_spec_error(e) then return e end
  local msg = tostring(e)
  local file, ln, rest = msg:match("^(.-):(%d+): (.*)$")
  -- Deep recursion in spec code overflows the stack wherever the next call happens (the
  -- line hook, the generator): the spec's fault, at the last spec line that ran.
  if msg:find("stack overflow", 1, true) then
    return setmetatable({ msg = "stack overflow (a function that calls itself without end?)",
      line = M.last_spec_line or spec_line(3) }, SpecError)
  end
  local src = file and M.spec_sources["@" .. file]
  if src then
    return setmetatable({ msg = rest, line = tonumber(ln), file = src ~= true and file or nil },
      SpecError)
  end
  -- The spec's own error() without a position (error(x, 0), or a value that is not a
  -- string): a C function (error) raised it, called by the spec. (Level 1 is this handler.)
  local raiser, caller = debug.getinfo(2, "S"), debug.getinfo(3, "Sl")
  src = caller and M.spec_sources[caller.source]
  if raiser and raiser.what == "C" and src then
    local what = type(e) == "string" and e or ("error() with a " .. type(e) .. " value")
    return setmetatable({ msg = what, line = caller.currentline, file = src ~= true and caller.source:sub(2) or nil },
      SpecError)
  end
  return setmetatable({ msg = msg, line = spec_line(3), internal = debug.traceback(msg, 2) }, SpecError)
end

-- One line, whatever the message holds (a spec's error() may pass newlines).
function M.format(e, path)
  -- A path with a newline (refused by the loader) must not break the line either.
  path = tostring(e.file or path):gsub("%c", function(c) return c == "\n" and "\\n" or string.format("\\x%02x", c:byte()) end)
  -- No addresses ("got table: 0x55..."): the same spec gives the same message every run.
  local msg = tostring(e.msg):gsub("[\r\n]+", " "):gsub("(%a+): 0x%x+", "a %1")
  if e.line then
    return string.format("%s:%d: error: %s", path, e.line, msg)
  end
  return string.format("%s: error: %s", path, msg)
end

-- Closest valid name, for "unknown option 'reshard_after_forwrd' (did you mean ...)".
local function distance(a, b)
  local la, lb = #a, #b
  local prev = {}
  for j = 0, lb do prev[j] = j end
  for i = 1, la do
    local cur = { [0] = i }
    for j = 1, lb do
      local cost = a:sub(i, i) == b:sub(j, j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[lb]
end

function M.closest(name, candidates)
  local best, bestd
  for _, c in ipairs(candidates) do
    local d = distance(name, c)
    if not bestd or d < bestd then best, bestd = c, d end
  end
  if best and bestd <= math.max(2, #name // 3) then return best end
  for _, c in ipairs(candidates) do
    if #name >= 3 and (c:sub(1, #name) == name or name:sub(1, #c) == c) then return c end
  end
  return nil
end

-- Checks that every key of `opts` is one of `allowed` (a sorted list of names).
function M.check_keys(opts, allowed, what, line)
  local set = {}
  for _, k in ipairs(allowed) do set[k] = true end
  local bad = {}
  for k in pairs(opts) do
    if type(k) ~= "string" or not set[k] then bad[#bad + 1] = tostring(k) end
  end
  table.sort(bad)
  if #bad > 0 then
    local k = bad[1]
    local hint = M.closest(k, allowed)
    local msg = string.format("unknown %s '%s'", what, k)
    if hint then msg = msg .. string.format(" (did you mean '%s'?)", hint) end
    msg = msg .. "; allowed: " .. table.concat(allowed, ", ")
    M.raise(msg, line)
  end
end

return M
