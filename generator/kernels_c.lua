-- The C kernel calls (rt_kernels.h) for each traced op, forward and backward: the
-- reverse-mode rules of autodiff, one op at a time. `ctx` gives the C expressions of
-- tensors at the current step:
--   ctx.val(t)      the value (activation, parameter, input)
--   ctx.grad(t)     the gradient buffer to accumulate into, or "NULL" (no grad needed)
--   ctx.dout(t)     the gradient of an output (pointer expression)
--   ctx.dloss(t)    the gradient of a scalar output (float expression)
--   ctx.stats(op)   the op's saved statistics: its start (attention softmax (max, 1/sum) rows,
--                   RMSNorm rstd) and the start of the second half (LayerNorm: mean, rstd)
--   ctx.scratch     attention's scratch buffer (forward and backward)
--   ctx.site(op)    the op's dropout RNG site
-- Backward kernels accumulate into gradients, so several consumers of one tensor add up.
local errors = require("errors")
local memory = require("memory")
local trace = require("trace")

local M = {}

local function numel(t) return trace.numel(t.shape) end
local function last(t) return t.shape[#t.shape] end
local function rows(t) return numel(t) // last(t) end

local round_dtype = { bf16 = "RT_BF16", fp16 = "RT_F16" }

-- Operand precision of a matrix product (rt_kernels.h `prec`): the dtype its float
-- operands share, whose values the CUDA backend may multiply on tensor cores; fp32 when
-- they differ (no narrowing of a value that is not representable).
local function prec(...)
  local d
  for _, t in ipairs({ ... }) do
    if d and t.dtype ~= d then return "RT_F32" end
    d = t.dtype
  end
  return round_dtype[d] or "RT_F32"
end

-- Mixed precision: values of a bf16/fp16 tensor are rounded after every write.
local function rounded(calls, expr, t)
  local d = round_dtype[t.dtype]
  if d then calls[#calls + 1] = string.format("rt_step_round(%s, %d, %s);", expr, numel(t), d) end
  return calls
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

local function unsupported(op, what)
  errors.raise(string.format("the code emitter does not support %s of op '%s' (%s)", what, op.kind,
    op.label or "?"))
end

-- ---------------------------------------------------------------------------- forward

local forward = {}

function forward.linear(op, c, out)
  local x, w, b = op.ins[1], op.ins[2], op.ins[3]
  return { string.format("rt_linear_forward(%s, %s, %s, %s, %d, %d, %d, %s);", out, c.val(x), c.val(w),
    b and c.val(b) or "NULL", rows(x), w.shape[2], w.shape[1], prec(x, w)) }
end

function forward.embedding(op, c, out)
  local idx, w = op.ins[1], op.ins[2]
  return { string.format("rt_embedding_forward(%s, %s, %s, %d, %d, %d);", out, c.val(idx), c.val(w),
    numel(idx), w.shape[2], w.shape[1]) }
end

function forward.arange(op, _, out)
  return { string.format("rt_arange_i32(%s, %d, 0);", out, numel(op.outs[1])) }
end

function forward.layer_norm(op, c, out)
  local x, w, b = op.ins[1], op.ins[2], op.ins[3]
  local mean, rstd = c.stats(op)
  return { string.format("rt_layernorm_forward(%s, %s, %s, %s, %s, %s, %d, %d, %s);", out, mean, rstd,
    c.val(x), c.val(w), b and c.val(b) or "NULL", rows(x), last(x), fmt_float(op.attrs.eps or 1e-5)) }
end

function forward.rms_norm(op, c, out)
  local x, w = op.ins[1], op.ins[2]
  local rstd = c.stats(op)
  return { string.format("rt_rmsnorm_forward(%s, %s, %s, %s, %d, %d, %s);", out, rstd, c.val(x),
    c.val(w), rows(x), last(x), fmt_float(op.attrs.eps or 1e-6)) }
end

for _, k in ipairs({ "relu", "gelu", "silu" }) do
  forward[k] = function(op, c, out)
    return { string.format("rt_%s_forward(%s, %s, %d);", k, out, c.val(op.ins[1]), numel(op.ins[1])) }
  end
end

function forward.swiglu(op, c, out)
  local a, b = op.ins[1], op.ins[2]
  return { string.format("rt_swiglu_forward(%s, %s, %s, %d, %s);", out, c.val(a), c.val(b), numel(a),
    prec(a, b)) }
end

function forward.add(op, c, out)
  local a, b = op.ins[1], op.ins[2]
  if numel(a) == numel(b) then
    return { string.format("rt_residual_forward(%s, %s, %s, %d);", out, c.val(a), c.val(b), numel(a)) }
  end
  return { string.format("rt_broadcast_add_forward(%s, %s, %s, %d, %d);", out, c.val(a), c.val(b),
    numel(a) // numel(b), numel(b)) }
end

function forward.mul(op, c, out)
  local a, b = op.ins[1], op.ins[2]
  if numel(a) ~= numel(b) then unsupported(op, "broadcasting") end
  return { string.format("rt_mul_forward(%s, %s, %s, %d);", out, c.val(a), c.val(b), numel(a)) }
end

function forward.dropout(op, c, out)
  local x = op.ins[1]
  return { string.format("rt_dropout_forward(%s, %s, %d, %s, R->seed, rt_step_rng_stream(R, %d), 0);",
    out, c.val(x), numel(x), fmt_float(op.attrs.p), c.site(op)) }
end

-- Attention keeps O(T) per head for backward (rt_attention_lowmem_*): the softmax rows'
-- (max, 1/sum) in the op's saved statistics, plus a scratch buffer during each call.
function forward.attention(op, c, out)
  local q, k, v = op.ins[1], op.ins[2], op.ins[3]
  local B, T = batch_seq(q)
  local a = op.attrs
  local stats = c.stats(op)
  return { string.format("rt_attention_lowmem_forward(%s, %s, %s, %s, %s, %s, %d, %d, %d, %d, %d, %d, %s);",
    out, stats, c.scratch, c.val(q), c.val(k), c.val(v), B, T, a.n_heads, a.n_kv_heads, a.head_dim,
    a.causal and 1 or 0, prec(q, k, v)) }
end

function forward.rotary(op, c, out)
  local x = op.ins[1]
  local B, T = batch_seq(x)
  local a = op.attrs
  return { string.format("rt_rope_forward(%s, %s, %d, %d, %d, %d, %s);", out, c.val(x), B, T,
    a.n_heads, a.head_dim, fmt_float(a.theta)) }
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

-- Forward calls of op writing its output to `out`.
function M.forward(op, c, out)
  local f = forward[op.kind]
  if not f then unsupported(op, "the forward") end
  return rounded(f(op, c, out), out, op.outs[1])
end

-- ---------------------------------------------------------------------------- backward

local backward = {}

function backward.linear(op, c)
  local x, w, b = op.ins[1], op.ins[2], op.ins[3]
  local y = op.outs[1]
  return { string.format("rt_linear_backward(%s, %s, %s, %s, %s, %s, %d, %d, %d, %s);", c.grad(x), c.grad(w),
    b and c.grad(b) or "NULL", c.dout(y), c.val(x), c.val(w), rows(x), w.shape[2], w.shape[1], prec(x, w, y)) }
end

function backward.embedding(op, c)
  local idx, w = op.ins[1], op.ins[2]
  return { string.format("rt_embedding_backward(%s, %s, %s, %d, %d, %d);", c.grad(w), c.dout(op.outs[1]),
    c.val(idx), numel(idx), w.shape[2], w.shape[1]) }
end

function backward.layer_norm(op, c)
  local x, w, b = op.ins[1], op.ins[2], op.ins[3]
  local mean, rstd = c.stats(op)
  return { string.format("rt_layernorm_backward(%s, %s, %s, %s, %s, %s, %s, %s, %d, %d);", c.grad(x),
    c.grad(w), b and c.grad(b) or "NULL", c.dout(op.outs[1]), c.val(x), c.val(w), mean, rstd, rows(x), last(x)) }
end

function backward.rms_norm(op, c)
  local x, w = op.ins[1], op.ins[2]
  local rstd = c.stats(op)
  return { string.format("rt_rmsnorm_backward(%s, %s, %s, %s, %s, %s, %d, %d);", c.grad(x), c.grad(w),
    c.dout(op.outs[1]), c.val(x), c.val(w), rstd, rows(x), last(x)) }
end

for _, k in ipairs({ "relu", "gelu", "silu" }) do
  backward[k] = function(op, c)
    local x = op.ins[1]
    return { string.format("rt_%s_backward(%s, %s, %s, %d);", k, c.grad(x), c.dout(op.outs[1]), c.val(x), numel(x)) }
  end
end

function backward.swiglu(op, c)
  local a, b = op.ins[1], op.ins[2]
  return { string.format("rt_swiglu_backward(%s, %s, %s, %s, %s, %d, %s);", c.grad(a), c.grad(b),
    c.dout(op.outs[1]), c.val(a), c.val(b), numel(a), prec(a, b, op.outs[1])) }
end

function backward.add(op, c)
  local a, b = op.ins[1], op.ins[2]
  if numel(a) == numel(b) then
    return { string.format("rt_residual_backward(%s, %s, %s, %d);", c.grad(a), c.grad(b), c.dout(op.outs[1]), numel(a)) }
  end
  return { string.format("rt_broadcast_add_backward(%s, %s, %s, %d, %d);", c.grad(a), c.grad(b),
    c.dout(op.outs[1]), numel(a) // numel(b), numel(b)) }
end

function backward.mul(op, c)
  local a, b = op.ins[1], op.ins[2]
  return { string.format("rt_mul_backward(%s, %s, %s, %s, %s, %d);", c.grad(a), c.grad(b), c.dout(op.outs[1]),
    c.val(a), c.val(b), numel(a)) }
end

function backward.dropout(op, c)
  local x = op.ins[1]
  return { string.format("rt_dropout_backward(%s, %s, %d, %s, R->seed, rt_step_rng_stream(R, %d), 0);",
    c.grad(x), c.dout(op.outs[1]), numel(x), fmt_float(op.attrs.p), c.site(op)) }
end

function backward.attention(op, c)
  local q, k, v = op.ins[1], op.ins[2], op.ins[3]
  local B, T = batch_seq(q)
  local a = op.attrs
  local stats = c.stats(op)
  local y = op.outs[1]
  return { string.format("rt_attention_lowmem_backward(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %d, %d, %d, %d, %d, %d, %s);",
    c.grad(q), c.grad(k), c.grad(v), c.scratch, c.dout(y), c.val(y), c.val(q), c.val(k),
    c.val(v), stats, B, T, a.n_heads, a.n_kv_heads, a.head_dim, a.causal and 1 or 0, prec(q, k, v, y)) }
end

function backward.rotary(op, c)
  local x = op.ins[1]
  local B, T = batch_seq(x)
  local a = op.attrs
  return { string.format("rt_rope_backward(%s, %s, %d, %d, %d, %d, %s);", c.grad(x), c.dout(op.outs[1]),
    B, T, a.n_heads, a.head_dim, fmt_float(a.theta)) }
end

-- A view cast's input and output share one gradient buffer: only the rounding to the
-- input's dtype (M.backward) is left to do.
function backward.cast(op, c)
  if memory.is_view(op) then return {} end
  return { string.format("rt_accumulate(%s, %s, %d);", c.grad(op.ins[1]), c.dout(op.outs[1]), numel(op.ins[1])) }
end

function backward.sum(op, c)
  return { string.format("rt_sum_loss_backward(%s, %d, %s);", c.grad(op.ins[1]), numel(op.ins[1]),
    c.dloss(op.outs[1])) }
end

function backward.cross_entropy(op, c)
  local logits, targets = op.ins[1], op.ins[2]
  return { string.format("rt_cross_entropy_backward(%s, %s, %s, %d, %d, %s);", c.grad(logits), c.val(logits),
    c.val(targets), rows(logits), last(logits), c.dloss(op.outs[1])) }
end

-- Backward calls of op (gradients of its inputs that need one, accumulated).
function M.backward(op, c)
  local f = backward[op.kind]
  if not f then unsupported(op, "the backward") end
  local calls = f(op, c)
  -- Activation gradients keep their tensor's precision (parameter gradients are rounded
  -- once, before the reduce-scatter).
  for _, t in ipairs(op.ins) do
    if t.requires_grad and not t.is_param and round_dtype[t.dtype] then
      local g = c.grad(t)
      if g ~= "NULL" then rounded(calls, g, t) end
    end
  end
  return calls
end

return M
