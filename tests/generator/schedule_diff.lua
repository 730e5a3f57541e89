-- Reviewing a change: the `.schedule` is diff-stable and `fsdpgen diff` summarises it.
--   - every one-line change of tests/generator/review_changes.lua (each kind, on the bench
--     Llama 1B, examples/gpt_bytes.lua and a 4-block Llama) plans, changes at most 25
--     lines of the .schedule (or its kind's bound where more lines change in meaning), and
--     `fsdpgen diff` of the two .schedule files equals tests/golden/diff/<spec>_<kind>.txt;
--     the summary says what the change is (the option, the events, the collectives);
--   - `fsdpgen diff` of two specs says what the diff of their .schedule files says;
--   - the collective counts it reads from a .schedule are `fsdpgen counts`', for every
--     golden schedule;
--   - the .layout agrees with the .schedule (peak, arena) and holds every buffer;
--   - bad, unreadable and mismatched inputs exit 2 with one line; cut and edited schedules
--     are refused with a reason or compared, never a Lua error;
--   - `git diff` with the documented .gitattributes and diff.fsdpgen.command shows the
--     summary, then the lines (in a throw-away git repository).
-- FSDPGEN_UPDATE_GOLDEN=1 rewrites the diff goldens. `--table [--before FSDPGEN]` prints
-- the changed-line counts as docs/reviewing.md's table instead (with the counts of
-- another fsdpgen, e.g. an older commit's, as "before").
-- Run from the repository root: lua5.4 tests/generator/schedule_diff.lua
package.path = "generator/?.lua;tests/generator/?.lua;./?.lua;" .. package.path
local rc = require("review_changes")
local util = require("tests.generator.step_c")
local any_failed = false
local function check(ok, msg)
  any_failed = any_failed or not ok
  util.check(ok, msg)
end
local read, write, sh = rc.read, rc.write, rc.sh

local ROOT = io.popen("pwd"):read("l")
local FSDPGEN = ROOT .. "/fsdpgen"
local update = os.getenv("FSDPGEN_UPDATE_GOLDEN") == "1"
local tmp = os.tmpname()
os.remove(tmp)
os.execute("mkdir -p " .. tmp)

-- Changed .schedule lines allowed per kind: 25, or more where more lines change in
-- meaning. Splitting a group adds the new group's header (its params move there) and its
-- collective, wait, reshard, post-backward and optimizer lines in the step and the eval;
-- checkpointing adds one recompute line per op of the block, splits the attention lines'
-- run of cuDNN ops around the block's (fsdpgen's: fp32 storage), and leaves the block's
-- last residual add where it ran and out of the next norm's call (planner.lua
-- residual_before_norm), its q, k, v and w1, w3 each out of their stack (five lines in
-- the step and five in the step after an eval) and the backward of its q and k rotations
-- out of their pair (memory/rope_pairs.lua: the k linear between them is no longer
-- stacked); mixed precision changes the dtype of every op line of the group, in the step
-- and in the eval, and takes its norms out of their adds' calls; freezing a block's
-- attention marks its weights, adds the group's frozen line, takes the q, k, v backward out
-- of their stack and the q and k rotations out of their pair, and changes the optimizer
-- line's elements and the memory lines its smaller gradients and optimizer state move
-- (the peaks, the persistent bytes).
local LIMIT = { split = 60, checkpoint = 70, mixed_precision = 160, freeze = 35 }

local function schedule_of(dir)
  return (io.popen("ls " .. dir .. "/*.schedule"):read("l"))
end

-- ---- --table: the counts only ----------------------------------------------------------
if arg[1] == "--table" then
  local before = arg[2] == "--before" and arg[3]
  local counts = {}
  local function run(fsdpgen, dir)
    local t = {}
    rc.each_pair(fsdpgen, dir, function(sp, k, r)
      t[sp.id .. " " .. k.kind] = r.na and "n/a" or r.err and "fails"
        or tostring(rc.changed_lines(schedule_of(r.old_out), schedule_of(r.new_out)))
    end)
    return t
  end
  local after = run(FSDPGEN, tmp .. "/after")
  if before then counts = run(before, tmp .. "/before") end
  print("| change | " .. (before and "Llama 1B before / after | gpt_bytes before / after | 4-block Llama before / after |"
    or "Llama 1B | gpt_bytes | 4-block Llama |"))
  print("| --- | --- | --- | --- |")
  for _, k in ipairs(rc.kinds) do
    local cells = {}
    for _, sp in ipairs(rc.specs) do
      local key = sp.id .. " " .. k.kind
      cells[#cells + 1] = before and (counts[key] .. " / " .. after[key]) or after[key]
    end
    print(string.format("| %s | %s |", k.what, table.concat(cells, " | ")))
  end
  os.execute("rm -rf " .. tmp)
  os.exit(0)
end

-- ---- the one-line changes ---------------------------------------------------------------
local function fsdpgen_in(dir, args)
  return sh("cd " .. dir .. " && " .. FSDPGEN .. " " .. args)
end

-- What each kind's summary must say on the 4-block Llama ("layers.1" is model.layers[2]).
local SAYS = {
  raf_false = { '"layers.1": reshard_after_forward true -> false', '- reshard "layers.1" FORWARD (forward1)',
    "backward   all_gather       4 -> 3" },
  raf_true = { '"": reshard_after_forward false -> true', '+ reshard "" FORWARD (forward1)' },
  raf_int = { '"layers.1": reshard_after_forward true -> 2' },
  fwd_prefetch = { '"layers.1": forward prefetch (none) -> "layers.2"',
    '~ reshard "layers.1" FORWARD (forward1): moved, was after unshard "layers.1" FORWARD, now after unshard "layers.2" FORWARD' },
  bwd_prefetch = { '"layers.3": backward prefetch (none) -> "layers.2", "layers.1"', '~ unshard "layers.1" PRE_BACKWARD (backward2): moved' },
  split = { '+ "layers.1.feed_forward": 3 params', '(params from "layers.1")', "forward    all_gather       5 -> 6" },
  checkpoint = { "recompute 0 -> 15", "FSDP events in the step: the same, in the same order" },
  mixed_precision = { '"layers.1": param_dtype fp32 -> bf16' },
  freeze = { '"layers.1": frozen none -> 4 of 9 params' },
}

local pairs_dir = tmp .. "/pairs"
rc.each_pair(FSDPGEN, pairs_dir, function(sp, k, r)
  local what = sp.id .. " " .. k.kind
  if r.na then
    print(string.format("SKIP %s: %s", what, r.na))
    return
  end
  if r.err then
    check(false, what .. ": " .. r.err)
    return
  end
  local old, new = schedule_of(r.old_out), schedule_of(r.new_out)
  local n = rc.changed_lines(old, new)
  local limit = LIMIT[k.kind] or 25
  check(n > 0 and n <= limit, string.format("%s (%s): %d .schedule lines change (1..%d allowed)", what, k.what, n, limit))
  local rel_old, rel_new = old:sub(#pairs_dir + 2), new:sub(#pairs_dir + 2)
  local ok, out = fsdpgen_in(pairs_dir, "diff " .. rel_old .. " " .. rel_new)
  local golden = "tests/golden/diff/" .. sp.id .. "_" .. k.kind .. ".txt"
  if update and ok then write(golden, out) end
  check(ok and out == read(golden), string.format("%s: fsdpgen diff exits 0 and equals %s%s", what, golden,
    ok and "" or (": " .. out)))
  if sp.id == "llama_4l" then
    local missing = {}
    for _, s in ipairs(SAYS[k.kind]) do
      if not out:find(s, 1, true) then missing[#missing + 1] = s end
    end
    check(#missing == 0, string.format("%s: the summary says %s", what,
      #missing == 0 and "what changed" or ("nothing of: " .. table.concat(missing, " | "))))
    -- Two specs give the summary of their two .schedule files (but for the labels).
    if k.kind == "raf_false" or k.kind == "split" then
      local rel_spec_old, rel_spec_new = r.old:sub(#pairs_dir + 2), r.new:sub(#pairs_dir + 2)
      local ok2, out2 = fsdpgen_in(pairs_dir, "diff " .. rel_spec_old .. " " .. rel_spec_new)
      local body = out:gsub("^[^\n]*\n", "")
      check(ok2 and out2:gsub("^[^\n]*\n", "") == body and out2:match("^fsdpgen diff review_llama_4l: [^\n]*%.lua %-> [^\n]*%.lua\n"),
        what .. ": fsdpgen diff of the two specs says what the diff of their schedules says")
    end
  end
end)

-- No change: every count the same, no event, no line.
do
  local s = pairs_dir .. "/llama_4l/base/out/review_llama_4l.schedule"
  local ok, out = sh(FSDPGEN .. " diff " .. s .. " " .. s)
  local arrows = 0
  for line in out:gmatch("[^\n]+") do
    if line:find(" -> ", 1, true) and not line:match("^fsdpgen diff ") and not line:match("^collectives per step") then
      arrows = arrows + 1
    end
  end
  check(ok and arrows == 0 and out:find("FSDP events in the step: the same, in the same order", 1, true)
    and out:find("schedule lines   the same lines", 1, true),
    "a schedule against itself: no old -> new anywhere, the same events and lines")
end

-- ---- the collective counts it reads are `fsdpgen counts`' ------------------------------
local diff = require("diff")
local schedule_read = require("schedule_read")
do
  local compared, bad = 0, {}
  local specs = util.all_specs()
  for _, path in ipairs(specs) do
    local name = (read(path) or ""):match('name%s*=%s*"([%w_%-]+)"')
    local text = name and read("tests/golden/" .. name .. ".schedule")
    -- At one rank the .schedule keeps FSDP2's all-gathers and reduce-scatters as direct
    -- copies, which FSDP2 (and so `fsdpgen counts`) does not count as collectives.
    if text and text:find("\nmesh       world 1 ", 1, true) then text = nil end
    if text then
      local s = schedule_read.parse(text)
      local counts = s and schedule_read.collectives(s)
      local ok, out = sh(FSDPGEN .. " counts " .. path)
      if counts and ok then
        for key, v in out:gmatch("(%a+ [%a_]+) (%d+)") do
          compared = compared + 1
          if (counts[key] or 0) ~= tonumber(v) then bad[#bad + 1] = string.format("%s %s: %s vs %s", name, key, counts[key], v) end
        end
      else
        bad[#bad + 1] = name .. ": not parsed or counts failed"
      end
    end
  end
  check(compared > 100 and #bad == 0, string.format("collectives read from the golden schedules equal fsdpgen counts (%d counts)%s",
    compared, #bad > 0 and (": " .. table.concat(bad, "; ")) or ""))
end

-- ---- the .layout -----------------------------------------------------------------------
do
  local dir = pairs_dir .. "/llama_4l/raf_false/out"
  local layout = read(dir .. "/review_llama_4l.layout") or ""
  local sched = read(dir .. "/review_llama_4l.schedule") or ""
  local peak, arena = layout:match("\nstep memory: predicted peak (%d+) %(arena (%d+)")
  local top, rows, top_arena = 0, 0, 0
  local part
  for line in layout:gmatch("[^\n]+") do
    if line:match("^%a") then part = line:match("^(%a+ ?%a*) memory") end
    local bytes, off = line:match("^  .-%s(%d+)%s+(%d+)  %S.* %.%. ")
    if part == "step" and bytes then
      rows = rows + 1
      top_arena = math.max(top_arena, tonumber(off) + tonumber(bytes))
    end
  end
  local s_peak, s_arena = sched:match("\n  predicted peak%s+(%d+) %([^;]*; arena (%d+)")
  check(peak and peak == s_peak and arena == s_arena and tonumber(arena) == top_arena and rows > 100
    and layout:match("^# review_llama_4l%.layout: generated by .*do not edit%.") and not sched:find("offset  live"),
    string.format("the .layout holds the step's %d buffers up to the arena %s, the .schedule's peak %s and arena %s, "
      .. "and the .schedule no offsets", rows, tostring(arena), tostring(s_peak), tostring(s_arena)))
end

-- ---- bad input ---------------------------------------------------------------------------
local function fails(args, want, what)
  local h = io.popen(FSDPGEN .. " diff " .. args .. " 2>&1; echo \"exit=$?\"")
  local out = h:read("a")
  h:close()
  local status = out:match("exit=(%d+)\n$")
  local msg = out:gsub("exit=%d+\n$", "")
  local one = select(2, msg:gsub("\n", "")) == 1
  check(status == "2" and msg:find(want, 1, true) ~= nil and (one or msg:match("\nusage: fsdpgen")),
    string.format("%s: exit 2, '%s' (got exit %s: %s)", what, want, tostring(status), (msg:gsub("\n.*", ""))))
end
local base = pairs_dir .. "/llama_4l/base/out/review_llama_4l.schedule"
local other = pairs_dir .. "/gpt_bytes/base/out/gpt_bytes.schedule"
write(tmp .. "/notes.txt", "just some text\n")
write(tmp .. "/cut.schedule", (read(base) or ""):match("^(.-\ngroups\n)"))
write(tmp .. "/bad_spec.lua", "return fsdp.spec{ name = 'x', model = nil }\n")
fails(base .. " " .. tmp .. "/missing.schedule", "fsdpgen diff: cannot read NEW '" .. tmp .. "/missing.schedule'", "a missing file")
fails(tmp .. "/notes.txt " .. base, "is neither a spec (.lua) nor a .schedule: its first line is not", "a text file")
fails(base .. " " .. tmp .. "/cut.schedule", "no groups, step lines or predicted peak", "a truncated schedule")
fails(base .. " " .. other, "OLD plans spec 'review_llama_4l' and NEW plans 'gpt_bytes'; diff compares two versions of one spec",
  "two different specs")
fails(tmp .. "/bad_spec.lua " .. base, "bad_spec.lua:1: error:", "a spec with an error")
fails(tmp .. "/missing.lua " .. base, "fsdpgen diff: cannot read OLD spec", "a missing spec")
fails(base, "fsdpgen: diff takes OLD and NEW", "one argument")

-- Cut and edited schedules: refused with a reason or compared, never a Lua error.
do
  local text = read("tests/golden/mp_paramless_root.schedule")
  local lines = {}
  for l in text:gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
  local good = schedule_read.parse(text)
  math.randomseed(7)
  local errors_seen, refused, compared = {}, 0, 0
  for _ = 1, 500 do
    local t = { lines[1] }
    for i = 2, #lines do
      local l = lines[i]
      if math.random() > 0.05 then
        if math.random() < 0.03 then l = l:sub(1, math.random(0, #l)) end
        if math.random() < 0.01 then l = l:gsub("%d+", "x") end
        t[#t + 1] = l
      end
      if math.random() < 0.01 then t[#t + 1] = lines[math.random(#lines)] end
    end
    local ok, s, why = pcall(schedule_read.parse, table.concat(t, "\n") .. "\n")
    if not ok then errors_seen[#errors_seen + 1] = tostring(s)
    elseif not s then refused = refused + (type(why) == "string" and 1 or 0)
    else
      local ok1, e1 = pcall(diff.summary, good, s, "old", "new")
      local ok2, e2 = pcall(diff.summary, s, good, "old", "new")
      if ok1 and ok2 then compared = compared + 1 else errors_seen[#errors_seen + 1] = tostring(ok1 and e2 or e1) end
    end
  end
  check(#errors_seen == 0 and refused > 0 and compared > 0, string.format(
    "500 randomly cut and edited schedules: %d refused with a reason, %d compared, %d Lua errors%s", refused, compared,
    #errors_seen, errors_seen[1] and (" (" .. errors_seen[1] .. ")") or ""))
end

-- ---- git diff --------------------------------------------------------------------------
local has_git = os.execute("command -v git >/dev/null 2>&1")
if not has_git then print("SKIP git diff: no git on this machine (apt-get install git)") end
if has_git then
  local repo = tmp .. "/repo"
  local function git(args) return sh("cd " .. repo .. " && git " .. args) end
  os.execute("mkdir -p " .. repo)
  local ok = git("init -q . && git config user.email t@example.com && git config user.name t"
    .. " && git config diff.fsdpgen.command '" .. FSDPGEN .. " diff --git'")
  write(repo .. "/.gitattributes", "*.schedule diff=fsdpgen\n")
  write(repo .. "/x.schedule", read(base))
  write(repo .. "/notes.schedule", "not a schedule\n")
  local ok2 = git("add . && git commit -qm base")
  write(repo .. "/x.schedule", read(pairs_dir .. "/llama_4l/raf_false/out/review_llama_4l.schedule"))
  write(repo .. "/notes.schedule", "still not a schedule\n")
  local ok3, out = git("diff")
  local summary_at = out:find('"layers.1": reshard_after_forward true -> false', 1, true)
  local hunk_at = summary_at and out:find("\n@@ ", summary_at, true)
  local removed = "\n-" .. string.format("  %-8s %-22s %-44s", "compute", "reshard", '"layers.1"')
  check(ok and ok2 and ok3 and out:find("\nfsdpgen diff a/x.schedule b/x.schedule\ngroups", 1, true) and hunk_at
    and out:find(removed, hunk_at, true) ~= nil,
    "git diff with diff=fsdpgen: the summary first, then the unified diff of the lines")
  check(out:find("fsdpgen diff: OLD '[^\n]*' is neither a spec") and out:find("\n%-not a schedule\n%+still not a schedule\n"),
    "git diff of a .schedule that is none: the one-line reason, then the lines")
  local _, plain = git("diff --no-ext-diff x.schedule")
  check(plain:match("^diff %-%-git") and not plain:find("fsdpgen diff", 1, true), "git diff --no-ext-diff: the lines only")
  -- A spec under the driver: both versions planned, the summary above the spec's lines.
  local spec_text = read("tests/specs/review/llama_4l.lua")
  write(repo .. "/.gitattributes", "*.schedule diff=fsdpgen\nspecs/*.lua diff=fsdpgen\n")
  os.execute("mkdir -p " .. repo .. "/specs")
  write(repo .. "/specs/llama_4l.lua", spec_text)
  git("add . && git commit -qm spec")
  write(repo .. "/specs/llama_4l.lua", rc.apply(spec_text, rc.kinds[1].edit("llama_4l")))
  local ok5, spec_out = git("diff specs/llama_4l.lua")
  local said = spec_out:find('"layers.1": reshard_after_forward true -> false', 1, true)
  check(ok5 and spec_out:match("^fsdpgen diff a/specs/llama_4l%.lua b/specs/llama_4l%.lua\n") and said
    and spec_out:find("\n+model.layers[2]:set_reshard_after_forward(false)\n", said, true) ~= nil,
    "git diff of a spec under the driver: the summary of both plans, then the spec's lines")
  write(repo .. "/y.schedule", read(base))
  local ok4, added = git("add y.schedule && git diff --cached y.schedule")
  check(ok4 and added:match("^fsdpgen diff a/y%.schedule b/y%.schedule\n") and added:find("\n%+%+%+ b/y%.schedule"),
    "git diff of a new .schedule: no summary, the added lines")
end

if any_failed then print("(files kept in " .. tmp .. ")") else os.execute("rm -rf " .. tmp) end
util.finish()
