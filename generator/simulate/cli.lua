-- The command lines of `fsdpgen simulate` and `fsdpgen show` (generator/main.lua calls
-- these with its helpers: plan, die, usage_error, root).
local gpu_table = require("simulate.gpu")
local sim = require("simulate.sim")

local M = {}

M.HELP = {
  simulate = [[
usage: fsdpgen simulate SPEC --gpu h100|h200|a100 [--gpus-per-node G] [--nodes N]
                        [--inter-node-gbps B] [--batch B] [--kernels fsdpgen|torch]
                        [--attention-backward deterministic|atomic] [--ops N] [--json]
Predicts one training step of SPEC on that GPU: step time, compute time, exposed
communication per phase (forward, backward, optimizer), kernel time by kind, MFU, tokens/s
and the peak memory per GPU. Each op is priced from its FLOPs and bytes against the GPU's
peaks (efficiencies fitted to measured kernels), each collective by NCCL's ring cost, on
the streams the schedule uses, with its waits. The figures are in generator/simulate/gpus/<gpu>.lua.
options:
  --gpu G               the GPU table (generator/simulate/gpus/): h100, h200, a100, or
                        h100_hbm2e (the 500 W HBM2e H100s of torchtitan's published runs)
  --gpus-per-node G     re-plan SPEC at G x N GPUs (G: the spec's world size, at most 8, and
  --nodes N             N: 1 unless given); HSDP specs shard within a node, replicate across
  --inter-node-gbps B   network bandwidth per GPU in Gb/s (default: the table's, 400)
  --batch B             the input's batch size per GPU
  --kernels K           fsdpgen (default) or torch: PyTorch FSDP2 eager's kernels
  --attention-backward F
                        cuDNN's attention backward, as the binary's RT_ATTENTION_BACKWARD:
                        deterministic (default; dP written and read in its workspace) or
                        atomic (dQ summed in fp32, no dP)
  --ops N               also the N costliest ops, by name (a layer's index as *) and
                        phase: calls, kernel time, launches
  --json                one JSON object instead of the table
example:
  ./fsdpgen simulate examples/llama_1b.lua --gpu h100 --gpus-per-node 8 --nodes 8
]],
  show = [[
usage: fsdpgen show SPEC --gpu G -o FILE.svg|FILE.html [simulate's options]
Draws the simulated step: one lane per stream (compute, all-gather copy-in and collective,
reduce-scatter, all-reduce), each schedule line a box as wide as its simulated time, FSDP
events and waits marked, groups in fixed colours; below, the planned memory in use over
the step with the peak and the largest buffers named. Repeated blocks fold into one
labelled span. Prints simulate's table too.
example:
  ./fsdpgen show examples/llama_1b.lua --gpu h100 -o step.svg
]],
}

M.USAGE_OPTS = "--gpu h100|h200|a100 [--gpus-per-node G] [--nodes N] [--inter-node-gbps B] "
  .. "[--batch B] [--kernels fsdpgen|torch] [--attention-backward deterministic|atomic]"

-- cuDNN's attention backward forms (the binary's RT_ATTENTION_BACKWARD, docs/cuda.md)
local ATTENTION_BACKWARDS = { deterministic = true, atomic = true }

local function posint(v)
  return v and v:match("^%d+$") and tonumber(v) >= 1 and tonumber(v) or nil
end

-- Parses the options both commands share (and -o / --json). Returns spec path and opts.
local function parse(args, cmd, ctx, no_spec)
  local o = { nodes = nil, gpus_per_node = nil, kernels = "fsdpgen",
    attention_backward = "deterministic" }
  local spec
  local i = 1
  local function value(name)
    local v = args[i + 1]
    if not v then ctx.usage_error(cmd .. " " .. name .. " needs a value") end
    i = i + 2
    return v
  end
  while i <= #args do
    local a = args[i]
    if a == "--gpu" then o.gpu = value(a)
    elseif a == "--gpus-per-node" or a == "--nodes" or a == "--batch" then
      local n = posint(value(a))
      if not n or n > 65536 then
        ctx.usage_error(cmd .. " " .. a .. " needs an integer from 1 to 65536")
      end
      o[a:sub(3):gsub("%-", "_")] = n
    elseif a == "--inter-node-gbps" then
      local v = tonumber(value(a))
      if not v or v <= 0 or v ~= v or v == math.huge then
        ctx.usage_error(cmd .. " --inter-node-gbps needs a positive number (Gb/s per GPU)")
      end
      o.net_gbps = v
    elseif a == "--kernels" then
      o.kernels = value(a)
    elseif a == "--attention-backward" then
      o.attention_backward = value(a)
    elseif a == "--json" and cmd == "simulate" then o.json = true; i = i + 1
    elseif a == "--ops" and cmd == "simulate" then
      o.ops = posint(value(a))
      if not o.ops or o.ops > 1000 then ctx.usage_error("simulate --ops needs an integer from 1 to 1000") end
    elseif a == "-o" and cmd == "show" then o.out = value(a)
    elseif a:sub(1, 1) == "-" then
      ctx.usage_error(string.format("unknown %s option '%s' (allowed: %s%s)", cmd, a, M.USAGE_OPTS,
        cmd == "simulate" and " [--ops N] [--json]" or cmd == "show" and " -o FILE.svg|FILE.html" or ""))
    elseif spec or no_spec then ctx.usage_error("unexpected argument '" .. a .. "'")
    else spec = a; i = i + 1 end
  end
  if not spec and not no_spec then ctx.usage_error(cmd .. " needs a SPEC") end
  local max = require("spec.fsdp").MAX_WORLD_SIZE
  if (o.gpus_per_node or 8) * (o.nodes or 1) > max then
    ctx.usage_error(string.format("%s: --gpus-per-node x --nodes is at most %d GPUs", cmd, max))
  end
  if not o.gpu then
    ctx.usage_error(cmd .. " needs --gpu (" .. table.concat(gpu_table.kinds(ctx.root), ", ") .. ")")
  end
  local g, err = gpu_table.load(ctx.root, o.gpu)
  if not g then ctx.die(2, "fsdpgen " .. cmd .. ": " .. err) end
  o.gpu = g
  if not g.kernels[o.kernels] then
    local ks = {}
    for k in pairs(g.kernels) do ks[#ks + 1] = k end
    table.sort(ks)
    ctx.die(2, string.format("fsdpgen %s: --kernels %s: no such kernel set for %s (allowed: %s)",
      cmd, o.kernels, g.kind, table.concat(ks, ", ")))
  end
  if not ATTENTION_BACKWARDS[o.attention_backward] then
    ctx.die(2, string.format("fsdpgen %s: --attention-backward %s: no such form of cuDNN's "
      .. "backward (allowed: deterministic, atomic)", cmd, o.attention_backward))
  end
  o.net_gbps = o.net_gbps or g.net_gbps
  return spec, o
end

-- Plans the spec at the simulated world and runs the simulation.
local function simulate(spec_path, o, ctx)
  local rescale = o.gpus_per_node or o.nodes
  local transform
  if rescale or o.batch then
    transform = function(spec)
      if rescale then
        o.gpus_per_node = o.gpus_per_node or math.min(8, spec.world_size)
        o.nodes = o.nodes or 1
      end
      sim.rescale(spec, rescale and o.gpus_per_node, o.nodes, o.batch)
    end
  end
  local plan = ctx.plan(spec_path, transform)
  if not rescale then
    -- the spec's own world: nodes of up to 8 GPUs
    o.gpus_per_node = math.min(8, plan.spec.world_size)
    o.nodes = (plan.spec.world_size + o.gpus_per_node - 1) // o.gpus_per_node
  end
  return sim.run(plan, o), plan
end

function M.simulate(args, ctx)
  local spec_path, o = parse(args, "simulate", ctx)
  local r = simulate(spec_path, o, ctx)
  io.write(o.json and sim.json(r) or sim.text(r))
end

-- `fsdpgen diff OLD NEW --gpu G ...`: the simulated change of a sharding change, as lines
-- for the review summary (both sides specs).
function M.diff_lines(old_path, new_path, args, ctx)
  local o = select(2, parse(args, "diff", ctx, true))
  local function copy()
    local c = {}
    for k, v in pairs(o) do c[k] = v end
    return c
  end
  local a, b = simulate(old_path, copy(), ctx), simulate(new_path, copy(), ctx)
  local function ms(x) return string.format("%.2f ms", x * 1e3) end
  -- a difference as printed: rounded to its digits first, so that noise is +0.00, not -0.00
  local function shown(v, fmt) return tonumber(string.format(fmt, v)) + 0.0 end
  local function change(x, y)
    return string.format("%s -> %s (%+.2f ms, %+.1f%%)", ms(x), ms(y), shown((y - x) * 1e3, "%.2f"),
      shown(x > 0 and 100 * (y / x - 1) or 0, "%.1f"))
  end
  local units = require("util.units")
  local out = {}
  out[#out + 1] = string.format("simulated step   %s on %d x %s (%d node%s x %d GPUs, network %g "
    .. "Gb/s per GPU, %s kernels)", change(a.step_s, b.step_s), b.world, b.gpu_name, b.nodes,
    b.nodes == 1 and "" or "s", b.gpus_per_node, b.net_gbps, b.kernels)
  out[#out + 1] = "  exposed comm   " .. change(a.exposed_s, b.exposed_s)
  local names, pa, pb = {}, {}, {}
  for _, p in ipairs(a.phases) do pa[p.name] = p; names[#names + 1] = p.name end
  for _, p in ipairs(b.phases) do
    pb[p.name] = p
    if not pa[p.name] then names[#names + 1] = p.name end
  end
  for _, n in ipairs(names) do
    local x, y = pa[n] and pa[n].exposed_s or 0, pb[n] and pb[n].exposed_s or 0
    out[#out + 1] = string.format("    %-12s %s", n, change(x, y))
  end
  if a.copies_s > 0 or b.copies_s > 0 then
    out[#out + 1] = "  FSDP copies    " .. change(a.copies_s, b.copies_s) .. " beside compute"
  end
  out[#out + 1] = string.format("  MFU            %.1f%% -> %.1f%%", 100 * a.mfu, 100 * b.mfu)
  out[#out + 1] = string.format("  peak memory    %s -> %s per GPU (at the simulated world)",
    units.bytes(a.peak_bytes), units.bytes(b.peak_bytes))
  out[#out + 1] = string.format("  %-14s %.0f -> %.0f per GPU per second", a.unit, a.per_gpu_s,
    b.per_gpu_s)
  return out
end

function M.show(args, ctx)
  local spec_path, o = parse(args, "show", ctx)
  if not o.out then ctx.usage_error("show needs -o FILE.svg or -o FILE.html") end
  local kind = o.out:match("%.svg$") and "svg" or o.out:match("%.html?$") and "html"
  if not kind then
    ctx.usage_error("show -o " .. o.out .. ": the file must end in .svg or .html")
  end
  local r, plan = simulate(spec_path, o, ctx)
  local svg = require("simulate.svg").render(plan, r)
  if kind == "html" then
    svg = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" .. plan.spec.name
      .. " step</title></head>\n<body style=\"margin:0\">\n" .. svg .. "</body></html>\n"
  end
  local path, changed = require("util.buffer").write_if_changed(o.out, svg)
  if not path then ctx.die(1, "fsdpgen: " .. changed) end
  print((changed and "wrote " or "unchanged ") .. o.out)
  io.write(sim.text(r))
end

return M
