-- Static memory plan: every buffer of one rank (sharded state, all-gather and
-- reduce-scatter buffers, unsharded parameters and gradients, activations and their
-- gradients) gets a lifetime over the schedule's steps and an offset in one arena. The
-- predicted peak is the highest byte a buffer uses, which the runtime measures and checks.
--
-- Storage: collective buffers hold their dtype (param_dtype all-gathers, reduce_dtype
-- reduce-scatters); compute buffers (activations, their gradients, unsharded parameters
-- and gradients, post-forward shards) hold fp32 values rounded to the tensor's dtype,
-- which is what the CPU kernels compute on, but where marked packed: 16-bit values (the
-- mark_packed_* functions below; a packed group's gradients, grad_assigns.lua); integer
-- tensors are int32.
--
-- Each step is annotated for the emitter with the buffers it uses (`st.bufs`; a backward
-- step's activation gradients in `st.bufs.grads`, by tensor: M.base), tensors with their
-- buffer (`t.buf`) and ops with their saved statistics (`op.scratch_buf`).
local attention = require("memory.attention")
local grad_assigns = require("memory.grad_assigns")
local late_waits = require("memory.late_waits")
local stacked = require("memory.stacked_linears")
local planner = require("plan.planner")
local hooks = require("plan.hooks")
local optimizer = require("plan.optimizer")
local trace = require("spec.trace")

local M = {}

local ALIGN = 256

local function align(n) return (n + ALIGN - 1) // ALIGN * ALIGN end

local function Q(g) return '"' .. g.name .. '"' end

local function bytes(numel, dtype) return numel * trace.dtype_bytes[dtype] end
local function compute_bytes(numel) return numel * 4 end

-- The tensor whose buffer holds t's value: FSDP's post-backward hook passes its inputs
-- through unchanged, and so does a view cast (M.plan marks them).
function M.base(t)
  while t.producer and (t.producer.kind == "post_backward_hook" or M.is_view(t.producer)) do
    t = t.producer.ins[t.out_index]
  end
  return t
end

-- Whether step st creates buffer b: a backward step lists the gradient buffers it creates
-- in st.bufs.zero (its kernels assign them, or they are zeroed first); later steps add.
function M.creates(st, b)
  for _, z in ipairs(st.bufs and st.bufs.zero or {}) do
    if z == b then return true end
  end
  return false
end

-- A cast to fp32 changes no stored value (compute buffers hold fp32 values rounded to
-- their dtype). When it is the only reader of an activation it is a view: output and
-- input share one buffer, and one gradient buffer (the input's gradient is the output's,
-- rounded to the input's dtype), so the fp32 logits of a bf16 model cost no copy and no
-- memory. A recomputed cast is a view when its original is.
function M.is_view(op) return (op.original or op).view == true end

local unhooked = hooks.unhooked  -- t before FSDP's post-backward hooks (see M.base)

-- The ops that read each tensor, in graph order. through_hooks: the tensors before FSDP's
-- post-backward hooks, which are not readers themselves (the next block's ops read a
-- block's output).
local function readers_of(graph, through_hooks)
  local readers = {}
  for _, op in ipairs(graph.ops) do
    if not (through_hooks and op.kind == "post_backward_hook") then
      for _, t in ipairs(op.ins) do
        local u = through_hooks and unhooked(t) or t
        readers[u] = readers[u] or {}
        readers[u][#readers[u] + 1] = op
      end
    end
  end
  return readers
end

-- A view cast also records `sole_reader`, the one op that reads its output, if there is one:
-- then that op's backward is the only contribution to the shared gradient buffer.
local function mark_view_casts(graph)
  local readers = readers_of(graph)
  for _, op in ipairs(graph.ops) do
    local x, rs = op.ins[1], readers[op.outs[1]] or {}
    if op.kind == "cast" and op.outs[1].dtype == "fp32" and #(readers[x] or {}) == 1 then
      local b = M.base(x)  -- an activation (earlier view casts are already marked)
      op.view = b.producer ~= nil and not b.is_param and not b.is_input
      op.sole_reader = op.view and #rs == 1 and rs[1] or nil
    end
  end
end

-- Whether step i, a cross-entropy's forward, is left to its loss gradient, the next step:
-- that step's one call (rt_cross_entropy_forward_backward) reads each row of logits once for
-- both (emit_step), and its logits may be packed (below).
function M.forward_with_loss_grad(steps, i)
  local st, nxt = steps[i], steps[i + 1]
  return st.op == "forward" and st.node.kind == "cross_entropy" and nxt ~= nil and nxt.op == "loss_grad"
    and nxt.node == st.node
end

local function sixteen(t) return t.dtype == "bf16" or t.dtype == "fp16" end

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
  if add.kind ~= "add" or not planner.NORMS[norm.kind] or unhooked(norm.ins[1]) ~= add.outs[1] then
    return false
  end
  local y = add.outs[1]
  if not sixteen(y) or trace.numel(add.ins[1].shape) ~= trace.numel(add.ins[2].shape) then return false end
  -- the call is the packed kernels' (kernels_c residual_norm), whose rows are whole 16-byte
  -- groups (RT_KCHECK_PACKED_ROWS) even when nothing is packed
  if y.shape[#y.shape] % 8 ~= 0 then return false end
  for _, t in ipairs({ add.ins[1], add.ins[2], norm.outs[1], table.unpack(norm.ins, 2) }) do
    if t.dtype ~= y.dtype then return false end
  end
  return true
end

-- Whether every float input of op has y's dtype (so op's kernel `dt` is y's: kernels_c).
local function inputs_have_dtype(op, y)
  for _, t in ipairs(op.ins) do
    if trace.is_float(t.dtype) and t.dtype ~= y.dtype then return false end
  end
  return true
end

-- Packed 16-bit storage (rt_kernels.h), where it saves the GPU a narrowing or widening pass;
-- the emitter calls the packed kernels for `t.packed` (value) and `t.grad_packed` (gradient).
--   * Logits: a bias-free 16-bit linear's output read only by a view cast to fp32 that only
--     a cross-entropy reads, whose forward is left to its loss gradient
--     (M.forward_with_loss_grad), i.e. a language model's head. Value and gradient are
--     packed, in rows padded to 8 elements: no widening of the head's output and no
--     narrowing of its gradient.
local function mark_packed_logits(steps)
  for i, st in ipairs(steps) do
    local ce = st.node
    if M.forward_with_loss_grad(steps, i) then
      local cast = ce.ins[1].producer
      local y = cast and cast.kind == "cast" and M.is_view(cast) and cast.sole_reader == ce and M.base(cast.ins[1])
      local lin = y and y.producer
      if lin and lin.kind == "linear" and not lin.ins[3] and not lin.region and y.requires_grad and sixteen(y) then
        y.packed, y.grad_packed = true, true
      end
    end
  end
end

-- The packed kernels (rt_kernels.h "packed 16-bit storage"): the ops that write a packed
-- output, the input positions that ops read packed, the ops whose backward reads a packed
-- gradient of their output (dout), and the input positions whose gradients ops write packed
-- (rotary: when it rotates the whole tensor, so its backward writes all of the gradient;
-- add: a residual add, not a broadcast one).
local function residual(op)
  local same = trace.numel(op.ins[1].shape) == trace.numel(op.ins[2].shape)
  return { same, same }
end
local PACKED_OUT = { linear = true, layer_norm = true, rms_norm = true, gelu = true, relu = true, silu = true,
  swiglu = true, rotary = true, attention = true, add = function(op) return residual(op)[1] end }
local PACKED_IN = { linear = { true }, gelu = { true }, relu = { true }, silu = { true }, swiglu = { true, true },
  rotary = { true }, attention = { true, true, true }, add = residual, layer_norm = { true }, rms_norm = { true } }
local PACKED_DOUT = { linear = true, gelu = true, relu = true, silu = true, swiglu = true, rotary = true,
  attention = true, layer_norm = true, rms_norm = true, add = PACKED_OUT.add }
local PACKED_DIN = { linear = { true }, gelu = { true }, relu = { true }, silu = { true }, swiglu = { true, true },
  add = residual, layer_norm = { true }, rms_norm = { true }, attention = { true, true, true },
  rotary = function(op)
    local x = op.ins[1]
    return { x.shape[#x.shape] == op.attrs.n_heads * op.attrs.head_dim }
  end }

-- op's entry in one of those tables (a function of op where it depends on the shapes).
local function entry(tbl, op)
  local e = tbl[op.kind]
  if type(e) == "function" then return e(op) end
  return e
end

-- Whether op reads its j-th input packed (`positions`: PACKED_IN or PACKED_DIN).
local function packed_at(positions, op, j)
  local p = entry(positions, op)
  return p ~= nil and p[j] == true
end


-- Whether op's backward kernel gets its dtype as dt, as the packed kernels need
-- (kernels_c backward_rounding: it rounds the gradients of the inputs at its packed
-- positions, which must then be activations, each its own gradient buffer but where the
-- kernel adds both contributions itself: swiglu(x, x), x + x).
local ALIAS_OK = { swiglu = true, add = true }
local function backward_in_dtype(op)
  local seen = {}
  for j, t in ipairs(op.ins) do
    if packed_at(PACKED_IN, op, j) and t.requires_grad then
      local b = M.base(t)
      if t.is_param or (seen[b] and not ALIAS_OK[op.kind]) then return false end
      seen[b] = true
    end
  end
  return true
end

-- Whether the gradient of y, read by the ops rs, may be packed: its producer's backward reads
-- a packed dout in dt, and each reader reads y once, where its backward writes (assigns or
-- adds to) a packed gradient.
local function grad_packable(op, y, rs)
  if not (entry(PACKED_DOUT, op) and y.requires_grad and backward_in_dtype(op)) then return false end
  local seen = {}
  for _, r in ipairs(rs) do
    if seen[r] then return false end
    seen[r] = true
    for j, t in ipairs(r.ins) do
      if unhooked(t) == y and not packed_at(PACKED_DIN, r, j) then return false end
    end
  end
  return true
end

--   * Activations: a linear's, a norm's, an activation's, a rotary embedding's, an
--     attention's or a residual add's 16-bit output read only where the packed kernels
--     take it (a linear's input, a norm's, an activation's inputs, a rotary embedding's,
--     attention's q, k, v, a residual add's; through FSDP's post-backward hooks), by ops
--     of its dtype: the residual stream, a block's attention and MLP inputs, q, k, v and
--     the attention's output, the MLP's hidden activations, the attention's and MLP's
--     outputs, the head's input. The GEMMs read its rows in place instead of a copy
--     narrowed in every forward and backward, and a linear's output is not widened. Its
--     last dimension is a multiple of 8 (dense rows). Checkpointed regions keep fp32
--     storage.
--   * Their gradients, where grad_packable: the readers' backwards write their
--     contributions packed (rt_kernels.h RT_PACKED_DINP: the first assigned, the others
--     added, each rounded once to the dtype), and the producer's backward reads the sum in
--     place (the norms' outputs, the MLP's hidden gradients, q's and k's before the rotary
--     embeddings, the attention output's, the attention's and MLP's outputs before the
--     residual adds, the residual stream's, q's, k's and v's: no widening of a GEMM's dinp
--     and no rounding pass over an fp32 sum, no narrowing for the next GEMM, half the bytes
--     for the kernels between, the norms', residual adds' and attention's backwards
--     included). An attention's output is packed only with its gradient (its backward
--     reads both for D = rowsum(dout * out)).
local function mark_packed_activations(graph)
  local readers = readers_of(graph, true)
  for _, op in ipairs(graph.ops) do
    local y, rs = op.outs[1], readers[op.outs[1]] or {}
    local ok = entry(PACKED_OUT, op) and not op.region and sixteen(y) and inputs_have_dtype(op, y)
      and y.shape[#y.shape] % 8 == 0 and #rs > 0
    for _, r in ipairs(rs) do
      ok = ok and not r.region and inputs_have_dtype(r, y) and r.outs[1].dtype == y.dtype and backward_in_dtype(r)
      for j, t in ipairs(r.ins) do
        if unhooked(t) == y then ok = ok and packed_at(PACKED_IN, r, j) end
      end
    end
    local grad = ok and grad_packable(op, y, rs)
    if ok and (grad or op.kind ~= "attention") then
      y.packed = true
      y.grad_packed = grad or nil
    end
  end
end

-- The order of group g's unsharded parameters (place_unsharded_params), as
-- `p.unsharded_pos`: the group's, except that the packed weights of linears that all read
-- one input follow the first of them (Llama's w1 and w3, registered with w2 between them),
-- so that stacked_linears can take them as one matrix. Kept on the parameters, as
-- `packed`, for the eval program, which reads them where the step's all-gathers put them.
local function unsharded_order(g, readers)
  local input_of = {}  -- a packed weight -> the one input that its linears read
  for _, l in ipairs(g.layout.params) do
    local p, x = l.param, nil
    for _, r in ipairs(p.packed and readers[p] or {}) do
      if r.ins[2] ~= p or (x and r.ins[1] ~= x) then
        x = false
        break
      end
      x = r.ins[1]
    end
    input_of[p] = x or nil
  end
  local params, placed, pos = g.layout.params, {}, 0
  for i, l in ipairs(params) do
    local x = input_of[l.param]
    for j = i, #params do
      local q = params[j].param
      if not placed[q] and (j == i or (x and input_of[q] == x)) then
        pos = pos + 1
        q.unsharded_pos, placed[q] = pos, true
      end
    end
  end
end

--   * Unsharded parameters that only linears read, each as its weight (position 2: 2-D with
--     both dims multiples of 8, dense rows and no zero rows for the GEMM to add) or as its
--     bias (position 3: a multiple of 8 values, no padding for cuBLASLt's bias epilogue),
--     in the parameter's 16-bit dtype (backward_in_dtype: no parameter input): the
--     all-gather's copy-out writes param_dtype's bits into the unsharded parameters
--     (rt_model.h `packed`; place_unsharded_params) and the GEMMs read them in place instead
--     of a copy narrowed in every forward and backward (rt_kernels.h RT_PACKED_INP2 and
--     RT_PACKED_INP3: GPT-2's biases, 24 copies a step). The unsharded gradients keep their
--     fp32 layout.
local function mark_packed_params(plan)
  local readers = readers_of(plan.graph)
  for _, g in ipairs(plan.groups) do
    for _, l in ipairs(g.layout.params) do
      local p, rs = l.param, readers[l.param] or {}
      local s = p.shape
      local weight = #s == 2 and s[1] % 8 == 0 and s[2] % 8 == 0
      local bias = #s == 1 and s[1] % 8 == 0
      local ok = sixteen(p) and #rs > 0
      for _, r in ipairs(rs) do
        ok = ok and r.kind == "linear" and inputs_have_dtype(r, p) and r.outs[1].dtype == p.dtype
          and backward_in_dtype(r)
        for j, t in ipairs(r.ins) do
          if t == p then ok = ok and ((j == 2 and weight) or (j == 3 and bias)) end
        end
      end
      p.packed = ok or nil
    end
    unsharded_order(g, readers)
  end
end

--   * At one shard rank the sharded layout is the unsharded one, and the all-gather's copy
--     rounds the fp32 shards to param_dtype. An embedding's output has its weight's dtype
--     and is rounded to it after the lookup (kernels_c `rounded`), so a lookup of the
--     unrounded fp32 value gives the same bits: a parameter that only lookups read is read
--     from the sharded parameters (`from_shard`, rt_model.h), and the all-gather copies
--     nothing for it (Llama's untied embedding: 2.1 GB of the copy at the step's start).
local function mark_shard_reads(plan)
  local readers = readers_of(plan.graph)
  for _, g in ipairs(plan.groups) do
    for _, l in ipairs(g.layout.params) do
      local p, rs = l.param, readers[l.param] or {}
      local ok = g.shard == 1 and #rs > 0
      for _, r in ipairs(rs) do ok = ok and r.kind == "embedding" and r.ins[2] == p and r.ins[1] ~= p end
      p.from_shard = ok or nil
    end
  end
end

-- A group's unsharded parameters (the all-gathers' copy-outs write them, compute reads
-- them), each from a 16-byte aligned offset in 4-byte words, l.unsharded_word, in group
-- order but for the weights unsharded_order moves: fp32 storage takes a word per element,
-- packed storage (mark_packed_params) half a word, and a parameter read from the shards
-- (mark_shard_reads) none; g.unsharded_words in all. Without the shards' padding, which the
-- copy-outs drop. The unsharded gradients keep the padded fp32 layout of the reductions
-- (l.offset * shard), in group order. runtime/step/state.c unsharded_layout checks that
-- the offsets pack the parameters tightly, in whatever order.
local function place_unsharded_params(plan)
  for _, g in ipairs(plan.groups) do
    local w, order = 0, {}
    for i, l in ipairs(g.layout.params) do order[i] = { l = l, pos = l.param.unsharded_pos or i } end
    table.sort(order, function(a, b) return a.pos < b.pos end)
    for _, o in ipairs(order) do
      local l = o.l
      local p = l.param
      l.unsharded_word = w
      local words = p.from_shard and 0 or p.packed and l.numel // 2 or l.numel
      w = w + (words + 3) // 4 * 4
    end
    g.unsharded_words = w
  end
end

-- Residual adds whose backward is no copy (`st.grad_alias` on the step): out = a + b gives
-- da = db = dout, so a's and b's gradients can be the output's gradient buffer itself, as
-- PyTorch's autograd hands AddBackward's gradient on to both inputs without a copy (on a
-- Llama residual stream, two 16-bit copies per add saved; one buffer carries the stream's
-- gradient through every block). The bits are the add's kernel's when
--   * a, b and the output (and their buffers' tensors, M.base) have one dtype and one
--     storage of their gradients, and a and b are distinct activations of the output's
--     size that need a gradient;
--   * neither a's nor b's gradient was begun before (the add's contribution is the first,
--     as when its kernel assigned them);
--   * each tensor sharing the buffer is read (its producer's backward) before any other
--     gets a further contribution: the buffer holds one gradient for all of them until then.
-- A view cast's backward rounds the shared buffer in place, so it counts as a contribution.
local function grad_alias_candidate(op)
  if op.kind ~= "add" or not op.outs[1].requires_grad then return nil end
  local o, a, b = op.outs[1], op.ins[1], op.ins[2]
  local A, B, O = M.base(a), M.base(b), M.base(o)
  if A == B or trace.numel(a.shape) ~= trace.numel(o.shape) or trace.numel(b.shape) ~= trace.numel(o.shape) then
    return nil
  end
  for _, t in ipairs({ a, b, A, B, O }) do
    if t.dtype ~= o.dtype or not t.requires_grad or t.is_param or not t.producer then return nil end
  end
  local function packed(t) return t.grad_packed == true end
  if packed(A) ~= packed(O) or packed(B) ~= packed(O) then return nil end
  return A, B, O
end

-- Within one backward pass (steps lo..hi, from its loss_grad).
local function mark_grad_alias_adds_in(steps, lo, hi)
  -- Steps that read (output) and write (input) each activation's gradient, in order.
  local reads, writes = {}, {}
  local function note(tbl, t, i)
    local l = tbl[t] or {}
    tbl[t] = l
    l[#l + 1] = i
  end
  for i = lo, hi do
    local st = steps[i]
    if st.op == "backward" or st.op == "loss_grad" then
      for _, t in ipairs(st.node.outs) do note(reads, M.base(t), i) end
      for _, t in ipairs(st.node.ins) do
        if t.requires_grad and not t.is_param then note(writes, M.base(t), i) end
      end
    end
  end
  local function first_after(l, k)
    for _, i in ipairs(l or {}) do
      if i > k then return i end
    end
  end
  local sharing = {}  -- tensor -> the tensors whose gradients share its buffer
  for k = lo, hi do
    local st = steps[k]
    local A, B, O
    if st.op == "backward" then A, B, O = grad_alias_candidate(st.node) end
    local ok = A and not (writes[A][1] < k or writes[B][1] < k)
    local group = {}
    if ok then
      -- The members are distinct (A's and B's first contributions are here, so neither
      -- shares O's buffer yet); x's next contribution must come after the last read of
      -- every other member, the latest (top1, of top1_of) or, for top1_of, the next.
      for _, t in ipairs(sharing[O] or { O }) do group[#group + 1] = t end
      group[#group + 1] = A
      group[#group + 1] = B
      local top1, top1_of, top2 = 0, nil, 0
      for _, y in ipairs(group) do
        local r = reads[y] and reads[y][#reads[y]] or 0
        if r > top1 then
          top1, top1_of, top2 = r, y, top1
        elseif r > top2 then
          top2 = r
        end
      end
      for _, x in ipairs(group) do
        local w = first_after(writes[x], k)
        if w and (x == top1_of and top2 or top1) >= w then ok = false end
      end
    end
    if ok then
      st.grad_alias = true
      for _, t in ipairs(group) do sharing[t] = group end
    end
  end
end

function M.mark_grad_alias_adds(steps)
  local lo = 1
  for i = 2, #steps + 1 do
    if i > #steps or steps[i].op == "loss_grad" then
      mark_grad_alias_adds_in(steps, lo, i - 1)
      lo = i
    end
  end
end

-- Bytes of a buffer of t's shape: fp32 values, or packed 16-bit rows.
local function tensor_bytes(t, packed)
  if not packed then return compute_bytes(trace.numel(t.shape)) end
  local cols = t.shape[#t.shape]
  return trace.numel(t.shape) // cols * ((cols + 7) // 8 * 8) * 2
end

-- What op's backward reads for its input or output t: inside a checkpointed region the
-- recomputed copy; a region's outputs read from outside it are saved as usual.
function M.saved(t, op)
  t = M.base(t)
  local r = t.recomputed and op.region and t.producer.region
  if r and trace.outermost(op.region) == trace.outermost(r) then return t.recomputed end
  return t
end

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
  -- A buffer in place (in_place_groups) is its alias's bytes, which were placed before it
  -- (they live from step 0).
  for _, b in ipairs(order) do
    if b.alias then b.offset = b.alias.offset end
  end
  return peak, arena
end

-- The groups whose unsharded gradients are their sharded ones (in place). At one rank the
-- sharded layout is the unsharded one, so where each reduction of a group is direct and
-- assigns (one per optimizer step, or the parts of one; no gradients kept across
-- backwards) and nothing clips, the backward accumulates straight into the sharded
-- gradients and the reduction's rounding to the gradients' dtype moves into the optimizer's
-- reads (rt_cuda.h grad_dt; the CPU backend rounds in place at the reduction): no copy and
-- no buffer of their own (FSDP2 copies them at one rank too). The bits are the same.
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
      if not st.direct or (r.index > 0 and not r.part) or ((since[g] or 0) > 0 and not r.part) then
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
  mark_view_casts(plan.graph)
  local steps = plan.steps
  mark_packed_logits(steps)
  mark_packed_activations(plan.graph)
  -- The eval program and the step after one read the parameters as the step's all-gathers
  -- store them (rt_model_param packed is the step's).
  if not (plan.is_eval or plan.is_after_eval) then
    mark_packed_params(plan)
    mark_shard_reads(plan)
  end
  place_unsharded_params(plan)
  stacked.mark(plan, readers_of(plan.graph), M.base)
  M.mark_grad_alias_adds(steps)
  for _, st in ipairs(steps) do st.fused_norm, st.fused_add = nil, nil end
  for i = 1, #steps - 1 do
    if add_with_norm(steps, i) then steps[i].fused_norm, steps[i + 1].fused_add = steps[i + 1], steps[i] end
  end
  if not plan.is_eval then late_waits.mark(plan) end
  attention.mark(plan, readers_of(plan.graph, true), M.base)
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
  -- packed), optimizer state.
  for _, g in ipairs(plan.groups) do
    local sb = bytes(g.layout.shard_numel, "fp32")
    g.params_buf = buf(Q(g) .. " sharded params", "persistent", sb, 0, n + 1)
    g.packed_grads = packed[g.index] or nil
    local gname = Q(g) .. " sharded grads" .. (g.packed_grads and " (" .. g.param_dtype .. ")" or "")
    local gb = g.packed_grads and bytes(g.layout.shard_numel, g.param_dtype) or sb
    g.grads_buf = buf(gname, "persistent", gb, 0, n + 1)
    g.grads_buf.packed_grads = g.packed_grads
    if opt_states > 0 then g.state_buf = buf(Q(g) .. " optimizer state", "persistent", sb * opt_states, 0, n + 1) end
  end
  plan.consumed_grads = consumed_grads(plan, in_place)

  -- Walk the steps: open/close transient buffers.
  local open = {}   -- key -> buffer
  local function start(key, name, kind, size, i)
    if open[key] then return open[key], false end
    local b = buf(name, kind, size, i, i)
    open[key] = b
    return b, true
  end
  local function stop(key, i)
    local b = open[key]
    if b then
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
        compute_bytes(g.layout.padded_numel), i)
    elseif st.op == "forward" or st.op == "recompute" then
      local op = st.node
      -- an add left to its norm's call is read there (add_with_norm)
      local at = st.fused_norm and i + 1 or i
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
      -- The inputs' gradients are the output's, in its buffer (M.mark_grad_alias_adds).
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
      for _, op in ipairs(stacked.ops(st)) do
        for _, t in ipairs(op.ins) do touch(M.saved(t, op).buf, i) end
        for _, t in ipairs(op.outs) do
          touch(M.saved(t, op).buf, i)
          touch(grad_of[M.base(t)], i)
        end
        touch((op.recomputed_op or op).scratch_buf, i)
        if op.kind == "attention" then
          u.scratch = buf(st.label .. " backward scratch", "activation_grad",
            compute_bytes(attention.scratch_floats(op)), i, i)
        end
        for _, t in ipairs(op.ins) do
          local b = M.base(t)
          if t.requires_grad and t.is_param then
            local pg = plan.owner[t]
            if pg then
              local gb, new = start("ugrad " .. pg.index, Q(pg) .. " unsharded grads"
                .. (in_place[pg] and " (in place)" or ""), "grads",
                compute_bytes(pg.layout.padded_numel), i)
              if new and in_place[pg] then
                gb.alias, gb.bytes, gb.packed_grads = pg.grads_buf, 0, pg.packed_grads
                if pg.packed_grads then gb.size = bytes(pg.layout.padded_numel, pg.param_dtype) end
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

  -- First-fit offsets in order of allocation (activations of recomputed regions end at
  -- their last forward use; backward reads the recomputed copies).
  local order = {}
  for k, b in ipairs(bufs) do
    b.seq = k
    order[k] = b
  end
  table.sort(order, function(a, b)
    if a.first ~= b.first then return a.first < b.first end
    if a.bytes ~= b.bytes then return a.bytes > b.bytes end
    if a.name ~= b.name then return a.name < b.name end
    return a.seq < b.seq
  end)
  local peak, arena = M.place(order)
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
    local also = grad_assigns.packed_groups(after, after.in_place, after.grad_assigns)
    for k in pairs(packed) do packed[k] = also[k] end
  end
  -- on the spec's parameter tensors, which the programs share (kernels_c RT_PACKED_DWEIGHT)
  for _, g in ipairs(plan.groups) do
    for _, l in ipairs(g.layout.params) do
      l.param.packed_grad = packed[g.index] and g.param_dtype or nil
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
