-- Which attention ops may run on cuDNN's fused flash attention (the spec's `attention`;
-- runtime/include/rt_cudnn.h) and the scratch each call is planned with. cuDNN takes packed
-- 16-bit tensors and overwrites the gradients of q, k and v, and its softmax statistics differ
-- from fsdpgen's kernels', so an op qualifies only where its forward and its backward both can:
-- the step then calls rt_step_attention_* on the op's site (rt_model.h), and the CUDA backend
-- picks cuDNN or fsdpgen's kernels at start (rt_step.h). Every other op keeps fsdpgen's
-- kernels, with the reason in the .schedule.
local packing = require("memory.packing")
local trace = require("spec.trace")

local M = {}

-- cuDNN's workspace as planned (scratch_floats): the backward's rowsum(dO * O), then room
-- for the larger of what its two forms keep (runtime/cuda/kernels/cudnn_attention.c): the
-- deterministic one the runtime builds first, dQ straight from its matmul, has cuDNN keep
-- dP, [B, NH, T, T] in 16 bits with T rounded up to 64, in its workspace (cudnn-frontend's
-- "dP workspace" form, which it forces for a deterministic backward on Hopper: 1.1 GB for
-- Llama 1B's bench shape); the other, an fp32 [B, NH, T, HD] dQ accumulator; and these
-- bytes more for the engines' own use. An engine that asks for more is declined at start
-- (the CUDA backend prints why) and fsdpgen's kernels run instead.
local ENGINE_RESERVE = 1 << 20

local function up256(n) return (n + 255) // 256 * 256 end
local function up64(n) return (n + 63) // 64 * 64 end

-- (B, T) of attention's [..., T, C] query.
function M.dims(op)
  local q = op.ins[1].shape
  local B, T = 1, q[#q - 1]
  for i = 1, #q - 2 do B = B * q[i] end
  return B, T
end

-- Bytes of dP as cuDNN's deterministic backward keeps it in its workspace (above).
function M.dp_bytes(op)
  local B, T = M.dims(op)
  return B * op.attrs.n_heads * up64(T) * up64(T) * 2
end

-- Bytes at the end of a cuDNN op's scratch where its backward writes the gradients that no
-- tensor needs (rt_model.h spare_bytes): cuDNN writes dQ, dK and dV whole, and LoRA's frozen
-- k in a block whose input needs no gradient has none. Each 256-byte aligned, in q, k, v order.
function M.spare_bytes(op)
  if not (op.attention and op.attention.cudnn and op.outs[1].requires_grad) then return 0 end
  local n = 0
  for _, t in ipairs(op.ins) do
    if not t.requires_grad then n = n + up256(trace.numel(t.shape) * 2) end
  end
  return n
end

-- Floats of the scratch of one call, forward or backward: fsdpgen's kernels need
-- rt_attention_lowmem_scratch_floats, max(2*T*T, B*NH*T); cuDNN's workspace is planned in
-- the same buffer where the op may run on cuDNN, and after it the spare gradients' bytes.
function M.scratch_floats(op)
  local B, T = M.dims(op)
  local nh = op.attrs.n_heads
  local n = math.max(2 * T * T, B * nh * T)
  if op.attention and op.attention.cudnn then
    local rows = B * nh * T
    local dq_acc, dp = up256(rows * op.attrs.head_dim * 4), up256(M.dp_bytes(op))
    n = math.max(n, (up256(rows * 4) + math.max(dq_acc, dp) + ENGINE_RESERVE) // 4) + M.spare_bytes(op) // 4
  end
  return n
end

local NAMES = { "q", "k", "v" }

-- Why op cannot run on cuDNN (a few words for the .schedule's line), or nil. readers: tensor
-- -> the ops that read it (through FSDP's post-backward hooks); base: memory.base. cuDNN
-- reads and writes packed 16-bit tensors of one dtype (memory.lua's packing) and writes the
-- gradients of q, k and v whole, so each that needs one must be a distinct tensor read by
-- this op alone (one that needs none goes to the scratch's spare bytes).
local function refusal(op, readers, base)
  local y = op.outs[1]
  if not packing.sixteen(y) then
    return y.dtype .. " (cuDNN's is bf16 or fp16)"
  end
  for j, t in ipairs(op.ins) do
    if t.dtype ~= y.dtype then
      return string.format("%s is %s, the output %s", NAMES[j], t.dtype, y.dtype)
    end
  end
  if op.attrs.dropout_p then
    return "dropout (cuDNN would draw its own masks, not the step's)"
  end
  if op.region then
    return "checkpointed (fp32 storage)"
  end
  local grads = y.requires_grad
  if not base(y).packed then
    return grads and "output not packed 16-bit" or "no backward (output in fp32)"
  end
  if grads and not base(y).grad_packed then return "output's gradient not packed 16-bit" end
  local seen = {}
  for j, t in ipairs(op.ins) do
    local b = base(t)
    local name = NAMES[j]
    if not b.packed then return name .. " not packed 16-bit" end
    if seen[b] then
      return string.format("%s is %s (their gradients add)", name, seen[b])
    end
    seen[b] = name
    if grads and t.requires_grad then
      if not b.grad_packed then return name .. "'s gradient not packed 16-bit" end
      local rs = readers[b] or {}
      if #rs ~= 1 then
        return string.format("%s has %d readers (its gradient adds)", name, #rs)
      end
    end
  end
  return nil
end

-- Sets op.attention on every attention op of plan's graph: { cudnn = true } where cuDNN may
-- run it, else { cudnn = false, why = reason }. Needs memory.lua's packing marks.
function M.mark(plan, readers, base)
  local asked = plan.spec.attention or "auto"
  for _, op in ipairs(plan.graph.ops) do
    if op.kind == "attention" then
      local why = asked == "fsdpgen" and "the spec's choice" or refusal(op, readers, base)
      op.attention = { cudnn = why == nil, why = why }
    end
  end
end

-- The op's shape as the .schedule and rt_model_attention give it.
function M.shape_str(op)
  local B, T = M.dims(op)
  local a = op.attrs
  return string.format("[%d, %d] %d/%d heads x %d %s%s%s", B, T, a.n_heads, a.n_kv_heads, a.head_dim,
    op.outs[1].dtype, a.causal and " causal" or "", a.dropout_p and string.format(" dropout %g", a.dropout_p) or "")
end

return M
