-- `fsdpgen show`: the simulated step as one SVG picture. One lane per stream (compute, the
-- all-gather copy-in and collective, reduce-scatter, all-reduce, optimizer); each schedule
-- line is a box as wide as its simulated time, coloured by the FSDP group it belongs to
-- (the same colour on every lane); compute's waits are red, FSDP events are ticks above
-- compute.
-- The whole step comes first, then one repeated block's forward and backward zoomed in,
-- then the planned memory in use over the step with its peak and the largest buffers.
-- Written by the generator: no script, no external file.
local units = require("util.units")
local arena_layout = require("memory.arena_layout")
local schedule = require("emit.schedule")

local M = {}

local W, LEFT, RIGHT = 1400, 150, 40
local PW = W - LEFT - RIGHT
local LANE_H, LANE_GAP = 22, 6
local LANES = {
  { id = "compute", label = "compute" },
  { id = "ag_copy", label = "all-gather copy-in" },
  { id = "ag", label = "all-gather" },
  { id = "rs", label = "reduce-scatter" },
  { id = "ar", label = "all-reduce" },
  { id = "opt", label = "optimizer" },
}
-- Tableau's 10 colours: distinct, and readable with black text.
local PALETTE = { "#4e79a7", "#f28e2b", "#59a14f", "#edc948", "#b07aa1", "#76b7b2", "#ff9da7",
  "#9c755f", "#86bcb6", "#d4a6c8" }
local ROOT_COLOUR, WAIT_COLOUR = "#bab0ac", "#e15759"

local function esc(s)
  return (tostring(s):gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;"):gsub('"', "&quot;"))
end

local function ms(s) return string.format("%.3f ms", s * 1e3) end

-- Appends one formatted element to out.
local function put(out, fmt, ...) out[#out + 1] = string.format(fmt, ...) end

-- The group a line belongs to: its own, or the group whose module holds its op.
local function owner_finder(plan)
  local prefixes = {}
  for _, g in ipairs(plan.groups) do
    for name in (g.name .. ", "):gmatch("(.-), ") do
      if name ~= "" then prefixes[#prefixes + 1] = { name = name, g = g } end
    end
  end
  table.sort(prefixes, function(a, b) return #a.name > #b.name end)
  local root
  for _, g in ipairs(plan.groups) do
    if g.name == "" or g.state.is_root then root = root or g end
  end
  return function(st)
    if st.group then return st.group end
    local label = st.node and (st.node.label or "") or ""
    for _, p in ipairs(prefixes) do
      if label == p.name or label:sub(1, #p.name + 1) == p.name .. "." then return p.g end
    end
    return root
  end
end

local function colour(g)
  if not g or g.state.is_root then return ROOT_COLOUR end
  return PALETTE[(g.index - 1) % #PALETTE + 1]
end

-- Which lanes the step uses (compute always).
local function used_lanes(tl)
  local used = { compute = true }
  for _, rec in ipairs(tl.lines) do
    for _, b in ipairs(rec.boxes) do
      used[(b.lane == "ag" and b.part == "copy-in") and "ag_copy" or b.lane] = true
    end
  end
  local out = {}
  for _, l in ipairs(LANES) do
    if used[l.id] then out[#out + 1] = l end
  end
  return out
end

-- Draws the lanes of the time window [t0, t1] at y; returns the y below.
local function lanes(out, plan, tl, owner, y, t0, t1, id, title)
  local scale = PW / math.max(t1 - t0, 1e-12)
  local function x(t) return LEFT + (t - t0) * scale end
  local ls = used_lanes(tl)
  put(out, '<g id="%s" class="panel">', id)
  put(out, '<text x="%d" y="%d" class="h2">%s</text>', LEFT, y + 14, esc(title))
  y = y + 30
  local lane_y = {}
  for i, l in ipairs(ls) do
    local ly = y + 12 + (i - 1) * (LANE_H + LANE_GAP)
    lane_y[l.id] = ly
    put(out, '<g class="lane" data-lane="%s"><rect x="%d" y="%d" width="%d" height="%d" '
      .. 'class="lane-bg"/><text x="%d" y="%d" class="lane-label">%s</text></g>', l.id, LEFT, ly,
      PW, LANE_H, LEFT - 8, ly + 15, esc(l.label))
  end
  local cy = lane_y.compute
  for i, rec in ipairs(tl.lines) do
    local st = rec.st
    local g = owner(st)
    local name = schedule.step_name(st)
    if rec.wait > 0 then
      local we = rec.boxes[1] and rec.boxes[1].s or rec.issue
      local ws = we - rec.wait
      if we >= t0 and ws <= t1 then
        local what = rec.wait_on == "ag" and "all-gather" or rec.wait_on == "ar" and "all-reduce"
          or "reduce-scatter"
        local wx = x(math.max(ws, t0))
        put(out, '<rect class="wait" data-step="%d" x="%.2f" y="%d" width="%.2f" height="%d">'
          .. '<title>%s: compute waits %s for the %s</title></rect>', i, wx, cy - 4,
          math.max(1, x(math.min(we, t1)) - wx), LANE_H + 8, esc(name), ms(rec.wait), what)
      end
    end
    for _, b in ipairs(rec.boxes) do
      if b.e >= t0 and b.s <= t1 and b.e > b.s then
        local lane = (b.lane == "ag" and b.part == "copy-in") and "ag_copy" or b.lane
        local bx, bw = x(math.max(b.s, t0)), x(math.min(b.e, t1)) - x(math.max(b.s, t0))
        put(out, '<rect class="box %s" data-step="%d" data-group="%s" x="%.2f" y="%d" '
          .. 'width="%.2f" height="%d" fill="%s"><title>%s (%s%s): %s</title></rect>', lane, i,
          esc(g and g.name or ""), bx, lane_y[lane], math.max(bw, 0.5), LANE_H, colour(g),
          esc(name), b.part, b.where and (", " .. b.where) or "", ms(b.e - b.s))
        local label = st.node and (st.node.kind) or b.part
        if bw > 7 * #label + 6 then
          put(out, '<text x="%.2f" y="%d" class="box-label">%s</text>', bx + 3,
            lane_y[lane] + 15, esc(label))
        end
      end
    end
    local ev = st.event
    if ev then
      local t = rec.boxes[1] and rec.boxes[1].s or rec.issue
      if t >= t0 and t <= t1 then
        put(out, '<path class="event" d="M%.2f %d l-4 -7 h8 z"><title>%s %s "%s" at %s'
          .. '</title></path>', x(t), cy - 2, ev.kind, ev.state, esc(ev.group), ms(t))
      end
    end
    if rec.mark and rec.mark.t >= t0 and rec.mark.t <= t1 and lane_y.ag_copy then
      put(out, '<line class="sync" x1="%.2f" y1="%d" x2="%.2f" y2="%d"><title>%s</title></line>',
        x(rec.mark.t), cy + LANE_H, x(rec.mark.t), lane_y.ag_copy, esc(name))
    end
  end
  y = y + 12 + #ls * (LANE_H + LANE_GAP)
  -- the time axis: ten ticks
  for k = 0, 10 do
    local t = t0 + (t1 - t0) * k / 10
    put(out, '<text x="%.1f" y="%d" class="tick">%.2f</text>', x(t), y + 10, t * 1e3)
  end
  put(out, '<text x="%d" y="%d" class="tick">ms</text>', LEFT - 30, y + 10)
  out[#out + 1] = "</g>"
  return y + 24
end

-- The window of one repeated block in a phase: its group's boxes on every lane.
local function block_window(tl, owner, g, phase)
  local s, e = math.huge, -math.huge
  for _, rec in ipairs(tl.lines) do
    if rec.st.phase == phase and owner(rec.st) == g then
      for _, b in ipairs(rec.boxes) do s, e = math.min(s, b.s), math.max(e, b.e) end
    end
  end
  if s > e then return nil end
  local pad = (e - s) * 0.15
  return math.max(0, s - pad), e + pad
end

-- The planned memory in use over the step, the peak and the largest buffers there.
local function memory_panel(out, plan, tl, y)
  local mem = plan.memory
  local n = #plan.steps
  local delta = {}
  for _, b in ipairs(mem.buffers) do
    local f, l = math.max(b.first, 0), math.min(b.last, n + 1)
    delta[f] = (delta[f] or 0) + b.bytes
    delta[l + 1] = (delta[l + 1] or 0) - b.bytes
  end
  local live, pts, top = 0, {}, 1
  for i = 0, n + 1 do
    live = live + (delta[i] or 0)
    pts[i] = live
    top = math.max(top, live)
  end
  local most = arena_layout.most_live(mem)
  local H = 160
  local scale = PW / math.max(tl.step, 1e-12)
  local function tx(i)
    if i < 1 then return LEFT end
    if i > n then return LEFT + PW end
    return LEFT + tl.lines[i].issue * scale
  end
  local y0 = y
  local function ty(v) return y0 + 30 + H - v / math.max(mem.arena, top) * H end
  local arena = esc(units.bytes(mem.arena))
  out[#out + 1] = '<g id="memory" class="panel">'
  put(out, '<text x="%d" y="%d" class="h2">planned memory in use per GPU over the step '
    .. '(arena %s; the .layout has every buffer)</text>', LEFT, y + 14, arena)
  put(out, '<rect x="%d" y="%d" width="%d" height="%d" class="lane-bg"/>', LEFT, y + 30, PW, H)
  local d = { string.format("M%d %.2f", LEFT, ty(0)) }
  for i = 0, n + 1 do
    d[#d + 1] = string.format("L%.2f %.2f", tx(i), ty(pts[i]))
    d[#d + 1] = string.format("L%.2f %.2f", tx(i + 1), ty(pts[i]))
  end
  d[#d + 1] = string.format("L%d %.2f Z", LEFT + PW, ty(0))
  put(out, '<path id="memory-live" d="%s"/>', table.concat(d, " "))
  put(out, '<line class="arena" x1="%d" y1="%.2f" x2="%d" y2="%.2f"><title>arena %s</title>'
    .. '</line>', LEFT, ty(mem.arena), LEFT + PW, ty(mem.arena), arena)
  put(out, '<text x="%d" y="%.2f" class="lane-label">%s</text>', LEFT - 8, ty(mem.arena) + 4, arena)
  put(out, '<text x="%d" y="%.2f" class="lane-label">0</text>', LEFT - 8, ty(0))
  y = y + 30 + H + 18
  if most then
    local at = plan.steps[most.step] and schedule.step_name(plan.steps[most.step]) or "the start"
    put(out, '<circle id="peak" cx="%.2f" cy="%.2f" r="5"><title>most live</title></circle>',
      tx(most.step), ty(most.bytes))
    put(out, '<text x="%d" y="%d" class="h3">most live: %s in %d buffers, at %s</text>', LEFT, y,
      esc(units.bytes(most.bytes)), most.count, esc(at))
    for k, b in ipairs(most.top) do
      put(out, '<text x="%d" y="%d" class="buffer">%s  %s (%s)</text>', LEFT + 12, y + 16 * k,
        esc(units.bytes(b.bytes)), esc(b.name), esc(b.kind))
    end
    y = y + 16 * (#most.top + 1)
  end
  out[#out + 1] = "</g>"
  return y + 10
end

-- The SVG text of plan's simulated step (r: simulate's result).
function M.render(plan, r)
  local tl = r.timeline
  local owner = owner_finder(plan)
  local body = {}
  local y = 10
  put(body, '<text x="%d" y="%d" class="h1">%s: simulated step on %d x %s, %s kernels</text>', 10,
    y + 16, esc(r.spec), r.world, esc(r.gpu_name), esc(r.kernels))
  local phases = {}
  for _, p in ipairs(r.phases) do
    phases[#phases + 1] = string.format("%s %s (exposed %s)", p.name, ms(p.time_s), ms(p.exposed_s))
  end
  put(body, '<text x="%d" y="%d" class="h3">step %s, compute %s, exposed communication %s; '
    .. 'MFU %.1f%%; %s; peak memory %s per GPU</text>', 10, y + 36, ms(r.step_s), ms(r.compute_s),
    ms(r.exposed_s), 100 * r.mfu, esc(table.concat(phases, ", ")), esc(units.bytes(r.peak_bytes)))
  y = y + 50
  y = lanes(body, plan, tl, owner, y, 0, tl.step, "overview",
    "the whole step (time in ms; hover a box for its schedule line)")
  -- one repeated block zoomed: the second sharded group that is not the root (prefetch shows)
  local blocks = {}
  for _, g in ipairs(plan.groups) do
    if not g.state.is_root then blocks[#blocks + 1] = g end
  end
  local g = blocks[math.min(2, #blocks)]
  if g then
    for _, phase in ipairs({ "forward", "backward" }) do
      local t0, t1 = block_window(tl, owner, g, phase)
      if t0 then
        local title = string.format('zoomed: the %s of "%s" (%d blocks like it)', phase, g.name,
          #blocks)
        y = lanes(body, plan, tl, owner, y, t0, t1, "zoom-" .. phase, title)
      end
    end
  end
  y = memory_panel(body, plan, tl, y)
  local legend = {}
  local lx = LEFT
  for _, item in ipairs({ { ROOT_COLOUR, "root group" }, { PALETTE[1], "one colour per group" },
    { WAIT_COLOUR, "compute waits" } }) do
    put(legend, '<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d" '
      .. 'class="tick">%s</text>', lx, y, item[1], lx + 16, y + 10, esc(item[2]))
    lx = lx + 200
  end
  y = y + 24
  local head = string.format('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
    .. 'viewBox="0 0 %d %d" font-family="sans-serif">\n<style>\n'
    .. '.h1{font-size:16px;font-weight:bold}.h2{font-size:13px;font-weight:bold}\n'
    .. '.h3{font-size:12px}.lane-bg{fill:#f4f4f4}.lane-label{font-size:11px;text-anchor:end}\n'
    .. '.tick{font-size:10px;fill:#555}.box{stroke:#fff;stroke-width:0.3}\n'
    .. '.box-label{font-size:10px;pointer-events:none}.wait{fill:%s;opacity:0.8}\n'
    .. '.event{fill:#222}.sync{stroke:#888;stroke-dasharray:2 2}\n'
    .. '#memory-live{fill:#4e79a7;fill-opacity:0.35;stroke:#4e79a7}\n'
    .. '.arena{stroke:#e15759;stroke-dasharray:4 3}#peak{fill:#e15759}\n'
    .. '.buffer{font-size:11px;font-family:monospace}\n</style>\n'
    .. '<rect width="100%%" height="100%%" fill="#fff"/>\n', W, y, W, y, WAIT_COLOUR)
  return head .. table.concat(body, "\n") .. "\n" .. table.concat(legend, "\n") .. "\n</svg>\n"
end

return M
