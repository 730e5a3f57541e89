-- How the generated C reads (emit_step.lua): every line at most WIDTH columns (calls and
-- initializer lists wrapped at their top-level commas, comments at spaces), numbers in
-- their shortest exact form, and the arena's buffers by name: one #define per buffer of
-- the memory plan, named after its name in the .layout, so that a reviewer can go from
-- a line of C to the .layout and the .schedule and back.
local M = {}

M.WIDTH = 100
M.CONT = "//    "  -- a comment's continuation lines (tests/generator/step_c.lua joins them)

-- The shortest decimal form that reads back as x (integers as they are).
function M.num(x)
  if math.type(x) == "integer" then return tostring(x) end
  for digits = 15, 17 do
    local s = string.format("%." .. digits .. "g", x)
    if tonumber(s) == x then return s end
  end
  return string.format("%.17g", x)
end

-- The characters of the C text s outside its string literals: an iterator of (i, ch).
local function code_chars(s)
  local i, quote = 0, false
  return function()
    while i < #s do
      i = i + 1
      local ch = s:sub(i, i)
      if quote then
        if ch == "\\" then i = i + 1 elseif ch == '"' then quote = false end
      elseif ch == '"' then quote = true
      else return i, ch end
    end
  end
end

-- The top-level pieces of a list "a, f(b, c), {d, e}, "x, y"" (commas outside brackets
-- and strings).
local function split(s)
  local out, depth, start = {}, 0, 1
  for i, ch in code_chars(s) do
    if ch == "(" or ch == "{" or ch == "[" then depth = depth + 1
    elseif ch == ")" or ch == "}" or ch == "]" then depth = depth - 1
    elseif ch == "," and depth == 0 then
      out[#out + 1] = s:sub(start, i - 1):match("^%s*(.-)%s*$")
      start = i + 1
    end
  end
  out[#out + 1] = s:sub(start):match("^%s*(.-)%s*$")
  return out
end

-- Where the first bracket of s opens and where it closes (outside strings), or nil.
local function first_list(s)
  local open, depth = nil, 0
  for i, ch in code_chars(s) do
    if ch == "(" or ch == "{" then
      open = open or i
      depth = depth + 1
    elseif ch == ")" or ch == "}" then
      depth = depth - 1
      if open and depth == 0 then return open, i end
    end
  end
end

-- Where a trailing `//` comment of the C line s starts (outside strings), or nil.
local function comment_at(s)
  for i, ch in code_chars(s) do
    if ch == "/" and s:sub(i + 1, i + 1) == "/" then return i end
  end
end

-- The lines of one C line `s` at indentation `ind`: as it is when it fits in WIDTH columns,
-- else its first call or initializer list wrapped at the commas (continuation lines 8
-- columns further in after a call, 1 after a leading brace, as in llm.c). A trailing
-- comment of a line too long goes on its own lines above the code (wrapped inside it, a
-- comment would end at the first line break and leave the rest as code).
function M.wrap(ind, s)
  if #ind + #s <= M.WIDTH then return { ind .. s } end
  local at = comment_at(s)
  if at then
    local lines, code = M.comment(ind, s:sub(at + 2):match("^%s*(.-)%s*$")), s:sub(1, at - 1)
    if code:find("%S") then
      for _, l in ipairs(M.wrap(ind, code:match("^(.-)%s*$"))) do lines[#lines + 1] = l end
    end
    return lines
  end
  local open, close = first_list(s)
  if not open or close - open < 2 then return { ind .. s } end
  local head, tail = s:sub(1, open), s:sub(close)
  local items = split(s:sub(open + 1, close - 1))
  local cont = ind .. (open == 1 and " " or "        ")
  for k, item in ipairs(items) do  -- an item too long for a continuation line: 4 columns in
    if #cont + #item + (k < #items and 1 or #tail) > M.WIDTH then cont = ind .. "    " end
  end
  -- the pieces, joined by one space: the items, one still too long cut at its | or +
  local pieces = {}
  for k, item in ipairs(items) do
    item = item .. (k < #items and "," or tail)
    local op = item:find(" | ", 1, true) and "|" or "+"
    if #cont + #item > M.WIDTH and item:find(" " .. op .. " ", 1, true) then
      local at = 1
      for bar in item:gmatch("() %" .. op .. " ") do
        pieces[#pieces + 1] = item:sub(at, bar - 1) .. " " .. op
        at = bar + 3
      end
      pieces[#pieces + 1] = item:sub(at)
    else
      pieces[#pieces + 1] = item
    end
  end
  local lines, cur = {}, ind .. head
  local fresh = true  -- nothing after the head or the continuation indent yet
  for k, piece in ipairs(pieces) do
    if k == 1 and #cur + #piece > M.WIDTH then  -- the head alone on its line
      lines[#lines + 1] = cur
      cur, fresh = cont .. piece, false
    elseif not fresh and #cur + 1 + #piece > M.WIDTH then
      lines[#lines + 1] = cur
      cur, fresh = cont .. piece, false
    else
      cur = cur .. (fresh and "" or " ") .. piece
      fresh = false
    end
  end
  lines[#lines + 1] = cur
  return lines
end

-- Writes the C line string.format(fmt, ...) into the buffer b at its indentation, wrapped.
function M.code(b, fmt, ...)
  local s = select("#", ...) > 0 and string.format(fmt, ...) or fmt
  for _, l in ipairs(M.wrap(string.rep(b.unit, b.depth), s)) do b.lines[#b.lines + 1] = l end
end

-- A comment `text` at indentation `ind`, wrapped at spaces (runs of spaces, the
-- .schedule's columns, shrink to two).
function M.comment(ind, text)
  text = text:gsub("   +", "  ")
  local lines, cur = {}, ind .. "// "
  local fresh = true
  for word, gap in text:gmatch("(%S+)(%s*)") do
    if not fresh and #cur + #word > M.WIDTH then
      lines[#lines + 1] = cur:gsub("%s+$", "")
      cur, fresh = ind .. M.CONT, true
    end
    cur = cur .. word .. (gap ~= "" and gap or "")
    fresh = false
  end
  lines[#lines + 1] = cur:gsub("%s+$", "")
  return lines
end

-- A long string cut at spaces into pieces of at most `width` characters (each piece but
-- the last keeps its trailing space): the adjacent literals C joins into one.
function M.string_lines(s, width)
  local out, cur = {}, ""
  for word, gap in s:gmatch("(%S+)(%s*)") do
    if cur ~= "" and #cur + #word > width then
      out[#out + 1] = cur
      cur = ""
    end
    cur = cur .. word .. gap
  end
  if cur ~= "" or #out == 0 then out[#out + 1] = cur end
  return out
end

-- ---------------------------------------------------------------------------- arena names

-- A C name from a buffer's name in the .layout: `"layers.0" all-gather output` becomes
-- layers_0_all_gather_output, the root group "" root.
local function base_name(name)
  local s = name:gsub('""', "root"):gsub("[^%w]+", "_"):gsub("^_+", ""):gsub("_+$", "")
  return s
end

-- base, or base__2, base__3, ... when taken: the first name `used` does not hold yet,
-- which it then holds.
local function unique(used, base)
  local name, k = base, 1
  while used[name] do
    k = k + 1
    name = base .. "__" .. k
  end
  used[name] = true
  return name
end

-- The #define of each parameter's byte offset `offset(p)` (none where it is nil) in a
-- buffer of its group, `prefix` and its name (P_ and layers.0.attention.wq.weight:
-- P_layers_0_attention_wq_weight): a map parameter -> name, and the lines.
function M.param_names(list, prefix, offset)
  local names, used, lines, w = {}, {}, {}, 0
  for _, p in ipairs(list) do
    if offset(p) then
      names[p] = unique(used, prefix .. base_name(p.fqn))
      w = math.max(w, #names[p])
    end
  end
  for _, p in ipairs(list) do
    if names[p] then
      lines[#lines + 1] = string.format("#define %-" .. math.min(w, 60) .. "s %9d", names[p], offset(p))
    end
  end
  return names, lines
end

-- The names of the buffers of one memory plan, `prefix` first: a map buffer -> name, and
-- the #define lines (with a comment, in the .layout's order). A name the .layout gives
-- several buffers (a group's unsharded parameters, gathered in forward and again in
-- backward) gets __2, __3, ... on its second, third, ... buffer.
-- `shared` (optional): the names of the step's persistent buffers, by their .layout name,
-- which the eval programs share (emit_step.lua check_persistent): not defined again.
function M.arena_names(mem, prefix, shared)
  local names, used, lines = {}, {}, {}
  local own = {}
  for _, bf in ipairs(mem.buffers) do
    if shared and bf.kind == "persistent" and shared[bf.name] then
      names[bf] = shared[bf.name]
    else
      own[#own + 1] = bf
    end
  end
  if #own < #mem.buffers then
    lines[1] = string.format("// (its %d persistent buffers are the step's, B_...)",
      #mem.buffers - #own)
  end
  for _, bf in ipairs(own) do
    names[bf] = unique(used, prefix .. base_name(bf.name))
  end
  local w = 0
  for _, bf in ipairs(own) do w = math.max(w, #names[bf]) end
  w = math.min(w, 56)
  for _, bf in ipairs(own) do
    local def = string.format("#define %-" .. w .. "s %9d", names[bf], bf.offset)
    local note = string.format("  // %d bytes, %s", bf.bytes, bf.kind)
    if #def + #note <= M.WIDTH then
      lines[#lines + 1] = def .. note
    else
      lines[#lines + 1] = string.format("// %d bytes, %s:", bf.bytes, bf.kind)
      lines[#lines + 1] = string.format("#define %s %d", names[bf], bf.offset)
    end
  end
  return names, lines
end

-- The runtime's enum names of a dtype and of an optimizer step's rows (rt_step.h).
M.DTYPE = { fp32 = "RT_F32", bf16 = "RT_BF16", fp16 = "RT_F16" }
M.ROWS = { unused = "RT_ROWS_UNUSED", final = "RT_ROWS_FINAL", looked_up = "RT_ROWS_LOOKED_UP" }

-- s as a C string literal.
function M.cstr(s) return '"' .. s:gsub('[\\"]', "\\%0") .. '"' end

-- Writes `.field =` and the string s into b as adjacent literals that fit in WIDTH columns.
function M.string_field(b, field, s)
  b:line(".%s =", field)
  b:indent()
  local width = M.WIDTH - 4 * b.depth - 3  -- the quotes and the comma
  for _, l in ipairs(M.string_lines(s, width)) do b:line("%s", M.cstr(l)) end
  b.lines[#b.lines] = b.lines[#b.lines] .. ","
  b:dedent()
end

-- Writes a comment into b, wrapped at WIDTH columns (M.comment).
function M.note(b, fmt, ...)
  local s = select("#", ...) > 0 and string.format(fmt, ...) or fmt
  local ind = string.rep(b.unit, b.depth)
  for _, l in ipairs(M.comment(ind, s)) do b.lines[#b.lines + 1] = l end
end

-- A shape as a C initializer list.
function M.shape_init(shape)
  local t = {}
  for i, d in ipairs(shape) do t[i] = tostring(d) end
  return "{" .. table.concat(t, ", ") .. "}"
end

return M
