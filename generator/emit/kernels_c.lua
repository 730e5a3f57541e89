-- The C kernel calls (rt_kernels.h) for each traced op, forward and backward: the
-- reverse-mode rules of autodiff, one op at a time. `ctx` gives the C expressions of
-- tensors at the current step:
--   ctx.val(t)      the value (activation, parameter, input)
--   ctx.grad(t)     the gradient buffer to accumulate into, or "NULL" (no grad needed)
--   ctx.grad_ld(t)  its row length where it is a slice of a stack's rows, else 0
--                   (memory/stacked_linears.lua)
--   ctx.stack(s)    stack s's weights, their gradients and its output gradients' rows
--   ctx.dout(t)     the gradient of an output (pointer expression; of the loss itself,
--                   rt_step_one(R): like every gradient, in the backend's memory)
--   ctx.stats(op)   the op's saved statistics: its start (attention softmax (max, 1/sum) rows,
--                   RMSNorm rstd) and the start of the second half (LayerNorm: mean, rstd)
--   ctx.scratch     attention's scratch buffer (forward and backward)
--   ctx.site(op)    the op's dropout RNG site
--   ctx.attention_site(op)  the index of the op's shape in rt_model.attention (an attention
--                   op that may run on cuDNN: memory/attention.lua)
--   ctx.fresh(t)    the gradient buffer of t when it is an activation-gradient buffer that
--                   this backward step creates (memory.lua `u.zero`), else nil
--   ctx.loss_out    at a loss gradient whose forward the emitter left to it (memory.forward_with_loss_grad):
--                   the forward's output, which the backward's call then computes too
--   ctx.assign_param(t)  whether this step makes the first contribution to parameter t's
--                   gradient in its buffer's life, one the kernel assigns (grad_assigns.lua;
--                   the emitter leaves it out of the buffer's rt_zero)
-- Backward kernels accumulate into gradients, so several consumers of one tensor add up;
-- a fresh buffer's first contribution is assigned instead (rt_kernels.h "Assign": the
-- kernel's `assign` bits, so the buffer needs no rt_zero), where the kernel can.
--
-- Mixed precision: the value of a bf16/fp16 tensor is rounded to its dtype after every
-- write. Most kernels do it themselves at the store (rt_kernels.h `dt`, the last argument:
-- the op's tensor dtype); `ROUNDS` says which of their outputs they round, and an
-- explicit rt_step_round follows every call for any other 16-bit output (embedding, cast,
-- and gradients a kernel leaves unrounded).
local grad_assigns = require("memory.grad_assigns")
local memory = require("memory.memory")
local trace = require("spec.trace")

local M = {}

local function numel(t) return trace.numel(t.shape) end
local function last(t) return t.shape[#t.shape] end
local function rows(t) return numel(t) // last(t) end

local round_dtype = { bf16 = "RT_BF16", fp16 = "RT_F16" }

-- The C dtype the given tensors share (rt_kernels.h `dt`, attention's `prec`): the dtype
-- a kernel rounds what it writes to and whose values the CUDA backend may multiply on
-- tensor cores; fp32 when they differ (no narrowing of a value that is not representable).
local function dtype_of(...)
  local d
  for _, t in ipairs({ ... }) do
    if d and t.dtype ~= d then return "RT_F32" end
    d = t.dtype
  end
  return round_dtype[d] or "RT_F32"
end

-- The `dt` of an op's kernels: the dtype its float tensors (inputs and output) share.
local function op_dtype(op)
  local ts = {}
  for _, t in ipairs(op.ins) do
    if trace.is_float(t.dtype) then ts[#ts + 1] = t end
  end
  ts[#ts + 1] = op.outs[1]
  return dtype_of(table.unpack(ts))
end

-- Mixed precision: values of a bf16/fp16 tensor are rounded after every write.
local function rounded(calls, expr, t)
  local d = round_dtype[t.dtype]
  if d then calls[#calls + 1] = string.format("rt_step_round(%s, %d, %s);", expr, numel(t), d) end
  return calls
end

-- What the kernels that take `dt` round (rt_kernels.h): their forward output, and in
-- backward the gradients of the inputs at positions `grads` (the others, such as a
-- linear's or a norm's weight and bias and a broadcast add's b, are parameter gradients
-- to the kernel). `alias_ok`: the kernel's two gradients may be one buffer (x + x; it
-- adds both before rounding). `fixed_dt`: dt also rounds intermediates, so a call cannot
-- fall back to RT_F32 (backward_rounding).
local ROUNDS = {
  linear = { grads = { 1 } },
  layer_norm = { grads = { 1 } },
  rms_norm = { grads = { 1 } },
  relu = { grads = { 1 } },
  gelu = { grads = { 1 } },
  silu = { grads = { 1 } },
  swiglu = { grads = { 1, 2 }, alias_ok = true, fixed_dt = true },
  rotary = { grads = { 1 } },
  mul = { grads = { 1, 2 }, alias_ok = true },
  scale = { grads = { 1 } },
  dropout = { grads = { 1 } },
  add = function(op)  -- rt_residual_* or rt_broadcast_add_*
    if numel(op.ins[1]) == numel(op.ins[2]) then return { grads = { 1, 2 }, alias_ok = true } end
    return { grads = { 1 } }
  end,
  attention = { grads = { 1, 2, 3 } },  -- rt_attention_lowmem_*: dt after prec
  embedding = { grads = {} },  -- rt_embedding_packed_forward; the backward writes a parameter's
}

local function rounds_of(op)
  local r = ROUNDS[op.kind]
  if type(r) == "function" then r = r(op) end
  return r
end

local function fmt_float(x)
  local s = string.format("%.9g", x)
  if not s:find("[%.eEn]") then s = s .. ".0" end
  return s .. "f"
end
M.fmt_float = fmt_float

-- (B, T) of a [..., T, C] tensor.
local function batch_seq(t)
  local s = t.shape
  local B = 1
  for i = 1, #s - 2 do B = B * s[i] end
  return B, s[#s - 1]
end

-- What the kernels cannot do is refused by the check pass (check.lua, through M.forward_refusal
-- and M.backward_refusal) before anything is planned to a file; reaching it here is a bug.
local function unsupported(op, what)
  error(string.format("internal: the check pass let through %s of op '%s' (%s)", what, op.kind,
    op.label or "?"))
end

local function shape_str(s)
  local t = {}
  for i, d in ipairs(s) do t[i] = tostring(d) end
  return "[" .. table.concat(t, ", ") .. "]"
end

-- ---------------------------------------------------------------------------- forward

local forward = {}

-- A packed call's `packed` argument (rt_kernels.h), nil when nothing is packed (memory.lua):
-- its output (forward) or the output's gradient (backward) RT_PACKED_OUT, the values of its
-- inputs at positions 1 to 3 (RT_PACKED_INP, RT_PACKED_INP2, RT_PACKED_INP3), and in
-- backward their gradients (RT_PACKED_DINP, RT_PACKED_DINP2, RT_PACKED_DINP3) and its
-- parameters' (RT_PACKED_DWEIGHT: a packed group's, grad_assigns.packed_groups); a backward
-- that reads no input value (rope's) passes `no_values`.
local function packed_bits(op, backward, no_values)
  local y = memory.base(op.outs[1])
  local bits = {}
  if (backward and y.grad_packed) or (not backward and y.packed) then bits[#bits + 1] = "RT_PACKED_OUT" end
  for j, name in ipairs({ "INP", "INP2", "INP3" }) do
    local x = op.ins[j] and memory.base(op.ins[j])
    -- a linear's backward takes no bias value
    local read = not (backward and op.kind == "linear" and j == 3)
    if x and x.packed and not no_values and read then bits[#bits + 1] = "RT_PACKED_" .. name end
  end
  for j, name in ipairs({ "DINP", "DINP2", "DINP3" }) do
    local x = op.ins[j] and memory.base(op.ins[j])
    if backward and x and x.grad_packed then bits[#bits + 1] = "RT_PACKED_" .. name end
  end
  for j, t in ipairs(op.ins) do  -- the parameters' gradients, one bit for all
    if backward and t.packed_grad and grad_assigns.param_grad_output(op, j) then
      bits[#bits + 1] = "RT_PACKED_DWEIGHT"
      break
    end
  end
  return #bits > 0 and table.concat(bits, " | ") or nil
end

-- The call rt_<k>_<dir>(args, dt[, as]), or its packed twin's with the packed bits before dt
-- (and after as, `lds`: the row lengths of its gradients, where the packed twin takes them).
local function kcall(k, dir, args, packed, dt, as, lds, more)
  local tail = (packed and packed .. ", " or "") .. dt .. (as and ", " .. as or "")
    .. (packed and lds and ", " .. lds or "") .. (more and ", " .. more or "")
  return { string.format("rt_%s_%s%s(%s, %s);", k, packed and "packed_" or "", dir, args, tail) }
end

-- A linear whose only reader, a scale by a power of two, is folded into it
-- (memory/scaled_linears.lua): the number is the GEMM's alpha, forward and backward.
local function out_scale(op) return (op.original or op).out_scale end

function forward.linear(op, c, out, dt)
  local x, w, b = op.ins[1], op.ins[2], op.ins[3]
  if out_scale(op) then
    local args = string.format("%s, %s, %s, %d, %d, %d, %s", out, c.val(x), c.val(w), rows(x), w.shape[2], w.shape[1],
      fmt_float(out_scale(op)))
    return kcall("linear_scaled", "forward", args, packed_bits(op), dt)
  end
  local args = string.format("%s, %s, %s, %s, %d, %d, %d", out, c.val(x), c.val(w), b and c.val(b) or "NULL", rows(x),
    w.shape[2], w.shape[1])
  return kcall("linear", "forward", args, packed_bits(op), dt)
end

-- A 16-bit lookup is rounded at its stores by the packed call, its output packed or not
-- (packing.lua); the weight is read in fp32 storage (its shard, or the unsharded parameters).
function forward.embedding(op, c, out, dt)
  local idx, w = op.ins[1], op.ins[2]
  local args = string.format("%s, %s, %s, %d, %d, %d", out, c.val(idx), c.val(w), numel(idx), w.shape[2],
    w.shape[1])
  if dt ~= "RT_F32" then
    return { string.format("rt_embedding_packed_forward(%s, %s, %s);", args, packed_bits(op) or "0", dt) }
  end
  return { string.format("rt_embedding_forward(%s);", args) }
end

function forward.arange(op, _, out)
  return { string.format("rt_arange_i32(%s, %d, 0);", out, numel(op.outs[1])) }
end

function forward.layer_norm(op, c, out, dt)
  local x, w, b = op.ins[1], op.ins[2], op.ins[3]
  local mean, rstd = c.stats(op)
  local args = string.format("%s, %s, %s, %s, %s, %s, %d, %d, %s", out, mean, rstd, c.val(x), c.val(w),
    b and c.val(b) or "NULL", rows(x), last(x), fmt_float(op.attrs.eps or 1e-5))
  return kcall("layernorm", "forward", args, packed_bits(op), dt)
end

function forward.rms_norm(op, c, out, dt)
  local x, w = op.ins[1], op.ins[2]
  local args = string.format("%s, %s, %s, %s, %d, %d, %s", out, c.stats(op), c.val(x), c.val(w), rows(x), last(x),
    fmt_float(op.attrs.eps or 1e-6))
  return kcall("rmsnorm", "forward", args, packed_bits(op), dt)
end

for _, k in ipairs({ "relu", "gelu", "silu" }) do
  forward[k] = function(op, c, out, dt)
    local x = op.ins[1]
    return kcall(k, "forward", string.format("%s, %s, %d", out, c.val(x), numel(x)), packed_bits(op),
      dt)
  end
end

function forward.swiglu(op, c, out, dt)
  local a, b = op.ins[1], op.ins[2]
  local args = string.format("%s, %s, %s, %d", out, c.val(a), c.val(b), numel(a))
  return kcall("swiglu", "forward", args, packed_bits(op), dt)
end

function forward.add(op, c, out, dt)
  local a, b = op.ins[1], op.ins[2]
  if numel(a) == numel(b) then
    return kcall("residual", "forward", string.format("%s, %s, %s, %d", out, c.val(a), c.val(b), numel(a)),
      packed_bits(op), dt)
  end
  return { string.format("rt_broadcast_add_forward(%s, %s, %s, %d, %d, %s);", out, c.val(a), c.val(b),
    numel(a) // numel(b), numel(b), dt) }
end

function forward.mul(op, c, out, dt)
  local a, b = op.ins[1], op.ins[2]
  if numel(a) ~= numel(b) then unsupported(op, "broadcasting") end  -- M.forward_refusal
  return { string.format("rt_mul_forward(%s, %s, %s, %d, %s);", out, c.val(a), c.val(b), numel(a), dt) }
end

-- The number of a scale (tensor * number) as the kernel multiplies by it: rounded to fp32
-- here, as PyTorch rounds a Python float to the fp32 of its opmath (x * 0.37 on a bf16
-- tensor is bf16(float(x) * 0.37f)); %.9g reads back as that float.
local function scale_arg(op)
  return fmt_float((string.unpack("f", string.pack("f", op.attrs.scale))))
end

function forward.scale(op, c, out, dt)
  if memory.is_view(op) then return {} end  -- folded into its linear
  local x = op.ins[1]
  return kcall("scale", "forward", string.format("%s, %s, %d, %s", out, c.val(x), numel(x), scale_arg(op)),
    packed_bits(op), dt)
end

function forward.dropout(op, c, out, dt)
  local x = op.ins[1]
  return { string.format("rt_dropout_forward(%s, %s, %d, %s, R->seed, rt_step_rng_stream(R, %d), 0, %s);",
    out, c.val(x), numel(x), fmt_float(op.attrs.p), c.site(op), dt) }
end

-- Attention keeps O(T) per head for backward (rt_attention_lowmem_*): the softmax rows'
-- (max, 1/sum) in the op's saved statistics, plus a scratch buffer during each call. An op
-- that may run on cuDNN (memory/attention.lua) calls its site instead (rt_step_attention_*,
-- ctx.attention_site), which runs the same packed kernels or cuDNN.
local function on_site(op) return (op.original or op).attention and (op.original or op).attention.cudnn end

-- The call's direction and its dropout arguments: with the spec's dropout_p, the
-- rt_attention_lowmem_*dropout_* calls, drawing from the op's RNG site as F.dropout does (a
-- recomputed op draws the original's masks).
local function attention_dropout(op, c, dir)
  local p = op.attrs.dropout_p
  if not p then return dir, nil end
  return "dropout_" .. dir, string.format("%s, R->seed, rt_step_rng_stream(R, %d)", fmt_float(p), c.site(op))
end

function forward.attention(op, c, out, dt)
  local q, k, v = op.ins[1], op.ins[2], op.ins[3]
  if on_site(op) then
    return { string.format("rt_step_attention_forward(R, %d, %s, %s, %s, %s, %s, %s);", c.attention_site(op), out,
      c.stats(op), c.scratch, c.val(q), c.val(k), c.val(v)) }
  end
  local B, T = batch_seq(q)
  local a = op.attrs
  local args = string.format("%s, %s, %s, %s, %s, %s, %d, %d, %d, %d, %d, %d, %s", out, c.stats(op), c.scratch,
    c.val(q), c.val(k), c.val(v), B, T, a.n_heads, a.n_kv_heads, a.head_dim, a.causal and 1 or 0, dtype_of(q, k, v))
  local dir, drop = attention_dropout(op, c, "forward")
  return kcall("attention_lowmem", dir, args, packed_bits(op), dt, nil, nil, drop)
end

function forward.rotary(op, c, out, dt)
  local x = op.ins[1]
  local B, T = batch_seq(x)
  local a = op.attrs
  local args = string.format("%s, %s, %d, %d, %d, %d, %s", out, c.val(x), B, T, a.n_heads, a.head_dim,
    fmt_float(a.theta))
  return kcall("rope", "forward", args, packed_bits(op), dt)
end

-- A view cast (memory.lua) shares its input's buffer: nothing to copy.
function forward.cast(op, c, out)
  if memory.is_view(op) then return {} end
  return { string.format("rt_copy(%s, %s, %d);", out, c.val(op.ins[1]), numel(op.ins[1])) }
end

function forward.sum(op, c, out)
  return { string.format("rt_sum_loss_forward(%s, %s, %d);", out, c.val(op.ins[1]), numel(op.ins[1])) }
end

function forward.cross_entropy(op, c, out)
  local logits, targets = op.ins[1], op.ins[2]
  return { string.format("rt_cross_entropy_forward(%s, NULL, %s, %s, %d, %d);", out, c.val(logits),
    c.val(targets), rows(logits), last(logits)) }
end

-- A residual add writing its sum to `sum` and the norm of that sum (RMSNorm, LayerNorm)
-- writing `out`, in one call (memory.lua add_with_norm: one 16-bit dtype throughout, which
-- both kernels round to).
function M.residual_norm(add, norm, c, sum, out)
  local a, b, x, w = add.ins[1], add.ins[2], add.outs[1], norm.ins[2]
  local stats, params, eps
  if norm.kind == "layer_norm" then
    local mean, rstd = c.stats(norm)
    stats, eps = mean .. ", " .. rstd, norm.attrs.eps or 1e-5
    params = c.val(w) .. ", " .. (norm.ins[3] and c.val(norm.ins[3]) or "NULL")
  else
    stats, params, eps = c.stats(norm), c.val(w), norm.attrs.eps or 1e-6
  end
  local args = string.format("%s, %s, %s, %s, %s, %s, %d, %d, %s, %s, %s, %s", sum, out, stats, c.val(a), c.val(b),
    params, rows(x), last(x), fmt_float(eps), packed_bits(add) or "0", packed_bits(norm) or "0", op_dtype(norm))
  local name = norm.kind == "layer_norm" and "layernorm" or "rmsnorm"
  return { "rt_residual_" .. name .. "_packed_forward(" .. args .. ");" }
end

-- Two rotary embeddings in one call (memory/rope_pairs.lua: one 16-bit dtype, which the
-- kernel rounds to), writing the earlier one's output to out_a, the later one's to out_b.
function M.rope_pair_forward(pair, c, out_a, out_b)
  local a, b = pair.a, pair.b
  local B, T = batch_seq(a.ins[1])
  local args = string.format("%s, %s, %d, %s, %s, %s, %d, %s, %d, %d, %d, %s, %s", out_a, c.val(a.ins[1]),
    a.attrs.n_heads, packed_bits(a) or "0", out_b, c.val(b.ins[1]), b.attrs.n_heads, packed_bits(b) or "0", B, T,
    a.attrs.head_dim, fmt_float(a.attrs.theta), op_dtype(a))
  return { "rt_rope_pair_packed_forward(" .. args .. ");" }
end

-- Forward calls of op writing its output to `out`: the kernel, then the rounding of a
-- 16-bit output it does not round itself.
function M.forward(op, c, out)
  local f = forward[op.kind]
  if not f then unsupported(op, "the forward") end
  local r, y = rounds_of(op), op.outs[1]
  local dt = r and op_dtype(op)
  local calls = f(op, c, out, dt)
  if r and dt == round_dtype[y.dtype] then return calls end
  return rounded(calls, out, y)
end

-- ---------------------------------------------------------------------------- backward

local backward = {}

-- A linear's dout and dinp row lengths: slices of stacks' rows (memory/stacked_linears.lua:
-- lora_b's output's gradient, lora_a's output's), else 0 (dense).
local function linear_lds(op, c)
  return string.format("%d, %d", c.grad_ld(op.outs[1]), c.grad_ld(op.ins[1]))
end

function backward.linear(op, c, dt, as)
  local x, w, b = op.ins[1], op.ins[2], op.ins[3]
  local y = op.outs[1]
  if out_scale(op) then
    local args = string.format("%s, %s, %s, %s, %s, %d, %d, %d, %s", c.grad(x), c.grad(w), c.dout(y), c.val(x),
      c.val(w), rows(x), w.shape[2], w.shape[1], fmt_float(out_scale(op)))
    return kcall("linear_scaled", "backward", args, packed_bits(op, true), dt, as, linear_lds(op, c))
  end
  local args = string.format("%s, %s, %s, %s, %s, %s, %d, %d, %d", c.grad(x), c.grad(w), b and c.grad(b) or "NULL",
    c.dout(y), c.val(x), c.val(w), rows(x), w.shape[2], w.shape[1])
  return kcall("linear", "backward", args, packed_bits(op, true), dt, as, linear_lds(op, c))
end

function backward.embedding(op, c)
  local idx, w = op.ins[1], op.ins[2]
  return { string.format("rt_embedding_backward(%s, %s, %s, %d, %d, %d);", c.grad(w), c.dout(op.outs[1]),
    c.val(idx), numel(idx), w.shape[2], w.shape[1]) }
end

function backward.layer_norm(op, c, dt, as)
  local x, w, b = op.ins[1], op.ins[2], op.ins[3]
  local mean, rstd = c.stats(op)
  local args = string.format("%s, %s, %s, %s, %s, %s, %s, %s, %d, %d", c.grad(x), c.grad(w), b and c.grad(b) or "NULL",
    c.dout(op.outs[1]), c.val(x), c.val(w), mean, rstd, rows(x), last(x))
  return kcall("layernorm", "backward", args, packed_bits(op, true), dt, as)
end

function backward.rms_norm(op, c, dt, as)
  local x, w = op.ins[1], op.ins[2]
  local args = string.format("%s, %s, %s, %s, %s, %s, %d, %d", c.grad(x), c.grad(w), c.dout(op.outs[1]), c.val(x),
    c.val(w), c.stats(op), rows(x), last(x))
  return kcall("rmsnorm", "backward", args, packed_bits(op, true), dt, as)
end

for _, k in ipairs({ "relu", "gelu", "silu" }) do
  backward[k] = function(op, c, dt, as)
    local x = op.ins[1]
    local args = string.format("%s, %s, %s, %d", c.grad(x), c.dout(op.outs[1]), c.val(x), numel(x))
    return kcall(k, "backward", args, packed_bits(op, true), dt, as)
  end
end

-- swiglu and mul: da, db, dout, a, b, n; packed (swiglu only: memory.lua), also the row
-- length and da's and db's row lengths (slices of a stack: stacked_linears)
for _, k in ipairs({ "swiglu", "mul" }) do
  backward[k] = function(op, c, dt, as)
    local a, b = op.ins[1], op.ins[2]
    local args = string.format("%s, %s, %s, %s, %s, %d", c.grad(a), c.grad(b), c.dout(op.outs[1]), c.val(a), c.val(b),
      numel(a))
    local lds = string.format("%d, %d, %d", last(a), c.grad_ld(a), c.grad_ld(b))
    return kcall(k, "backward", args, packed_bits(op, true), dt, as, lds)
  end
end

function backward.add(op, c, dt, as)
  local a, b = op.ins[1], op.ins[2]
  if numel(a) == numel(b) then
    local args = string.format("%s, %s, %s, %d", c.grad(a), c.grad(b), c.dout(op.outs[1]), numel(a))
    return kcall("residual", "backward", args, packed_bits(op, true, true), dt, as)
  end
  return { string.format("rt_broadcast_add_backward(%s, %s, %s, %d, %d, %s, %s);", c.grad(a), c.grad(b),
    c.dout(op.outs[1]), numel(a) // numel(b), numel(b), dt, as) }
end

-- reads no input value: the number is the whole derivative
function backward.scale(op, c, dt, as)
  if memory.is_view(op) then return {} end  -- the linear's backward scales (forward.linear)
  local x = op.ins[1]
  local args = string.format("%s, %s, %d, %s", c.grad(x), c.dout(op.outs[1]), numel(x), scale_arg(op))
  return kcall("scale", "backward", args, packed_bits(op, true, true), dt, as)
end

function backward.dropout(op, c, dt, as)
  local x = op.ins[1]
  return { string.format("rt_dropout_backward(%s, %s, %d, %s, R->seed, rt_step_rng_stream(R, %d), 0, %s, %s);",
    c.grad(x), c.dout(op.outs[1]), numel(x), fmt_float(op.attrs.p), c.site(op), dt, as) }
end

function backward.attention(op, c, dt, as)
  local q, k, v = op.ins[1], op.ins[2], op.ins[3]
  local B, T = batch_seq(q)
  local a = op.attrs
  local y = op.outs[1]
  if on_site(op) then
    -- the site's kernels assign the packed gradients the step wants, the others NULL
    -- (memory/attention.lua's rule)
    local assigns, dinps = {}, {}
    for j, t in ipairs({ q, k, v }) do
      if c.grad(t) ~= "NULL" then
        assigns[#assigns + 1] = "RT_ASSIGN_" .. j
        dinps[#dinps + 1] = " | RT_PACKED_DINP" .. (j > 1 and j or "")
      end
    end
    if as ~= table.concat(assigns, " | ") or packed_bits(op, true) ~= "RT_PACKED_OUT | RT_PACKED_INP | "
      .. "RT_PACKED_INP2 | RT_PACKED_INP3" .. table.concat(dinps) then
      error(string.format("internal: attention '%s' on a cuDNN site, but its backward is %s, %s", op.label or "?",
        as, tostring(packed_bits(op, true))))
    end
    return { string.format("rt_step_attention_backward(R, %d, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s);",
      c.attention_site(op), c.grad(q), c.grad(k), c.grad(v), c.scratch, c.dout(y), c.val(y), c.val(q), c.val(k),
      c.val(v), (c.stats(op))) }
  end
  local args = string.format("%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %d, %d, %d, %d, %d, %d, %s", c.grad(q),
    c.grad(k), c.grad(v), c.scratch, c.dout(y), c.val(y), c.val(q), c.val(k), c.val(v), c.stats(op), B, T,
    a.n_heads, a.n_kv_heads, a.head_dim, a.causal and 1 or 0, dtype_of(q, k, v, y))
  local lds = string.format("%d, %d, %d", c.grad_ld(q), c.grad_ld(k), c.grad_ld(v))
  local dir, drop = attention_dropout(op, c, "backward")
  return kcall("attention_lowmem", dir, args, packed_bits(op, true), dt, as, lds, drop)
end

function backward.rotary(op, c, dt, as)
  local x = op.ins[1]
  local B, T = batch_seq(x)
  local a = op.attrs
  local args = string.format("%s, %s, %d, %d, %d, %d, %s", c.grad(x), c.dout(op.outs[1]), B, T, a.n_heads,
    a.head_dim, fmt_float(a.theta))
  return kcall("rope", "backward", args, packed_bits(op, true, true), dt, as, tostring(c.grad_ld(x)))
end

-- Whether the gradient of t is rounded after each backward that writes it: activation
-- gradients keep their tensor's precision; parameter gradients are rounded once, before
-- the reduce-scatter.
local function grad_rounded(t)
  return t.requires_grad and not t.is_param and round_dtype[t.dtype] ~= nil
end

-- Whether a view cast's rounding of its gradient (to its input's 16-bit dtype) is done by
-- its output's only reader, a cross-entropy whose backward is then the buffer's only
-- contribution and rounds it at the store (rt_kernels.h: its dt); returns that dtype.
local function cast_rounded_by_loss(cast)
  local o = cast.original or cast
  local r = o.sole_reader
  if not (memory.is_view(o) and r and r.kind == "cross_entropy" and r.ins[1] == o.outs[1]) then return nil end
  local x = o.ins[1]
  return grad_rounded(x) and round_dtype[x.dtype] or nil
end

-- A view cast's input and output share one gradient buffer: only the rounding to the
-- input's dtype (M.backward) is left to do, unless the loss did it.
function backward.cast(op, c)
  if memory.is_view(op) then return {} end
  return { string.format("rt_accumulate(%s, %s, %d);", c.grad(op.ins[1]), c.dout(op.outs[1]), numel(op.ins[1])) }
end

function backward.sum(op, c, _, as)
  return { string.format("rt_sum_loss_backward(%s, %d, %s, %s);", c.grad(op.ins[1]), numel(op.ins[1]),
    c.dout(op.outs[1]), as) }
end

function backward.cross_entropy(op, c, _, as)
  local logits, targets = op.ins[1], op.ins[2]
  local cast = logits.producer
  local dt = cast and cast.kind == "cast" and cast_rounded_by_loss(cast) or "RT_F32"
  local args = string.format("%s, %s, %d, %d, %s, %s, %s", c.val(logits), c.val(targets), rows(logits),
    last(logits), c.dout(op.outs[1]), dt, as)
  if c.loss_out then
    local packed = memory.base(logits).packed and "packed_" or ""
    return { string.format("rt_cross_entropy_%sforward_backward(%s, %s, %s);", packed, c.grad(logits), c.loss_out,
      args) }
  end
  return { string.format("rt_cross_entropy_backward(%s, %s);", c.grad(logits), args) }
end

-- Whether the gradient buffer of op's input i is also that of another float input j (one
-- not in the set `except`): x + x, x * x give one buffer two contributions in one call.
-- `grad(t)`: t's gradient buffer (ctx.grad, or any key equal for equal buffers) or "NULL".
local function grad_shared(op, grad, i, except)
  local g = grad(op.ins[i])
  for j, u in ipairs(op.ins) do
    if j ~= i and trace.is_float(u.dtype) and grad(u) == g and not (except and except[j]) then
      return true
    end
  end
  return false
end

-- The inputs (by position) whose gradients op's backward kernel rounds, and the dt to pass
-- it: the op's dtype, unless a gradient the kernel would round must not be rounded there
-- (a parameter's; one sharing its buffer with another gradient of the call, which would be
-- rounded between the two contributions); then RT_F32 and only explicit roundings, as
-- for every 16-bit output of the kernels without dt. The third result is true where the
-- kernel cannot fall back (fixed_dt): M.backward_refusal.
local function backward_rounding(op, grad)
  local r = rounds_of(op)
  if not r then return nil, {} end
  local dt = op_dtype(op)
  if dt == "RT_F32" then return dt, {} end
  local by_kernel, in_grads = {}, {}
  for _, i in ipairs(r.grads) do in_grads[i] = true end
  local ok = true
  for _, i in ipairs(r.grads) do
    local t = op.ins[i]
    if grad(t) ~= "NULL" then
      if not grad_rounded(t) or round_dtype[t.dtype] ~= dt then ok = false end
      if grad_shared(op, grad, i, r.alias_ok and in_grads) then ok = false end
      by_kernel[i] = true
    end
  end
  if ok then return dt, by_kernel end
  return "RT_F32", {}, r.fixed_dt
end

-- The kernels that take `assign` (rt_kernels.h "Assign"): the inputs (by position) whose
-- gradients are their RT_ASSIGN_1, RT_ASSIGN_2, ... outputs. Parameter-gradient outputs
-- (weights, biases, broadcast_add's db) have no bit.
local ASSIGNS = {
  linear = { 1 }, layer_norm = { 1 }, rms_norm = { 1 }, relu = { 1 }, gelu = { 1 }, silu = { 1 },
  swiglu = { 1, 2 }, mul = { 1, 2 }, scale = { 1 }, dropout = { 1 }, sum = { 1 }, cross_entropy = { 1 },
  attention = { 1, 2, 3 },
  add = function(op) return numel(op.ins[1]) == numel(op.ins[2]) and { 1, 2 } or { 1 } end,
  rotary = function(op)  -- the kernel writes B*T*NH*HD values: all of the buffer
    local B, T = batch_seq(op.ins[1])
    return B * T * op.attrs.n_heads * op.attrs.head_dim == numel(op.ins[1]) and { 1 } or {}
  end,
}

-- The `assign` argument of op's backward kernel and the gradient buffers it assigns: the
-- fresh activation-gradient buffers (ctx.fresh) of the kernel's assignable outputs, each
-- but one that is also another gradient output of the call (x + x accumulates both
-- contributions into one buffer); and the parameters' where ctx.assign_param says.
local function backward_assign(op, c)
  local a = ASSIGNS[op.kind]
  if type(a) == "function" then a = a(op) end
  local bits, bufs = {}, {}
  for bit, i in ipairs(a or {}) do
    local t = op.ins[i]
    local fresh = c.fresh(t)
    if c.grad(t) ~= "NULL" and fresh and not grad_shared(op, c.grad, i) then
      bits[#bits + 1] = "RT_ASSIGN_" .. bit
      bufs[#bufs + 1] = fresh
    end
  end
  for i, t in ipairs(op.ins) do
    if grad_assigns.assigns_param(op, i) and c.assign_param and c.assign_param(t) then
      bits[#bits + 1] = "RT_ASSIGN_DWEIGHT"
      break
    end
  end
  return bits[1] and table.concat(bits, " | ") or "RT_ACCUMULATE", bufs
end

-- Backward calls of op (gradients of its inputs that need one, accumulated, or assigned
-- where the buffer is fresh): the kernel, then the rounding of each 16-bit activation
-- gradient it does not round itself. Returns the calls and the buffers the kernel assigns
-- (which need no rt_zero).
function M.backward(op, c)
  local f = backward[op.kind]
  if not f then unsupported(op, "the backward") end
  local dt, by_kernel, refused = backward_rounding(op, c.grad)
  if refused then unsupported(op, "a bf16/fp16 parameter operand") end
  local as, assigned = backward_assign(op, c)
  local calls = f(op, c, dt, as)
  if op.kind == "cast" and cast_rounded_by_loss(op) then by_kernel[1] = true end
  if op.kind == "scale" and memory.is_view(op) then by_kernel[1] = true end  -- one dtype: nothing to round
  for i, t in ipairs(op.ins) do
    if grad_rounded(t) and not by_kernel[i] then
      local g = c.grad(t)
      if g ~= "NULL" and memory.base(t).grad_packed then  -- memory.lua's rule broken
        error(string.format("packed gradient of '%s' left unrounded by the backward of '%s'", t.label or "?",
          op.label or op.kind))
      end
      if g ~= "NULL" then rounded(calls, g, t) end
    end
  end
  return calls, assigned
end

-- The one backward call of a stack's linears (memory/stacked_linears.lua): the first one's
-- with the stack's operands, OC their rows' sum; dinp assigned or added to as the first
-- linear's would be, rounded by the kernel, and one RT_ASSIGN_DWEIGHT bit for all weights.
-- A split stack: the input gradient's call, then one per trainable linear for its weight's
-- gradient from its columns, with its own packed and assign bits.
function M.backward_stacked(s, c)
  local op = s.ops[1]
  local x, w = op.ins[1], op.ins[2]
  local dt, by_kernel = backward_rounding(op, c.grad)
  if not by_kernel[1] or dt == "RT_F32" then
    error(string.format("internal: stacked linears of '%s' with an unrounded input gradient", op.label or "?"))
  end
  local as, assigned = backward_assign(op, c)
  local weight, dweight, dout = c.stack(s)
  local C = w.shape[2]
  local lds = string.format("%d, %d", s.ld, c.grad_ld(x))
  local function call(dinp, dw, d, W, oc, a, bits)
    local args = string.format("%s, %s, NULL, %s, %s, %s, %d, %d, %d", dinp, dw, d, c.val(x), W, s.rows, C, oc)
    return kcall("linear", "backward", args, bits, dt, a, lds)[1]
  end
  if not s.split then return { call(c.grad(x), dweight, dout, weight, s.ld, as, packed_bits(op, true)) }, assigned end
  -- the packed bits without the weight gradient's, the assign bits without its
  local bits_in = packed_bits(op, true):gsub(" | RT_PACKED_DWEIGHT$", "")
  local as_in = {}
  for b in as:gmatch("RT_[%w_]+") do
    if b ~= "RT_ASSIGN_DWEIGHT" and b ~= "RT_ACCUMULATE" then as_in[#as_in + 1] = b end
  end
  local calls = { call(c.grad(x), "NULL", dout, weight, s.ld, as_in[1] and table.concat(as_in, " | ")
    or "RT_ACCUMULATE", bits_in) }
  for _, m in ipairs(s.ops) do
    local y, wm = m.outs[1], m.ins[2]
    if wm.requires_grad then
      local dw = grad_assigns.assigns_param(m, 2) and c.assign_param(wm) and "RT_ASSIGN_DWEIGHT" or "RT_ACCUMULATE"
      calls[#calls + 1] = call("NULL", c.grad(wm), c.grad(y), c.val(wm), y.shape[#y.shape], dw, packed_bits(m, true))
    end
  end
  return calls, assigned
end

-- The one backward call of a pair of rotary embeddings (memory/rope_pairs.lua): each one's
-- input gradient assigned or added to as its own call would, rounded by the kernel. Returns
-- the call and the buffers it assigns.
function M.rope_pair_backward(pair, c)
  local parts, assigned = {}, {}
  for k, op in ipairs({ pair.a, pair.b }) do
    local x = op.ins[1]
    local dt, by_kernel = backward_rounding(op, c.grad)
    if not by_kernel[1] or dt == "RT_F32" then
      error(string.format("internal: rotary pair with '%s' leaving its input gradient unrounded", op.label or "?"))
    end
    local as, bufs = backward_assign(op, c)
    for _, bf in ipairs(bufs) do assigned[#assigned + 1] = bf end
    parts[k] = string.format("%s, %s, %d, %s, %s, %d", c.grad(x), c.dout(op.outs[1]), op.attrs.n_heads,
      packed_bits(op, true, true) or "0", as, c.grad_ld(x))
  end
  local a = pair.a
  local B, T = batch_seq(a.ins[1])
  return { string.format("rt_rope_pair_packed_backward(%s, %s, %d, %d, %d, %s, %s);", parts[1], parts[2], B, T,
    a.attrs.head_dim, fmt_float(a.attrs.theta), op_dtype(a)) }, assigned
end

-- ---------------------------------------------------------------------------- refusals

-- What the check pass (check.lua) refuses, one line each; nil where the kernels can.
local function refusal(op, why)
  local where = op.label and op.label ~= op.kind and (" (" .. op.label .. ")") or ""
  return string.format("op '%s'%s: %s", op.kind, where, why)
end

-- Why op's forward cannot be emitted, or nil.
function M.forward_refusal(op)
  if not forward[op.kind] then return refusal(op, "fsdpgen has no forward kernel for it") end
  local a, b = op.ins[1], op.ins[2]
  if op.kind == "mul" and numel(a) ~= numel(b) then
    return refusal(op, string.format("multiplies %s by %s; the mul kernel does not broadcast "
      .. "(allowed: operands of one shape; add broadcasts)", shape_str(a.shape),
      shape_str(b.shape)))
  end
end

-- Why op's backward cannot be emitted, or nil. `grad(t)`: t's gradient buffer at that
-- backward step (a key equal for equal buffers) or "NULL", as ctx.grad.
function M.backward_refusal(op, grad)
  if not backward[op.kind] then return refusal(op, "fsdpgen has no backward kernel for it") end
  local _, _, refused = backward_rounding(op, grad)
  if refused then
    return refusal(op, "a bf16/fp16 parameter operand: its kernel rounds every input gradient to "
      .. "the op's dtype, which a parameter's gradient must not be (allowed: activation operands, "
      .. "or fp32)")
  end
end

return M
