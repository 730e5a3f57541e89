-- fsdpgen command line: `plan`, `events`, `counts`, `build`, `test`, `run`, `bench`.
-- Exit status: 0 success, 1 failure at run time, 2 bad spec or bad arguments.
-- The generator's stages are its folders, each requiring only earlier ones: spec/ (load,
-- trace) -> plan/ (FSDP2) -> memory/ -> emit/ (check, .schedule, C) -> simulate/; util/
-- is shared text helpers. Modules are required by folder: require("plan.planner").
local ROOT = arg[1]
package.path = table.concat({ ROOT .. "/generator/?.lua", ROOT .. "/?.lua", ROOT .. "/?/init.lua" }, ";")

local errors = require("spec.errors")
local loader = require("spec.loader")
local planner = require("plan.planner")

local USAGE = [[
usage: fsdpgen COMMAND SPEC [options]       (fsdpgen help COMMAND: its options and an example)
  plan SPEC [-o DIR]      write DIR/<name>.schedule and <name>.layout (default build/<name>/)
  events SPEC             print one step's FSDP events: STATE KIND "GROUP"
  counts SPEC             print the step's collective counts
  diff OLD NEW            review summary of a change (each a spec or a .schedule)
  simulate SPEC --gpu G   predicted step time, exposed communication, MFU, tokens/s, memory
  show SPEC --gpu G -o F  the simulated step drawn as SVG (or HTML): streams, waits, memory
  torch SPEC [-o FILE]    write the spec's PyTorch FSDP2 twin (default build/<name>/<name>_twin.py)
  build SPEC [--cuda] [-o DIR]
                          emit the C and build DIR/<name> (default build/<name>/; --cuda: <name>_cuda)
  test SPEC [--cuda] [-o DIR] [-- ARGS]
                          build and run the spec's conformance test
  run SPEC [--cuda] [-o DIR] [-- ARGS]
                          build and train (ARGS, after --, go to the training binary)
  bench comm [ARGS]       collective benchmark (see docs/runtime.md)
  bench train SPEC [--cuda] [--steps N] [-- ARGS]
                          build, train N steps (default 20) and print tokens/s and the
                          compute / exposed communication / optimizer split
  help [COMMAND], --version]]

local function die(status, msg)
  io.stderr:write(msg, "\n")
  os.exit(status)
end

-- One line: what was wrong, and where the usage is.
local function usage_error(msg)
  die(2, "fsdpgen: " .. msg .. " (./fsdpgen help shows the usage)")
end

-- Runs fn(path) (load, plan, emit); spec errors exit 2 with one line.
local function guarded(path, what, fn)
  errors.arm_budget(errors.PLAN_SECONDS)
  local ok, res = pcall(fn)
  errors.arm_budget(nil)
  if ok then return res end
  if errors.is_spec_error(res) and not res.internal then die(2, errors.format(res, path)) end
  if os.getenv("FSDPGEN_DEBUG") then io.stderr:write(res.internal or tostring(res), "\n") end
  local where = type(res) == "table" and res.line and (path .. ":" .. res.line) or path
  die(1, "fsdpgen: internal error while " .. what .. " " .. where .. ": " .. tostring(type(res) == "table" and res.msg or res)
    .. " (please report it; FSDPGEN_DEBUG=1 shows a traceback)")
end

-- Loads, plans and checks a spec (`transform` adjusts the loaded spec first, e.g. the
-- reference): every command refuses what build would (generator/emit/check.lua).
local function plan_spec(path, transform)
  return guarded(path, "planning", function()
    local spec = loader.load(path)
    if transform then transform(spec) end
    -- The stages in order: FSDP plan, memory plan, the check of what the emitters can do.
    local function plan_checked(s)
      return require("emit.check").run(require("memory.memory").plan_all(planner.plan(s)))
    end
    return loader.protect(spec.line, plan_checked, spec)
  end)
end

local commands = {}
local help = require("help")

-- Where the user ran fsdpgen (the wrapper is sh, which sets PWD to the real directory).
local CWD = os.getenv("PWD") or ROOT
local function abs(p) return p:sub(1, 1) == "/" and p or (CWD .. "/" .. p) end
-- A path as printed: relative to the current directory when it is below it.
local function shown(p)
  p = abs(p):gsub("/%./", "/")
  if p:sub(1, #CWD + 1) == CWD .. "/" then return p:sub(#CWD + 2) end
  return p
end

function commands.events(args)
  if #args ~= 1 then usage_error("events takes exactly one SPEC") end
  local out = planner.event_lines(plan_spec(args[1]))
  io.write(table.concat(out, "\n"), #out > 0 and "\n" or "")
end

function commands.counts(args)
  if #args ~= 1 then usage_error("counts takes exactly one SPEC") end
  local plan = plan_spec(args[1])
  local lines = planner.count_lines(plan)
  io.write(table.concat(lines, "\n"), "\n")
end

-- Reads "SPEC [-o OUT]" for `cmd`, whose -o names a `what` ("directory", "file").
local function spec_and_out(args, cmd, what)
  local spec_path, out
  local i = 1
  while i <= #args do
    if args[i] == "-o" then
      out = args[i + 1]
      if not out then usage_error("-o needs a " .. what) end
      i = i + 2
    elseif args[i]:sub(1, 1) == "-" then
      usage_error("unknown " .. cmd .. " option '" .. args[i] .. "' (allowed: -o " .. (what == "file" and "FILE" or "DIR") .. ")")
    elseif not spec_path then
      spec_path = args[i]
      i = i + 1
    else
      usage_error("unexpected argument '" .. args[i] .. "'")
    end
  end
  if not spec_path then usage_error(cmd .. " needs a SPEC") end
  return spec_path, out
end

function commands.plan(args)
  local spec_path, out_dir = spec_and_out(args, "plan", "directory")
  local plan = plan_spec(spec_path)
  local schedule = require("emit.schedule")
  out_dir = out_dir and abs(out_dir) or (ROOT .. "/build/" .. plan.spec.name)
  local owner_ok, owner_err = help.claim(out_dir, spec_path, plan.spec.name, shown)
  if not owner_ok then die(2, "fsdpgen: " .. owner_err) end
  local files, err = schedule.write(plan, out_dir, spec_path)
  if not files then die(1, "fsdpgen: " .. err) end
  for _, f in ipairs(files) do print((f.changed and "wrote " or "unchanged ") .. shown(f.path)) end
  print(string.format("predicted peak per rank: %d bytes (%s)", plan.memory.peak, require("util.units").bytes(plan.memory.peak)))
end

local function sh_quote(x) return "'" .. tostring(x):gsub("'", "'\\''") .. "'" end

local function exec(bin, args)
  local q = { sh_quote(bin) }
  for _, a in ipairs(args) do q[#q + 1] = sh_quote(a) end
  local _, _, status = os.execute(table.concat(q, " "))
  os.exit(status or 1)
end

-- `torch SPEC [-o FILE]`: the spec's PyTorch FSDP2 twin (generator/emit/emit_torch.lua).
function commands.torch(args)
  local spec_path, out = spec_and_out(args, "torch", "file")
  local plan = plan_spec(spec_path)
  local text = guarded(spec_path, "writing the PyTorch twin of", function()
    return loader.protect(plan.spec.line, require("emit.emit_torch").text, plan, spec_path, ROOT)
  end)
  out = out or (ROOT .. "/build/" .. plan.spec.name .. "/" .. plan.spec.name .. "_twin.py")
  local path, changed = require("util.buffer").write_if_changed(out, text)
  if not path then die(1, "fsdpgen: " .. changed) end
  print((changed and "wrote " or "unchanged ") .. path)
end

local bench_train
-- `bench comm ARGS`: the collective benchmark; `bench train SPEC [--steps N] [-- ARGS]`:
-- builds the spec and runs its binary with --bench.
function commands.bench(args)
  if args[1] == "train" then return bench_train({ table.unpack(args, 2) }) end
  if args[1] ~= "comm" then usage_error("bench takes 'comm' or 'train'") end
  local bin = ROOT .. "/build/runtime/bench_comm"
  local ok = os.execute("cd " .. sh_quote(ROOT) .. " && ninja -f runtime/core.ninja build/runtime/bench_comm >/dev/null")
  if not ok then die(1, "fsdpgen: could not build build/runtime/bench_comm (run: ninja -f runtime/core.ninja)") end
  exec(bin, { table.unpack(args, 2) })
end

-- Emits the C and builds DIR/<name> (-o DIR, default build/<name>/) and its conformance
-- test (--cuda: <name>_cuda and <name>_cuda_test); returns the output directory (an
-- absolute path) and the binary's name. `cmd` names the command for the usage errors.
local function build_spec(args, cmd)
  local spec_path, cuda, out_dir = nil, false, nil
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == "--cuda" then cuda = true
    elseif a == "-o" then
      out_dir = args[i + 1]
      if not out_dir then usage_error("-o needs a directory") end
      i = i + 1
    elseif a:sub(1, 1) == "-" then
      if cmd ~= "build" then
        usage_error(string.format("'%s' is not an option of %s (allowed: --cuda, -o DIR); options of the %s go "
          .. "after --, e.g. ./fsdpgen %s SPEC -- %s", a, cmd, cmd == "test" and "conformance test" or "training binary",
          cmd, table.concat(args, " ", i)))
      end
      usage_error("unknown build option '" .. a .. "' (allowed: --cuda, -o DIR)")
    elseif spec_path then usage_error("unexpected argument '" .. a .. "'")
    else spec_path = a end
    i = i + 1
  end
  if not spec_path then usage_error((cmd or "build") .. " needs a SPEC") end
  if cuda and not io.open("/usr/local/cuda/bin/nvcc", "r") then
    die(2, "fsdpgen build --cuda: /usr/local/cuda/bin/nvcc not found (install the CUDA toolkit with cuBLAS and NCCL, "
      .. "or build without --cuda for the CPU backend)")
  end
  local plan = plan_spec(spec_path)
  local reference = plan_spec(spec_path, require("spec.reference").transform)
  -- The output directory, relative to ROOT when below it (ninja runs there), else absolute.
  local dir = "build/" .. plan.spec.name
  if out_dir then
    if not out_dir:match("^[%w%._%-/+]+$") then
      usage_error("-o " .. out_dir .. ": the directory may hold only letters, digits and . _ - + / "
        .. "(it is written into build.ninja)")
    end
    dir = abs(out_dir):gsub("/+$", "")
    if dir:sub(1, #ROOT + 1) == ROOT .. "/" then dir = dir:sub(#ROOT + 2) end
  end
  local full = dir:sub(1, 1) == "/" and dir or (ROOT .. "/" .. dir)
  local owner_ok, owner_err = help.claim(full, spec_path, plan.spec.name, shown)
  if not owner_ok then die(2, "fsdpgen: " .. owner_err) end
  guarded(spec_path, "emitting", function()
    local write = require("emit.emit_build").write
    return loader.protect(plan.spec.line, write, ROOT, dir, plan, reference, spec_path)
  end)
  -- Quiet unless the build fails: then the compiler's output is what the user needs.
  local ninja_file = dir .. (cuda and "/build_cuda.ninja" or "/build.ninja")
  local p = io.popen("cd " .. sh_quote(ROOT) .. " && ninja -f " .. sh_quote(ninja_file) .. " 2>&1")
  local out = p:read("a")
  if not p:close() then
    io.stderr:write(out)
    die(1, "fsdpgen build: compiling " .. shown(full) .. " failed (see the compiler output above)")
  end
  return full, plan.spec.name .. (cuda and "_cuda" or "")
end

-- Splits "SPEC [opts] [-- ARGS]" into the build arguments and the program's arguments.
local function split_args(args)
  local mine, rest, seen = {}, {}, false
  for _, a in ipairs(args) do
    if seen then rest[#rest + 1] = a
    elseif a == "--" then seen = true
    else mine[#mine + 1] = a end
  end
  return mine, rest
end


bench_train = function(args)
  local mine, rest = split_args(args)
  local steps = "20"
  local build_args = {}
  local i = 1
  while i <= #mine do
    if mine[i] == "--steps" then
      steps = mine[i + 1]
      if not steps or not steps:match("^%d+$") or tonumber(steps) < 2 then
        usage_error("bench train --steps needs an integer >= 2 (the first step is warm-up)")
      end
      i = i + 2
    else
      build_args[#build_args + 1] = mine[i]
      i = i + 1
    end
  end
  local dir, name = build_spec(build_args, "bench")
  local run = { "--bench", "--steps", steps, "--log-every", steps }
  for _, a in ipairs(rest) do run[#run + 1] = a end
  exec(dir .. "/" .. name, run)
end

function commands.build(args)
  local dir, name = build_spec(args, "build")
  print("built " .. shown(dir .. "/" .. name) .. " and " .. shown(dir .. "/" .. name .. "_test"))
end

function commands.test(args)
  local mine, rest = split_args(args)
  local dir, name = build_spec(mine, "test")
  exec(dir .. "/" .. name .. "_test", rest)
end

function commands.run(args)
  local mine, rest = split_args(args)
  local dir, name = build_spec(mine, "run")
  exec(dir .. "/" .. name, rest)
end

function commands.diff(args)
  require("diff").main(args, { plan = plan_spec, die = die, usage_error = usage_error, root = ROOT })
end

-- `simulate` and `show`: generator/simulate/ (the step on a GPU, predicted from the plan).
local sim_cli = require("simulate.cli")
for _, name in ipairs({ "simulate", "show" }) do
  help.HELP[name] = sim_cli.HELP[name]
  commands[name] = function(args)
    sim_cli[name](args, { plan = plan_spec, die = die, usage_error = usage_error, root = ROOT })
  end
end

local cmd = arg[2]
local rest = {}
for k = 3, #arg do rest[#rest + 1] = arg[k] end
-- help, --help, -h, --version and CMD --help (before any `--`) are answered here.
local answer = help.answer(ROOT, cmd, rest, USAGE, commands)
if answer then
  io.write(answer.text)
  os.exit(answer.status)
end
local fn = commands[cmd]
if not fn then usage_error("unknown command '" .. cmd .. "'") end
fn(rest)
