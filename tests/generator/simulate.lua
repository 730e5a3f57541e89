-- `fsdpgen simulate` and `show` (generator/simulate/): the NCCL cost against figures worked
-- by hand, the stream timeline's waits on small plans with made-up GPUs whose answers are
-- known, the calibration against the measured H100 steps (bench/RESULTS.md), cuDNN's
-- attention and its two backward forms (dP's bytes or none), the kernels counted against
-- those the CUDA backend launches (tests/cuda_step/kernels/*.txt), the re-plan at another
-- world size, every repository spec simulated and drawn, and the SVG's structure (lanes,
-- boxes per line, waits, group colours, memory peak, largest buffers).
-- Run from the repository root: lua5.4 tests/generator/simulate.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path

local util = require("tests.generator.step_c")
local check = util.check
local nccl = require("simulate.nccl")
local gpu_table = require("simulate.gpu")
local sim = require("simulate.sim")
local svg = require("simulate.svg")
local loader = require("spec.loader")
local planner = require("plan.planner")
local memory = require("memory.memory")

local function near(a, b, rel) return math.abs(a - b) <= rel * math.abs(b) end

local h100 = assert(gpu_table.load(".", "h100"))

-- NCCL: alpha + size (n-1)/n / busbw, by hand.
local topo = { gpu = h100, gpus_per_node = 8, net_gbps = 400 }
local t, where = nccl.time("all_gather", 1e9, 8, 1, topo)
check(where == "nvlink" and near(t, (8.4 + 7 * 3.4) * 1e-6 + 1e9 * 7 / 8 / 360e9, 1e-9),
  string.format("all-gather of 1 GB over 8 GPUs of a node: %.4f ms over NVLink", t * 1e3))
t, where = nccl.time("reduce_scatter", 1e9, 16, 1, topo)
local alpha = (8.4 + 13 * 3.4 + 2 * 14) * 1e-6
check(where == "net" and near(t, alpha + 1e9 * 15 / 16 / (50 * 0.92e9), 1e-9),
  string.format("reduce-scatter over 2 nodes: the network's 46 GB/s, 2 network hops (%.3f ms)",
    t * 1e3))
t = nccl.time("all_reduce", 1e9, 4, 8, topo)
check(near(t, (8.4 + 6 * 14) * 1e-6 + 1e9 * 2 * 3 / 4 / (50 * 0.92e9), 1e-9),
  "all-reduce across 4 replicas, one per node: 2 (n-1)/n over the network")
check(nccl.time("all_gather", 1e9, 1, 1, topo) == 0, "a collective over one rank costs nothing")
check(nccl.nodes_spanned(4, 2, 8) == 1 and nccl.nodes_spanned(8, 2, 8) == 2
  and nccl.nodes_spanned(3, 8, 8) == 3,
  "the nodes a strided group spans")

-- A made-up GPU: collectives at `busbw` GB/s with no latency, FSDP copies and launches free.
local function fake_gpu(busbw)
  local g = {}
  for k, v in pairs(h100) do g[k] = v end
  g.nvlink = { all_gather = busbw, reduce_scatter = busbw, all_reduce = busbw }
  g.alpha_base_us, g.alpha_nvlink_step_us, g.alpha_net_step_us = 0, 0, 0
  local k = {}
  for key, v in pairs(h100.kernels.fsdpgen) do k[key] = v end
  k.copy, k.launch_us = 1e9, 0
  g.kernels = { fsdpgen = k }
  return g
end

-- Plans (each spec and world planned once: planning is what costs).
local plans = {}
local function plan_of(path, gpn, nodes, batch, attention)
  local key = table.concat({ path, tostring(gpn), tostring(nodes), tostring(batch),
    tostring(attention) }, " ")
  if not plans[key] then
    local spec = loader.load(path)
    if gpn or batch then sim.rescale(spec, gpn, nodes or 1, batch) end
    spec.attention = attention or spec.attention
    plans[key] = loader.protect(spec.line, function(s) return memory.plan_all(planner.plan(s)) end, spec)
  end
  return plans[key]
end

local function run(plan, gpu, kernels, optimizer_stream, attention_backward)
  return sim.run(plan, { gpu = gpu, kernels = kernels or "fsdpgen",
    gpus_per_node = math.min(8, plan.spec.world_size), nodes = 1, net_gbps = 400,
    optimizer_stream = optimizer_stream, attention_backward = attention_backward })
end

local tiny = plan_of("examples/gpt_bytes.lua")
local fast = run(tiny, fake_gpu(1e9))
local slow = run(tiny, fake_gpu(1e-3))
check(fast.exposed_s < 1e-6 * fast.step_s + 1e-9, string.format("collectives at 1e9 GB/s: no "
  .. "exposed communication (%.3g s of a %.3g s step)", fast.exposed_s, fast.step_s))
local ag_bytes, rs_bytes = 0, 0
for _, st in ipairs(tiny.steps) do
  local g = st.group
  local f = g and (g.shard - 1) / g.shard
  if st.op == "all_gather" and not st.direct then
    ag_bytes = ag_bytes + g.layout.shard_numel * g.shard * 4 * f
  elseif st.op == "reduce_scatter" and not st.direct then
    rs_bytes = rs_bytes + st.reduction.layout.padded_numel * 4 * f
  end
end
-- the all-gather stream runs its collectives one after another, and so does the
-- reduce-scatter stream; the two streams overlap each other and compute
local ag_s, rs_s = ag_bytes / 1e6, rs_bytes / 1e6
check(slow.step_s >= math.max(ag_s, rs_s) * 0.999999
  and slow.step_s <= ag_s + rs_s + slow.compute_s,
  string.format("collectives at 1 MB/s: the step (%.3f s) is at least each stream's collectives "
    .. "(%.3f s, %.3f s) and at most their sum plus compute", slow.step_s, ag_s, rs_s))
local sum = 0
for _, p in ipairs(slow.phases) do sum = sum + p.time_s end
check(near(sum, slow.step_s, 1e-9), "the phases add up to the step")
check(near(slow.step_s, slow.compute_s + slow.exposed_s, 1e-9),
  "step = compute + exposed communication")

-- Calibration: the measured H100 steps (bench/RESULTS.md, 2026-11-24, f4f6038), within 15%;
-- fsdpgen's own attention kernels ran then (the spec's attention = "fsdpgen"), and its
-- optimizer steps after the backward, on compute.
for _, c in ipairs({ { "examples/gpt2_124m.lua", "fsdpgen", 44.63 },
  { "examples/llama_1b.lua", "fsdpgen", 163.09 }, { "examples/gpt2_124m.lua", "torch", 79.06 },
  { "examples/llama_1b.lua", "torch", 214.30 } }) do
  local r = run(plan_of(c[1], nil, nil, nil, "fsdpgen"), h100, c[2], "compute")
  check(near(r.step_s * 1e3, c[3], 0.15), string.format("%s, %s kernels: %.2f ms against %.2f ms "
    .. "measured (%+.1f%%)", c[1], c[2], r.step_s * 1e3, c[3], 100 * (r.step_s * 1e3 / c[3] - 1)))
end
local l1b = plan_of("examples/llama_1b.lua")
local r1 = run(l1b, h100)
check(near(r1.model_flops / (4 * 2048), 8220192768, 1e-6),
  string.format("model FLOPs per token of Llama 1B as bench/flops.py: %.0f",
    r1.model_flops / (4 * 2048)))

-- Attention on cuDNN where the memory stage lets it and, under "auto", where the GPU table
-- predicts it faster: Llama 1B's 16 bf16 ops all; the step shorter by exactly the
-- attention's difference (16 layers' causal half, backward 2.5 x, at the two efficiencies).
local own = run(plan_of("examples/llama_1b.lua", nil, nil, nil, "fsdpgen"), h100)
local k = h100.kernels.fsdpgen
local f = 16 * 4 * 4 * 2048 * 2048 * 2048 * 0.5 / (h100.bf16_tflops * 1e12)
local want = f * (1 / k.attention_fwd - 1 / k.cudnn_attention_fwd)
  + 2.5 * f * (1 / k.attention_bwd - 1 / k.cudnn_attention_bwd)
check(r1.attention.cudnn == 16 and r1.attention.ops == 16 and own.attention.cudnn == 0
  and near(own.step_s - r1.step_s, want, 1e-6),
  string.format("Llama 1B: cuDNN for %d of %d ops (\"auto\"), %d (\"fsdpgen\"); %.2f ms "
    .. "shorter, %.2f ms of attention", r1.attention.cudnn, r1.attention.ops,
    own.attention.cudnn, (own.step_s - r1.step_s) * 1e3, want * 1e3))

-- The kernels line: the compute stream's time and the optimizer's beside it, by kind, largest
-- first (Llama 1B: GEMMs), adding up to compute less the optimizer after the backward plus
-- all of it.
local ksum, sorted = 0, true
for i, kd in ipairs(r1.kinds) do
  ksum = ksum + kd.time_s
  sorted = sorted and (i == 1 or r1.kinds[i - 1].time_s >= kd.time_s)
end
local o1 = r1.optimizer
check(sorted and r1.kinds[1].kind == "GEMM" and #r1.kinds == 6
  and near(ksum, r1.compute_s - o1.after_s + o1.total_s, 1e-9)
  and sim.text(r1):find("\n  kernels       GEMM %d+%.%d%d ms, [^\n]*attention %d+%.%d%d"),
  string.format("Llama 1B by kind: %d kinds, %.2f ms, the compute stream's %.2f ms with all of the "
    .. "optimizer's %.2f ms", #r1.kinds, ksum * 1e3, (r1.compute_s - o1.after_s) * 1e3, o1.total_s * 1e3))
local slower = fake_gpu(360)
slower.kernels.fsdpgen.cudnn_attention_bwd = 0.05
local sr = run(l1b, slower)
check(sr.attention.cudnn == 0 and run(plan_of("examples/llama_1b.lua", nil, nil, nil, "cudnn"),
  slower).attention.cudnn == 16,
  "\"auto\" keeps fsdpgen's kernels where cuDNN is predicted slower; \"cudnn\" takes cuDNN")
local fp32 = run(tiny, h100)
local tr = run(l1b, h100, "torch")
check(fp32.attention.cudnn == 0 and tr.attention.cudnn == 0
  and not sim.text(tr):find("\n  attention ", 1, true)
  and sim.text(r1):find('attention     cuDNN for 16 of 16 ops (the spec\'s "auto")', 1, true),
  "no cuDNN for an fp32 spec nor with --kernels torch (SDPA's figures); the text says how many")

-- cuDNN's backward forms (RT_ATTENTION_BACKWARD): the deterministic one (the default) writes
-- dP, [B, NH, T, T] 16-bit values with T rounded up to 64, and reads it again, the causal half
-- of it; those bytes cost only past the backward's FLOP time. The atomic one keeps no dP: its
-- price is the FLOPs' alone. On synthetic ops at T = 1000 (dP's T 1024), one causal with 8
-- heads of 16 (dP's bytes past the FLOPs) and one not with 8 of 128 (within them):
local cost = require("simulate.cost")
local function attention_op(heads, hd, causal)
  local q = { shape = { 2, 1000, heads * hd }, dtype = "bfloat16" }
  return { kind = "attention", ins = { q, q, q }, outs = { q }, attention = { cudnn = true },
    attrs = { n_heads = heads, n_kv_heads = heads, head_dim = hd, causal = causal } }
end
local on_cudnn = { spec = { attention = "cudnn" } }
local function backward_s(op, form)
  return cost.step({ node = op, op = "backward" }, on_cudnn, h100, k, form).compute
end
local launches = 3 * k.launch_us * 1e-6
for _, c in ipairs({ { 16, true }, { 128, false } }) do
  local op = attention_op(8, c[1], c[2])
  local half = c[2] and 0.5 or 1
  local flop_s = 2.5 * half * 4 * 2 * 1000 * 1000 * 8 * c[1]
    / (h100.bf16_tflops * 1e12 * k.cudnn_attention_bwd)
  local byte_s = 2 * half * 2 * 8 * 1024 * 1024 * 2 / (h100.hbm_gbps * 1e9 * k.elementwise)
  local det, atomic = backward_s(op, "deterministic"), backward_s(op, "atomic")
  check(near(atomic, flop_s + launches, 1e-12)
    and near(det, math.max(flop_s, byte_s) + launches, 1e-12)
    and backward_s(op) == det and (c[2] and det > atomic or det == atomic),
    string.format("cuDNN backward, 8 heads of %d%s: FLOPs %.4f ms, dP's bytes %.4f ms; "
      .. "deterministic %.4f ms, atomic %.4f ms with the launches", c[1], c[2] and ", causal" or "",
      flop_s * 1e3, byte_s * 1e3, det * 1e3, atomic * 1e3))
end
-- Under "auto" the binary keeps the faster it times at start: at head dim 8 dP's bytes make
-- the deterministic cuDNN slower than fsdpgen's kernels, the atomic one still faster.
local tiny_heads = attention_op(4, 8, true)
check(not cost.attention_cudnn(tiny_heads, {}, h100, k, "deterministic")
  and cost.attention_cudnn(tiny_heads, {}, h100, k, "atomic")
  and cost.attention_cudnn(tiny_heads, on_cudnn.spec, h100, k, "deterministic"),
  "\"auto\" at head dim 8: fsdpgen's kernels beside the deterministic backward, cuDNN's atomic "
    .. "one; \"cudnn\" takes cuDNN")
-- Llama 1B (head dim 64): dP's bytes (1.07 GB a layer, 0.45 ms) stay under the backward's
-- FLOP time (0.66 ms), so the step is the atomic form's; the text and the JSON say which.
local atomic1 = run(l1b, h100, nil, nil, "atomic")
check(r1.step_s >= atomic1.step_s and near(own.step_s - atomic1.step_s, want, 1e-6)
  and r1.attention.backward == "deterministic" and atomic1.attention.backward == "atomic"
  and sim.text(r1):find('16 of 16 ops (the spec\'s "auto"), deterministic backward', 1, true)
  and sim.text(atomic1):find("), atomic backward", 1, true)
  and sim.json(atomic1):find('"backward":"atomic"', 1, true)
  and sim.text(own):find('(the spec\'s "fsdpgen")\n', 1, true),
  string.format("Llama 1B: %.2f ms with the deterministic backward, %.2f ms with the atomic one",
    r1.step_s * 1e3, atomic1.step_s * 1e3))

-- On compute (RT_OPTIMIZER_STREAM=compute), the optimizer steps the groups in the order
-- they were reduced and waits for the last reduction only at its step: on one H100 Llama
-- 1B's root, reduced in two parts (reductions.lua Sim:reduce_parts), steps its output head's
-- part first and its embedding's last, whose reduction (1 GB of copies) hides behind the
-- 16 blocks' AdamW (the last block's in two parts: Sim:reduce_tail); clipping (no parts)
-- still waits for every reduction.
local function optimizer_phase(r)
  for _, ph in ipairs(r.phases) do
    if ph.name == "optimizer" then return ph end
  end
end
local opt_groups, last_opt, unused_rows = {}, nil, 0
for _, st in ipairs(l1b.steps) do
  if st.op == "optimizer" and st.rows == "unused" then
    unused_rows = unused_rows + 1  -- the embedding's rows no token looks up (below)
  elseif st.op == "optimizer" then
    opt_groups[#opt_groups + 1] = st.group.name .. (st.reduction and " (a part)" or "")
    last_opt = st
  end
end
local clipped_spec = loader.load("examples/llama_1b.lua")
clipped_spec.grad_clip = 1.0
local clipped_plan = loader.protect(clipped_spec.line,
  function(s) return memory.plan_all(planner.plan(s)) end, clipped_spec)
local clipped = run(clipped_plan, h100)
local serial = run(l1b, h100, nil, "compute")
local clipped_parts = 0
for _, st in ipairs(clipped_plan.steps) do
  if st.reduction and st.reduction.part then clipped_parts = clipped_parts + 1 end
end
check(optimizer_phase(serial).rs_s == 0 and optimizer_phase(clipped).rs_s > 1e-3
  and opt_groups[1] == " (a part)" and opt_groups[2] == "layers.15"
  and opt_groups[#opt_groups] == " (a part)" and #opt_groups == 19 and clipped_parts == 0,
  string.format("Llama 1B: optimizer %s first, then %s, the root's other part last (%d steps); "
    .. "%.2f ms waiting for reductions, %.2f ms with clipping (%d parts)", opt_groups[1],
    opt_groups[2], #opt_groups, optimizer_phase(serial).rs_s * 1e3,
    optimizer_phase(clipped).rs_s * 1e3, clipped_parts))

-- Beside the backward (the default without clipping): each group's step starts when its
-- reduction is done, so all but the root's last part (its embedding, reduced last) run
-- during the backward, and of the embedding's (17.5% of the parameters) only the rows a
-- step's tokens look up (at most 8192 of 128256) follow it: the others are stepped from the
-- step's start (optimizer.lua Sim:split_token_rows); what follows the backward is well under
-- half the embedding's share (the optimizer stream may still be finishing the blocks' steps
-- when the backward ends). The step is shorter by at most what ran
-- beside it; clipping, and the torch kernels (PyTorch's step after the backward), keep the
-- optimizer on compute.
local o = r1.optimizer
local numel = 0
for _, g in ipairs(l1b.groups) do numel = numel + g.layout.numel end
local root_share = last_opt.reduction.layout.numel / numel
local saved = serial.step_s - r1.step_s
check(o and saved > 0 and saved <= o.total_s - o.after_s + 1e-12
  and unused_rows == 1 and o.after_s < 0.5 * root_share * o.total_s
  and not clipped.optimizer and not tr.optimizer
  and sim.text(r1):find("optimizer     %d+%.%d+ ms of %d+%.%d+ ms beside the backward")
  and o.serial_step_s == serial.step_s
  and sim.text(r1):find(
    string.format("with none of it beside: %.2f ms a step", serial.step_s * 1e3), 1, true)
  and not sim.text(clipped):find("beside the backward", 1, true),
  string.format("Llama 1B: %.2f of %.2f ms of AdamW beside the backward (the embedding's "
    .. "share %.1f%%), the step %.2f ms shorter (%.2f ms with none beside, as the summary says); "
    .. "none with clipping or torch kernels",
    (o.total_s - o.after_s) * 1e3, o.total_s * 1e3, 100 * root_share, saved * 1e3,
    serial.step_s * 1e3))

-- Re-planned at 8 x 8 GPUs: shards of 1/64, NCCL collectives across nodes, world 64.
local l64 = plan_of("examples/llama_1b.lua", 8, 8)
local g1 = l64.groups[2]
check(l64.spec.world_size == 64 and g1.shard == 64 and g1.layout.shard_numel * 64 >= g1.layout.numel
  and g1.layout.shard_numel < g1.layout.numel // 63,
  "--gpus-per-node 8 --nodes 8 re-plans at world 64 (shards of 1/64)")
local r64 = sim.run(l64, { gpu = h100, kernels = "fsdpgen", gpus_per_node = 8, nodes = 8,
  net_gbps = 400 })
local nets = 0
for _, rec in ipairs(r64.timeline.lines) do
  for _, b in ipairs(rec.boxes) do if b.where == "net" then nets = nets + 1 end end
end
check(nets > 0 and r64.exposed_s > 0 and r64.step_s > r1.step_s / 4,
  string.format("64 GPUs: collectives over the network, %.2f ms exposed", r64.exposed_s * 1e3))
local hsdp = plan_of("examples/llama_hsdp_ckpt.lua", 4, 2)
check(hsdp.spec.mesh.replicate == 2 and hsdp.spec.mesh.shard == 4,
  "an HSDP spec shards within a node, replicates across")
local b8 = plan_of("examples/llama_1b.lua", nil, nil, 8)
check(b8.spec.input.shape[1] == 8 and run(b8, h100).per_gpu_step == 8 * 2048,
  "--batch 8 doubles the tokens per step")

-- Every example simulates and draws; the slow tier (FSDPGEN_SLOW=1): every spec of the
-- repository, the calibration specs among them (planning them takes about 10 s).
local slow = os.getenv("FSDPGEN_SLOW") == "1"
local specs = {}
local p = io.popen(slow and "ls tests/specs/seed/*_*.lua tests/specs/features/*.lua "
  .. "tests/specs/conformance/*.lua examples/*.lua bench/calibration/*.lua" or "ls examples/*.lua")
for f in p:lines() do specs[#specs + 1] = f end
p:close()
local bad = {}
local n = 0
for _, path in ipairs(specs) do
  local ok, err = pcall(function()
    local plan = plan_of(path)
    local r = run(plan, h100)
    assert(r.step_s > 0 and r.step_s < math.huge and r.exposed_s >= -1e-12, "bad totals")
    local text = svg.render(plan, r)
    assert(text:find("</svg>", 1, true), "no svg")
    assert(sim.json(r):match("^{.*}\n$"), "bad json")
  end)
  n = n + 1
  if not ok then
    bad[#bad + 1] = path .. ": " .. tostring(type(err) == "table" and err.msg or err)
  end
end
check(#bad == 0 and n >= (slow and 70 or 6), string.format("%d %s simulate and draw%s", n,
  slow and "specs" or "examples", #bad > 0 and (": " .. bad[1]) or ""))

-- The slow tier: torchtitan's published Llama 3.1 8B FSDP2 runs on 8 and 128 H100s (README's
-- calibration table), within 15%.
if slow then
  local hbm2e = assert(gpu_table.load(".", "h100_hbm2e"))
  for _, c in ipairs({ { 1, 5762 }, { 16, 5605 } }) do
    local plan = plan_of("bench/calibration/llama3_8b_h100.lua", 8, c[1])
    local r = sim.run(plan, { gpu = hbm2e, kernels = "torch", gpus_per_node = 8, nodes = c[1],
      net_gbps = 400 })
    local err = 100 * (r.per_gpu_s / c[2] - 1)
    check(near(r.per_gpu_s, c[2], 0.15), string.format("Llama 3.1 8B on %d H100s: %.0f "
      .. "tokens/s/GPU against %d published (%+.1f%%)", 8 * c[1], r.per_gpu_s, c[2], err))
  end
end

-- The SVG's structure on Llama 1B at 8 GPUs.
local l8 = plan_of("examples/llama_1b.lua", 8, 1)
local r8 = sim.run(l8, { gpu = h100, kernels = "fsdpgen", gpus_per_node = 8, nodes = 1,
  net_gbps = 400 })
local text = svg.render(l8, r8)
local depth, balanced = 0, true
for close, name, self in text:gmatch("<(/?)([%w]+)[^>]-(/?)>") do
  if close == "/" then depth = depth - 1 elseif self ~= "/" then depth = depth + 1 end
  if depth < 0 then balanced = false end
end
check(balanced and depth == 0, "the SVG's tags balance")
local overview = text:match('<g id="overview".-\n</g>')
local lanes = {}
for l in overview:gmatch('data%-lane="([%w_]+)"') do lanes[#lanes + 1] = l end
check(table.concat(lanes, ",") == "compute,ag_copy,ag,rs,opt", "lanes: " .. table.concat(lanes, ","))
local want = 0
for _, rec in ipairs(r8.timeline.lines) do
  for _, b in ipairs(rec.boxes) do if b.lane == "compute" and b.e > b.s then want = want + 1 end end
end
local got = select(2, overview:gsub('class="box compute"', ""))
check(got == want and want > 400,
  string.format("one compute box per compute line with time (%d)", got))
local colours, same = {}, true
for group, fill in overview:gmatch('data%-group="([^"]*)" [^>]-fill="(#%x+)"') do
  if colours[group] and colours[group] ~= fill then same = false end
  colours[group] = fill
end
check(same and colours["layers.3"] and colours["layers.3"] ~= colours["layers.4"],
  "every group has one colour on every lane, neighbours differ")
check(select(2, text:gsub('class="event"', "")) >= 4 * 16, "FSDP events are marked")
check(text:find('id="zoom%-forward"') and text:find('id="zoom%-backward"'),
  "one block's forward and backward zoomed")
check(text:find('id="peak"') and text:find('class="buffer">[^<]*optimizer state'),
  "the memory panel marks the peak and names the largest buffers")
local waits = select(2, overview:gsub('class="wait"', ""))
local want_waits = 0
for _, rec in ipairs(r8.timeline.lines) do if rec.wait > 0 then want_waits = want_waits + 1 end end
check(waits == want_waits and waits > 0,
  string.format("every wait of compute is drawn (%d)", waits))

-- Bad options: one line, exit 2.
for _, a in ipairs({ "--gpu ../gpus/h100", "--gpu h100 --nodes 0", "--gpu h100 --kernels x",
  "--gpu h100 --gpus-per-node 65536 --nodes 2", "--gpu h100 --inter-node-gbps nan", "",
  "--gpu h100 --attention-backward x", "--gpu h100 --attention-backward", "--gpu h100 --ops 0",
  "--gpu h100 --ops many" }) do
  local pp = io.popen("./fsdpgen simulate examples/tiny.lua " .. a .. " 2>&1; echo \"exit $?\"")
  local o = pp:read("a")
  pp:close()
  check(o:match("^fsdpgen[^\n]*\nexit 2\n$") ~= nil, "simulate " .. a .. ": one line, exit 2" ..
    (o:match("^fsdpgen[^\n]*\nexit 2\n$") and "" or (": " .. o)))
end
local pp = io.popen("./fsdpgen simulate examples/tiny.lua --gpu h100 --attention-backward fast 2>&1")
local bad_form = pp:read("a")
pp:close()
pp = io.popen("./fsdpgen simulate --help")
local help = pp:read("a")
pp:close()
check(bad_form:find("--attention-backward fast", 1, true)
  and bad_form:find("(allowed: deterministic, atomic)", 1, true)
  and help:find("[--attention-backward deterministic|atomic]", 1, true)
  and help:find("\n  --attention-backward F\n", 1, true),
  "--attention-backward: a bad form named with the allowed ones; the help lists the option")

-- Launches: per class, the kernels the simulator prices for the compute ops of a step are
-- those the CUDA backend launches for them, as the CUDA emulator lists a captured step of
-- the bench models in small (tests/cuda_step/kernels/*.txt, which tests/cuda_step/run.sh
-- keeps equal to the binary's). Kernel names to classes; GEMMs and element-wise together,
-- as the column sums serve both (the linears' bias gradients, a broadcast add's). Not
-- compared: memsets (no kernel), the FSDP copies and the step's own kernels (priced by bytes
-- on their streams), the optimizer's.
local KERNEL_CLASSES = {
  { "^cublas_gemm$", "gemm" }, { "^add_packed_kernel", "gemm" }, { "narrow_kernel", "gemm" },
  { "^colsum_", "gemm" }, { "^flash_kernel$", "attention" }, { "norm", "norm" },
  { "^dw_finish_kernel$", "norm" }, { "^ce_", "loss" }, { "^rope_kernel", "gemm" },
  { "^swiglu_", "gemm" }, { "^gelu_", "gemm" }, { "^acc2_kernel", "gemm" },
  { "^broadcast_add_kernel$", "gemm" }, { "^arange_kernel$", "gemm" },
  { "^embedding_", "gemm" }, { "^rows_kernel$", "gemm" }, { "^cub_radix_sort$", "gemm" },
  { "^memset$" }, { "^memcpy$" }, { "^seg_copy_kernel$" }, { "^round_kernel$" },
  { "^adam_" }, { "^rows_mark_kernel$" },
}
local SIM_CLASSES = { gemm = "gemm", elementwise = "gemm", attention = "attention", norm = "norm",
  loss = "loss" }
for _, name in ipairs({ "llama_bench_shape", "gpt2_bench_shape" }) do
  local want, unknown = {}, {}
  for line in io.lines("tests/cuda_step/kernels/" .. name .. ".txt") do
    local n, kernel = line:match("^%s*(%d+) (.+)$")
    if n then
      local class
      for _, c in ipairs(KERNEL_CLASSES) do
        if kernel:find(c[1]) then class = c[2] or false break end
      end
      if class == nil then unknown[#unknown + 1] = kernel end
      if class then want[class] = (want[class] or 0) + tonumber(n) end
    end
  end
  check(#unknown == 0, name .. ": every kernel of the list has a class here (new: "
    .. table.concat(unknown, ", ") .. ")")
  local plan = plan_of("tests/cuda_step/" .. name .. ".lua")
  local got = {}
  for _, st in ipairs(plan.steps) do
    local c = cost.step(st, plan, h100, h100.kernels.fsdpgen)
    local class = SIM_CLASSES[c.class]
    if class and c.launches > 0 then got[class] = (got[class] or 0) + c.launches end
  end
  for _, class in ipairs({ "gemm", "attention", "norm", "loss" }) do
    check(got[class] == want[class], string.format("%s: the simulator's %s launches %s, the "
      .. "binary's %s", name, class == "gemm" and "GEMM and element-wise" or class,
      tostring(got[class]), tostring(want[class])))
  end
end

-- `fsdpgen diff OLD NEW --gpu ...`: the simulated change of reshard_after_forward=False on
-- every block (no backward all-gathers: a shorter step, backward exposes no more).
local base = "tests/specs/review/llama_4l.lua"
local variant = os.tmpname() .. ".lua"
local f = assert(io.open(variant, "w"))
f:write((assert(io.open(base)):read("a"):gsub("fsdp%.fully_shard%(layer%)",
  "fsdp.fully_shard(layer, { reshard_after_forward = false })")))
f:close()
local pipe = io.popen("./fsdpgen diff " .. base .. " " .. variant
  .. " --gpu h100 --gpus-per-node 4 --nodes 2 2>&1")
local out = pipe:read("a")
pipe:close()
local s0, s1 = out:match("simulated step%s+([%d.]+) ms %-> ([%d.]+) ms")
local b0, b1 = out:match("\n    backward%s+([%d.]+) ms %-> ([%d.]+) ms")
check(s0 and b0 and tonumber(s1) < tonumber(s0) and tonumber(b1) <= tonumber(b0)
  and out:find("on 8 x H100", 1, true),
  string.format("diff --gpu: reshard_after_forward=False at 2 x 4 GPUs, step %s -> %s ms, backward "
    .. "exposed %s -> %s ms", tostring(s0), tostring(s1), tostring(b0), tostring(b1)))
pipe = io.popen("./fsdpgen diff tests/golden/review_llama_4l.schedule " .. variant
  .. " --gpu h100 2>&1; echo \"exit $?\"")
out = pipe:read("a")
pipe:close()
local one_line = out:match("^fsdpgen: diff %-%-gpu [^\n]*\nexit 2\n$") ~= nil
check(one_line, "diff --gpu of a .schedule: one line, exit 2" .. (one_line and "" or (": " .. out)))
os.remove(variant)
os.remove(variant:sub(1, -5))

-- README's "What does reshard_after_forward=False ... cost" example: its commands (the sh block
-- after the question, /tmp paths moved to a temporary folder) print the block it shows.
local readme = assert(io.open("README.md")):read("a")
local q = readme:find("**What does `reshard_after_forward=False`", 1, true)
local cmds = q and readme:match("```sh\n(.-)```", q)
local shown = q and readme:match("ends with the simulated change:\n\n```\n(.-)```", q)
local dir = os.tmpname()
os.remove(dir)
local printed
if cmds and shown then
  pipe = io.popen("mkdir -p " .. dir .. " && " .. cmds:gsub("/tmp/", dir .. "/") .. " 2>&1")
  printed = pipe:read("a"):match("\n(simulated step .*)$")
  pipe:close()
end
os.execute("rm -rf " .. dir)
check(printed ~= nil and printed == shown, "README's reshard_after_forward example prints what README shows"
  .. (printed and printed ~= shown and (":\n" .. printed) or ""))

-- --ops N: the N costliest ops by name and phase, a layer's index folded; every op's time
-- is the kinds' time (one rank: no FSDP copies on compute), and their launches too.
do
  local function out_of(a)
    local f = io.popen("./fsdpgen simulate bench/specs/llama_1b.lua --gpu h100 " .. a)
    local o = f:read("a")
    f:close()
    return o
  end
  local text = out_of("--ops 3")
  local rows = {}
  for l in text:gmatch("\n    (%S[^\n]*)") do rows[#rows + 1] = l end
  check(#rows == 3 and rows[1]:match("^layers%.%*%.feed_forward%.w1%.linear +backward +16 +[%d.]+ ms +48$") ~= nil
    and text:find("  ops           the 3 costliest, by name (a layer's index as *) and phase", 1, true) ~= nil,
    "--ops 3: three rows, the first Llama's w1 + w3 stack's backward, 16 calls, 48 launches: " .. tostring(rows[1]))
  local llama = plan_of("bench/specs/llama_1b.lua")
  local r = sim.run(llama, { gpu = h100, kernels = "fsdpgen", gpus_per_node = 1, nodes = 1, net_gbps = 400,
    ops = 1000 })
  local t_ops, l_ops, t_kinds, l_kinds = 0, 0, 0, 0
  for _, e in ipairs(r.ops) do t_ops, l_ops = t_ops + e.time_s, l_ops + e.launches end
  for _, k in ipairs(r.kinds) do t_kinds, l_kinds = t_kinds + k.time_s, l_kinds + k.launches end
  check(math.abs(t_ops - t_kinds) <= 1e-9 * t_kinds and l_ops == l_kinds and not out_of("--json"):find('"ops":[', 1, true),
    string.format("every op: %.4f ms and %d launches, the kinds' %.4f ms and %d; the JSON has ops only with --ops",
      t_ops * 1e3, l_ops, t_kinds * 1e3, l_kinds))
end

-- A linear's backward GEMMs: the input's gradient and the weight's, each only where it is
-- wanted. Linear(16, 8) on a float input (no input gradient) then Linear(8, 8), 4 rows:
-- forward 2*4*16*8 + 2*4*8*8 = 1536 FLOPs; backward the first's weight gradient (1024), the
-- second's input and weight gradients (512 + 512), or with its weight frozen the input's alone.
local function linear_flops(freeze)
  local path = os.tmpname() .. ".lua"
  local sf = assert(io.open(path, "w"))
  sf:write([[
local nn, fsdp = require("nn"), require("fsdp")
local model = nn.Sequential{ nn.Linear(16, 8, { bias = false }), nn.Linear(8, 8, { bias = false }) }
]] .. (freeze and "model[2].weight.requires_grad = false\n" or "") .. [[
fsdp.fully_shard(model)
return fsdp.spec{ name = "two_linears", model = model, world_size = 1, input = { shape = { 4, 16 } },
  loss = "sum" }
]])
  sf:close()
  local r = run(plan_of(path), h100)
  os.remove(path)
  os.remove(path:sub(1, -5))
  return r.hw_flops
end
local trained, frozen2 = linear_flops(false), linear_flops(true)
check(trained == 1536 + 2048 and frozen2 == 1536 + 1536, string.format("linear backward GEMMs: no input "
  .. "gradient for a float input, no weight gradient for a frozen weight (%d, %d FLOPs)", trained, frozen2))

util.finish()
