-- Unit tests of the memory plan's placements (generator/memory/memory.lua): on random
-- buffer sets, first fit (M.place) gives the offsets, peak and arena of a plain first fit
-- that scans every buffer still alive, and no two buffers alive at one step overlap;
-- largest first (M.place_by_size) leaves the persistent buffers where first fit put them,
-- overlaps nothing either, and peaks lower on some sets (and on a hole first fit cannot
-- use, by hand).
-- Run from the repository root: lua5.4 tests/generator/unit_memory_place.lua
package.path = "generator/?.lua;./?.lua;" .. package.path
local memory = require("memory.memory")
local checks = require("tests.generator.step_c")
local check = checks.check

-- The reference: for each buffer, the buffers placed before it that are alive at its
-- first step, by offset; it goes into the first gap between them that holds it.
local function naive_place(order)
  local placed, peak, arena = {}, 0, 0
  for _, b in ipairs(order) do
    local live = {}
    for _, l in ipairs(placed) do
      if l.last >= b.first then live[#live + 1] = l end
    end
    table.sort(live, function(x, y) return x.offset < y.offset end)
    local off = 0
    for _, l in ipairs(live) do
      if off + b.bytes <= l.offset then break end
      off = math.max(off, l.offset + l.bytes)
    end
    b.offset = off
    placed[#placed + 1] = b
    peak = math.max(peak, off + b.size)
    arena = math.max(arena, off + b.bytes)
  end
  return peak, arena
end

-- n buffers over `steps` steps, sorted by first step as M.plan sorts them.
local function random_buffers(n, steps, max_units)
  local bufs = {}
  for i = 1, n do
    local first = math.random(0, steps)
    local bytes = 256 * math.random(1, max_units)
    bufs[i] = { first = first, last = math.random(first, math.min(steps + 1, first + math.random(0, steps))),
      bytes = bytes, size = bytes - math.random(0, 255), seq = i }
  end
  table.sort(bufs, function(a, b)
    if a.first ~= b.first then return a.first < b.first end
    return a.seq < b.seq
  end)
  return bufs
end

local function copy(bufs)
  local out = {}
  for i, b in ipairs(bufs) do
    out[i] = { first = b.first, last = b.last, bytes = b.bytes, size = b.size }
  end
  return out
end

local function overlaps(bufs)
  for i = 1, #bufs do
    for j = i + 1, #bufs do
      local a, b = bufs[i], bufs[j]
      if a.first <= b.last and b.first <= a.last and a.offset < b.offset + b.bytes
        and b.offset < a.offset + a.bytes then
        return true
      end
    end
  end
  return false
end

math.randomseed(7)
for trial = 1, 60 do
  local n = trial <= 20 and math.random(1, 12) or math.random(50, 300)
  local steps = math.random(1, trial <= 40 and 10 or 200)
  local bufs = random_buffers(n, steps, trial % 3 == 0 and 1 or 64)
  local ref = copy(bufs)
  local peak, arena = memory.place(bufs)
  local rpeak, rarena = naive_place(ref)
  local same = peak == rpeak and arena == rarena
  for i = 1, #bufs do same = same and bufs[i].offset == ref[i].offset end
  check(same and not overlaps(bufs), string.format(
    "trial %d: %d buffers over %d steps: offsets, peak %d and arena %d as the plain first fit's, no overlap",
    trial, n, steps, peak, arena))
end

-- A hole left by a freed buffer is reused by the first buffer that fits it, and the
-- buffers on either side of a freed one merge with it into one hole.
local function B(first, last, units) return { first = first, last = last, bytes = 256 * units, size = 256 * units } end
local bufs = { B(0, 9, 1), B(0, 1, 2), B(0, 1, 1), B(0, 9, 1), B(2, 9, 4), B(2, 9, 3) }
memory.place(bufs)
local offs = {}
for i, b in ipairs(bufs) do offs[i] = b.offset // 256 end
check(table.concat(offs, ",") == "0,1,3,4,5,1",
  "buffers ending at step 1 free units 1..3 as one hole: 4 units go on top, 3 into the hole (got "
  .. table.concat(offs, ",") .. ")")

-- Largest first, after first fit: persistent buffers (step 0 to the end) stay, no overlap,
-- the peak at least the most live at once and the arena's top byte.
local function most_live(bufs)
  local most = 0
  for _, a in ipairs(bufs) do
    local live = 0
    for _, b in ipairs(bufs) do
      if b.first <= a.first and a.first <= b.last then live = live + b.bytes end
    end
    most = math.max(most, live)
  end
  return most
end
local better = 0
for trial = 1, 40 do
  local bufs = random_buffers(math.random(5, 200), math.random(2, 60), trial % 2 == 0 and 1 or 64)
  local steps = 0
  for _, b in ipairs(bufs) do steps = math.max(steps, b.last) end
  for i = 1, math.random(0, 4) do
    bufs[#bufs + 1] = { first = 0, last = steps, bytes = 256 * i, size = 256 * i, kind = "persistent" }
  end
  table.sort(bufs, function(a, b)
    if a.first ~= b.first then return a.first < b.first end
    return (a.kind and 0 or 1) < (b.kind and 0 or 1)
  end)
  local fpeak = memory.place(bufs)
  local kept = {}
  for i, b in ipairs(bufs) do kept[i] = b.kind and b.offset end
  local peak, arena = memory.place_by_size(bufs)
  local stay, top = true, 0
  for i, b in ipairs(bufs) do
    stay = stay and (not b.kind or b.offset == kept[i])
    top = math.max(top, b.offset + b.bytes)
  end
  local most = most_live(bufs)
  if peak < fpeak then better = better + 1 end
  check(stay and not overlaps(bufs) and arena == top and peak <= arena and arena >= most, string.format(
    "largest first, trial %d: %d buffers, persistent ones unmoved, no overlap, arena %d (most live %d)",
    trial, #bufs, arena, most))
end
check(better >= 5, string.format("largest first has the lower peak in %d of 40 random sets", better))

-- First fit's gap: a unit freed at step 1 leaves a hole that the 2 units from step 2 on
-- do not fit (4 units in all); largest first puts those 2 at the bottom, the first unit
-- under them and the other above (3 units).
bufs = { B(0, 1, 1), B(0, 3, 1), B(2, 3, 2) }
check(memory.place(bufs) == 256 * 4 and memory.place_by_size(bufs) == 256 * 3,
  "a hole first fit cannot use: 4 units by first fit, 3 largest first")

checks.finish()
