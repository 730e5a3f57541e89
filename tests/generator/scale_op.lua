-- A tensor times a number (PyTorch's x * 0.37, 2 * x): nn's `*` with one number operand
-- traces the op "scale" (the number as a float in attrs.scale, the tensor's dtype, a
-- parameter operand too), never "mul"; a NaN, an infinity, a number past fp32's range or a
-- non-number is one spec error at its line; the step C calls rt_scale_forward /
-- rt_scale_backward with the op's dt and the number rounded to fp32 (as PyTorch's opmath
-- does), assigning or adding to the input's gradient; no model FLOPs; the simulator prices
-- one element-wise launch each way; the PyTorch twin writes `x * s` with s reading back as
-- the spec's double.
-- Run from the repository root: lua5.4 tests/generator/scale_op.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path

local util = require("tests.generator.step_c")
local check, args_of = util.check, util.args_of

local function f32(x) return (string.unpack("f", string.pack("f", x))) end

-- A one-module spec whose forward is `body` (x: its [4, 16] input; self.lin, self.p),
-- under `mp` ("bf16" or nil).
local function spec_src(body, mp)
  local policy = mp and string.format(
    ", { mp_policy = fsdp.MixedPrecisionPolicy{ param_dtype = %q, reduce_dtype = \"fp32\" } }", mp) or ""
  return table.concat({
    'local nn, fsdp = require("nn"), require("fsdp")',
    "local M = {}",
    "function M.forward(self, x)",
    "  " .. body,
    "end",
    'local m = nn.new_module("M", M)',
    "m.lin = nn.Linear(16, 16)",
    'm.p = nn.Parameter({ 4, 16 }, { kind = "normal", std = 1.0 })',
    "fsdp.fully_shard(m" .. policy .. ")",
    'return fsdp.spec{ name = "scale_op", model = m, world_size = 2, input = { shape = { 4, 16 } },',
    '  loss = "sum", optimizer = { "sgd", lr = 1e-2 } }',
  }, "\n") .. "\n"
end

local function ops_of(plan, kind)
  local out = {}
  for _, op in ipairs(plan.graph.ops) do
    if op.kind == kind then out[#out + 1] = op end
  end
  return out
end

-- ---------------------------------------------------------------------------- the trace

local plan = util.plan_source(spec_src("return self.lin(x) * 0.37 + 2 * self.lin(x) + self.p * 3", "bf16"))
local sc = ops_of(plan, "scale")
local want = { 0.37, 2.0, 3.0 }
local ok = #sc == 3 and #ops_of(plan, "mul") == 0
for i, op in ipairs(sc) do
  ok = ok and op.attrs.scale == want[i] and math.type(op.attrs.scale) == "float" and #op.ins == 1
    and op.outs[1].dtype == op.ins[1].dtype and op.outs[1].dtype == "bf16"
end
check(ok, string.format("x * 0.37, 2 * x, p * 3 under bf16: %d scale ops (0 mul), numbers 0.37, 2.0, 3.0 as "
  .. "floats, one input each, output bf16 as its input", #sc))
check(sc[3] and sc[3].ins[1].is_param and sc[3].requires_grad,
  "a parameter times a number: the parameter is the op's input, the op requires grad")
local fp = util.plan_source(spec_src("return self.lin(x) * -1.5"))
local s1 = ops_of(fp, "scale")[1]
check(s1 and s1.attrs.scale == -1.5 and s1.outs[1].dtype == "fp32" and #s1.outs[1].shape == 2
  and s1.outs[1].shape[1] == 4 and s1.outs[1].shape[2] == 16, "fp32: x * -1.5 keeps fp32 and x's shape [4, 16]")

-- ---------------------------------------------------------------------------- spec errors

local function err_of(body)
  local okp, e = pcall(util.plan_source, spec_src(body))
  if okp then return nil end
  return type(e) == "table" and e or { msg = tostring(e) }
end
local allowed = "tensor * x: x must be a tensor or a finite number within fp32's range (|x| <= 3.4028235e38), got "
for _, c in ipairs({ { "self.lin(x) * (0 / 0)", "nan" }, { "self.lin(x) * math.huge", "inf" },
    { "-math.huge * self.lin(x)", "-inf" }, { "self.lin(x) * 1e39", "1e+39" },
    { 'self.lin(x) * "2"', "string" }, { "{} * self.lin(x)", "table" }, { "self.lin(x) * true", "boolean" } }) do
  local e = err_of("return " .. c[1])
  check(e ~= nil and e.msg == allowed .. c[2] and e.line == 4,
    string.format("return %s: the spec error at line 4: %s", c[1], e and e.msg or "planned"))
end
local e = err_of("return self.lin(x) * 3.4028234663852886e38")
check(e == nil, "x * 3.4028234663852886e38 (fp32's largest finite value) plans")
e = err_of("return self.lin(x) * self.lin")
check(e ~= nil and e.msg:find("mul expects a tensor, got the module", 1, true) ~= nil,
  "x * module: still mul's error, which says to call the module: " .. (e and e.msg or "planned"))

-- ---------------------------------------------------------------------------- the step C

-- The scale calls of a step C text: { dir, args } each, in order.
local function scale_calls(text)
  local out = {}
  for call, dir in text:gmatch("(rt_scale_(%a+)ward%b();)") do out[#out + 1] = { dir = dir, a = args_of(call) } end
  return out
end

local feature = util.plan("tests/specs/features/scale_bf16.lua")
local step = util.step_c(feature, true)
local fwd, bwd = {}, {}
for _, k in ipairs(scale_calls(step)) do
  local list = k.dir == "for" and fwd or bwd
  list[#list + 1] = k
end
local nums, packed = {}, 0
local memory = require("memory.memory")
for _, op in ipairs(ops_of(feature, "scale")) do
  nums[#nums + 1] = op.attrs.scale
  for _, t in ipairs({ op.ins[1], op.outs[1] }) do
    local b = memory.base(t)
    if b.packed or b.grad_packed then packed = packed + 1 end
  end
end
check(#nums == 5 and packed == 0, string.format("scale_bf16: no scale's input or output (nor their gradients) "
  .. "stored packed, the kernels' fp32 storage (%d packed)", packed))
check(#nums == 5 and #fwd == 5 and #bwd == 5, string.format("scale_bf16: %d scale ops, %d rt_scale_forward and %d "
  .. "rt_scale_backward calls in the step (5 each: two blocks' 0.37 and 2, the head's 0.5)", #nums, #fwd, #bwd))
-- the number each call passes: a float literal that C reads as the spec's number rounded to fp32
local function lit(s) return tonumber((s:gsub("f$", ""))) end
ok = #fwd == #nums
for i, k in ipairs(fwd) do
  ok = ok and #k.a == 5 and k.a[3] == "256" and k.a[5] == "RT_BF16" and k.a[4]:match("f$")
    and f32(lit(k.a[4])) == f32(nums[i])
end
check(ok, "each rt_scale_forward(out, x, 256, s, RT_BF16): s a float literal of the op's number rounded to "
  .. "fp32 (0.37 as " .. (fwd[2] and fwd[2].a[4] or "?") .. ")")
local f32s = {}
for _, v in ipairs(nums) do f32s[f32(v)] = true end
local assigned, added = 0, 0
ok = true
for _, k in ipairs(bwd) do
  ok = ok and #k.a == 6 and k.a[3] == "256" and k.a[5] == "RT_BF16" and f32s[f32(lit(k.a[4]))] ~= nil
  if k.a[6] == "RT_ASSIGN_1" then assigned = assigned + 1 elseif k.a[6] == "RT_ACCUMULATE" then added = added + 1 end
end
check(ok and assigned == 3 and added == 2, string.format("each rt_scale_backward(dx, dout, 256, s, RT_BF16, "
  .. "assign), s as the forward's: %d assign x's gradient (its first contribution), %d add to it (2 * x, "
  .. "traced before the linears that read x)", assigned, added))
local steps, rounds = 0, 0
for _, st in ipairs(util.compute_steps(step)) do
  if st.calls[1] and st.calls[1]:match("^rt_scale_") then
    steps = steps + 1
    for _, call in ipairs(st.calls) do
      if call:match("^rt_step_round%(") then rounds = rounds + 1 end
    end
  end
end
check(steps == 10 and rounds == 0, string.format("the %d scale steps have no rt_step_round (%d): the kernel rounds "
  .. "its bf16 output and gradient", steps, rounds))

-- PyTorch multiplies by the number rounded to fp32 (checked in torch 2.11: an fp32 1.0 times
-- 1 + 13 * 2^-24 + 2^-45, just above the midpoint of two floats, gives the upper float
-- 1.00000083), so the literal must read back as that float: the double's 9 digits
-- (1.00000077) would read back as the lower one
local mid = 1 + 13 * 2 ^ -24 + 2 ^ -45
local _, tc = util.plan_source(spec_src(string.format("return self.lin(x) * %.17g", mid)))
local tk = scale_calls(tc)[1]
check(tk ~= nil and f32(lit(tk.a[4])) == f32(mid) and f32(mid) == 1 + 14 * 2 ^ -24,
  "x * (1 + 13 * 2^-24 + 2^-45): the call's number reads back as its fp32 rounding 1 + 14 * 2^-24: "
  .. (tk and tk.a[4] or "none"))

-- ---------------------------------------------------------------------------- FLOPs, simulator

local flops = require("plan.flops")
local base = flops.count(util.plan_source(spec_src("return self.lin(x)")))
local scaled = flops.count(util.plan_source(spec_src("return self.lin(x) * 0.37 + self.p * 0.5")))
check(scaled.rank_flops == base.rank_flops and scaled.rank_flops > 0 and scaled.params == base.params + 64,
  string.format("model FLOPs: a scale of an activation and of a parameter add none (%s = %s), the parameter "
  .. "is counted (%d parameters)", tostring(scaled.rank_flops), tostring(base.rank_flops), scaled.params))

local cost = require("simulate.cost")
local h100 = assert(require("simulate.gpu").load(".", "h100"))
local k = h100.kernels.fsdpgen
local by = {}
for _, st in ipairs(feature.steps) do
  if st.node and st.node.kind == "scale" and (st.op == "forward" or st.op == "backward") then
    by[st.node] = by[st.node] or {}
    by[st.node][st.op] = cost.step(st, feature, h100, k)
  end
end
local n, one, same, more = 0, true, 0, 0
for op, c in pairs(by) do
  n = n + 1
  local f, b = c.forward, c.backward
  one = one and f and b and f.launches == 1 and b.launches == 1 and f.class == "elementwise"
    and b.class == "elementwise" and f.compute > 0
  -- x read and the output written; backward: dout read, dx written (and read where added to)
  if f and b and b.compute == f.compute then same = same + 1 end
  if f and b and b.compute > f.compute and op.attrs.scale == 2.0 then more = more + 1 end
end
check(n == 5 and one and same == 3 and more == 2, string.format("the simulator: each scale one element-wise "
  .. "launch each way (%d ops), the backward's bytes the forward's where it assigns (%d), more where it adds (%d)",
  n, same, more))

-- ---------------------------------------------------------------------------- the twin

local twin = require("emit.emit_torch").text(feature, "spec.lua", ".")
check(twin:find(" * 0.37\n", 1, true) ~= nil and twin:find(" * 2.0\n", 1, true) ~= nil
  and twin:find(" * 0.5\n", 1, true) ~= nil,
  "the PyTorch twin: x * 0.37, 2 * x as x * 2.0 (the same product), the head's h * 0.5")
local odd = 0.1 + 0.2
local t2 = require("emit.emit_torch").text(util.plan_source(spec_src(string.format("return self.lin(x) * %.17g",
  odd))), "spec.lua", ".")
local w = t2:match(" %* ([%d%.e%-]+)\n")
check(w ~= nil and tonumber(w) == odd and w ~= "0.3",
  "the twin writes x * (0.1 + 0.2) as " .. tostring(w) .. ": Python reads back the spec's double")

util.finish()
