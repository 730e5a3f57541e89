-- The command line's help (`fsdpgen help [CMD]`, `fsdpgen CMD --help`, `--version`) and
-- the ownership record of an output directory (two specs with the same name must not
-- silently overwrite each other's build).
local M = {}

-- Per command: usage, what it does, its options, an example.
M.HELP = {
  plan = [[
usage: fsdpgen plan SPEC [-o DIR]
Plans SPEC and writes DIR/<name>.schedule (default build/<name>/), only when it changed:
the spec, every group and parameter, one line per step, the eval program, the memory plan;
and DIR/<name>.layout, the arena offsets and buffer lifetimes (the .schedule leaves them
out, so that its diff shows what changed in meaning).
options:
  -o DIR    write the schedule into DIR instead of build/<name>/
example:
  ./fsdpgen plan examples/tiny.lua -o /tmp/plans
]],
  events = [[
usage: fsdpgen events SPEC
Prints one training step's FSDP events, one per line: STATE KIND "GROUP" (the root group
is ""), as PyTorch's tests record them.
example:
  ./fsdpgen events examples/tiny.lua
]],
  counts = [[
usage: fsdpgen counts SPEC
Prints the step's collective counts: forward all_gather N, backward all_gather N,
backward reduce_scatter N (and backward all_reduce N under HSDP).
example:
  ./fsdpgen counts examples/llama_hsdp_ckpt.lua
]],
  diff = [[
usage: fsdpgen diff OLD NEW [--gpu G ...]   (... : simulate's options)
Compares two specs or two .schedule files (or one of each) and prints the review summary of
the change: spec and per-group option changes, collectives per phase and the bytes each rank
sends per step, the predicted peak and what is live there, FSDP events added, removed or
moved, then the changed .schedule lines. Exit 0 when it compared, 2 on bad input.
`fsdpgen diff --git` is git's external diff driver (docs/reviewing.md).
With --gpu G and simulate's options after OLD and NEW (two specs), it adds the simulated
step-time and exposed-communication change (fsdpgen help simulate).
example (the review of an edit: the schedule planned before it against the spec after it):
  ./fsdpgen plan examples/tiny.lua     # then edit examples/tiny.lua
  ./fsdpgen diff build/tiny/tiny.schedule examples/tiny.lua
]],
  torch = [[
usage: fsdpgen torch SPEC [-o FILE]
Writes the spec's twin: one standalone PyTorch program with the same model, fully_shard
calls, step program, optimizer, inputs and initial weights, which runs in real FSDP2 and
prints the events, counts and losses the binary prints (docs/fsdp2_oracle.md).
options:
  -o FILE   write the twin to FILE (default build/<name>/<name>_twin.py)
example:
  ./fsdpgen torch examples/tiny.lua -o /tmp/tiny_twin.py && python3 /tmp/tiny_twin.py --world 2
]],
  build = [[
usage: fsdpgen build SPEC [--cuda] [-o DIR]
Emits the C of SPEC and builds the training binary DIR/<name> and its conformance test
DIR/<name>_test (default DIR: build/<name>/). A directory holds one spec's build: another
spec file with the same name is refused (rename it or give -o DIR).
options:
  --cuda    build <name>_cuda and <name>_cuda_test on the CUDA backend instead
  -o DIR    build into DIR (letters, digits and . _ - + / only: it is written into build.ninja)
example:
  ./fsdpgen build examples/tiny.lua && build/tiny/tiny --steps 5
]],
  test = [[
usage: fsdpgen test SPEC [--cuda] [-o DIR] [-- ARGS]
Builds SPEC (as build) and runs its conformance test: events, collective counts, the loss
against a non-sharded reference over 10 steps, the arena's peak. ARGS go to the test
(--steps N, --verbose; DIR/<name>_test --help lists them).
example:
  ./fsdpgen test examples/tiny.lua -- --steps 20
]],
  run = [[
usage: fsdpgen run SPEC [--cuda] [-o DIR] [-- ARGS]
Builds SPEC (as build) and trains: ARGS, after --, go to the training binary
(--steps N, --data FILE, --val-data FILE, --save FILE, --trace FILE, ...; DIR/<name> --help
lists them all).
example:
  ./fsdpgen run examples/tiny.lua -- --steps 50 --log-every 10
]],
  bench = [[
usage: fsdpgen bench comm [ARGS]
       fsdpgen bench train SPEC [--cuda] [--steps N] [-- ARGS]
comm: the all-gather and reduce-scatter benchmark (ARGS: --world N, --backend threads|nccl,
--dtype fp32|bf16|fp16). train: builds SPEC and trains N steps (default 20, at least 2)
with --bench: tokens/s of the median step after warm-up and, on the CPU, the split into
compute, exposed communication and optimizer time.
examples:
  ./fsdpgen bench comm --world 4
  ./fsdpgen bench train examples/tiny.lua --steps 10
]],
  help = [[
usage: fsdpgen help [COMMAND]
Prints the commands, or one command's usage, options and an example (as COMMAND --help).
example:
  ./fsdpgen help run
]],
}

-- The version: `git describe` of the checkout where there is one, else the generator's.
function M.version(root)
  local v = require("emit.schedule").VERSION
  local p = io.popen("git -C '" .. root:gsub("'", "'\\''") .. "' describe --tags --always --dirty 2>/dev/null")
  local git = p and p:read("l")
  if p then p:close() end
  if git and git ~= "" then return v .. " (git " .. git .. ")" end
  return v
end

-- The answer to a help or version request, { text, status }, or nil for a real command.
function M.answer(root, cmd, args, usage, commands)
  local tail = "\nRun ./fsdpgen help COMMAND (or COMMAND --help) for its options and an example.\n"
  if not cmd then return { text = usage .. "\n" .. tail, status = 2 } end
  if cmd == "-h" or cmd == "--help" then return { text = usage .. "\n" .. tail, status = 0 } end
  if cmd == "--version" or cmd == "version" then return { text = M.version(root) .. "\n", status = 0 } end
  if cmd == "help" then
    local what = args[1]
    if not what then return { text = usage .. "\n" .. tail, status = 0 } end
    if M.HELP[what] then return { text = M.HELP[what], status = 0 } end
    if commands[what] then return { text = usage .. "\n", status = 0 } end
    return { text = "fsdpgen: no command '" .. tostring(what) .. "'\n" .. usage .. "\n", status = 2 }
  end
  if not M.HELP[cmd] then return nil end
  for _, a in ipairs(args) do
    if a == "--" then break end
    if a == "--help" or a == "-h" then return { text = M.HELP[cmd], status = 0 } end
  end
  return nil
end

local function sh_quote(x) return "'" .. tostring(x):gsub("'", "'\\''") .. "'" end

-- The canonical path of an existing file (symlinks and ./.. resolved).
local function realpath(path)
  local p = io.popen("realpath -- " .. sh_quote(path) .. " 2>/dev/null")
  local r = p and p:read("l")
  if p then p:close() end
  return r ~= "" and r or path
end

-- Records in DIR/.<name>.spec which spec file writes DIR's <name> files, and refuses (nil, message) when
-- another spec file already does: two specs with the same name would otherwise overwrite
-- each other's build. `shown` prints a path relative to the current directory.
function M.claim(dir, spec_path, name, shown)
  local me = realpath(spec_path)
  local record = dir .. "/." .. name .. ".spec"
  local f = io.open(record, "r")
  if f then
    local owner = f:read("l")
    f:close()
    if owner and owner ~= "" and owner ~= me and io.open(owner, "r") then
      return nil, string.format("%s holds the build of %s, also named '%s'; rename one spec's name, give -o DIR, "
        .. "or remove %s", shown(dir) .. "/", shown(owner), name, shown(dir) .. "/")
    end
    if owner == me then return true end
  end
  os.execute("mkdir -p " .. sh_quote(dir))
  f = io.open(record, "w")
  if not f then return nil, "cannot write " .. shown(record) end
  f:write(me, "\n")
  f:close()
  return true
end

return M
