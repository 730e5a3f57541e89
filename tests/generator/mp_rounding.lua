-- Mixed-precision rounding in the emitted step C (generator/emit/kernels_c.lua): the kernels
-- that take a dt round their own outputs (rt_kernels.h), and the generator adds an explicit
-- rt_step_round only where a 16-bit value is left unrounded. Checks, on the step C of every
-- spec (tests/specs, examples):
--   * every forward (and recomputed) output is rounded exactly once when its tensor is
--     bf16/fp16 (by the kernel's dt or by one rt_step_round) and never when it is fp32 (a
--     residual add and its norm in one call, both by its dt);
--   * no rt_step_round repeats the rounding of a buffer the backward kernel just rounded;
-- and, on tests/specs/features/mixed_precision_odd_ops.lua and bench GPT-2, the cases the
-- kernels cannot round themselves (parameter operands, tensors used twice, broadcast_add's
-- db of an activation), that swiglu with a bf16 parameter operand is refused, and which
-- tensors are packed into 16 bits (memory.lua: a head's logits, activations around the
-- linears, attention's operands, and some of their gradients).
-- Run from the repository root: lua5.4 tests/generator/mp_rounding.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path

local util = require("tests.generator.step_c")
local check, args_of, compute_steps = util.check, util.args_of, util.compute_steps

-- The training step's C (the eval program after it calls the same kernel emitters, but
-- the counts below are the step's).
local function step_c(path)
  local plan = util.plan(path)
  return (util.step_c(plan)), plan.spec.name  -- one line per call
end

-- The kernels with a dt (their last argument; a backward kernel's next to last, before its
-- assign bits) and the argument positions they round.
local DT_FORWARD = { linear = true, layernorm = true, rmsnorm = true, gelu = true, relu = true, silu = true,
  swiglu = true, rope = true, residual = true, mul = true, scale = true, broadcast_add = true, dropout = true,
  attention_lowmem = true, linear_packed = true, layernorm_packed = true, rmsnorm_packed = true, gelu_packed = true,
  relu_packed = true, silu_packed = true, swiglu_packed = true, rope_packed = true, attention_lowmem_packed = true,
  residual_packed = true, embedding_packed = true, scale_packed = true, linear_scaled = true,
  linear_scaled_packed = true }
local DT_BACKWARD_ROUNDS = { linear = { 1 }, linear_packed = { 1 }, layernorm = { 1 }, rmsnorm = { 1 }, gelu = { 1 }, relu = { 1 },
  silu = { 1 }, rope = { 1 }, dropout = { 1 }, swiglu = { 1, 2 }, residual = { 1, 2 }, mul = { 1, 2 }, scale = { 1 },
  broadcast_add = { 1 }, attention_lowmem = { 1, 2, 3 }, cross_entropy = { 1 }, gelu_packed = { 1 }, relu_packed = { 1 },
  silu_packed = { 1 }, swiglu_packed = { 1, 2 }, rope_packed = { 1 }, attention_lowmem_packed = { 1, 2, 3 },
  residual_packed = { 1, 2 }, layernorm_packed = { 1 }, rmsnorm_packed = { 1 }, scale_packed = { 1 },
  linear_scaled = { 1 }, linear_scaled_packed = { 1 } }


local SIXTEEN = { RT_BF16 = true, RT_F16 = true }

local function kernel_of(call)
  local k, dir = call:match("^rt_([%w_]+)_(%a+)ward%(")
  return k, dir and (dir .. "ward")
end

-- Checks the two rules on one spec's step C; returns counts for the summary line.
local function check_rules(text, name)
  local bad_fwd, bad_bwd, nfwd, nbwd = {}, {}, 0, 0
  for _, st in ipairs(compute_steps(text, true)) do
    if (st.kind == "forward" or st.kind == "recompute") and st.calls[1] then
      local first = st.calls[1]
      local a = args_of(first)
      local out = a[1]
      local k = kernel_of(first)
      local rounds = 0
      if k and DT_FORWARD[k] and first:match("_forward%(") and SIXTEEN[a[#a]] then rounds = rounds + 1 end
      -- a residual add and its norm in one call (the add's step has none): dt rounds both
      -- the sum (argument 1, the add's output) and the norm's output (argument 2)
      if k == "residual_rmsnorm_packed" or k == "residual_layernorm_packed" then
        out = a[2]
        if SIXTEEN[a[#a]] then rounds, nfwd = rounds + 1, nfwd + 1 end
      end
      -- two rotary embeddings in one call (the earlier one's step has none): dt rounds both
      -- outputs, the earlier one's (argument 1) and this step's (argument 5)
      if k == "rope_pair_packed" then
        out = a[5]
        if SIXTEEN[a[#a]] then rounds, nfwd = rounds + 1, nfwd + 1 end
      end
      -- an attention site (rt_step_attention_forward(R, site, out, ...)): 16-bit, rounded
      if first:match("^rt_step_attention_forward%(") then out, rounds = a[3], 1 end
      for i = 2, #st.calls do
        local r = st.calls[i]:match("^rt_step_round%((.*)%);$")
        if r and args_of(st.calls[i])[1] == out then rounds = rounds + 1 end
      end
      local want = (st.dtype == "bf16" or st.dtype == "fp16") and 1 or 0
      if st.dtype and first:match("^rt_") and not first:match("^rt_arange") then
        nfwd = nfwd + 1
        if rounds ~= want then bad_fwd[#bad_fwd + 1] = string.format("%s: rounded %d times", st.head, rounds) end
      end
    elseif st.kind == "backward" then
      local rounded = {}
      for _, call in ipairs(st.calls) do
        local k, dir = kernel_of(call)
        if call:match("^rt_step_attention_backward%(") then  -- (R, site, dq, dk, dv, ...): rounded
          nbwd = nbwd + 1
          local a = args_of(call)
          for i = 3, 5 do rounded[a[i]] = true end
        elseif k == "rope_pair_packed" and dir == "backward" then  -- dinp_a (1), dinp_b (7); dt last
          nbwd = nbwd + 1
          local a = args_of(call)
          if SIXTEEN[a[#a]] then rounded[a[1]], rounded[a[7]] = true, true end
        elseif k and dir == "backward" and DT_BACKWARD_ROUNDS[k] then
          nbwd = nbwd + 1
          local a = args_of(call)
          if SIXTEEN[a[#a - 1]] then  -- dt, then the assign bits
            for _, i in ipairs(DT_BACKWARD_ROUNDS[k]) do
              if a[i] ~= "NULL" then rounded[a[i]] = true end
            end
          end
        elseif call:match("^rt_step_round%(") then
          local buf = args_of(call)[1]
          if rounded[buf] then bad_bwd[#bad_bwd + 1] = st.head .. ": " .. call end
        end
      end
    end
  end
  check(#bad_fwd == 0, string.format("%s: %d forward outputs, each bf16/fp16 one rounded once, fp32 ones never%s",
    name, nfwd, bad_fwd[1] and (" (" .. bad_fwd[1] .. ")") or ""))
  check(#bad_bwd == 0, string.format("%s: %d backward kernel calls, no rt_step_round repeats a kernel's own rounding%s",
    name, nbwd, bad_bwd[1] and (" (" .. bad_bwd[1] .. ")") or ""))
end

local specs = util.all_specs()
local texts = {}
for _, spec in ipairs(specs) do
  local ok, text, name = pcall(step_c, spec)
  check(ok, spec .. ": step C emitted" .. (ok and "" or (": " .. tostring(type(text) == "table" and text.msg or text))))
  if ok then
    texts[name] = text
    check_rules(text, name)
  end
end

-- ---------------------------------------------------------------------------- odd cases

-- The calls of the backward step of the op labelled `label`, without the zeroing of new
-- gradient buffers.
local function backward_calls(text, label)
  for _, st in ipairs(compute_steps(text, true)) do
    if st.kind == "backward" and st.head:match("^%s*// compute%s+%a+%s+(%S+)") == label then
      local calls = {}
      for _, c in ipairs(st.calls) do
        if not c:match("^rt_zero%(") then calls[#calls + 1] = c end
      end
      return calls
    end
  end
  return {}
end

local function count_rounds(calls)
  local n = 0
  for _, c in ipairs(calls) do if c:match("^rt_step_round%(") then n = n + 1 end end
  return n
end

local odd = texts["mixed_precision_odd_ops"]
check(odd ~= nil, "mixed_precision_odd_ops: step C emitted")
if odd then
  local function expect(label, pattern, nrounds, what)
    local calls = backward_calls(odd, label)
    local ok = calls[1] ~= nil and calls[1]:match(pattern) ~= nil and count_rounds(calls) == nrounds
    check(ok, string.format("odd ops %s backward: %s (%s then %d rt_step_round)", label, what,
      calls[1] or "no call", count_rounds(calls)))
  end
  local F = "F%(%d+, %d+%)"
  local AS = ", [%w_ |]+%);$"  -- the assign bits after dt
  expect("child.mul#2", "^rt_mul_backward%((" .. F .. "), %1, .*RT_BF16" .. AS, 0,
    "x * x: one buffer for both gradients, rounded by the kernel")
  expect("child.add", "^rt_residual_backward%((" .. F .. "), %1, .*RT_BF16" .. AS, 0,
    "x + x: one buffer, rounded by the kernel")
  expect("child.swiglu", "^rt_swiglu_backward%((" .. F .. "), %1, .*RT_BF16" .. AS, 0,
    "swiglu(x, x): one buffer, rounded by the kernel")
  expect("child.add#2", "^rt_residual_backward%(.*RT_F32" .. AS, 1,
    "x + parameter: RT_F32 (the parameter's gradient is not rounded), the activation's rounded explicitly")
  expect("child.mul#3", "^rt_mul_backward%(.*RT_F32" .. AS, 1, "x * parameter: as x + parameter")
  expect("child.add#3", "^rt_broadcast_add_backward%(.*RT_BF16" .. AS, 0,
    "x + bias parameter [16]: da rounded by the kernel, db (the parameter's) left alone")
  expect("child.linear", "^rt_linear_backward%(.*RT_F32" .. AS, 0,
    "linear(parameter, weight): RT_F32, nothing rounded (both gradients are parameters')")
  expect("cast#2", "^rt_step_round%(", 1, "the fp32 view cast rounds its input's gradient to bf16")
end

local gpt2 = texts["bench_gpt2_124m"]
if gpt2 then
  local calls = backward_calls(gpt2, "add")
  local a = calls[1] and calls[1]:match("^rt_broadcast_add_backward") and args_of(calls[1])
  local ok = a and a[#a - 1] == "RT_BF16" and #calls == 2 and args_of(calls[2])[1] == a[2]
  check(ok, "gpt2 tok + pos broadcast add backward: da rounded by the kernel, db (the bf16 position "
    .. "embedding's gradient, an activation) by one rt_step_round")
end

-- The fp32 logits of a bf16 model (a view cast, read only by the loss): the cross-entropy
-- backward rounds their gradient to bf16 itself, the cast's backward has nothing left to do.
-- The loss's forward, directly before its gradient, is left to the same fused call.
local llama = texts["bench_llama_1b"]
if llama then
  local ce, fwd
  for _, st in ipairs(compute_steps(llama, true)) do
    if st.kind == "loss_grad" then ce = st.calls[1] end
    if st.kind == "forward" and st.head:match("cross_entropy") then fwd = st.calls end
  end
  local a = ce and ce:match("^rt_cross_entropy_packed_forward_backward%(") and args_of(ce)
  local cast = backward_calls(llama, "cast")
  check(a and a[#a - 1] == "RT_BF16" and a[#a] == "RT_ASSIGN_1" and #cast == 0,
    "llama 1B logits: cross-entropy backward assigns dlogits rounded to bf16 (" .. tostring(ce)
    .. "), the view cast's backward emits nothing (" .. #cast .. " calls)")
  check(fwd and #fwd == 0, "llama 1B: the cross-entropy forward emits no call of its own ("
    .. tostring(fwd and fwd[1]) .. ")")
end

-- ---------------------------------------------------------------------------- refused

local tmp = os.tmpname() .. ".lua"
local f = assert(io.open(tmp, "w"))
f:write([[
local nn, fsdp = require("nn"), require("fsdp")
local M = {}
function M.forward(self, x) return nn.swiglu(self.lin(x), self.p) end
local m = nn.new_module("M", M)
m.lin = nn.Linear(8, 8)
m.p = nn.Parameter({ 2, 8 })
fsdp.fully_shard(m, { mp_policy = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16" } })
return fsdp.spec{ name = "mp_swiglu_param", model = m, world_size = 1, input = { shape = { 2, 8 } },
  loss = "sum", optimizer = { "sgd", lr = 0.1 } }
]])
f:close()
local ok, err = pcall(util.plan, tmp)
os.remove(tmp)
local msg = type(err) == "table" and (err.msg or "") or tostring(err)
check(not ok and require("spec.errors").is_spec_error(err) and not err.internal
  and msg:find("parameter operand", 1, true) ~= nil,
  "swiglu with a bf16 parameter operand is refused when planning (check.lua: its dt would round "
  .. "the parameter's gradient): " .. msg)

-- Packed logits (packing.lua mark_packed_logits) only for a bias-free head: the same small token
-- model with and without the head's bias.
for _, bias in ipairs({ false, true }) do
  local path = os.tmpname() .. ".lua"
  local h = assert(io.open(path, "w"))
  h:write(string.format([[
local nn, fsdp = require("nn"), require("fsdp")
local M = {}
function M.forward(self, tok) return self.head(self.emb(tok)):float() end
local m = nn.new_module("M", M)
m.emb = nn.Embedding(16, 8)
m.head = nn.Linear(8, 13, { bias = %s })
fsdp.fully_shard(m, { mp_policy = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16" } })
return fsdp.spec{ name = "mp_head", model = m, world_size = 1, input = { batch = 2, seq_len = 4 },
  loss = "cross_entropy", optimizer = { "sgd", lr = 0.1 } }
]], tostring(bias)))
  h:close()
  local ok, text = pcall(step_c, path)
  os.remove(path)
  local packed = ok and text:find("rt_linear_packed_forward(", 1, true) ~= nil
    and text:find("rt_cross_entropy_packed_forward_backward(", 1, true) ~= nil
    and text:find("rt_linear_packed_backward(", 1, true) ~= nil
  -- (the head reads the embedding's packed lookup either way)
  local head = ok and text:match("rt_linear_[%w_]*forward%b()") or ""
  local plain = ok and head ~= "" and not head:find("RT_PACKED_OUT", 1, true)
    and text:find("rt_cross_entropy_forward_backward(", 1, true) ~= nil
  check(ok and (bias and plain and not packed or not bias and packed),
    string.format("bf16 head with%s bias, vocabulary 13: logits %s", bias and "" or "out",
      bias and "in fp32 storage (the head's forward without RT_PACKED_OUT, rt_cross_entropy_forward_backward)"
        or "packed (rt_linear_packed_forward, rt_cross_entropy_packed_forward_backward, rt_linear_packed_backward)"))
end

-- Packed activations (packing.lua mark_packed_activations): an activation's bf16 output that only
-- linears and residual adds read is packed (as is the linear output it reads); read by a
-- product too, or 12 wide (not a multiple of 8), or in fp32, it is not. Its gradient is
-- packed with it (the relu's backward then reads a packed dout, the readers' backwards
-- write theirs packed, the second one adding to the first's).
local function act_spec(width, extra_reader, dtype)
  local ret = { add = "return (y + self.down(h + self.up(x))):float()", linear = "return (y + self.down(h)):float()",
    mul = "return (y + self.down(h * self.up(x))):float()" }
  return string.format([[
local nn, fsdp = require("nn"), require("fsdp")
local M = {}
function M.forward(self, x)
  local h = nn.relu(self.up(x))
  local y = self.down(h)
  %s
end
local m = nn.new_module("M", M)
m.up = nn.Linear(8, %d)
m.down = nn.Linear(%d, 8)
fsdp.fully_shard(m, { mp_policy = fsdp.MixedPrecisionPolicy{ param_dtype = "%s" } })
return fsdp.spec{ name = "mp_act", model = m, world_size = 1, input = { shape = { 4, 8 }, dtype = "%s" },
  loss = "sum", optimizer = { "sgd", lr = 0.1 } }
]], ret[extra_reader] or "return y:float()", width, width, dtype, dtype)
end
-- width, extra reader, dtype, relu output packed, its gradient packed
for _, c in ipairs({
  { 16, nil, "bf16", true, true }, { 16, "linear", "bf16", true, true }, { 16, "add", "bf16", true, true },
  { 16, "mul", "bf16", false, false },
  { 12, nil, "bf16", false, false }, { 16, nil, "fp32", false, false },
}) do
  local path = os.tmpname() .. ".lua"
  local h = assert(io.open(path, "w"))
  h:write(act_spec(c[1], c[2], c[3]))
  h:close()
  local ok, text = pcall(step_c, path)
  os.remove(path)
  -- whether the first call to `name` with `shape` in its arguments has the packed bit `bit`
  local function has(name, shape, bit)
    for line in (ok and text or ""):gmatch("[^\n]+") do
      if line:find(name .. "(", 1, true) and line:find(shape, 1, true) then return line:find(bit .. "%f[^%w_]") ~= nil end
    end
    return false
  end
  local down = string.format(", 4, %d, 8, ", c[1])  -- the down projection's N, C, OC
  local packed = has("rt_relu_packed_forward", "", "RT_PACKED_OUT")
  local read_packed = has("rt_linear_packed_forward", down, "RT_PACKED_INP")
  local grad_packed = has("rt_relu_packed_backward", "", "RT_PACKED_OUT")  -- its dout: h's gradient
  check(ok and packed == c[4] and read_packed == c[4] and grad_packed == c[5], string.format(
    "%s relu output %d wide%s: %s%s%s", c[3], c[1], c[2] and ", also read by " .. ({ add = "a residual add",
    linear = "another linear", mul = "a product" })[c[2]] or "", c[4] and "packed, and read packed by its linear" or "fp32 storage",
    c[5] and "; its gradient packed, read packed by the relu's backward" or "",
    ok and "" or " (" .. tostring(text) .. ")"))
end

-- Packed attention and residual stream (memory.lua): in a bf16 Llama with a fully_shard
-- per block, q and k (each through its rotary embedding), v and the attention's output are
-- packed, and the gradients of q and k before and after the rotary embeddings, of v and of
-- the attention's output; the residual adds write packed outputs that the norms read, the second block's
-- first norm through FSDP's post-backward hook, and the residual stream's gradient is packed
-- too (the norms' backwards write it; the adds pass their output's gradient buffer on to
-- both inputs, grad_alias.lua) but for the embedding's output (its
-- gradient fp32: the first block's first norm and add write it, the add from a packed dout).
-- Checkpointed, none of the blocks' tensors are (the final norm's output still is). With
-- `attention = "fsdpgen"` the attention calls are fsdpgen's packed kernels; by default
-- (auto) they are the site's (rt_step_attention_*, memory/attention.lua), with the packing
-- the site's runtime implies.
local function llama_spec(ckpt, attention)
  return string.format([[
local fsdp, models = require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = models.Llama{ n_layers = 2, dim = 32, n_heads = 4, n_kv_heads = 2, vocab_size = 64,
                            max_seq_len = 16, checkpoint_activations = %s }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { mp_policy = mp }) end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{ name = "mp_llama", model = model, world_size = 1, input = { batch = 2, seq_len = 16 },
  loss = "cross_entropy", optimizer = { "adamw", lr = 1e-3 }, attention = %q }
]], tostring(ckpt), attention)
end
-- pcall(step_c) of that spec, written to a temporary file.
local function llama_step_c(ckpt, attention)
  local path = os.tmpname() .. ".lua"
  local h = assert(io.open(path, "w"))
  h:write(llama_spec(ckpt, attention))
  h:close()
  local ok, text = pcall(step_c, path)
  os.remove(path)
  return ok, text
end
for _, ckpt in ipairs({ false, true }) do
  local ok, text = llama_step_c(ckpt, "fsdpgen")
  local function bits_of(name)  -- the packed bits of each call to `name`, in order
    local found = {}
    for line in (ok and text or ""):gmatch("[^\n]+") do
      if line:find(name .. "(", 1, true) then found[#found + 1] = line:match("(RT_PACKED[^,]*),") or "" end
    end
    return table.concat(found, "; ")
  end
  local all4 = "RT_PACKED_OUT | RT_PACKED_INP | RT_PACKED_INP2 | RT_PACKED_INP3"
  local norm_in = "RT_PACKED_OUT | RT_PACKED_INP"
  local norm_bwd = norm_in .. " | RT_PACKED_DINP"
  local attn_bwd = all4 .. " | RT_PACKED_DINP | RT_PACKED_DINP2 | RT_PACKED_DINP3"
  -- the norms after a residual add are computed with it (their add's bits first), the
  -- embedding's only alone (the lookup packed, its gradient not); checkpointed, the two in-block pairs, in fp32 storage, and so
  -- are the q and k rotations' pairs (forward and recomputed: 4; the backward's apart). The
  -- blocks' gradients are packed (grad_assigns.packed_groups), the root's (the final norm's
  -- weight, with the embedding's) not.
  local add3 = "RT_PACKED_OUT | RT_PACKED_INP | RT_PACKED_INP2"
  local dw = " | RT_PACKED_DWEIGHT"
  local want = ckpt and { "", "", string.rep("", 4, "; "), "", "RT_PACKED_OUT", "",
    "RT_PACKED_OUT; " .. ("RT_PACKED_DWEIGHT"):rep(4, "; "), "; " } or { all4:rep(2, "; "),
    attn_bwd:rep(2, "; "), ("RT_PACKED_OUT | RT_PACKED_INP"):rep(2, "; "), ("RT_PACKED_OUT | RT_PACKED_DINP"):rep(2, "; "),
    norm_in, "RT_PACKED_OUT | RT_PACKED_DINP2",
    norm_bwd .. "; " .. (norm_bwd .. dw):rep(3, "; ") .. "; " .. norm_in .. dw, add3:rep(4, "; ") }
  local got = { bits_of("rt_attention_lowmem_packed_forward"), bits_of("rt_attention_lowmem_packed_backward"),
    bits_of("rt_rope_pair_packed_forward"), bits_of("rt_rope_pair_packed_backward"), bits_of("rt_rmsnorm_packed_forward"),
    bits_of("rt_residual_packed_backward"), bits_of("rt_rmsnorm_packed_backward"),
    bits_of("rt_residual_rmsnorm_packed_forward") }
  local same = ok
  for i = 1, #want do same = same and got[i] == want[i] end
  check(same, string.format("bf16 Llama, 2 blocks%s: attention packed (%s | %s), rope forward (%s), rope backward "
    .. "(%s), rmsnorm forward (%s), residual backward (%s), rmsnorm backward (%s), residual add + rmsnorm "
    .. "forward (%s)%s", ckpt and ", checkpointed" or "", got[1], got[2], got[3], got[4], got[5], got[6], got[7],
    got[8], ok and "" or " (" .. tostring(text) .. ")"))
end
do
  local ok, text = llama_step_c(false, "auto")
  text = ok and text or ""
  local function count(name) return select(2, text:gsub(name .. "%(R, 0, ", "")) end
  local fwd, bwd = count("rt_step_attention_forward"), count("rt_step_attention_backward")
  local kernels = select(2, text:gsub("rt_attention_lowmem[%w_]*%(", ""))
  check(fwd == 2 and bwd == 2 and kernels == 0, string.format("bf16 Llama, 2 blocks, attention auto: both blocks' "
    .. "attention at site 0 (forward %d, backward %d calls), no direct kernel call (%d)", fwd, bwd, kernels))
end

-- Packed parameters (packing.lua mark_params): the params table's packed column and the
-- linears' RT_PACKED_INP2 bit. Three bias-carrying linears 8 -> mid -> 8 -> 16: with mid 8 in
-- bf16 every weight is packed; with mid 6 the first two are not ([6, 8] and [8, 6]: 6 rows or
-- columns) but the third is, which follows 110 elements (each parameter's unsharded offset
-- is 16-byte aligned: packing.lua place_unsharded_params); in fp32 none is. In the
-- benchmarks GPT-2's tied token embedding (also read by the embedding) and Llama's are
-- not, Llama's output head is; in the odd ops, the weight of linear(parameter, weight) is
-- not (its backward runs in fp32).
local function packed_params(text)
  local got = {}
  for entry in util.flat(text):gmatch('\n%s*({%.fqn = "[^\n]*)') do
    got[entry:match('^{%.fqn = "([^"]+)"')] = entry:find(".packed = 1", 1, true) ~= nil
  end
  return got
end
local function align_spec(mid, dtype)
  return string.format([[
local nn, fsdp = require("nn"), require("fsdp")
local M = {}
function M.forward(self, x) return self.c(nn.relu(self.b(nn.relu(self.a(x))))):float() end
local m = nn.new_module("M", M)
m.a = nn.Linear(8, %d)
m.b = nn.Linear(%d, 8)
m.c = nn.Linear(8, 16)
fsdp.fully_shard(m, { mp_policy = fsdp.MixedPrecisionPolicy{ param_dtype = "%s" } })
return fsdp.spec{ name = "mp_params", model = m, world_size = 1, input = { shape = { 4, 8 }, dtype = "%s" },
  loss = "sum", optimizer = { "sgd", lr = 0.1 } }
]], mid, mid, dtype, dtype)
end
-- c: mid, dtype, weights packed (a, b, c), biases packed (a, b, c): a bias of a multiple of
-- 8 values is packed whatever its weight
for _, c in ipairs({ { 8, "bf16", true, true, true, true, true, true },
  { 6, "bf16", false, false, true, false, true, true },
  { 8, "fp32", false, false, false, false, false, false } }) do
  local path = os.tmpname() .. ".lua"
  local h = assert(io.open(path, "w"))
  h:write(align_spec(c[1], c[2]))
  h:close()
  local ok, text = pcall(step_c, path)
  os.remove(path)
  local got = ok and packed_params(text) or {}
  local inp2, inp3 = 0, 0  -- linear calls reading a packed weight, a packed bias
  for line in (ok and text or ""):gmatch("[^\n]+") do
    if line:find("rt_linear_packed_", 1, true) and line:find("RT_PACKED_INP2", 1, true) then inp2 = inp2 + 1 end
    if line:find("rt_linear_packed_", 1, true) and line:find("RT_PACKED_INP3", 1, true) then inp3 = inp3 + 1 end
  end
  local function n(a, b, d) return (a and 1 or 0) + (b and 1 or 0) + (d and 1 or 0) end
  check(ok and got["a.weight"] == c[3] and got["b.weight"] == c[4] and got["c.weight"] == c[5]
    and (got["a.bias"] or false) == c[6] and (got["b.bias"] or false) == c[7]
    and (got["c.bias"] or false) == c[8] and inp2 == 2 * n(c[3], c[4], c[5]) and inp3 == n(c[6], c[7], c[8]),
    string.format("%s linears 8 -> %d -> 8 -> 16: weights packed a %s, b %s, c %s, biases a %s, b %s, c %s; "
    .. "%d linear calls read a packed weight (forward and backward of each), %d a packed bias (the forwards)%s",
    c[2], c[1], tostring(got["a.weight"]), tostring(got["b.weight"]), tostring(got["c.weight"]),
    tostring(got["a.bias"]), tostring(got["b.bias"]), tostring(got["c.bias"]), inp2, inp3,
    ok and "" or " (" .. tostring(text) .. ")"))
end
local bench = { gpt2 = texts["bench_gpt2_124m"] and packed_params(texts["bench_gpt2_124m"]),
  llama = texts["bench_llama_1b"] and packed_params(texts["bench_llama_1b"]),
  odd = odd and packed_params(odd) }
if bench.gpt2 and bench.llama and bench.odd then
  check(bench.gpt2["layers.0.attention.wq.weight"] and bench.gpt2["layers.11.feed_forward.w2.weight"]
    and not bench.gpt2["tok_embeddings.weight"] and bench.llama["output.weight"]
    and not bench.llama["tok_embeddings.weight"] and not bench.llama["norm.weight"]
    and bench.odd["child.lin.weight"] and not bench.odd["child.lin2.weight"],
    "packed parameters: the benchmarks' block linears and Llama's head, not the token embeddings "
    .. "(GPT-2's tied to its head) nor a norm's weight; odd ops: not the weight of linear(parameter, weight)")
end

util.finish()
