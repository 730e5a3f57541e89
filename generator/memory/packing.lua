-- Packed 16-bit storage (rt_kernels.h "packed 16-bit storage"): which activations, their
-- gradients, the logits and the unsharded parameters the memory plan stores in their
-- 16-bit dtype (t.packed, t.grad_packed, p.packed), where it saves the GPU a narrowing or
-- widening pass; at one shard rank, the parameters read from the shards (p.from_shard);
-- and the unsharded parameters' offsets that follow from both. memory.lua's mark calls
-- them in order.
local trace = require("spec.trace")
local hooks = require("plan.hooks")
local views = require("memory.views")

local M = {}

local base, is_view, readers_of = views.base, views.is_view, views.readers_of
local unhooked = hooks.unhooked

function M.sixteen(t) return t.dtype == "bf16" or t.dtype == "fp16" end

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
function M.mark_packed_logits(steps)
  for i, st in ipairs(steps) do
    local ce = st.node
    if views.forward_with_loss_grad(steps, i) then
      local cast = ce.ins[1].producer
      local y = cast and cast.kind == "cast" and is_view(cast) and cast.sole_reader == ce and base(cast.ins[1])
      local lin = y and y.producer
      if lin and lin.kind == "linear" and not lin.ins[3] and not lin.region and y.requires_grad and M.sixteen(y) then
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
  swiglu = true, rotary = true, attention = true, add = function(op) return residual(op)[1] end,
  embedding = true, scale = true }
local PACKED_IN = { linear = { true }, gelu = { true }, relu = { true }, silu = { true }, swiglu = { true, true },
  rotary = { true }, attention = { true, true, true }, add = residual, layer_norm = { true }, rms_norm = { true },
  scale = { true } }
local PACKED_DOUT = { linear = true, gelu = true, relu = true, silu = true, swiglu = true, rotary = true,
  attention = true, layer_norm = true, rms_norm = true, add = PACKED_OUT.add, scale = true }
local PACKED_DIN = { linear = { true }, gelu = { true }, relu = { true }, silu = { true }, swiglu = { true, true },
  add = residual, layer_norm = { true }, rms_norm = { true }, attention = { true, true, true }, scale = { true },
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
      local b = base(t)
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
--     attention's, a residual add's, a scale's or an embedding lookup's 16-bit output read
--     only where the packed kernels take it (a linear's input, a norm's, an activation's
--     inputs, a rotary embedding's, attention's q, k, v, a residual add's, a scale's;
--     through FSDP's post-backward hooks), by ops of its dtype: the residual stream, a
--     block's attention and MLP inputs, q, k, v and the attention's output, the MLP's
--     hidden activations, the attention's and MLP's outputs, the head's input, Llama's
--     token embeddings, LoRA's adapter path (lora_b's output, its scale, their sum). The
--     GEMMs read its rows in place instead of a copy narrowed in every forward and
--     backward, a linear's output is not widened, and a lookup's not rounded in a pass of
--     its own. Its last dimension is a multiple of 8 (dense rows). Checkpointed regions
--     keep fp32 storage.
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
function M.mark_packed_activations(graph)
  local readers = readers_of(graph, true)
  for _, op in ipairs(graph.ops) do
    local y, rs = op.outs[1], readers[op.outs[1]] or {}
    local ok = entry(PACKED_OUT, op) and not op.region and M.sixteen(y) and inputs_have_dtype(op, y)
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

-- Whether op reads parameter p from the sharded parameters, not the unsharded ones: a
-- lookup in p at one shard rank (mark_params).
function M.reads_shard(op, p)
  return p.lookup_shard and op.kind == "embedding" and op.ins[2] == p and op.ins[1] ~= p or false
end

-- The readers of parameter p that read its unsharded copy (all but the lookups that read
-- its shard: p.lookup_shard set first).
local function unsharded_readers(p, readers)
  local rs = {}
  for _, r in ipairs(readers[p] or {}) do
    if not M.reads_shard(r, p) then rs[#rs + 1] = r end
  end
  return rs
end

-- Whether p's unsharded copy can be packed, rs its readers there:
--   * Unsharded parameters that only linears read (lookups may read their shards), each as
--     its weight (position 2: 2-D with both dims multiples of 8, dense rows and no zero rows
--     for the GEMM to add) or as its bias (position 3: a multiple of 8 values, no padding
--     for cuBLASLt's bias epilogue), in the parameter's 16-bit dtype (backward_in_dtype: no
--     parameter input): the all-gather's copy-out writes param_dtype's bits into the
--     unsharded parameters (rt_model.h `packed`; place_unsharded_params) and the GEMMs read
--     them in place instead of a copy narrowed in every forward and backward (rt_kernels.h
--     RT_PACKED_INP2 and RT_PACKED_INP3: GPT-2's biases, 24 copies a step). The unsharded
--     gradients keep their fp32 layout.
local function packable(p, rs)
  local s = p.shape
  local weight = #s == 2 and s[1] % 8 == 0 and s[2] % 8 == 0
  local bias = #s == 1 and s[1] % 8 == 0
  local ok = M.sixteen(p) and #rs > 0
  for _, r in ipairs(rs) do
    ok = ok and r.kind == "linear" and inputs_have_dtype(r, p) and r.outs[1].dtype == p.dtype
      and backward_in_dtype(r)
    for j, t in ipairs(r.ins) do
      if t == p then ok = ok and ((j == 2 and weight) or (j == 3 and bias)) end
    end
  end
  return ok
end

-- How the step's all-gathers store each parameter and where its readers read it, readers
-- the graph's (views.readers_of): `p.packed` (packable), `p.unsharded_pos`
-- (unsharded_order) and the reads from the shards:
--   * At one shard rank the sharded layout is the unsharded one, and the all-gather's copy
--     rounds the fp32 shards to param_dtype. An embedding's output has its weight's dtype
--     and the lookup rounds to it (kernels_c forward.embedding), so a lookup of the
--     unrounded fp32 value gives the same bits: there every lookup reads its weight from
--     the sharded parameters (`p.lookup_shard`, M.reads_shard), and a parameter that only
--     lookups read is not copied at all (`from_shard`, rt_model.h; Llama's untied
--     embedding: 2.1 GB of the copy at the step's start). A tied one (GPT-2's) is copied
--     for the output head alone, its first reader then (late_waits.lua).
function M.mark_params(plan, readers)
  for _, g in ipairs(plan.groups) do
    for _, l in ipairs(g.layout.params) do
      local p = l.param
      p.lookup_shard = g.shard == 1 or nil
      local all, rs = #(readers[p] or {}), unsharded_readers(p, readers)
      p.packed = packable(p, rs) or nil
      p.from_shard = (all > 0 and #rs == 0) or nil
      -- copied, and looked up in the shards too (the .schedule says so)
      p.shard_lookups = (all > #rs and #rs > 0) or nil
    end
    unsharded_order(g, readers)
  end
end

-- A group's unsharded parameters (the all-gathers' copy-outs write them, compute reads
-- them), each from a 16-byte aligned offset in 4-byte words, l.unsharded_word, in group
-- order but for the weights unsharded_order moves: fp32 storage takes a word per element,
-- packed storage (mark_params) half a word, and a parameter read from the shards
-- (mark_params) none; g.unsharded_words in all. Without the shards' padding, which the
-- copy-outs drop. The unsharded gradients keep the padded fp32 layout of the reductions
-- (l.offset * shard), in group order. runtime/step/state.c unsharded_layout checks that
-- the offsets pack the parameters tightly, in whatever order.
function M.place_unsharded_params(plan)
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

return M
