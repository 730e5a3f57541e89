-- The command line a new user meets: help (`help`, `help CMD`, `CMD --help`, `--version`;
-- the planning commands' examples run as printed),
-- one-line usage errors (options of the training binary before `--`, a directory as the
-- spec), where output goes (`plan -o`, `build -o`, paths printed relative to the current
-- directory, two spec files with the same name refused instead of overwriting each
-- other's build), and inputs that would reach C, ninja or the shell (a spec path with a
-- newline, a spec that tries os.execute). Builds one tiny spec (about 10 s).
-- Run from the repository root: lua5.4 tests/generator/cli.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local util = require("tests.generator.step_c")
local check = util.check

local ROOT = io.popen("pwd"):read("l")
local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- Runs a shell command; returns its exit status, stdout, stderr.
local work = os.tmpname()
os.remove(work)
os.execute("mkdir -p " .. q(work))
local function run(cmd, cwd)
  local o, e = work .. "/out", work .. "/err"
  local full = string.format("cd %s && %s >%s 2>%s", q(cwd or ROOT), cmd, q(o), q(e))
  local _, _, rc = os.execute(full)
  local function slurp(p)
    local f = io.open(p)
    local s = f and f:read("a") or ""
    if f then f:close() end
    return s
  end
  return rc, slurp(o), slurp(e)
end
local function lines(s) return select(2, s:gsub("\n", "")) end
local function one_line(rc, out, err, want_rc)
  return rc == want_rc and lines(err) == 1 and out == ""
end

-- ---- help and version
local rc, out, err = run("./fsdpgen help")
check(rc == 0 and out:find("usage: fsdpgen COMMAND", 1, true) and out:find("help COMMAND", 1, true) ~= nil,
  "./fsdpgen help: the usage and how to get a command's help (exit " .. rc .. ")")
rc, out = run("./fsdpgen --version")
local h = io.popen("git describe --tags --always --dirty 2>/dev/null")
local desc = h:read("l")
h:close()
check(rc == 0 and out:match("^fsdpgen %S+") and (not desc or out:find(desc, 1, true)) and lines(out) == 1,
  "./fsdpgen --version: one line with the version and git describe (" .. out:gsub("\n", "") .. ")")
for _, cmd in ipairs({ "plan", "events", "counts", "build", "test", "run", "bench" }) do
  local a_rc, a_out, a_err = run("./fsdpgen " .. cmd .. " --help")
  local b_rc, b_out = run("./fsdpgen help " .. cmd)
  check(a_rc == 0 and a_err == "" and a_out:find("^usage: fsdpgen " .. cmd) and a_out:find("example", 1, true)
    and a_out:find("./fsdpgen " .. cmd, 1, true) and b_rc == 0 and b_out == a_out,
    string.format("./fsdpgen %s --help and ./fsdpgen help %s: its usage, options and an example (exit %d, %d lines)",
      cmd, cmd, a_rc, lines(a_out)))
end
-- the examples of the commands that only plan run as printed (comments dropped; /tmp/ is
-- this test's folder, so that another checkout's output there is not in the way), in order
for _, cmd in ipairs({ "plan", "events", "counts", "diff" }) do
  local _, help = run("./fsdpgen " .. cmd .. " --help")
  local ran, ok = 0, true
  for line in help:match("\nexample[^\n]*\n(.*)$"):gmatch("[^\n]+") do
    local c = line:match("^  (%./fsdpgen .-)%s*$")
    if not c then break end
    c = c:gsub("%s*#.*$", ""):gsub("/tmp/", work .. "/")
    ran = ran + 1
    ok = ok and run(c) == 0
  end
  check(ran > 0 and ok, string.format("./fsdpgen %s --help: its example's %d command(s) exit 0", cmd, ran))
end
rc, out, err = run("./fsdpgen run --help")
check(not err:find("unknown build option", 1, true), "./fsdpgen run --help is help, not 'unknown build option'")
rc, out, err = run("./fsdpgen plan -h")
check(rc == 0 and not err:find("cannot open", 1, true), "./fsdpgen plan -h is help, not 'cannot open spec file'")

-- ---- one-line usage errors
rc, out, err = run("./fsdpgen run examples/tiny.lua --steps 2")
check(one_line(rc, out, err, 2) and err:find("after --", 1, true) and err:find("-- --steps 2", 1, true),
  "./fsdpgen run SPEC --steps 2: one line saying the binary's options go after -- (" .. err:gsub("\n", "") .. ")")
rc, out, err = run("./fsdpgen test examples/tiny.lua --verbose")
check(one_line(rc, out, err, 2) and err:find("after --", 1, true), "./fsdpgen test SPEC --verbose: the same")
rc, out, err = run("./fsdpgen events examples")
check(one_line(rc, out, err, 2) and err:find("examples: error:", 1, true) and not err:find("syntax", 1, true),
  "a directory as the spec: one line, not a syntax error (" .. err:gsub("\n", "") .. ")")
rc, out, err = run("./fsdpgen frobnicate")
check(one_line(rc, out, err, 2), "an unknown command: one line, exit 2 (" .. err:gsub("\n", "") .. ")")

-- ---- where output goes
local sub = work .. "/sub"
os.execute("mkdir -p " .. q(sub) .. " && cp examples/tiny.lua " .. q(sub .. "/a.lua") .. " && cp examples/tiny.lua "
  .. q(sub .. "/b.lua"))
rc, out, err = run(q(ROOT .. "/fsdpgen") .. " plan a.lua -o plans", sub)
check(rc == 0 and out:find("^wrote plans/tiny%.schedule\nwrote plans/tiny%.layout\npredicted peak per rank: ")
  and io.open(sub .. "/plans/tiny.schedule") ~= nil,
  "plan -o DIR from another directory: writes DIR/<name>.schedule and .layout, prints them relative ("
  .. out:gsub("\n", "; ") .. ")")
rc, out, err = run(q(ROOT .. "/fsdpgen") .. " plan b.lua -o plans", sub)
check(one_line(rc, out, err, 2) and err:find("a.lua", 1, true) and err:find("also named 'tiny'", 1, true),
  "a second spec file named 'tiny' into the same DIR: refused in one line naming the first (" .. err:gsub("\n", "")
  .. ")")
rc, out = run(q(ROOT .. "/fsdpgen") .. " plan a.lua -o plans", sub)
check(rc == 0 and out:find("^unchanged plans/tiny%.schedule\nunchanged plans/tiny%.layout\n"),
  "the first spec file plans into it again: " .. out:gsub("\n", "; "))
rc, out, err = run(q(ROOT .. "/fsdpgen") .. " build b.lua -o bout", sub)
local built = io.open(sub .. "/bout/tiny")
check(rc == 0 and out == "built bout/tiny and bout/tiny_test\n" and built ~= nil,
  "build -o DIR from another directory: builds DIR/<name>, prints paths relative to it (" .. out:gsub("\n", "")
  .. err:sub(1, 300) .. ")")
if built then built:close() end
rc, out, err = run(q(ROOT .. "/fsdpgen") .. " build a.lua -o bout", sub)
check(one_line(rc, out, err, 2) and err:find("b.lua", 1, true),
  "build of another spec file with the same name into DIR: refused, one line (" .. err:gsub("\n", "") .. ")")
rc, out, err = run(q(ROOT .. "/fsdpgen") .. " build a.lua -o 'bad dir'", sub)
check(one_line(rc, out, err, 2) and err:find("build.ninja", 1, true),
  "build -o with a space: refused (it would break build.ninja): " .. err:gsub("\n", ""))

-- ---- names that reach C, ninja and the shell
local nl = work .. "/x\nbuild evil: phony"
os.execute("mkdir -p " .. q(nl) .. " && cp examples/tiny.lua " .. q(nl .. "/s.lua"))
rc, out, err = run("./fsdpgen build " .. q(nl .. "/s.lua") .. " -o " .. q(work .. "/nl_out"))
check(one_line(rc, out, err, 2) and err:find("control character", 1, true) and io.open(work .. "/nl_out/build.ninja") == nil,
  "a spec path with a newline: refused before anything is written (" .. err:gsub("\n", "\\n") .. ")")
local f = io.open(work .. "/escape.lua", "w")
f:write('os.execute("touch ' .. work .. '/escaped")\n')
f:close()
rc, out, err = run("./fsdpgen events " .. q(work .. "/escape.lua"))
check(one_line(rc, out, err, 2) and io.open(work .. "/escaped") == nil and err:find("sandbox", 1, true),
  "a spec calling os.execute: refused by the sandbox, nothing ran (" .. err:gsub("\n", "") .. ")")
-- require of a module next to the spec: it works, sandboxed, and its errors name its file.
os.execute("mkdir -p " .. q(work .. "/mod"))
f = io.open(work .. "/mod/blocks.lua", "w")
f:write('local nn = require("nn")\nlocal M = {}\nfunction M.make(n)\n  local t = {}\n'
  .. '  for i = 1, n do t[i] = nn.Linear(4, 4) end\n  if n > 3 then os.exit(1) end\n  return nn.Sequential(t)\nend\n'
  .. 'return M\n')
f:close()
f = io.open(work .. "/mod/s.lua", "w")
f:write('local fsdp = require("fsdp")\nlocal model = require("blocks").make(N)\nfsdp.fully_shard(model)\n'
  .. 'return fsdp.spec{ name = "modtest", model = model, world_size = 2, input = { shape = { 2, 4 } } }\n')
f:close()
os.execute("sed -i 's/(N)/(2)/' " .. q(work .. "/mod/s.lua"))
rc, out, err = run("./fsdpgen counts " .. q(work .. "/mod/s.lua"))
check(rc == 0 and out:find("forward all_gather 1", 1, true) ~= nil, "a spec requires a module of its own directory")
os.execute("sed -i 's/(2)/(5)/' " .. q(work .. "/mod/s.lua"))
rc, out, err = run("./fsdpgen counts " .. q(work .. "/mod/s.lua"))
check(one_line(rc, out, err, 2) and err:find(work .. "/mod/blocks.lua:6: error: 'os' is not available", 1, true) ~= nil,
  "that module is sandboxed too, and its error names its own file and line (" .. err:gsub("\n", "") .. ")")

-- Deterministic: the same spec plans byte-identically twice (no clock, no random).
local r1 = select(2, run("./fsdpgen events examples/llama_hsdp_ckpt.lua"))
local r2 = select(2, run("./fsdpgen events examples/llama_hsdp_ckpt.lua"))
check(r1 ~= "" and r1 == r2, "the same spec gives the same events twice")

os.execute("rm -rf " .. q(work))
util.finish()
