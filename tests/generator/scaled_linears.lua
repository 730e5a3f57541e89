-- Scales folded into the linear they read (generator/memory/scaled_linears.lua): which scales
-- fold (a power of two, after a bias-free linear that only the scale reads, in
-- fp32 or bf16) and which keep their kernel (0.37, a linear with a bias, one read twice, a
-- scale of anything else, fp16); the step C of a folded one (the linear's call takes the number
-- as its alpha, forward and backward; no rt_scale call), its schedule lines, the memory plan
-- (no buffer for the scale's output), the simulator (no price) and the PyTorch twin (still
-- `x * s`). The bits are tests/kernels/test_scaled_linear.c's and tests/cuda_step/run.sh's.
-- Run from the repository root: lua5.4 tests/generator/scaled_linears.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path

local util = require("tests.generator.step_c")
local check = util.check

-- A one-module spec whose forward returns `expr` + x (x: its [4, 16] input, cast to the
-- group's dtype; the add, like LoRA's, reads the scale's output packed), with linears lin
-- (bias-free) and lin_b (with a bias), under param dtype `mp` (nil: fp32).
local function spec_src(expr, mp)
  local body = { "return " .. expr .. " + x" }
  if mp then table.insert(body, 1, string.format("x = x:to(%q)", mp)) end
  return util.module_spec("scaled_linears", { "m.lin = nn.Linear(16, 16, { bias = false })",
    "m.lin_b = nn.Linear(16, 16)" }, body, mp)
end

-- The scale ops of plan's graph, as "number:folded" or "number:kernel".
local function folds(plan)
  local out = {}
  for _, op in ipairs(plan.graph.ops) do
    if op.kind == "scale" then
      out[#out + 1] = string.format("%g:%s", op.attrs.scale, op.folded and "folded" or "kernel")
    end
  end
  return table.concat(out, " ")
end

local cases = {
  { "self.lin(x) * 2", "bf16", "2:folded", "a bf16 linear times 2" },
  { "self.lin(x) * 0.5", "bf16", "0.5:folded", "times 0.5" },
  { "self.lin(x) * -2", "bf16", "-2:kernel", "times -2 (a negative number flips the sign of a zero the "
    .. "scale's kernel keeps)" },
  { "0.25 * self.lin(x)", nil, "0.25:folded", "an fp32 linear, 0.25 * y" },
  { "self.lin(x) * 0.37", "bf16", "0.37:kernel", "times 0.37 (not a power of two)" },
  { "self.lin(x) * 2", "fp16", "2:kernel", "fp16 (its subnormals would scale inexactly)" },
  { "self.lin_b(x) * 2", "bf16", "2:kernel", "a linear with a bias" },
  { "self.lin(x) * 2 + self.lin(x):float():to(\"bf16\")", "bf16", "2:folded", "a linear read by a scale, "
    .. "another call of it by a cast" },
  { "nn.relu(self.lin(x)) * 2", "bf16", "2:kernel", "a scale of a relu" },
  { "self.lin(x) * 2 * 4", "bf16", "2:folded 4:kernel", "a scale of a folded scale" },
  { "self.lin(x) * 2 + self.lin(x) * 2 + 0 * self.lin(x)", "bf16", "2:folded 2:folded 0:kernel", "two folds; "
    .. "times 0 kept" },
}
for _, c in ipairs(cases) do
  local expr, mp, want, what = c[1], c[2], c[3], c[4]
  local plan = util.plan_source(spec_src(expr, mp))
  local got = plan and folds(plan) or "plan failed"
  check(got == want, string.format("%s: %s (want %s)", what, got, want))
end

-- a linear output read twice, by the scale and by the add: the scale keeps its kernel
local plan2 = util.plan_source(spec_src("(function() local y = self.lin(x) return y * 2 + y end)()", "bf16"))
check(plan2 and folds(plan2) == "2:kernel", "a linear output read by the scale and an add: "
  .. (plan2 and folds(plan2) or "plan failed") .. " (want 2:kernel)")

-- The step C, schedule, memory and simulator of a LoRA Llama whose alpha / rank is 2, every block
-- checkpointed (the folds recomputed): lora_llama_w1_ckpt_bf16's ten adapters.
local path = "tests/specs/features/lora_llama_w1_ckpt_bf16.lua"
local plan = util.plan(path)
local step = util.step_c(plan, true)
local n = { fwd = 0, bwd = 0, scale = 0, alpha = 0 }
for call in step:gmatch("rt_linear_scaled_[%w_]+%b();") do
  local a = util.args_of(call)
  if call:match("_forward%(") then n.fwd = n.fwd + 1 else n.bwd = n.bwd + 1 end
  for _, v in ipairs(a) do
    if v == "2.0f" then n.alpha = n.alpha + 1 end
  end
end
for _ in step:gmatch("rt_scale_[%w_]+%(") do n.scale = n.scale + 1 end
check(n.fwd == 20 and n.bwd == 10 and n.alpha == 30 and n.scale == 0, string.format(
  "%s: %d scaled linear forwards (10 and their recomputations) and %d backwards, each with alpha 2.0f "
  .. "(%d), and %d rt_scale calls", path, n.fwd, n.bwd, n.alpha, n.scale))

local memory = require("memory.memory")
local named, viewed = 0, 0
for _, op in ipairs(plan.graph.ops) do
  if op.kind == "scale" and op.folded then
    viewed = viewed + ((memory.base(op.outs[1]) == op.ins[1] and not op.outs[1].buf) and 1 or 0)
  end
end
for _, b in ipairs(plan.memory.buffers) do
  if b.name:match("%.scale$") then named = named + 1 end
end
check(viewed == 10 and named == 0, string.format("the memory plan: each of the 10 folded scales' output is "
  .. "its linear's buffer (%d), and its gradient the linear output's: no buffer of a scale's own (%d)",
  viewed, named))

local sched = io.open("tests/golden/lora_llama_w1_ckpt_bf16.schedule"):read("a")
local lines = 0
for _ in sched:gmatch("\n  compute  forward +layers%.0%.attention%.wq%.scale +scale %[2, 16, 64%] bf16 <%- "
  .. "layers%.0%.attention%.wq%.lora_b%.linear times 2 %(folded into the linear: same buffer%)") do
  lines = lines + 1
end
check(lines == 2 and sched:find("lora_b.weight times 2\n", 1, true) ~= nil,
  "the schedule: the folded scale's line says so (the step's and the eval's forward), and lora_b's "
  .. "linear shows the number it multiplies by")

local cost = require("simulate.cost")
local gpu = require("simulate.gpu").load(".", "h100")
local priced, scales = 0, 0
for _, st in ipairs(plan.steps) do
  if st.node and st.node.kind == "scale" then
    scales = scales + 1
    local c = cost.step(st, plan, gpu, gpu.kernels.fsdpgen)
    priced = priced + c.compute + c.launches
  end
end
check(scales == 30 and priced == 0, string.format("the simulator: the %d folded scale steps (forward, "
  .. "recompute, backward) cost nothing (%g)", scales, priced))

local torch = util.plan_source(spec_src("self.lin(x) * 2", "bf16"))
local twin = torch and require("emit.emit_torch").text(torch, "spec.lua", ".") or ""
check(twin:find("* 2.0", 1, true) ~= nil, "the PyTorch twin still multiplies: `* 2.0`")

util.finish()
