-- The cost of one schedule line on one GPU: its FLOPs and bytes, and the time a roofline
-- gives them (the slower of FLOPs against the tensor-core peak and bytes against the
-- memory bandwidth, each at the kernel kind's fitted efficiency, plus a launch gap per
-- kernel). Collectives are priced by nccl.lua; this file prices the FSDP copies around
-- them. Reads the plan's steps and tensors; changes nothing in them.
local trace = require("spec.trace")
local memory = require("memory.memory")
local optimizer = require("plan.optimizer")
local flops = require("plan.flops")
local attention = require("memory.attention")

local M = {}

local numel = trace.numel

-- Bytes of a tensor as the kernels move it: its dtype's size (16-bit activations are
-- stored packed; integer token ids as int32).
local function tbytes(t)
  if not t or not t.shape then return 0 end
  t = memory.base(t)   -- a view's bytes are its base's (the fp32 view of 16-bit logits)
  local b = trace.dtype_bytes[t.dtype] or 4
  if t.dtype == "int64" then b = 4 end
  return numel(t.shape) * b
end

local function io_bytes(op)
  local n = 0
  for _, t in ipairs(op.ins) do
    if not t.is_param then n = n + tbytes(t) end
  end
  for _, t in ipairs(op.outs) do n = n + tbytes(t) end
  return n
end

-- A linear's GEMM dims: M rows, K inner, N outputs.
local function gemm_dims(op)
  local x, y = op.ins[1], op.outs[1]
  local k = x.shape[#x.shape]
  local n = y.shape[#y.shape]
  return numel(y.shape) // n, k, n
end

-- Attention: the full T x T products (q k^T and p v), 4 B H T^2 d FLOPs; a causal
-- kernel computes half.
local function attention_flops(op)
  local q = op.ins[1]
  local b = numel(q.shape) // q.shape[#q.shape] // q.shape[#q.shape - 1]
  local t = q.shape[#q.shape - 1]
  local d = op.attrs.n_heads * op.attrs.head_dim
  return 4 * b * t * t * d
end

-- The time of `flops` at efficiency eff of the bf16 peak and `bytes` at eff_bw of the
-- memory bandwidth, whichever is slower, plus `kernels` launch gaps.
local function roofline(gpu, k, flops, eff, bytes, eff_bw, kernels)
  local tf = flops > 0 and flops / (gpu.bf16_tflops * 1e12 * eff) or 0
  local tb = bytes > 0 and bytes / (gpu.hbm_gbps * 1e9 * eff_bw) or 0
  return math.max(tf, tb) + kernels * k.launch_us * 1e-6
end

-- Bytes of cuDNN's backward of attention op beyond its operands under `form` (the
-- binary's RT_ATTENTION_BACKWARD): the deterministic form (its default) writes dP to its
-- workspace and reads it again for dQ (memory/attention.lua); a causal kernel computes
-- only the tiles on and below the diagonal and is taken to write and read only those,
-- half, as its FLOPs. The atomic form keeps an fp32 dQ instead, as PyTorch's SDPA backward
-- does, whose measured speed the cuDNN figures are: its traffic is in them already.
local function dp_traffic(op, form)
  if form == "atomic" then return 0 end
  return 2 * attention.dp_bytes(op) * (op.attrs.causal and 0.5 or 1)
end

-- Attention op's forward and backward seconds (no launch gaps) on cuDNN (cu) or fsdpgen's
-- kernels, and its forward's FLOPs. dP's bytes go at the element-wise efficiency, as a
-- linear's extra bytes: the backward kernel stores and loads its tiles between its
-- products, not in the long contiguous runs of the FSDP copies that k.copy is fitted to.
local function attention_times(op, gpu, k, cu, form)
  local f = attention_flops(op) * (op.attrs.causal and 0.5 or 1)
  local fwd = roofline(gpu, k, f, cu and k.cudnn_attention_fwd or k.attention_fwd, 0, 1, 0)
  local bwd = roofline(gpu, k, 2.5 * f, cu and k.cudnn_attention_bwd or k.attention_bwd,
    cu and dp_traffic(op, form) or 0, k.elementwise, 0)
  return fwd, bwd, f
end

-- Whether the binary runs attention op on cuDNN with kernel set k and backward form `form`:
-- where the memory stage let the op use it (op.attention) and k has cuDNN's figures; under
-- the spec's "auto" only where cuDNN's forward and backward together are predicted faster,
-- as the CUDA backend keeps the faster it measures at start.
function M.attention_cudnn(op, spec, gpu, k, form)
  if not (op.attention and op.attention.cudnn and k.cudnn_attention_fwd) then return false end
  if spec.attention == "cudnn" then return true end
  local cf, cb = attention_times(op, gpu, k, true, form)
  local ff, fb = attention_times(op, gpu, k, false, form)
  return cf + cb < ff + fb
end

local norms = { rms_norm = true, layer_norm = true }

-- fsdpgen's backward kernels by kind (tests/cuda_step/kernels/*.txt list a step's
-- launches): how many launches. Besides the output's gradient they read what the memory plan
-- keeps for them (memory.lua backward_reads: rotary, an add and a scale nothing, the
-- activations and the norms their inputs) and write the inputs' gradients. A kind not here,
-- and every kind of the other kernel sets (PyTorch's): two launches, twice the forward's
-- bytes.
local BACKWARD_LAUNCHES = {
  rotary = 1, swiglu = 1, mul = 1, gelu = 1, relu = 1, silu = 1, add = 1, scale = 1,
  rms_norm = 2, layer_norm = 2,  -- the row-per-warp kernel, then the weight gradients' finish
}

-- Input t's gradient buffer at backward step st if an earlier step of the backward created
-- it (the kernel then adds to it; it assigns one its step creates, memory.creates), else nil.
local function accumulated_grad(st, t)
  if not (t and t.requires_grad) or t.is_param or not st.bufs then return nil end
  local b = st.bufs.grads and st.bufs.grads[memory.base(t)]
  if not b or memory.creates(st, b) then return nil end
  return b
end

-- The kernels a 16-bit linear runs besides its GEMMs (linear.cu), and their bytes: a 16-bit
-- copy of each operand not stored packed (rtc_narrow: the input, the weight and the bias in
-- the forward, the output's gradient in the backward; 4 bytes read and 2 written an
-- element), the bias gradient's column sums (one launch, column_sums.cuh: the output's
-- gradient read again; none where the weight's and the bias's gradients are assigned and
-- the output width is a multiple of 8: cuBLASLt's epilogue, linear.cu dweight16) and, for an
-- output width not a multiple of 8, the weight gradient's last rows as a second product.
-- assigned: the step's call assigns the parameters' gradients (RT_ASSIGN_DWEIGHT).
local function linear_extras(op, bwd, assigned)
  local y = memory.base(op.outs[1])
  if trace.dtype_bytes[y.dtype] == 4 then return 0, 0 end
  local x, w, b = memory.base(op.ins[1]), op.ins[2], op.ins[3]
  local launches, bytes = 0, 0
  local function narrow(t, n)
    if not t.packed then launches, bytes = launches + 1, bytes + n * 6 end
  end
  if not bwd then
    narrow(x, numel(x.shape))
    narrow(w, numel(w.shape))
    if b then narrow(b, numel(b.shape)) end
    return launches, bytes
  end
  if w.requires_grad then narrow(x, numel(x.shape)) end
  if x.requires_grad and not x.is_input then narrow(w, numel(w.shape)) end
  if not y.grad_packed then launches, bytes = launches + 1, bytes + numel(y.shape) * 6 end
  local with_dw = assigned and w.requires_grad and w.shape[1] % 8 == 0
  if b and b.requires_grad and not with_dw then launches, bytes = launches + 1, bytes + tbytes(y) end
  if w.requires_grad and w.shape[1] % 8 ~= 0 then launches = launches + 1 end
  return launches, bytes
end

-- A linear's input gradient added to an earlier one (another reader of its input): a
-- 16-bit product is added in a second kernel (linear.cu add_packed_kernel: the fp32 product
-- written and read, the packed gradient read and written; an fp32 gradient: read by the
-- GEMM, rounded after), an fp32 one by the GEMM. Returns the launches and bytes it adds.
local function linear_accumulation(st, op)
  local x = op.ins[1]
  if not accumulated_grad(st, x) then return 0, 0 end
  local n = numel(x.shape)
  if trace.dtype_bytes[op.outs[1].dtype] == 4 then return 0, n * 4 end
  return 1, n * 12
end

-- A compute op (forward, recompute, backward, loss_grad of st.node): its time, class, the
-- FLOPs its kernels execute and its launches. form: cuDNN's attention backward.
local function op_cost(st, plan, gpu, k, form)
  local op, spec = st.node, plan.spec
  local bwd = st.op == "backward"
  local kind = op.kind
  -- linears stacked in backward (memory/stacked_linears.lua): fsdpgen's calls on the last
  -- one's step, as one linear of the stack's width
  local stack = k.name == "fsdpgen" and bwd and st.stack
  if k.name == "fsdpgen" and bwd and st.stacked then return 0, "gemm", 0, 0 end
  if kind == "linear" then
    local m, kk, n = gemm_dims(op)
    local eb = trace.dtype_bytes[op.outs[1].dtype] or 4
    -- backward: the input's gradient and the weight's, each where it requires grad (a
    -- frozen weight's product, or one of an input without a gradient, is not computed); a
    -- stack's input gradient over its width, its weights' over the trainable ones' rows
    local dw = op.ins[2].requires_grad and n or 0
    local dx = op.ins[1].requires_grad and n or 0
    local launches = bwd and ((dx > 0 and 1 or 0) + (dw > 0 and 1 or 0)) or 1
    if stack then
      local trainable = 0
      dx, dw = stack.ld, 0
      for _, s_op in ipairs(stack.ops) do
        local w = s_op.ins[2]
        if w.requires_grad then dw, trainable = dw + w.shape[1], trainable + 1 end
      end
      -- the input gradient's GEMM, then the weights' in one or (split) one each
      launches = stack.split and 1 + trainable or 2
    end
    local flops = bwd and 2 * m * kk * (dx + dw) or 2 * m * kk * n
    local eff = k.gemm
    local function gemm_bytes(cols) return (m * kk + kk * cols + m * cols) * eb end
    local bytes = bwd and (dx > 0 and gemm_bytes(dx) or 0) + (dw > 0 and gemm_bytes(dw) or 0)
      + kk * dw * 8 or gemm_bytes(n)   -- backward: the fp32 weight gradient read and written
    if k.name == "fsdpgen" then
      local more, more_bytes = linear_extras(op, bwd, bwd and plan.grad_assigns
        and plan.grad_assigns[st] and plan.grad_assigns[st][op.ins[2]])
      if bwd then
        local acc, acc_bytes = linear_accumulation(st, op)
        more, more_bytes = more + acc, more_bytes + acc_bytes
      end
      launches, bytes = launches + more, bytes + more_bytes
    end
    return roofline(gpu, k, flops, eff, bytes, k.elementwise, launches), "gemm", flops, launches
  elseif kind == "attention" then
    local cu = M.attention_cudnn(op, spec, gpu, k, form)
    local fwd, back, f = attention_times(op, gpu, k, cu, form)
    if bwd then return back + 3 * k.launch_us * 1e-6, "attention", 2.5 * f, 3 end
    return fwd + k.launch_us * 1e-6, "attention", f, 1
  elseif memory.is_view(op) then
    return 0, "view", 0, 0   -- a view cast, or a scale folded into its linear
  elseif bwd and st.grad_alias then
    return 0, "view", 0, 0   -- an add whose inputs' gradients share its buffer: no kernel
  elseif kind == "arange" then
    return k.launch_us * 1e-6, "elementwise", 0, 1
  end
  -- Element-wise, norms, lookups and the loss: bandwidth. A backward reads the output's
  -- gradient and the inputs its kernel needs (BACKWARD_LAUNCHES), and writes the inputs' gradients,
  -- reading those it adds to.
  local bytes = io_bytes(op)
  local launches = bwd and 2 or 1
  local ours = k.name == "fsdpgen"
  local b = bwd and ours and BACKWARD_LAUNCHES[kind]
  if kind == "cross_entropy" and st.op == "loss_grad" then
    -- the rows read again and the gradient written; fsdpgen's loss and gradient are one
    -- call after the forward's line (loss.cu), which also counts the valid targets and sums
    -- the partial losses, and reads again only what of a packed row its block could not
    -- stage in shared memory (loss.cu rtc_ce_stage)
    local x = memory.base(op.ins[1])
    local again = 1
    if ours and x.packed then
      again = math.max(0, 1 - gpu.smem_block_kib * 1024 / (x.shape[#x.shape] * 2))
    end
    bytes, launches = (1 + again) * tbytes(op.ins[1]), ours and 2 or 1
  elseif kind == "cross_entropy" then bytes = tbytes(op.ins[1])
  elseif b then
    launches = b
    local reads = memory.backward_reads(op)
    for _, t in ipairs(reads.ins and op.ins or {}) do bytes = bytes + tbytes(t) end
    for _, t in ipairs(reads.outs and op.outs or {}) do bytes = bytes + tbytes(t) end
    for _, t in ipairs(op.ins) do
      if accumulated_grad(st, t) then bytes = bytes + tbytes(memory.base(t)) end
    end
  elseif bwd then bytes = 2 * bytes end
  if kind == "embedding" and bwd then
    -- fsdpgen's: the token ids sorted with their row numbers (a fill and cub's sort), then
    -- the output gradient's rows added into the weight's (fp32); where this step creates the
    -- weight's gradient (no tied head assigned it first), the whole table is zeroed before
    -- (rt_zero, a memset: no kernel; Llama 1B's 1 GB), unless the optimizer left it zero
    -- (memory.lua consumed_grads) or a buffer after a part zeroes only others (a tied
    -- embedding's gradient after its rows' part: memory.lua part_reads)
    bytes = tbytes(op.outs[1]) + numel(op.outs[1].shape) * 8
    local zero = false
    for _, bf in ipairs(st.bufs and st.bufs.zero or {}) do
      local left, reads = false, plan.part_reads and plan.part_reads[bf]
      for _, p in ipairs(bf.alias and plan.consumed_grads[bf.alias] or {}) do
        left = left or p == op.ins[2]
      end
      if reads then
        local read = false
        for _, p in ipairs(reads) do read = read or p == op.ins[2] end
        left = left or not read
      end
      zero = zero or not left
    end
    if zero then bytes = bytes + numel(op.ins[2].shape) * 4 end
    launches = (ours or zero) and 3 or 2
  elseif ours and kind == "add" and bwd and numel(op.ins[1].shape) ~= numel(op.ins[2].shape) then
    launches = 2   -- the broadcast operand's gradient is a column sum (elementwise.cu)
  end
  bytes = bytes * (k.elementwise_passes or 1)
  local class = (kind == "cross_entropy") and "loss" or norms[kind] and "norm" or "elementwise"
  -- a residual add and its norm in one call (memory.lua add_with_norm): one launch, and the
  -- norm takes the sum from registers
  if st.fused_norm then return roofline(gpu, k, 0, 1, bytes, k[class], 0), class, 0, 0 end
  if st.fused_add then bytes = bytes - tbytes(op.ins[1]) end
  -- a pair of rotary embeddings in one call (memory/rope_pairs.lua): one launch, the call's
  if ours and st.rope_pair and st ~= st.rope_pair.call then launches = 0 end
  return roofline(gpu, k, 0, 1, bytes, k[class], launches), class, 0, launches
end

local function copy_time(gpu, k, bytes)
  if bytes <= 0 then return 0 end
  return roofline(gpu, k, 0, 1, bytes, k.copy, 1)
end

local function dbytes(dtype) return trace.dtype_bytes[dtype] or 4 end

-- Bytes of parameters `params` of group g (default: all of them) as the copies write them
-- to the unsharded parameters: param_dtype's bits (packed) or fp32 values; none for one its
-- readers take from the shards (packing.lua mark_params). With `read` bytes more per
-- element read for each.
local function unsharded_bytes(g, read, params)
  local n = 0
  if not params then
    params = {}
    for i, l in ipairs(g.layout.params) do params[i] = l.param end
  end
  for _, p in ipairs(params) do
    if not p.from_shard then
      n = n + trace.numel(p.shape) * (read + (p.packed and dbytes(g.param_dtype) or 4))
    end
  end
  return n
end

-- Bytes one rank's direct all-gather moves (rt_step_all_gather_direct): each parameter's
-- fp32 shard read and written to the unsharded parameters.
local function direct_copy_bytes(g) return unsharded_bytes(g, 4) end

-- Sharded gradient elements of every group (clipping reads and scales them all): a frozen
-- group has none, a group with frozen parameters its trainable ones' (layout.lua grad_numel).
local function grads_total(plan)
  local n = 0
  for _, g in ipairs(plan.groups) do
    if not g.frozen then n = n + g.layout.grad_numel end
  end
  return n
end

-- Shard elements an optimizer line steps: its parameters with a gradient in the step (the
-- runtime skips the others, frozen ones among them).
local function stepped_numel(st)
  local of, n = {}, 0
  for _, l in ipairs(st.group.layout.params) do of[l.param] = l.shard_numel end
  for _, p in ipairs(optimizer.stepped_params(st)) do n = n + of[p] end
  return n
end

-- An optimizer line split by rows (optimizer.lua Sim:split_token_rows, reductions.lua
-- Sim:reduce_parts; its parameters are [rows, row_len]): the rows a step's tokens look up
-- are at most its tokens (a split needs token inputs); the others are stepped without
-- reading a gradient ("unused") or with theirs ("final"). per: bytes per element without
-- the gradient.
local function rows_bytes(st, plan, per)
  local tokens = flops.rank_tokens(plan.spec)
  local bytes = 0
  for _, p in ipairs(optimizer.stepped_params(st)) do
    local rows, row_len = p.shape[1], p.shape[2]
    local looked = math.min(rows, tokens)
    if st.rows == "looked_up" then
      bytes = bytes + looked * row_len * (per + 4)
    else
      bytes = bytes + (rows - looked) * row_len * (per + (st.rows == "final" and 4 or 0))
    end
  end
  return bytes
end

-- The compute-stream part of a line and the side-stream copies around its collective.
-- Returns { compute = s, class = name, hw_flops = the FLOPs its kernels execute,
-- copy_in = s (side stream, before the collective), copy_out = s (after it), launches = the
-- kernels of a compute op's line (tests/cuda_step/kernels/*.txt count them) }.
-- attention_backward: cuDNN's, "deterministic" (also when nil: the binary's default) or
-- "atomic".
function M.step(st, plan, gpu, k, attention_backward)
  local c = { compute = 0, class = "fsdp", hw_flops = 0, copy_in = 0, copy_out = 0, launches = 0 }
  local g = st.group
  if st.node and (st.op == "forward" or st.op == "backward" or st.op == "recompute"
      or st.op == "loss_grad" or st.op == "eval_loss") then
    c.compute, c.class, c.hw_flops, c.launches = op_cost(st, plan, gpu, k, attention_backward)
  elseif st.op == "all_gather" and not st.kept then  -- a kept one copies nothing (plan/keep.lua)
    local L = g.layout
    local per = st.from_post_forward and (L.padded_numel // g.post_forward_world) or L.shard_numel
    -- copy-in: fp32 shards read, param_dtype written (direct: into the unsharded params)
    c.copy_in = copy_time(gpu, k, st.direct and direct_copy_bytes(g) or per * (4 + dbytes(g.param_dtype)))
  elseif st.op == "all_gather_wait" and not st.direct then
    -- copy-out: the all-gather output read, the unsharded parameters written
    c.compute = copy_time(gpu, k, g.layout.padded_numel * dbytes(g.param_dtype) + unsharded_bytes(g, 0))
  elseif st.op == "reshard_post_forward" then
    c.compute = copy_time(gpu, k, g.layout.padded_numel // g.post_forward_world * 8)
  elseif st.op == "reduce_scatter" then
    local L = st.reduction.layout
    if st.in_place then
      -- nothing runs (memory.lua in_place_groups)
    elseif st.direct then
      c.copy_in = copy_time(gpu, k, L.padded_numel * 8)
    else
      -- copy-in on compute (grads read, reduce_dtype written); view-out after the collective
      c.compute = copy_time(gpu, k, L.padded_numel * (4 + dbytes(g.reduce_dtype)))
      c.copy_out = copy_time(gpu, k, L.shard_numel * (dbytes(g.reduce_dtype) + 8))
    end
  elseif st.op == "accumulate_unsharded_grads" then
    c.compute = copy_time(gpu, k, memory.unsharded_grad_numel(g) * 12)
  elseif st.op == "clip_grad_norm" then
    c.compute = copy_time(gpu, k, grads_total(plan) * 12)
  elseif st.op == "optimizer" then
    local o = plan.spec.optimizer
    local states = memory.optimizer_states(o)
    -- parameters read and written, gradients read (fp32, or 16-bit where packed:
    -- grad_assigns.lua), each state read and written (fp32); a part's (reductions.lua
    -- Sim:reduce_parts) of its parameters only, of those with a gradient only
    -- Kernels: the step (optim.cu: one); a line by rows that builds the looked-up rows' mask
    -- (the first, "unused" or "final"), a memset and the marking kernel before it.
    local bytes = stepped_numel(st) * ((g.packed_grads and 10 or 12) + 8 * states)
    if st.rows then bytes = rows_bytes(st, plan, 8 + 8 * states) end
    local launches = 1 + ((st.rows == "unused" or st.rows == "final") and 2 or 0)
    -- kept across steps (plan/keep.lua persist): the step also writes the new values to the
    -- unsharded params, in its one kernel (optim.cu rt_cuda_cast)
    if st.across then bytes = bytes + unsharded_bytes(g, 0, optimizer.stepped_params(st)) end
    c.compute = roofline(gpu, k, 0, 1, bytes, k.optimizer, launches)
    c.class, c.launches = "optimizer", launches
  end
  return c
end

return M
