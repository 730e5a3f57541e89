-- `fsdpgen diff OLD NEW`: what a sharding change does, read in ten seconds. OLD and NEW
-- are two versions of one spec, each a spec (.lua, planned here) or a `.schedule` file
-- (e.g. `git show main:build/x/x.schedule`). Both are compared as `.schedule` text, so a
-- schedule carries everything the summary needs: the spec and group options, the
-- collectives and bytes per rank of one step, the predicted peak and the most bytes live
-- at once (which buffers), the FSDP events added, removed or moved, and how many lines
-- changed.
-- `fsdpgen diff --git ...` is git's external diff driver (docs/reviewing.md). The
-- schedules are read by schedule_read.lua.
local units = require("util.units")
local schedule_read = require("schedule_read")

local M = {}

-- Longest common subsequence of two lists of strings, as matched[i] = j (for a and b);
-- nil where the part that differs is too long to compare in memory.
local MAX_CELLS = 4e6
local function lcs(a, b)
  local n, m = #a, #b
  local lo = 0
  while lo < n and lo < m and a[lo + 1] == b[lo + 1] do lo = lo + 1 end
  local hi = 0
  while hi < n - lo and hi < m - lo and a[n - hi] == b[m - hi] do hi = hi + 1 end
  local ma, mb = {}, {}
  for i = 1, lo do ma[i], mb[i] = i, i end
  for k = 0, hi - 1 do ma[n - k], mb[m - k] = m - k, n - k end
  local A, B = {}, {}
  for i = lo + 1, n - hi do A[#A + 1] = a[i] end
  for j = lo + 1, m - hi do B[#B + 1] = b[j] end
  if (#A + 1) * (#B + 1) > MAX_CELLS then return nil end
  -- Dynamic programming over the middle (suffix lengths), then one walk.
  local L = {}
  for i = #A + 1, 1, -1 do
    L[i] = {}
    for j = #B + 1, 1, -1 do
      if i > #A or j > #B then L[i][j] = 0
      elseif A[i] == B[j] then L[i][j] = L[i + 1][j + 1] + 1
      else L[i][j] = math.max(L[i + 1][j], L[i][j + 1]) end
    end
  end
  local i, j = 1, 1
  while i <= #A and j <= #B do
    if A[i] == B[j] then
      ma[lo + i], mb[lo + j] = lo + j, lo + i
      i, j = i + 1, j + 1
    elseif L[i + 1][j] >= L[i][j + 1] then i = i + 1 else j = j + 1 end
  end
  return ma, mb
end

-- Lines added and removed between two lists of lines (nil if too long to compare).
function M.changed_lines(a, b)
  local ma, mb = lcs(a, b)
  if not ma then return nil end
  local removed, added = 0, 0
  for i = 1, #a do if not ma[i] then removed = removed + 1 end end
  for j = 1, #b do if not mb[j] then added = added + 1 end end
  return added, removed
end

-- The step's FSDP events with their section, and an occurrence number so that each key is
-- one event.
local function events(s)
  local out, seen = {}, {}
  for _, st in ipairs(s.steps) do
    if st.event then
      local what = string.format("%s %s %s", st.event.kind, st.target, st.event.state)
      local key = what .. " (" .. st.section .. ")"
      seen[key] = (seen[key] or 0) + 1
      out[#out + 1] = { what = what, key = key, id = key .. "#" .. seen[key] }
    end
  end
  return out
end

local function event_changes(old, new)
  local eo, en = events(old), events(new)
  local ia, ib = {}, {}
  for i, e in ipairs(eo) do ia[i] = e.id end
  for i, e in ipairs(en) do ib[i] = e.id end
  local ma, mb = lcs(ia, ib)
  if not ma then return { string.format("  %d events -> %d (too many changes to list)", #eo, #en) } end
  local function after(list, i)
    return i > 1 and ("after " .. list[i - 1].what) or "first"
  end
  local gone, out, removed = {}, {}, {}
  for i, e in ipairs(eo) do
    if not ma[i] then gone[e.id] = gone[e.id] or {}; table.insert(gone[e.id], i) end
  end
  local moved = {}
  for j, e in ipairs(en) do
    if not mb[j] then
      local i = gone[e.id] and table.remove(gone[e.id], 1)
      if i then
        moved[i] = true
        out[#out + 1] = string.format("  ~ %s: moved, was %s, now %s", e.key, after(eo, i), after(en, j))
      else
        out[#out + 1] = string.format("  + %s, %s", e.key, after(en, j))
      end
    end
  end
  for i, e in ipairs(eo) do
    if not ma[i] and not moved[i] then removed[#removed + 1] = string.format("  - %s, was %s", e.key, after(eo, i)) end
  end
  for _, l in ipairs(out) do removed[#removed + 1] = l end
  return removed
end

local function arrow(a, b, fmt)
  fmt = fmt or tostring
  if a == b then return fmt(a) end
  return (a == nil and "(none)" or fmt(a)) .. " -> " .. (b == nil and "(none)" or fmt(b))
end

local function size(n) return n and units.bytes(n) or "?" end

local function lines_changed(a, r)
  if not a then return "too many changes to count" end
  if a == 0 and r == 0 then return "the same lines" end
  return string.format("%d line%s added, %d removed", a, a == 1 and "" or "s", r)
end

-- The summary lines of OLD -> NEW (two parsed schedules).
function M.summary(old, new, old_label, new_label)
  local out = {}
  local function put(fmt, ...) out[#out + 1] = string.format(fmt, ...) end
  put("fsdpgen diff %s: %s -> %s", new.name, old_label, new_label)
  -- The spec's header lines (mesh, input, optimizer, step program, ...).
  local keys, seen = {}, {}
  for _, list in ipairs({ old.spec_keys, new.spec_keys }) do
    for _, k in ipairs(list) do
      if not seen[k] and k ~= "spec" then seen[k] = true; keys[#keys + 1] = k end
    end
  end
  for _, k in ipairs(keys) do
    if old.spec[k] ~= new.spec[k] then put("spec %-11s %s", k, arrow(old.spec[k], new.spec[k])) end
  end
  -- The step's attention lines (a run of ops: cudnn, or fsdpgen and why) gone and new; the
  -- eval's follow them (fsdpgen's kernels: no backward).
  local was, now = {}, {}
  for _, l in ipairs(old.attention) do was[l] = true end
  for _, l in ipairs(new.attention) do now[l] = true end
  for _, l in ipairs(old.attention) do
    if not now[l] and l:match("^step ") then put("attention  - %s", l) end
  end
  for _, l in ipairs(new.attention) do
    if not was[l] and l:match("^step ") then put("attention  + %s", l) end
  end
  -- Groups added, removed, and the options that changed.
  put("groups (%s)", arrow(#old.group_list, #new.group_list))
  local n_changes = #out
  for _, g in ipairs(old.group_list) do
    if not new.groups[g.name] then put("  - %s: %d params, %d elements", g.name, g.n, g.numel) end
  end
  for _, g in ipairs(new.group_list) do
    local o = old.groups[g.name]
    if not o then
      local from, seen_from = {}, {}
      for _, p in ipairs(g.params) do
        for _, og in ipairs(old.group_list) do
          for _, q in ipairs(og.params) do
            if q == p and not seen_from[og.name] then seen_from[og.name] = true; from[#from + 1] = og.name end
          end
        end
      end
      put("  + %s: %d params, %d elements, %s%s", g.name, g.n, g.numel, g.opts.param_dtype,
        #from > 0 and (" (params from " .. table.concat(from, ", ") .. ")") or "")
    else
      if o.n ~= g.n or o.numel ~= g.numel then
        put("  %s: params %s, elements %s", g.name, arrow(o.n, g.n), arrow(o.numel, g.numel))
      end
      local ok, list = {}, {}
      for k in pairs(o.opts) do ok[k] = true end
      for k in pairs(g.opts) do ok[k] = true end
      for k in pairs(ok) do list[#list + 1] = k end
      table.sort(list)
      for _, k in ipairs(list) do
        if o.opts[k] ~= g.opts[k] then put("  %s: %s %s", g.name, k, arrow(o.opts[k], g.opts[k])) end
      end
    end
  end
  if #out == n_changes then put("  no option changed") end
  -- Collectives per phase and bytes per rank.
  put("collectives per step (per phase, old -> new)")
  local co, order_o, bo = schedule_read.collectives(old)
  local cn, order_n, bn = schedule_read.collectives(new)
  local order, seen_k = {}, {}
  for _, list in ipairs({ order_o, order_n }) do
    for _, k in ipairs(list) do
      if not seen_k[k] then seen_k[k] = true; order[#order + 1] = k end
    end
  end
  for _, k in ipairs(order) do
    local ph, op = k:match("^(%S+) (%S+)$")
    put("  %-10s %-16s %s", ph, op, arrow(co[k] or 0, cn[k] or 0))
  end
  put("  each rank sends (and receives) %s per step%s", arrow(bo, bn, units.bytes),
    bo ~= bn and (" (" .. units.delta(bn - bo) .. ")") or (bn == 0 and #order > 0) and " (one-rank groups: no data moves)" or "")
  -- Compute lines per kind: activation checkpointing shows as recompute lines.
  local function ops(sched)
    local c = {}
    for _, st in ipairs(sched.steps) do
      if st.stream == "compute" and (st.op == "forward" or st.op == "backward" or st.op == "recompute") then
        c[st.op] = (c[st.op] or 0) + 1
      end
    end
    return c
  end
  local po, pn = ops(old), ops(new)
  local cparts = {}
  for _, k in ipairs({ "forward", "backward", "recompute" }) do
    if po[k] or pn[k] then cparts[#cparts + 1] = k .. " " .. arrow(po[k] or 0, pn[k] or 0) end
  end
  put("compute ops per step: %s", table.concat(cparts, ", "))
  -- Memory.
  put("memory per rank")
  put("  predicted peak   %s%s", arrow(old.peak, new.peak, units.bytes),
    old.peak ~= new.peak and (" (" .. units.delta(new.peak - old.peak) .. ", exact " .. old.peak .. " -> " .. new.peak .. ")") or "")
  put("  most live        %s%s", arrow(old.live, new.live, size),
    old.live ~= new.live and old.live and new.live and (" (" .. units.delta(new.live - old.live) .. ")") or "")
  put("  at               %s", arrow(old.live_at, new.live_at))
  if old.live and new.live then
    -- the peak is the top buffer's last byte, the most live whole aligned buffers
    local function gaps(s) return math.max(0, s.peak - s.live) end
    put("  placement gaps   %s (the predicted peak less the most live)",
      arrow(gaps(old), gaps(new), size))
  end
  local kinds, ks = {}, {}
  for k in pairs(old.kinds) do ks[k] = true end
  for k in pairs(new.kinds) do ks[k] = true end
  for k in pairs(ks) do kinds[#kinds + 1] = k end
  table.sort(kinds, function(a, b)
    local x, y = new.kinds[a] or 0, new.kinds[b] or 0
    if x ~= y then return x > y end
    return a < b
  end)
  local parts = {}
  for _, k in ipairs(kinds) do
    if old.kinds[k] ~= new.kinds[k] then
      parts[#parts + 1] = string.format("%s %s", k, arrow(old.kinds[k], new.kinds[k], size))
    end
  end
  if next(ks) then
    put("  live then        %s", #parts > 0 and (table.concat(parts, ", ") .. (#parts < #kinds and " (other kinds the same)" or ""))
      or "each kind the same")
  end
  local was = {}
  for _, b in ipairs(old.largest) do was[b.name] = b.bytes end
  local is = {}
  if #new.largest > 0 then put("  largest buffers live then (+ new among them, - gone)") end
  for _, b in ipairs(new.largest) do
    is[b.name] = true
    put("  %s %-56s %s", was[b.name] and " " or "+", b.name, size(b.bytes))
  end
  for _, b in ipairs(old.largest) do
    if not is[b.name] then put("  - %-56s %s", b.name, size(b.bytes)) end
  end
  -- FSDP events of the step.
  local ev = event_changes(old, new)
  put("FSDP events in the step%s", #ev == 0 and ": the same, in the same order" or "")
  for _, l in ipairs(ev) do out[#out + 1] = l end
  -- The eval and the step after one.
  local ea, er = M.changed_lines(old.eval, new.eval)
  if old.eval_unavailable or new.eval_unavailable then
    put("eval             %s", arrow(old.eval_unavailable or "available", new.eval_unavailable or "available"))
  else
    put("eval             %s; peak %s", lines_changed(ea, er),
      arrow(old.eval_peak, new.eval_peak, size))
  end
  local aa, ar = M.changed_lines(old.after_eval, new.after_eval)
  if #old.after_eval + #new.after_eval > 0 then
    put("step after eval  %s; peak %s", lines_changed(aa, ar),
      arrow(old.after_eval_peak, new.after_eval_peak, size))
  end
  local la, lr = M.changed_lines(old.lines, new.lines)
  put("schedule lines   %s (of %s)", lines_changed(la, lr), arrow(#old.lines, #new.lines))
  return table.concat(out, "\n") .. "\n"
end

-- Reads one side: a spec (planned with env.plan) or a .schedule. Returns its parsed
-- schedule, or exits 2 with one line.
local function load_side(path, which, env)
  if path:match("%.lua$") then
    local f = io.open(path, "rb")
    if not f then env.die(2, string.format("fsdpgen diff: cannot read %s spec '%s'", which, path)) end
    f:close()
    local plan = env.plan(path)
    local s = schedule_read.parse(require("emit.schedule").render(plan, path:match("[^/]+$")))
    return s
  end
  local f, err = io.open(path, "rb")
  if not f then env.die(2, string.format("fsdpgen diff: cannot read %s '%s' (%s)", which, path, err)) end
  local text = f:read("a") or ""
  f:close()
  local s, why = schedule_read.parse(text)
  if not s then
    env.die(2, string.format("fsdpgen diff: %s '%s' is neither a spec (.lua) nor a .schedule: %s", which, path, why))
  end
  return s
end

local function sh_quote(x) return "'" .. tostring(x):gsub("'", "'\\''") .. "'" end

-- git's external diff driver: `fsdpgen diff --git PATH OLD OLD_HEX OLD_MODE NEW NEW_HEX
-- NEW_MODE`. Prints the summary (or the one line saying why there is none), then the
-- unified diff of the lines. Always exits 0, so that git goes on to the next file.
local function git_driver(args, env)
  local path, old, new = args[1], args[2], args[5]
  io.write(string.format("fsdpgen diff a/%s b/%s\n", path, path))
  if old ~= "/dev/null" and new ~= "/dev/null" then
    local p = io.popen(table.concat({ sh_quote(env.root .. "/fsdpgen"), "diff", sh_quote(old), sh_quote(new) }, " ") .. " 2>&1")
    io.write((p:read("a"):gsub("^fsdpgen diff [^\n]*\n", "")))
    p:close()
    io.write("\n")
  end
  io.flush()
  os.execute(table.concat({ "diff -u --label", sh_quote("a/" .. path), "--label", sh_quote("b/" .. path),
    sh_quote(old), sh_quote(new) }, " "))
  os.exit(0)
end

-- env: plan (a spec path -> plan; spec errors exit 2), die(status, line), usage_error,
-- root (the repository).
function M.main(args, env)
  if args[1] == "--git" then
    if #args ~= 8 then env.usage_error("diff --git takes git's 7 arguments: PATH OLD HEX MODE NEW HEX MODE") end
    return git_driver({ table.unpack(args, 2) }, env)
  end
  -- `--gpu G [simulate's options]` after OLD and NEW adds the simulated change (two specs)
  local sim_args = {}
  if args[3] then sim_args = { table.unpack(args, 3) } end
  if #args < 2 or (args[3] and args[3] ~= "--gpu") then
    env.usage_error("diff takes OLD and NEW (each a spec .lua or a .schedule), then optionally --gpu G and "
      .. "simulate's options")
  end
  if #sim_args > 0 and not (args[1]:match("%.lua$") and args[2]:match("%.lua$")) then
    env.usage_error("diff --gpu simulates both sides, so OLD and NEW must be specs (.lua)")
  end
  local old = load_side(args[1], "OLD", env)
  local new = load_side(args[2], "NEW", env)
  if old.name ~= new.name then
    env.die(2, string.format("fsdpgen diff: OLD plans spec '%s' and NEW plans '%s'; diff compares two versions of one spec (the same name)",
      old.name, new.name))
  end
  local ok, text = pcall(M.summary, old, new, args[1], args[2])
  if not ok then
    env.die(1, "fsdpgen diff: internal error while comparing " .. args[1] .. " and " .. args[2] .. ": " .. tostring(text)
      .. " (please report it)")
  end
  io.write(text)
  if #sim_args > 0 then
    local lines = require("simulate.cli").diff_lines(args[1], args[2], sim_args, env)
    io.write(table.concat(lines, "\n"), "\n")
  end
end

return M
