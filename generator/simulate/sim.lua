-- `fsdpgen simulate`: the predicted step of a plan on a given GPU and world (time by
-- phase, exposed communication, MFU, tokens/s, peak memory), as text or JSON. The spec is
-- re-planned at the simulated world size (rescale), so shard sizes are the real ones.
local timeline = require("simulate.timeline")
local cost = require("simulate.cost")
local flops = require("plan.flops")
local units = require("util.units")
local json = require("util.json")

local M = {}

-- Adjusts a freshly loaded spec to `gpn` GPUs per node x `nodes` (in place): a plain FSDP
-- spec shards over the whole world; an HSDP spec (a mesh with replicas) shards within a
-- node and replicates across nodes. An integer reshard_after_forward that no longer
-- divides the shard group becomes the node size where that divides it, else True.
-- batch, when given, replaces the input's batch size.
function M.rescale(spec, gpn, nodes, batch)
  if gpn then
    local world = gpn * nodes
    local hsdp = spec.mesh.replicate > 1
    for _, s in ipairs(spec.states) do hsdp = hsdp or (s.mesh and s.mesh.replicate > 1) end
    local mesh = hsdp and { replicate = nodes, shard = gpn } or { replicate = 1, shard = world }
    spec.mesh, spec.world_size = mesh, world
    for _, s in ipairs(spec.states) do
      if s.mesh then s.mesh = { replicate = mesh.replicate, shard = mesh.shard } end
      local raf = s.reshard_after_forward
      if math.type(raf) == "integer" and mesh.shard % raf ~= 0 then
        s.reshard_after_forward = (gpn > 1 and mesh.shard % gpn == 0) and gpn or true
      end
    end
  end
  if batch then spec.input.shape[1] = batch end
  return spec
end

-- cost.lua's class names as the kernel time line prints them
local KIND_NAMES = { gemm = "GEMM", fsdp = "FSDP copies on compute", norm = "norms" }

-- The step's ops by name, a layer's index as * (layers.*.attention.wq.linear; an
-- optimizer step by its group), and phase, each with its calls, kernel time and launches,
-- costliest first: the first n.
local function op_costs(tl, n)
  local by, list = {}, {}
  for _, rec in ipairs(tl.lines) do
    local st, c = rec.st, rec.cost
    local name = st.node and st.node.label or st.op == "optimizer" and st.group
      and "optimizer of " .. (st.group.name ~= "" and st.group.name or "the root")
    if name and c.compute > 0 then
      name = name:gsub("%.%d+%.", ".*."):gsub("%.%d+$", ".*")
      local key = name .. "\0" .. st.op
      local e = by[key]
      if not e then
        e = { op = name, phase = st.op, calls = 0, time_s = 0, launches = 0 }
        by[key], list[#list + 1] = e, e
      end
      e.calls, e.time_s, e.launches = e.calls + 1, e.time_s + c.compute, e.launches + (c.launches or 0)
    end
  end
  table.sort(list, function(a, b)
    if a.time_s ~= b.time_s then return a.time_s > b.time_s end
    return a.op .. a.phase < b.op .. b.phase
  end)
  for i = #list, n + 1, -1 do list[i] = nil end
  return list
end

-- Runs the timeline. opts = { gpu (table), kernels (name), gpus_per_node, nodes, net_gbps,
-- optimizer_stream, attention_backward }: where the optimizer steps run, "side" (fsdpgen's
-- default: each group's beside the backward, RT_OPTIMIZER_STREAM) or "compute" (after the
-- backward, as PyTorch's, and so always with --kernels torch); cuDNN's attention backward,
-- "deterministic" (the binary's default, RT_ATTENTION_BACKWARD) or "atomic".
function M.run(plan, opts)
  local gpu = opts.gpu
  local topo = { gpu = gpu, k = gpu.kernels[opts.kernels], gpus_per_node = opts.gpus_per_node,
    net_gbps = opts.net_gbps,
    optimizer_stream = opts.kernels == "torch" and "compute" or opts.optimizer_stream or "side",
    attention_backward = opts.attention_backward or "deterministic" }
  local tl = timeline.run(plan, topo)
  local spec = plan.spec
  local fc = flops.count(plan)   -- model FLOPs (PaLM, bench/flops.py) and tokens, one rank
  local per = fc.rank_tokens
  local r = {
    spec = spec.name, gpu = gpu.kind, gpu_name = gpu.name, kernels = opts.kernels,
    gpus_per_node = opts.gpus_per_node, nodes = opts.nodes, world = spec.world_size,
    replicate = spec.mesh.replicate, shard = spec.mesh.shard, net_gbps = opts.net_gbps,
    step_s = tl.step, compute_s = 0, exposed_s = 0, phases = {},
    model_flops = fc.rank_flops, hw_flops = tl.hw_flops,
    mfu = fc.rank_flops / (tl.step * gpu.bf16_tflops * 1e12),
    unit = spec.input.tokens and "tokens" or "samples",
    per_gpu_step = per, per_s = per * spec.world_size / tl.step, per_gpu_s = per / tl.step,
    peak_bytes = plan.memory.peak, memory_gb = gpu.memory_gb, peak_tflops = gpu.bf16_tflops,
    timeline = tl,
  }
  -- the attention ops of the step, how many the binary would run on cuDNN, and the form of
  -- cuDNN's backward priced
  local att = { choice = spec.attention, ops = 0, cudnn = 0,
    backward = topo.attention_backward }
  for _, op in ipairs(plan.graph.ops) do
    if op.kind == "attention" then
      att.ops = att.ops + 1
      if cost.attention_cudnn(op, spec, gpu, topo.k, topo.attention_backward) then
        att.cudnn = att.cudnn + 1
      end
    end
  end
  if att.ops > 0 then r.attention = att end
  -- kernel time by kind (cost.lua's classes; the optimizer's wherever it runs), largest
  -- first, with the launches priced in it (launch_us each): what `tests/gpu/kernel_times.py`
  -- sums from ncu on a GPU, and `tests/gpu/refit.py` holds against it
  r.kinds = {}
  for kind, s in pairs(tl.classes) do
    if s > 0 then
      r.kinds[#r.kinds + 1] = { kind = KIND_NAMES[kind] or kind, time_s = s, launches = tl.launches[kind] or 0 }
    end
  end
  -- the copies beside compute: they take memory bandwidth from it on a GPU, which the
  -- timeline does not price
  r.copies_s, r.copy_launches = tl.copies, tl.copy_launches
  r.kernel_figures = topo.k  -- the table's figures that priced them (gpus/<gpu>.lua)
  if opts.ops then r.ops = op_costs(tl, opts.ops) end
  table.sort(r.kinds, function(a, b)
    if a.time_s ~= b.time_s then return a.time_s > b.time_s end
    return a.kind < b.kind
  end)
  -- the optimizer steps beside the backward: how much of them runs after it, and the step
  -- with them on compute after the backward (RT_OPTIMIZER_STREAM=compute): kernels of
  -- different streams do not slow each other here, so what hides is an upper bound
  if tl.optimizer then
    local serial = setmetatable({ optimizer_stream = "compute" }, { __index = topo })
    r.optimizer = { total_s = tl.optimizer.total, after_s = tl.optimizer.after,
      serial_step_s = timeline.run(plan, serial).step }
  end
  -- phases by name, in order of first appearance (microbatches add up)
  local idx = {}
  for _, p in ipairs(tl.phases) do
    local e = idx[p.name]
    if not e then
      e = { name = p.name, time_s = 0, compute_s = 0, ag_s = 0, rs_s = 0, ar_s = 0, tail_s = 0 }
      idx[p.name] = e
      r.phases[#r.phases + 1] = e
    end
    e.time_s = e.time_s + (p.finish - p.start)
    e.compute_s = e.compute_s + p.compute
    e.ag_s, e.rs_s, e.ar_s = e.ag_s + p.exposed.ag, e.rs_s + p.exposed.rs, e.ar_s + p.exposed.ar
    e.tail_s = e.tail_s + p.exposed.tail
    r.compute_s = r.compute_s + p.compute
  end
  for _, e in ipairs(r.phases) do
    e.exposed_s = e.ag_s + e.rs_s + e.ar_s + e.tail_s
    r.exposed_s = r.exposed_s + e.exposed_s
  end
  return r
end

local function ms(s) return string.format("%.2f ms", s * 1e3) end

local function si(x)
  if x >= 1e6 then return string.format("%.2f M", x / 1e6) end
  if x >= 1e3 then return string.format("%.1f k", x / 1e3) end
  return string.format("%.1f ", x)
end

function M.text(r)
  local out = {}
  local function line(fmt, ...) out[#out + 1] = string.format(fmt, ...) end
  line("simulated step of %s on %d x %s (%d node%s x %d GPU%s; network %g Gb/s per GPU; "
    .. "%s kernels)",
    r.spec, r.world, r.gpu_name, r.nodes, r.nodes == 1 and "" or "s", r.gpus_per_node,
    r.gpus_per_node == 1 and "" or "s", r.net_gbps, r.kernels)
  line("  mesh          world %d = replicate %d x shard %d; %d %s per GPU per step", r.world,
    r.replicate, r.shard, r.per_gpu_step, r.unit)
  line("  step          %s (compute %s, exposed communication %s)", ms(r.step_s), ms(r.compute_s),
    ms(r.exposed_s))
  line("  %-12s %11s %11s %11s %11s %11s %11s", "phase", "time", "compute", "exposed ag",
    "exposed rs", "exposed ar", "step end")
  for _, p in ipairs(r.phases) do
    line("  %-12s %11s %11s %11s %11s %11s %11s", p.name, ms(p.time_s), ms(p.compute_s), ms(p.ag_s),
      ms(p.rs_s), ms(p.ar_s), ms(p.tail_s))
  end
  local a = r.attention
  if a and r.kernels ~= "torch" then
    line("  attention     cuDNN for %d of %d ops (the spec's \"%s\")%s", a.cudnn, a.ops, a.choice,
      a.cudnn > 0 and ", " .. a.backward .. " backward" or "")
  end
  local kinds = {}
  for i, k in ipairs(r.kinds) do
    kinds[i] = string.format("%s %s", k.kind, i == 1 and ms(k.time_s) or string.format("%.2f", k.time_s * 1e3))
  end
  if #kinds > 0 then line("  kernels       %s", table.concat(kinds, ", ")) end
  if r.ops then
    line("  ops           the %d costliest, by name (a layer's index as *) and phase: calls, time, launches",
      #r.ops)
    for _, e in ipairs(r.ops) do
      line("    %-46s %-9s %4d %10s %5d", e.op, e.phase, e.calls, ms(e.time_s), e.launches)
    end
  end
  if r.copies_s > 0 then
    line("  copies        %s of FSDP copies on the collectives' streams, beside compute (not priced "
      .. "as slowing it)", ms(r.copies_s))
  end
  local o = r.optimizer
  if o then
    line("  optimizer     %s of %s beside the backward (each group's step after its reduction)",
      ms(o.total_s - o.after_s), ms(o.total_s))
    line("                with none of it beside: %s a step, %.1f%% MFU (the step hides at most "
      .. "the difference)", ms(o.serial_step_s), 100 * r.mfu * r.step_s / o.serial_step_s)
  end
  line("  MFU           %.1f%% (model FLOPs %.4g per GPU per step, PaLM convention; bf16 peak "
    .. "%g TFLOP/s)",
    100 * r.mfu, r.model_flops, r.peak_tflops)
  line("  %-13s %s/s (%s/s per GPU)", r.unit, si(r.per_s), si(r.per_gpu_s))
  line("  peak memory   %s per GPU (the memory plan's arena; cuBLAS and NCCL workspaces come on "
    .. "top)%s",
    units.bytes(r.peak_bytes), r.peak_bytes > r.memory_gb * 1e9 and string.format(
      ": MORE than the GPU's %g GB", r.memory_gb) or "")
  return table.concat(out, "\n") .. "\n"
end

-- The summary's JSON: compact, floats to 6 significant digits.
local JSON = { float = function(x) return string.format("%.6g", x) end, sep = ",", colon = ":",
  empty = "[]" }

function M.json(r)
  local keep = {}
  for k, v in pairs(r) do
    if k ~= "timeline" then keep[k] = v end
  end
  return json.encode(keep, JSON) .. "\n"
end

return M
