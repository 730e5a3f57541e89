-- Static memory plan: every buffer of one rank (sharded state, all-gather and
-- reduce-scatter buffers, unsharded parameters and gradients, activations and their
-- gradients) gets a lifetime over the schedule's steps and an offset in one arena. The
-- predicted peak is the highest byte a buffer uses, which the runtime measures and checks.
--
-- Storage: collective buffers hold their dtype (param_dtype all-gathers, reduce_dtype
-- reduce-scatters); compute buffers (activations, their gradients, unsharded parameters
-- and gradients, post-forward shards) hold fp32 values rounded to the tensor's dtype,
-- which is what the CPU kernels compute on, but where marked packed: 16-bit values (the
-- marks of packing.lua; a packed group's gradients, grad_assigns.lua); integer
-- tensors are int32.
--
-- Each step is annotated for the emitter with the buffers it uses (`st.bufs`; a backward
-- step's activation gradients in `st.bufs.grads`, by tensor: M.base), tensors with their
-- buffer (`t.buf`) and ops with their saved statistics (`op.scratch_buf`).
local attention = require("memory.attention")
local grad_alias = require("memory.grad_alias")
local grad_assigns = require("memory.grad_assigns")
local late_waits = require("memory.late_waits")
local packing = require("memory.packing")
local rope_pairs = require("memory.rope_pairs")
local scaled = require("memory.scaled_linears")
local stacked = require("memory.stacked_linears")
local step_ops = require("memory.step_ops")
local views = require("memory.views")
local planner = require("plan.planner")
local hooks = require("plan.hooks")
local keep = require("plan.keep")
local optimizer = require("plan.optimizer")
local trace = require("spec.trace")

local M = {}

local ALIGN = 256

local function align(n) return (n + ALIGN - 1) // ALIGN * ALIGN end

local function Q(g) return '"' .. g.name .. '"' end

local function bytes(numel, dtype) return numel * trace.dtype_bytes[dtype] end
local function compute_bytes(numel) return numel * 4 end

-- Which buffer holds a tensor's value, views (casts, folded scales), the cross-entropy left
-- to its loss gradient: views.lua, handed on to the later stages by these names.
M.base, M.is_view, M.forward_with_loss_grad = views.base, views.is_view, views.forward_with_loss_grad

-- Whether step st creates buffer b: a backward step lists the gradient buffers it creates
-- in st.bufs.zero (its kernels assign them, or they are zeroed first); later steps add.
function M.creates(st, b)
  for _, z in ipairs(st.bufs and st.bufs.zero or {}) do
    if z == b then return true end
  end
  return false
end

-- Whether forward steps i and i + 1 are a residual add and the norm of its sum (RMSNorm,
-- LayerNorm: planner.NORMS), all their tensors of one 16-bit dtype: the norm's step makes
-- one call for both (rt_residual_rmsnorm_packed_forward or
-- rt_residual_layernorm_packed_forward: the sum is normalised as it is written, not read
-- again), and the add's step none (planner.lua residual_before_norm issues such an add
-- just before its norm). M.plan marks the pair (`fused_norm` on the add's step,
-- `fused_add` on the norm's) for the emitter and the simulator.
local function add_with_norm(steps, i)
  local st, nxt = steps[i], steps[i + 1]
  if not (nxt and st.op == "forward" and nxt.op == "forward") then return false end
  local add, norm = st.node, nxt.node
  if add.kind ~= "add" or not planner.NORMS[norm.kind] or hooks.unhooked(norm.ins[1]) ~= add.outs[1] then
    return false
  end
  local y = add.outs[1]
  if not packing.sixteen(y) or trace.numel(add.ins[1].shape) ~= trace.numel(add.ins[2].shape) then return false end
  -- the call is the packed kernels' (kernels_c residual_norm), whose rows are whole 16-byte
  -- groups (RT_KCHECK_PACKED_ROWS) even when nothing is packed
  if y.shape[#y.shape] % 8 ~= 0 then return false end
  for _, t in ipairs({ add.ins[1], add.ins[2], norm.outs[1], table.unpack(norm.ins, 2) }) do
    if t.dtype ~= y.dtype then return false end
  end
  return true
end

-- Bytes of a buffer of t's shape: fp32 values, or packed 16-bit rows.
local function tensor_bytes(t, packed)
  if not packed then return compute_bytes(trace.numel(t.shape)) end
  local cols = t.shape[#t.shape]
  return trace.numel(t.shape) // cols * ((cols + 7) // 8 * 8) * 2
end

-- What op's backward, at backward step st, reads for its input or output t: inside a
-- checkpointed region the copy st's backward recomputed (st.replayed: the planner's
-- pair_recomputed); a region's outputs read from outside it are saved as usual.
function M.saved(t, op, st)
  t = M.base(t)
  local copy = st.replayed and st.replayed[t]
  local r = copy and op.region and t.producer.region
  if r and trace.outermost(op.region) == trace.outermost(r) then return copy end
  return t
end

-- The op whose saved statistics op's backward at step st reads: its replay, if st's
-- backward recomputed it.
function M.saved_op(op, st) return st.replayed and st.replayed[op] or op end

-- What an op's backward kernel reads of its forward (kernels_c.lua's backward calls), so that
-- an activation lives until the last backward that reads it, as autograd frees what no
-- node saved: the gradients of an add, a scale, a rotation, a dropout (its mask drawn
-- again) and a cast come from the output's gradient alone; attention also reads its
-- output (rowsum(dO * O)), the loss its buffer; the others their inputs. A kind not listed
-- reads both.
local BACKWARD_READS = {
  add = {}, scale = {}, rotary = {}, dropout = {}, cast = {},
  attention = { ins = true, outs = true },
  linear = { ins = true }, embedding = { ins = true }, layer_norm = { ins = true },
  rms_norm = { ins = true }, relu = { ins = true }, gelu = { ins = true }, silu = { ins = true },
  swiglu = { ins = true }, mul = { ins = true },
}
local READS_BOTH = { ins = true, outs = true }
function M.backward_reads(op) return BACKWARD_READS[op.kind] or READS_BOTH end

-- Statistics an op saves for its backward besides its inputs and outputs, in floats:
-- attention softmax rows' (max, 1/sum) [B, NH, T, 2] (rt_attention_stats_floats; cuDNN's
-- logsumexp [B, NH, T] fits in them); norm mean and rstd [N] each.
local function scratch_floats(op)
  if op.kind == "attention" then
    local B, T = attention.dims(op)
    return B * op.attrs.n_heads * T * 2
  end
  if op.kind == "layer_norm" or op.kind == "rms_norm" then
    local s = op.ins[1].shape
    return 2 * (trace.numel(s) // s[#s])
  end
  return 0
end

-- fp32 state buffers the optimizer keeps per parameter element: Adam's exp_avg and
-- exp_avg_sq, SGD's momentum buffer (none without momentum).
function M.optimizer_states(o)
  if o.kind == "sgd" then return (o.momentum or 0) > 0 and 1 or 0 end
  return 2
end

-- Elements of group g's unsharded gradients: the padded parameters that require grad, in
-- group order (layout.lua grad_numel, times the shard world), as FSDP2 gives a frozen
-- parameter no gradient. At one rank that is the sharded gradients' layout, so they can be
-- one buffer (in_place_groups).
function M.unsharded_grad_numel(g) return g.layout.grad_numel * g.shard end

-- Returns [lo, hi) to `free` (sorted disjoint intervals, the last one unbounded above
-- every buffer), merged with the free intervals it touches.
local function release(free, lo, hi)
  local a, z = 1, #free
  while a <= z do -- the first interval at or above hi
    local mid = (a + z) // 2
    if free[mid][1] < hi then a = mid + 1 else z = mid - 1 end
  end
  local prev, nxt = free[a - 1], free[a]
  if prev and prev[2] == lo and nxt[1] == hi then
    prev[2] = nxt[2]
    table.remove(free, a)
  elseif prev and prev[2] == lo then
    prev[2] = hi
  elseif nxt[1] == hi then
    nxt[1] = lo
  else
    table.insert(free, a, { lo, hi })
  end
end

-- A buffer in place (in_place_groups) is its alias's bytes, which were placed before it
-- (they live from step 0).
local function place_aliases(order)
  for _, b in ipairs(order) do
    if b.alias then b.offset = b.alias.offset end
  end
end

-- First fit: sets each buffer's offset, in the given order (by first step), to the lowest
-- one where it overlaps no buffer placed before it whose step interval meets its own.
-- `free` holds the maximal free intervals, in offset order, the last one unbounded; a
-- buffer's bytes are free again for buffers that start after its last step. A buffer with
-- an alias (in place: in_place_groups) takes no bytes of its own and gets the alias's offset.
-- Returns the peak (the highest byte any buffer really uses) and the arena size (which also
-- holds the alignment padding of the top buffer).
function M.place(order)
  local free = { { 0, math.huge } }
  local ending, freed_to = {}, -1 -- buffers placed, by last step; freed: last <= freed_to
  local peak, arena = 0, 0
  for _, b in ipairs(order) do
    if b.alias then goto continue end
    while freed_to < b.first - 1 do
      freed_to = freed_to + 1
      for _, l in ipairs(ending[freed_to] or {}) do release(free, l.offset, l.offset + l.bytes) end
      ending[freed_to] = nil
    end
    for k, f in ipairs(free) do
      if f[2] - f[1] >= b.bytes then
        b.offset = f[1]
        f[1] = f[1] + b.bytes
        if f[1] == f[2] then table.remove(free, k) end
        break
      end
    end
    ending[b.last] = ending[b.last] or {}
    table.insert(ending[b.last], b)
    peak = math.max(peak, b.offset + b.size)
    arena = math.max(arena, b.offset + b.bytes)
    ::continue::
  end
  place_aliases(order)
  return peak, arena
end

-- Largest first (an offline placement: every lifetime is known before any offset): the
-- persistent buffers keep the offsets M.place gave them (the arena's bottom, the same in
-- every program), and each other buffer of `order` but an alias (M.place) goes to the
-- lowest offset where it overlaps no buffer placed before it whose step interval meets
-- its own, taking them by size, the largest first (ties in `order`'s order). First fit by
-- first step leaves gaps that no later buffer fits (546 MiB of Llama 1B's plan); this order
-- fills the large holes first. Returns the peak and the arena size, as M.place does.
function M.place_by_size(order)
  local placed, todo, peak, arena = {}, {}, 0, 0  -- placed: by offset
  local function put(b)
    local lo, hi = 1, #placed  -- after the last one at or below b's offset
    while lo <= hi do
      local mid = (lo + hi) // 2
      if placed[mid].offset <= b.offset then lo = mid + 1 else hi = mid - 1 end
    end
    table.insert(placed, lo, b)
    peak, arena = math.max(peak, b.offset + b.size), math.max(arena, b.offset + b.bytes)
  end
  for k, b in ipairs(order) do
    if b.kind == "persistent" then put(b) elseif not b.alias then todo[#todo + 1] = { b = b, k = k } end
  end
  table.sort(todo, function(x, y)
    if x.b.bytes ~= y.b.bytes then return x.b.bytes > y.b.bytes end
    return x.k < y.k
  end)
  for _, t in ipairs(todo) do
    local b, off = t.b, 0
    for _, p in ipairs(placed) do
      if p.first <= b.last and b.first <= p.last then
        if off + b.bytes <= p.offset then break end
        off = math.max(off, p.offset + p.bytes)
      end
    end
    b.offset = off
    put(b)
  end
  place_aliases(order)
  return peak, arena
end

-- The groups whose unsharded gradients are their sharded ones (in place). At one rank the
-- sharded layout is the unsharded one, so where each reduction of a group is direct and
-- assigns (one per optimizer step, or the parts of one; no gradients kept across
-- backwards) and nothing clips, the backward accumulates straight into the sharded
-- gradients and the reduction's rounding to the gradients' dtype moves into the optimizer's
-- reads (rt_cuda.h grad_dt; the CPU backend rounds in place at the reduction): no copy and
-- no buffer of their own (FSDP2 copies them at one rank too). The bits are the same. A
-- reduction of fewer parameters qualifies where those it leaves out are frozen: they have
-- no gradients (no room in either: layout.lua grad_offset), and the optimizer steps the
-- reduction's alone.
local function leaves_only_frozen(g, r)
  local with = {}
  for _, k in ipairs(r.params) do with[k] = true end
  for k, p in ipairs(g.params) do
    if not with[k] and p.requires_grad then return false end
  end
  return true
end

local function in_place_groups(plan)
  local ok = {}
  if plan.spec.grad_clip then return ok end
  for _, g in ipairs(plan.groups) do ok[g] = g.shard == 1 and g.replicate == 1 end
  local since = {}  -- the group's reductions since its last optimizer step
  for _, st in ipairs(plan.steps) do
    local g = st.group
    if st.op == "accumulate_unsharded_grads" then
      ok[g] = false
    elseif st.op == "reduce_scatter" then
      local r = st.reduction
      local some = r.index > 0 and not r.part and not leaves_only_frozen(g, r)
      if not st.direct or some or ((since[g] or 0) > 0 and not r.part) then
        ok[g] = false
      end
      since[g] = (since[g] or 0) + 1
    elseif st.op == "optimizer" then
      since[g] = 0
    end
  end
  return ok
end

-- The parameters whose in-place gradients their looked-up rows' optimizer step leaves zero,
-- as lists by their group's sharded gradient buffer: it sets each looked-up row's gradient
-- to 0 as it reads it (rt_step.h rt_step_optimizer_rows), and no other row has one (the
-- step's other line for them steps the unused rows with gradient 0: optimizer.lua
-- Sim:split_token_rows), so the next backward adds to zeros without zeroing them first
-- (emit_step.lua; Llama 1B's embedding: 1 GB a step). The arena starts zeroed. Not a tied
-- embedding's (reductions.lua Sim:reduce_parts): its unused rows keep the output head's.
local function consumed_grads(plan, in_place)
  local by, unused = {}, {}
  for _, st in ipairs(plan.steps) do
    if st.op == "optimizer" and st.rows == "unused" then
      for _, p in ipairs(optimizer.stepped_params(st)) do unused[p] = true end
    end
  end
  for _, st in ipairs(plan.steps) do
    local g = st.group
    if st.op == "optimizer" and st.rows == "looked_up" and in_place[g] then
      local list = by[g.grads_buf] or {}
      for _, p in ipairs(optimizer.stepped_params(st)) do
        if unused[p] then list[#list + 1] = p end
      end
      by[g.grads_buf] = list
    end
  end
  return by
end

-- The unsharded gradient buffers that parts of a split reduction end (reductions.lua
-- Sim:reduce_parts), each with the parameters they read: only theirs need zeroing
-- (emit_step.lua zero). Parts reduced one after another read one buffer. The part of a
-- parameter's looked-up rows reads what its "final" part's buffer began (the lookups add
-- to the output head's gradient), so the buffer that part ends does not zero it again.
local function part_reads(steps)
  local reads = {}
  for _, st in ipairs(steps) do
    local r = st.op == "reduce_scatter" and st.reduction
    if r and r.part and st.bufs.ugrad and not st.bufs.acc then
      local ps = reads[st.bufs.ugrad] or {}
      if r.rows ~= "looked_up" then
        for _, k in ipairs(r.params) do ps[#ps + 1] = st.group.params[k] end
      end
      reads[st.bufs.ugrad] = ps
    end
  end
  return reads
end

-- The marks on the graph and the steps that the buffers follow; the groups with gradients in
-- place (plan.in_place) and the parameter gradients each backward step assigns
-- (plan.grad_assigns: grad_assigns.by_step).
local function mark(plan)
  views.mark_view_casts(plan.graph)
  local steps = plan.steps
  packing.mark_packed_logits(steps)
  packing.mark_packed_activations(plan.graph)
  local readers = views.readers_of(plan.graph)  -- the marks below add no op and no input
  scaled.mark(plan.graph, readers)  -- after the packing marks it compares
  -- The eval program and the step after one read the parameters as the step's all-gathers
  -- store them (rt_model_param packed is the step's).
  if not (plan.is_eval or plan.is_after_eval) then
    packing.mark_params(plan, readers)
  end
  packing.place_unsharded_params(plan)
  grad_alias.mark(steps)
  stacked.mark(plan, readers, M.base)  -- reaches through the adds grad_alias marks
  for _, st in ipairs(steps) do st.fused_norm, st.fused_add = nil, nil end
  for i = 1, #steps - 1 do
    if add_with_norm(steps, i) then steps[i].fused_norm, steps[i + 1].fused_add = steps[i + 1], steps[i] end
  end
  if not plan.is_eval then late_waits.mark(plan) end
  rope_pairs.mark(plan, M.base)  -- after the waits move: its marks hold step indices
  attention.mark(plan, views.readers_of(plan.graph, true), M.base)
  plan.in_place = in_place_groups(plan)
  plan.grad_assigns = grad_assigns.by_step(plan)
end

-- Builds buffers with [first, last] step intervals, then assigns offsets. packed: the groups
-- (by index) whose gradients are 16-bit (grad_assigns.packed_groups).
function M.plan(plan, packed)
  local steps = plan.steps
  local bufs = {}
  local function buf(name, kind, size, first, last)
    if size <= 0 then return nil end
    local b = { name = name, kind = kind, size = size, bytes = align(size), first = first, last = last or first }
    bufs[#bufs + 1] = b
    return b
  end
  local n = #steps
  local opt_states = M.optimizer_states(plan.spec.optimizer)
  local in_place = plan.in_place

  -- Persistent per group: fp32 sharded params, their gradients (fp32, or param_dtype where
  -- packed), optimizer state; a frozen group (plan/groups.lua) the params alone, as
  -- torch.optim keeps no state for parameters that never have a gradient, and a group with
  -- frozen parameters gradients and state for the others alone (layout.lua grad_numel).
  for _, g in ipairs(plan.groups) do
    g.params_buf = buf(Q(g) .. " sharded params", "persistent", bytes(g.layout.shard_numel, "fp32"), 0, n + 1)
    if not g.frozen then
      g.packed_grads = packed[g.index] or nil
      local gname = Q(g) .. " sharded grads" .. (g.packed_grads and " (" .. g.param_dtype .. ")" or "")
      local sb = bytes(g.layout.grad_numel, "fp32")
      local gb = g.packed_grads and bytes(g.layout.grad_numel, g.param_dtype) or sb
      g.grads_buf = buf(gname, "persistent", gb, 0, n + 1)
      g.grads_buf.packed_grads = g.packed_grads
      if opt_states > 0 then
        g.state_buf = buf(Q(g) .. " optimizer state", "persistent", sb * opt_states, 0, n + 1)
      end
    end
  end
  plan.consumed_grads = consumed_grads(plan, in_place)

  -- One rank's unsharded parameters kept across steps (plan/keep.lua persist): persistent,
  -- so the eval programs find them where the step left them.
  local open = {}   -- key -> buffer
  for _, g in ipairs(plan.groups) do
    if plan.kept_across[g.index] then
      g.kept_buf = buf(Q(g) .. " unsharded params (kept across steps)", "persistent",
        4 * g.unsharded_words, 0, n + 1)
      if g.kept_buf then g.kept_buf.kept_across = true end  -- none: nothing unsharded to keep
      open["unsharded " .. g.index] = g.kept_buf
    end
  end

  -- Walk the steps: open/close transient buffers.
  local function start(key, name, kind, size, i)
    if open[key] then return open[key], false end
    local b = buf(name, kind, size, i, i)
    open[key] = b
    return b, true
  end
  local function stop(key, i)
    local b = open[key]
    if b and b.kind ~= "persistent" then  -- kept across steps: never closed
      if i > b.last then b.last = i end
      open[key] = nil
    end
    return b
  end
  local function touch(b, i)
    if b and i > b.last then b.last = i end
  end

  -- The all-gather streams run ahead of compute up to their last wait for it (a sync: an
  -- all_gather_sync, all_gather_wait or reshard_post_forward step, runtime/cuda/step/
  -- backend.c), so an all-gather's output starts there: it may only sit on buffers that
  -- ended before that point, whose last users compute has finished (or waited for).
  local synced = 1
  local grad_of = {}  -- the backward pass's activation-gradient buffers, by tensor (M.base)
  local stack_grad = {}  -- stack (stacked_linears) -> its output gradients' buffer
  local function step_grads(op)  -- the gradient buffers of op's inputs and outputs
    local gs = {}
    for _, t in ipairs(op.ins) do gs[M.base(t)] = grad_of[M.base(t)] end
    for _, t in ipairs(op.outs) do gs[M.base(t)] = grad_of[M.base(t)] end
    return gs
  end
  for i, st in ipairs(steps) do
    local g = st.group
    local u = st.bufs or {}
    st.bufs = u
    if st.op == "all_gather_sync" then
      synced = i
    elseif st.op == "all_gather" and st.kept then
      -- One rank, the shards unchanged since a reshard kept the buffer (plan/keep.lua).
      u.unsharded = open["unsharded " .. g.index]
    elseif st.op == "all_gather" and st.direct then
      -- One rank: the copy-in writes the unsharded parameters (on its own stream, CUDA).
      u.unsharded = start("unsharded " .. g.index, Q(g) .. " unsharded params", "unsharded",
        4 * g.unsharded_words, synced)
    elseif st.op == "all_gather" then
      -- In place, as FSDP2: the all-gather input is this rank's block of the output.
      local ws = st.from_post_forward and g.post_forward_world or g.shard
      local in_numel = st.from_post_forward and (g.layout.padded_numel // g.post_forward_world)
        or g.layout.shard_numel
      u.out = start("ag_out " .. st.ag, Q(g) .. " all-gather output", "all_gather", bytes(in_numel * ws, g.param_dtype),
        synced)
      if st.from_post_forward then
        -- The copy-in reads the post-forward shard on its own stream (CUDA), so the shard
        -- lives until compute waits for this all-gather, as PyTorch's caching allocator
        -- keeps a block that another stream still uses.
        u.post_forward_shard = open["post_forward_shard " .. g.index]
        open["post_forward_shard " .. g.index], open["ag_in " .. st.ag] = nil, u.post_forward_shard
      end
    elseif st.op == "all_gather_wait" or st.op == "all_gather_drop" then
      stop("ag_out " .. st.ag, i)
      stop("ag_in " .. st.ag, i)
      if st.op == "all_gather_wait" then
        synced = i
        u.unsharded = start("unsharded " .. g.index, Q(g) .. " unsharded params", "unsharded",
          4 * g.unsharded_words, i)
      elseif st.direct then
        stop("unsharded " .. g.index, i)
      end
    elseif st.op == "reshard" and st.keep then
      u.unsharded = open["unsharded " .. g.index]
      touch(u.unsharded, i)
    elseif st.op == "reshard" then
      stop("unsharded " .. g.index, i)
      stop("post_forward_shard " .. g.index, i)
    elseif st.op == "reshard_post_forward" then
      synced = i
      u.unsharded = stop("unsharded " .. g.index, i)
      u.post_forward_shard = start("post_forward_shard " .. g.index, Q(g) .. " post-forward shard",
        "unsharded", compute_bytes(g.layout.padded_numel // g.post_forward_world), i)
    elseif st.op == "reduce_scatter" then
      -- One reduce-scatter in flight: the previous one's buffers are freed now.
      local keys = {}
      for k in pairs(open) do
        if k:match("^rs ") then keys[#keys + 1] = k end
      end
      for _, k in ipairs(keys) do stop(k, i) end
      u.ugrad = stop("ugrad " .. g.index, i)
      -- a part right after another of its group reads the buffer that one ended (a tied
      -- embedding's rows part after the norm's: reductions.lua Sim:reduce_parts)
      local prev = steps[i - 1]
      if not u.ugrad and st.reduction.part and prev and prev.op == "reduce_scatter" and prev.group == g then
        u.ugrad = prev.bufs.ugrad
        touch(u.ugrad, i)
      end
      u.acc = stop("accgrad " .. g.index, i)
      st.in_place = in_place[g] or nil
      if st.in_place then
        -- nothing to keep: the optimizer reads the sharded gradients the backward wrote
      elseif st.direct then
        -- Read on the reduce-scatter stream (CUDA): kept until the next reduction waits for it.
        open["rs " .. st.rs .. " src"] = u.acc or u.ugrad
      else
        local L = st.reduction.layout
        u.rs_in = start("rs " .. st.rs .. " in", Q(g) .. " reduce-scatter input", "reduce_scatter", bytes(L.padded_numel, g.reduce_dtype), i)
        u.rs_out = start("rs " .. st.rs .. " out", Q(g) .. " reduce-scatter output", "reduce_scatter", bytes(L.shard_numel, g.reduce_dtype), i)
      end
    elseif st.op == "all_reduce" then
      touch(open["rs " .. st.rs .. " out"], i)
    elseif st.op == "accumulate_unsharded_grads" then
      u.ugrad = stop("ugrad " .. g.index, i)
      u.acc, u.acc_new = start("accgrad " .. g.index, Q(g) .. " accumulated unsharded grads", "grads",
        compute_bytes(M.unsharded_grad_numel(g)), i)
    elseif st.op == "forward" or st.op == "recompute" then
      local op = st.node
      -- an add left to its norm's call is read there (add_with_norm), a rotation to its
      -- pair's call (rope_pairs.lua)
      local pair = st.rope_pair
      if pair and steps[pair.at] ~= pair.call then error("internal: a rotary pair's call moved from its step") end
      local at = st.fused_norm and i + 1 or pair and pair.at or i
      for _, t in ipairs(op.ins) do touch(M.base(t).buf, at) end
      for _, t in ipairs(M.is_view(op) and {} or op.outs) do
        t.buf = buf((st.op == "recompute" and "recomputed " or "") .. st.label, "activation",
          tensor_bytes(t, t.packed), i, i)
        t.buf.packed = t.packed
      end
      local sf = scratch_floats(op)
      if sf > 0 then op.scratch_buf = buf(st.label .. " saved stats", "activation", compute_bytes(sf), i, i) end
      if op.kind == "attention" then
        u.scratch = buf(st.label .. " scratch", "activation", compute_bytes(attention.scratch_floats(op)), i, i)
      end
    elseif st.op == "eval_loss" then
      touch(M.base(st.node.outs[1]).buf, i)
    elseif st.grad_alias then
      -- The inputs' gradients are the output's, in its buffer (grad_alias.lua).
      u.zero, u.ugrad = {}, {}
      local gb = grad_of[M.base(st.node.outs[1])]
      touch(gb, i)
      for _, t in ipairs(st.node.ins) do grad_of[M.base(t)] = gb end
      u.grads = step_grads(st.node)
    elseif st.op == "backward" or st.op == "loss_grad" then
      -- Each backward pass computes its own activation gradients (as autograd does when a
      -- retained graph is backpropagated again); only the parameters' accumulate.
      if st.op == "loss_grad" then grad_of, stack_grad = {}, {} end
      -- Reads saved inputs and outputs and the output gradients; writes input gradients
      -- and (for parameters) the group's unsharded gradients.
      u.zero, u.ugrad, u.grads = {}, {}, {}
      for _, op in ipairs(step_ops.ops(st)) do
        local reads = st.op == "loss_grad" and READS_BOTH or M.backward_reads(op)  -- the loss is read
        for _, t in ipairs(op.ins) do
          if reads.ins then touch(M.saved(t, op, st).buf, i) end
        end
        for _, t in ipairs(op.outs) do
          if reads.outs then touch(M.saved(t, op, st).buf, i) end
          touch(grad_of[M.base(t)], i)
        end
        touch(M.saved_op(op, st).scratch_buf, i)
        if op.kind == "attention" then
          u.scratch = buf(st.label .. " backward scratch", "activation_grad",
            compute_bytes(attention.scratch_floats(op)), i, i)
        end
        for _, t in ipairs(op.ins) do
          local b = M.base(t)
          if t.requires_grad and t.is_param then
            local pg = plan.owner[t]
            if pg then
              local numel = M.unsharded_grad_numel(pg)
              local gb, new = start("ugrad " .. pg.index, Q(pg) .. " unsharded grads"
                .. (in_place[pg] and " (in place)" or ""), "grads", compute_bytes(numel), i)
              if new and in_place[pg] then
                gb.alias, gb.bytes, gb.packed_grads = pg.grads_buf, 0, pg.packed_grads
                if pg.packed_grads then gb.size = bytes(numel, pg.param_dtype) end
              end
              u.ugrad[pg.index] = gb
              if new then u.zero[#u.zero + 1] = gb end
            end
          elseif t.requires_grad and b.producer and not grad_of[b] then
            local gb = b.grad_slice and stack_grad[b.grad_slice.stack]
            if not gb then
              local s = b.grad_slice and b.grad_slice.stack
              local name, size = "grad of " .. (b.label or "?"), tensor_bytes(b, b.grad_packed)
              if s then name, size = "stacked grads of " .. (s.ops[1].label or "?"), 2 * s.rows * s.ld end
              gb = buf(name, "activation_grad", size, i, i)
              gb.packed = b.grad_packed
              if s then stack_grad[s], gb.stack = gb, s end
            end
            grad_of[b] = gb
            -- a stack's slice is created by its one writer, which assigns it (stacked_linears)
            if not M.creates(st, gb) then u.zero[#u.zero + 1] = gb end
          end
        end
        for b, gb in pairs(step_grads(op)) do u.grads[b] = gb end
      end
    end
  end
  local rest = {}
  for k in pairs(open) do rest[#rest + 1] = k end
  for _, k in ipairs(rest) do stop(k, n) end

  plan.part_reads = part_reads(steps)

  -- Offsets: first fit in order of allocation, or largest first where that peaks lower
  -- (activations of recomputed regions end at their last forward use; backward reads the
  -- recomputed copies).
  local order = {}
  for k, b in ipairs(bufs) do
    b.seq = k
    order[k] = b
  end
  -- Buffers kept across steps after the other persistent ones: the CUDA backend's host
  -- mirror of the sharded state (rt_step_persistent_end) then leaves them out.
  table.sort(order, function(a, b)
    if a.first ~= b.first then return a.first < b.first end
    if (a.kept_across or false) ~= (b.kept_across or false) then return not a.kept_across end
    if a.bytes ~= b.bytes then return a.bytes > b.bytes end
    if a.name ~= b.name then return a.name < b.name end
    return a.seq < b.seq
  end)
  local peak, arena = M.place(order)
  local first_fit = {}
  for k, b in ipairs(order) do first_fit[k] = b.offset end
  local p2, a2 = M.place_by_size(order)
  if p2 < peak or (p2 == peak and a2 < arena) then
    peak, arena = p2, a2
  else
    for k, b in ipairs(order) do b.offset = first_fit[k] end
  end
  -- the persistent buffers are the arena's bottom, nothing else among them: the CUDA
  -- backend mirrors [0, their end) on the host, and offload keeps it there
  local persistent_end = 0
  for _, b in ipairs(order) do
    if b.kind == "persistent" then persistent_end = math.max(persistent_end, b.offset + b.bytes) end
  end
  for _, b in ipairs(order) do
    if b.kind ~= "persistent" and not b.alias and b.bytes > 0 and b.offset < persistent_end then
      error(string.format("internal: buffer '%s' placed at %d, below the persistent buffers' end %d",
        b.name, b.offset, persistent_end))
    end
  end
  local totals = {}
  for _, b in ipairs(order) do totals[b.kind] = (totals[b.kind] or 0) + b.bytes end
  return { buffers = order, peak = peak, arena = arena, totals = totals }
end

-- The memory stage of a whole plan (what the planner hands on, planner.lua's top): the
-- step's memory, and the eval's and the step-after-an-eval's (their own buffers; the
-- persistent buffers and the parameters' storage are the step's). The step after an eval
-- is kept as plan.after_eval_plan only where its steps differ from the step's, compared
-- once both carry this stage's marks (view casts, gradient-aliasing adds).
-- Gradients are packed where the step and the step after an eval both allow it: the
-- programs share the persistent buffers, and the model's groups say how they are stored.
function M.plan_all(plan)
  local ev, after = plan.eval_plan, plan.after_eval
  plan.after_eval = nil
  mark(plan)
  local packed = grad_assigns.packed_groups(plan, plan.in_place, plan.grad_assigns)
  if ev then
    mark(ev)
    mark(after)
  end
  keep.persist(plan, ev, ev and after)  -- after mark: it reads which parameters the shards serve
  if ev then
    local also = grad_assigns.packed_groups(after, after.in_place, after.grad_assigns)
    for k in pairs(packed) do packed[k] = also[k] end
  end
  -- on the spec's parameter tensors, which the programs share (kernels_c RT_PACKED_DWEIGHT);
  -- a frozen one has no gradient
  for _, g in ipairs(plan.groups) do
    for _, l in ipairs(g.layout.params) do
      l.param.packed_grad = packed[g.index] and l.param.requires_grad and g.param_dtype or nil
    end
  end
  plan.memory = M.plan(plan, packed)
  if ev then
    ev.memory = M.plan(ev, packed)
    after.memory = M.plan(after, packed)
    if not planner.same_steps(after, plan) then plan.after_eval_plan = after end
  end
  return plan
end

return M
