-- The one-line spec changes a sharding review is made of, on three specs (the bench's Llama
-- 1B, the default example and a 4-block Llama): each kind of change as one line inserted
-- after (or replacing) one line of the spec. tests/generator/schedule_diff.lua plans
-- every pair, counts the `.schedule` lines that change and checks `fsdpgen diff` on them;
-- `lua5.4 tests/generator/schedule_diff.lua --table [--fsdpgen PATH]` prints the counts
-- as the table of docs/reviewing.md.
local M = {}

M.specs = {
  { id = "llama_1b", path = "bench/specs/llama_1b.lua", world = 1 },
  { id = "gpt_bytes", path = "examples/gpt_bytes.lua", world = 4 },
  { id = "llama_4l", path = "tests/specs/review/llama_4l.lua", world = 4 },
}

-- The spec lines the changes are anchored at: setters go just before the spec's return
-- (after every fully_shard and the example's own prefetch lists), new fully_shard and
-- checkpoint calls just before the loop that shards the blocks, option changes replace
-- the loop's fully_shard line.
local RET = "return fsdp.spec{"
local LOOP = "for _, layer in ipairs(model.layers) do"
local SHARD = {
  llama_1b = "  fsdp.fully_shard(layer, { mp_policy = mp })",
  gpt_bytes = "  fsdp.fully_shard(layer, { reshard_after_forward = true })",
  llama_4l = "  fsdp.fully_shard(layer)",
}
-- The loop's fully_shard line with other options for model.layers[2] ("layers.1").
local REST = { llama_1b = "{ mp_policy = mp }", gpt_bytes = "{ reshard_after_forward = true }", llama_4l = "nil" }
local function shard_line(s, opts)
  return { replace = SHARD[s],
    line = string.format("  fsdp.fully_shard(layer, layer == model.layers[2] and { %s } or %s)", opts, REST[s]) }
end

-- kind, what it is, and per spec: { after = anchor, line = inserted } (or before), or
-- { replace = line, line = new line }, or `na` with the reason.
M.kinds = {
  { kind = "raf_false", what = "reshard_after_forward true -> false on one block",
    edit = function() return { before = RET, line = "model.layers[2]:set_reshard_after_forward(false)" } end },
  { kind = "raf_true", what = "reshard_after_forward false -> true on the root",
    edit = function() return { before = RET, line = "model:set_reshard_after_forward(true, { recurse = false })" } end },
  { kind = "raf_int", what = "reshard_after_forward true -> 2 on one block",
    edit = function(s)
      if s == "llama_1b" then return { na = "world size 1: 1 is its only divisor, and means false" } end
      return shard_line(s, "reshard_after_forward = 2")
    end },
  { kind = "fwd_prefetch", what = "a forward prefetch",
    edit = function(s)
      if s == "gpt_bytes" then -- every block already prefetches the next one: two ahead
        return { before = RET, line = "model.layers[2]:set_modules_to_forward_prefetch({ model.layers[3], model.layers[4] })" }
      end
      return { before = RET, line = "model.layers[2]:set_modules_to_forward_prefetch({ model.layers[3] })" }
    end },
  { kind = "bwd_prefetch", what = "a backward prefetch",
    edit = function()
      return { before = RET, line = "model.layers[4]:set_modules_to_backward_prefetch({ model.layers[3], model.layers[2] })" }
    end },
  { kind = "split", what = "a group split into two",
    edit = function(s)
      return { before = LOOP, line = "fsdp.fully_shard(model.layers[2].feed_forward" .. (s == "llama_1b" and ", { mp_policy = mp })" or ")") }
    end },
  { kind = "checkpoint", what = "activation checkpointing on one block",
    edit = function() return { before = LOOP, line = 'require("nn").checkpoint_module(model.layers[2])' } end },
  { kind = "freeze", what = "one block's attention frozen",
    edit = function() return { before = RET, line = "model.layers[2].attention:requires_grad_(false)" } end },
  { kind = "mixed_precision", what = "mixed precision on one group",
    edit = function(s)
      if s == "llama_1b" then -- every group is bf16 already: one in fp32
        return shard_line(s, 'mp_policy = fsdp.MixedPrecisionPolicy{ param_dtype = "fp32" }')
      end
      return shard_line(s, (s == "gpt_bytes" and "reshard_after_forward = true, " or "")
        .. 'mp_policy = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", output_dtype = "fp32" }')
    end },
}

-- Plain find (no patterns); the anchor must occur exactly once as a whole line.
local function whole_line(text, line)
  local at, n, from = nil, 0, 1
  while true do
    local i, j = text:find(line, from, true)
    if not i then break end
    local before = i == 1 or text:sub(i - 1, i - 1) == "\n"
    local after = text:sub(j + 1, j + 1) == "\n"
    if before and after then at, n = i, n + 1 end
    from = j + 1
  end
  return n == 1 and at or nil, n
end

-- The spec text with the change applied, or nil and why.
function M.apply(text, e)
  local anchor = e.after or e.before or e.replace
  local at, n = whole_line(text, anchor)
  if not at then return nil, string.format("anchor line found %d times: %s", n, anchor) end
  local stop = at + #anchor
  if e.after then return text:sub(1, stop) .. e.line .. "\n" .. text:sub(stop + 1) end
  if e.before then return text:sub(1, at - 1) .. e.line .. "\n" .. text:sub(at) end
  return text:sub(1, at - 1) .. e.line .. text:sub(stop)
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

local function sh(cmd)
  local h = io.popen(cmd .. " 2>&1")
  local out = h:read("a")
  return h:close(), out
end

M.read, M.write, M.sh = read, write, sh

-- Writes the base spec and each change of it under dir/<spec>/<kind>/ (same file name, so
-- the two schedules' headers agree) and plans them with `fsdpgen` (a command). Calls
-- row(spec, kind, r) for each pair: r.na (why the change does not apply), or r.old and
-- r.new (spec paths), r.old_out and r.new_out (plan output dirs), r.err.
function M.each_pair(fsdpgen, dir, row)
  for _, sp in ipairs(M.specs) do
    local text = assert(read(sp.path), sp.path)
    local file = sp.path:match("[^/]+$")
    local base = dir .. "/" .. sp.id .. "/base"
    os.execute("mkdir -p " .. base .. "/out")
    write(base .. "/" .. file, text)
    local ok, out = sh(fsdpgen .. " plan " .. base .. "/" .. file .. " -o " .. base .. "/out")
    for _, k in ipairs(M.kinds) do
      local e = k.edit(sp.id)
      local r = { old = base .. "/" .. file, old_out = base .. "/out" }
      if e.na then
        r.na = e.na
      elseif not ok then
        r.err = "base plan failed: " .. out
      else
        local changed, why = M.apply(text, e)
        if not changed then
          r.err = why
        else
          local d = dir .. "/" .. sp.id .. "/" .. k.kind
          os.execute("mkdir -p " .. d .. "/out")
          write(d .. "/" .. file, changed)
          r.new, r.new_out = d .. "/" .. file, d .. "/out"
          local ok2, out2 = sh(fsdpgen .. " plan " .. r.new .. " -o " .. r.new_out)
          if not ok2 then r.err = "plan failed: " .. out2 end
        end
      end
      row(sp, k, r)
    end
  end
end

-- Lines added plus lines removed between two files.
function M.changed_lines(a, b)
  local _, out = sh("diff " .. a .. " " .. b)
  local n = 0
  for _ in out:gmatch("\n[<>]") do n = n + 1 end
  if out:match("^[<>]") then n = n + 1 end
  return n
end

return M
