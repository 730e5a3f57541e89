-- A tensor times a number (PyTorch's x * 0.37, 2 * x): nn's `*` with one number operand
-- traces the op "scale" (the number as a float in attrs.scale, the tensor's dtype, a
-- parameter operand too), never "mul"; a NaN, an infinity, a number past fp32's range or a
-- non-number is one spec error at its line; the step C calls rt_scale_packed_forward /
-- rt_scale_packed_backward where packing.lua packs its operands (LoRA's lora_b -> scale -> add
-- in bf16 end to end), rt_scale_forward / rt_scale_backward where not (a checkpointed
-- block), with the op's dt and the number rounded to fp32 (as PyTorch's opmath does),
-- assigning or adding to the input's gradient; no model FLOPs; the simulator prices
-- one element-wise launch each way, and no copy of lora_b's packed output gradient; the
-- PyTorch twin writes `x * s` with s reading back as the spec's double.
-- Run from the repository root: lua5.4 tests/generator/scale_op.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path

local util = require("tests.generator.step_c")
local check, args_of = util.check, util.args_of

local function f32(x) return (string.unpack("f", string.pack("f", x))) end

-- A one-module spec whose forward is `body` (x: its [4, 16] input; self.lin, self.p),
-- under `mp` ("bf16" or nil).
local function spec_src(body, mp)
  return util.module_spec("scale_op", { "m.lin = nn.Linear(16, 16)",
    'm.p = nn.Parameter({ 4, 16 }, { kind = "normal", std = 1.0 })' }, { body }, mp)
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

-- The scale calls of a step C text: { name (forward, backward, packed_forward,
-- packed_backward), args } each, in order.
local function scale_calls(text)
  local out = {}
  for call, name in text:gmatch("(rt_scale_([%a_]+)%b();)") do out[#out + 1] = { name = name, a = args_of(call) } end
  return out
end

local memory = require("memory.memory")
local function packed_chain(plan, op)
  local x, y = memory.base(op.ins[1]), memory.base(op.outs[1])
  return x.packed, x.grad_packed, y.packed, y.grad_packed
end

local feature = util.plan("tests/specs/features/scale_bf16.lua")
local step = util.step_c(feature, true)
local calls = { forward = {}, backward = {}, packed_forward = {}, packed_backward = {} }
for _, k in ipairs(scale_calls(step)) do table.insert(calls[k.name], k) end
local fwd, bwd = calls.packed_forward, calls.packed_backward
local nums, values, grads = {}, 0, 0
for _, op in ipairs(ops_of(feature, "scale")) do
  nums[#nums + 1] = op.attrs.scale
  local xv, xg, yv, yg = packed_chain(feature, op)
  values = values + (xv and 1 or 0) + (yv and 1 or 0)
  grads = grads + (xg and 1 or 0) + (yg and 1 or 0)
end
check(#nums == 5 and values == 10 and grads == 9, string.format("scale_bf16: every scale's input and output "
  .. "stored packed (%d of 10), their gradients too (%d of 10) but the lookup's output's, whose backward reads "
  .. "fp32 storage", values, grads))
check(#nums == 5 and #fwd == 5 and #bwd == 5 and #calls.forward == 0 and #calls.backward == 0,
  string.format("scale_bf16: %d scale ops, %d rt_scale_packed_forward and %d rt_scale_packed_backward calls in "
  .. "the step (5 each: two blocks' 0.37 and 2, the head's 0.5), %d rt_scale_forward and %d rt_scale_backward",
  #nums, #fwd, #bwd, #calls.forward, #calls.backward))
-- the number each call passes: a float literal that C reads as the spec's number rounded to fp32
local function lit(s) return tonumber((s:gsub("f$", ""))) end
ok = #fwd == #nums
for i, k in ipairs(fwd) do
  ok = ok and #k.a == 6 and k.a[3] == "256" and k.a[5] == "RT_PACKED_OUT | RT_PACKED_INP" and k.a[6] == "RT_BF16"
    and k.a[4]:match("f$") and f32(lit(k.a[4])) == f32(nums[i])
end
check(ok, "each rt_scale_packed_forward(out, x, 256, s, RT_PACKED_OUT | RT_PACKED_INP, RT_BF16): s a float "
  .. "literal of the op's number rounded to fp32 (0.37 as " .. (fwd[2] and fwd[2].a[4] or "?") .. ")")
local f32s = {}
for _, v in ipairs(nums) do f32s[f32(v)] = true end
local assigned, added, dinp16 = 0, 0, 0
ok = true
for _, k in ipairs(bwd) do
  -- dout packed, never an input value (the number is the whole derivative)
  ok = ok and #k.a == 7 and k.a[3] == "256" and k.a[6] == "RT_BF16" and f32s[f32(lit(k.a[4]))] ~= nil
    and (k.a[5] == "RT_PACKED_OUT" or k.a[5] == "RT_PACKED_OUT | RT_PACKED_DINP")
  if k.a[5]:find("RT_PACKED_DINP", 1, true) then dinp16 = dinp16 + 1 end
  if k.a[7] == "RT_ASSIGN_1" then assigned = assigned + 1 elseif k.a[7] == "RT_ACCUMULATE" then added = added + 1 end
end
check(ok and assigned == 3 and added == 2 and dinp16 == 4, string.format("each rt_scale_packed_backward(dx, "
  .. "dout, 256, s, RT_PACKED_OUT[ | RT_PACKED_DINP], RT_BF16, assign), s as the forward's: %d write a packed "
  .. "dx (4: all but the lookup's output's), %d assign x's gradient (its first contribution), %d add to it "
  .. "(2 * x, traced before the linears that read x)", dinp16, assigned, added))
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

-- LoRA's branch, lora_b -> scale -> add, packed end to end: lora_b writes its output packed
-- and its backward reads a packed dout, the add's backward shares its gradient's buffer (no
-- kernel), and the step calls the packed scale kernels (bf16, two ranks)
local lora = util.plan("tests/specs/features/lora_llama_bf16.lua")
local lstep = util.step_c(lora, true)
local chains, whole, aliased = 0, 0, 0
for _, op in ipairs(ops_of(lora, "scale")) do
  local lb, add = op.ins[1].producer, nil
  for _, r in ipairs(lora.graph.ops) do
    if r.kind == "add" and (r.ins[1] == op.outs[1] or r.ins[2] == op.outs[1]) then add = r end
  end
  chains = chains + 1
  local xv, xg, yv, yg = packed_chain(lora, op)
  if lb and lb.kind == "linear" and lb.label:find("lora_b", 1, true) and xv and xg and yv and yg then
    whole = whole + 1
  end
  for _, st in ipairs(lora.steps) do
    if add and st.node == add and st.op == "backward" and st.grad_alias then aliased = aliased + 1 end
  end
end
local lcalls = { forward = {}, backward = {}, packed_forward = {}, packed_backward = {} }
for _, k in ipairs(scale_calls(lstep)) do table.insert(lcalls[k.name], k) end
local lb_out, lb_dout = 0, 0
for _, st in ipairs(util.compute_steps(lstep)) do
  if st.head:find("lora_b.linear", 1, true) then
    local a = st.calls[1] and args_of(st.calls[1])
    local fw = st.calls[1] and st.calls[1]:match("^rt_linear_packed_forward%(")
    local bw = st.calls[1] and st.calls[1]:match("^rt_linear_packed_backward%(")
    if fw and a[8]:find("RT_PACKED_OUT", 1, true) then lb_out = lb_out + 1 end
    if bw and a[10]:find("RT_PACKED_OUT", 1, true) then lb_dout = lb_dout + 1 end
  end
end
check(chains == 9 and whole == 9 and aliased == 6 and lb_out == 9 and lb_dout == 9
  and #lcalls.packed_forward == 9 and #lcalls.packed_backward == 9 and #lcalls.forward == 0
  and #lcalls.backward == 0, string.format("lora_llama_bf16: %d of %d scales packed with their input (lora_b's "
  .. "output) and both gradients, lora_b's calls write a packed output (%d) and read a packed dout (%d), %d of "
  .. "the adds after them share their gradient's buffer (6: not the head's, whose sum is the logits, nor the "
  .. "first block's q and v, whose frozen linears' outputs need no gradient), "
  .. "%d + %d packed scale calls, %d + %d fp32-storage ones", whole, chains, lb_out, lb_dout, aliased,
  #lcalls.packed_forward, #lcalls.packed_backward, #lcalls.forward, #lcalls.backward))

-- the control: a checkpointed module keeps fp32 storage (packing.lua), its scale by 0.37 (not
-- a power of two: not folded, scaled_linears.lua) the fp32-storage calls with the bf16 dt,
-- recomputed in backward
local ckpt_src = spec_src('return self.lin(x:to("bf16")) * 0.37', "bf16"):gsub("fsdp%.fully_shard%(m",
  "nn.checkpoint_module(m)\nfsdp.fully_shard(m")
local ckpt = util.plan_source(ckpt_src)
local ccalls = { forward = {}, backward = {}, packed_forward = {}, packed_backward = {} }
for _, k in ipairs(ckpt and scale_calls(util.step_c(ckpt, true)) or {}) do table.insert(ccalls[k.name], k) end
local cpacked = 0
for _, op in ipairs(ckpt and ops_of(ckpt, "scale") or {}) do
  local xv, xg, yv, yg = packed_chain(ckpt, op)
  if xv or xg or yv or yg then cpacked = cpacked + 1 end
end
ok = #ccalls.forward == 2 and #ccalls.backward == 1 and #ccalls.packed_forward == 0
  and #ccalls.packed_backward == 0 and cpacked == 0
for _, k in ipairs(ccalls.forward) do ok = ok and k.a[5] == "RT_BF16" end
check(ok, string.format("a checkpointed module's x * 0.37: no scale operand packed (%d), %d rt_scale_forward "
  .. "(1 and its recomputation) and %d rt_scale_backward calls with RT_BF16, %d packed", cpacked,
  #ccalls.forward, #ccalls.backward, #ccalls.packed_forward + #ccalls.packed_backward))

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

-- LoRA's lora_b reads its packed output gradient in place: its backward is its two GEMMs and
-- the 16-bit copies of its input and weight (rank 6: not packed), no copy of dout
local lb, lb4 = 0, 0
for _, st in ipairs(lora.steps) do
  if st.node and st.op == "backward" and st.node.label:find("lora_b", 1, true) then
    lb = lb + 1
    if cost.step(st, lora, h100, k).launches == 4 then lb4 = lb4 + 1 end
  end
end
check(lb == 9 and lb4 == 9, string.format("the simulator: lora_llama_bf16's lora_b backwards %d of %d with 4 "
  .. "launches (2 GEMMs, copies of the rank-6 input and weight; none of the packed dout)", lb4, lb))

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
