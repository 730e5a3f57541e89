-- The planner's reductions (Sim methods, merged by planner.lua): FSDPParamGroup.post_backward
-- and the reduce-scatter it issues, over the parameters that have a gradient; at one rank,
-- a group reduced in parts (the root's output head before the blocks' backward, the tail
-- group's larger part before the rest of its backward), so that the CUDA backend's
-- optimizer stream steps each part beside the backward.
local groups_of = require("plan.groups")
local layout = require("plan.layout")
local optimizer = require("plan.optimizer")
local trace = require("spec.trace")

local POST_BACKWARD = groups_of.POST_BACKWARD

local M = { Sim = {} }
local Sim = M.Sim

-- Whether reducing g's gradients (stored as grads_dtype values) changes none of them: one
-- rank (no collective), no division (at one rank only a custom divide factor divides), and
-- a reduce dtype that holds every value exactly. The copy-in and view-out are then one pass
-- from the unsharded gradients into the sharded ones, with no reduce-scatter buffers
-- (rt_step_reduce_direct): the same bits as the three passes, a third of the traffic.
local function direct_reduction(g, grads_dtype)
  return g.shard == 1 and g.replicate == 1 and g.state.divide_factor == nil
    and (g.reduce_dtype == "fp32" or g.reduce_dtype == grads_dtype)
end

-- What one reduce-scatter of g packs: foreach_reduce gets only the parameters that have a
-- gradient (FSDPParamGroup.post_backward's fsdp_params_with_grad), laid out as a group of
-- just those. `with` lists their indices in g.params. All of them: index 0, g's own layout;
-- fewer: one entry of g.reductions per distinct subset (index k >= 1, rt_model_reduction),
-- a part (Sim:reduce_parts) an entry of its own, and a part of one parameter stepped by
-- rows (`rows`: "final" or "looked_up", Sim:reduce_parts) one more.
local function reduction(g, with, part, rows)
  if #with == #g.params then return { index = 0, layout = g.layout, params = with } end
  local key = (part and "part " or "") .. (rows and rows .. " " or "") .. table.concat(with, ",")
  g.reductions = g.reductions or {}
  for _, r in ipairs(g.reductions) do
    if r.key == key then return r end
  end
  local ps = {}
  for i, k in ipairs(with) do ps[i] = g.params[k] end
  local r = { index = #g.reductions + 1, key = key, params = with, part = part, rows = rows,
    layout = layout.group(ps, g.shard, g.state.placement) }
  g.reductions[#g.reductions + 1] = r
  return r
end

-- Reduces the gradients of g's parameters `with` (indices into g.params), stored as
-- grads_dtype values; `part` for a part of a split reduction (Sim:reduce_parts), `rows` for
-- one stepped by rows.
function Sim:reduce(g, with, grads_dtype, part, rows)
  g.opt_grads = g.opt_grads or {}   -- the sharded grads the next optimizer step reads
  for _, k in ipairs(with) do g.opt_grads[k] = true end
  self.rs_seq = self.rs_seq + 1
  g.reduced_seq = self.rs_seq
  local r = reduction(g, with, part, rows)
  local st = { stream = "rs", op = "reduce_scatter", group = g, rs = self.rs_seq, reduction = r,
    direct = direct_reduction(g, grads_dtype) }
  if part then
    -- part k of n (n set by the last part, when g's post_backward reduces the rest)
    g.opt_parts = g.opt_parts or {}
    g.opt_parts[#g.opt_parts + 1] = { seq = self.rs_seq, reduction = r, step = st }
    st.part = #g.opt_parts
    for _, o in ipairs(g.opt_parts) do o.step.parts = #g.opt_parts end
  end
  self:emit(st)
  -- foreach_reduce over one rank copies instead of reduce-scattering (FSDP2 2.11); the
  -- HSDP all-reduce below still runs.
  if g.shard > 1 then self:count("reduce_scatter") end
  if g.replicate > 1 and g.state.all_reduce_grads then
    self:emit({ stream = "ar", op = "all_reduce", group = g, rs = self.rs_seq, reduction = r })
    self:count("all_reduce")
  end
end

-- Whether this backward may reduce g in parts: one rank and a direct reduction (no
-- collective, so nothing FSDP2 counts or orders moves), g's first reduction since the last
-- optimizer step and the only one before the next (the parts then assign every sharded
-- gradient, and each part's optimizer step reads its own), no clipping (which needs every
-- gradient first), and a gradient for each of g's parameters in this backward.
function Sim:splits(g, pending)
  if not self.optimizer_next or self.spec.grad_clip or g.opt_grads or g.grads_accumulated
    or not g.state.reduce_grads or not direct_reduction(g, g.param_dtype) then
    return false
  end
  for _, p in ipairs(g.params) do
    if not pending[p] then return false end
  end
  return true
end

-- The parameters whose contributions after the first are all lookups of the step's tokens
-- (a tied embedding: the output head's product, then the embedding's lookups), marked
-- p.final_rows: once the first is in, the gradient of every row no token of the step looks
-- up is final. Only where the step's rows can be told apart as the optimizer steps them
-- (optimizer.lua rows_apart).
function Sim:mark_final_rows(order)
  local ok = optimizer.rows_apart(self.spec)
  local seen = {}   -- parameter -> its contributions so far, in backward order
  for _, p in ipairs(self.params) do p[2].final_rows = nil end
  for _, op in ipairs(order) do
    for j, t in ipairs(op.ins) do
      if t.is_param and t.requires_grad and self.owner[t] then
        local lookup = optimizer.token_lookup(op, j)
        seen[t] = (seen[t] or 0) + 1
        if seen[t] == 1 then
          t.final_rows = ok and #t.shape == 2 and not lookup or nil
        elseif not lookup then
          t.final_rows = nil
        end
      end
    end
  end
  for t, n in pairs(seen) do
    if n < 2 then t.final_rows = nil end
  end
end

-- At the first pre-backward of s (another group's modules follow): reduce the gradients of the
-- splitting groups that are complete, so that at one rank a group whose backward spans
-- others' (a root holding the embedding and the output head) reduces the head's gradient
-- before the blocks' backward, and the CUDA backend's optimizer stream steps it beside
-- them (runtime/cuda/step/backend.c). Each part assigns its parameters' sharded gradients;
-- the group's post_backward reduces the rest as its last part. The bits are those of one
-- reduction after the backward: each gradient is complete when reduced, and each
-- parameter's update reads only its own. Not while a parameter of the group has some of
-- its contributions and not all (a part ends the group's unsharded gradient buffer, and
-- the rest would start on a new one), unless the rest are lookups of the step's tokens
-- (Sim:mark_final_rows: GPT-2's tied embedding after the output head's backward): that
-- parameter is then a part of its own whose optimizer step takes the rows no token looks
-- up ("final"; the gradients stay in place, so the lookups add to the head's), and its
-- post_backward part the rows looked up ("looked_up").
local function partial(g, rows_ok)
  for _, p in ipairs(g.params) do
    if p.grad_partial and not (rows_ok and p.final_rows) then return true end
  end
  return false
end

function Sim:reduce_parts(s)
  for _, g in ipairs(self.groups) do
    if g.split and g ~= s.group and not partial(g, true) then
      local with = {}
      for k, p in ipairs(g.params) do
        if p.grad_ready then with[#with + 1] = k end
        p.grad_ready = nil
      end
      if #with > 0 then
        local whole = #with == #g.params
        g.split = not whole and g.split or nil
        self:reduce(g, with, g.param_dtype, not whole)
      end
      for k, p in ipairs(g.params) do
        if g.split and p.grad_partial and p.final_rows == true then
          p.final_rows = "reduced"
          self:reduce(g, { k }, g.param_dtype, true, "final")
        end
      end
    end
  end
end

-- The group that the backward (ops in `order`; `pending`: each parameter's contributions)
-- reduces last of those it may split (Sim:splits) whose contributions come between two
-- post-backward hooks and that have two parameters or more: at one rank its optimizer step
-- is what the optimizer stream still runs after the backward (Llama 1B's first block: 0.6 ms
-- of AdamW), so Sim:reduce_tail reduces it in two parts. The root, whose head and embedding
-- come first and last, is not one; and there is none where a parameter of a group reduced
-- after it has two contributions (GPT-2's tied embedding: its looked-up rows, and the
-- position embedding, are stepped after the backward anyway).
function Sim:tail_group(order, pending)
  local first, last, hooks = {}, {}, {}
  for i, op in ipairs(order) do
    if op.kind == "post_backward_hook" then
      hooks[#hooks + 1] = i
    else
      for _, t in ipairs(op.ins) do
        local g = t.is_param and t.requires_grad and self.owner[t]
        if g then first[g], last[g] = first[g] or i, i end
      end
    end
  end
  local tail
  for _, g in ipairs(self.groups) do
    local l, between = last[g], false
    for _, h in ipairs(hooks) do between = between or (l and h > first[g] and h < l) end
    if l and g.split and #g.params >= 2 and not between and (not tail or l > last[tail]) then
      tail = g
    end
  end
  for _, g in ipairs(self.groups) do
    if tail and last[g] and last[g] > last[tail] then
      local whole = not g.split
      for _, p in ipairs(g.params) do whole = whole or (pending[p] or 0) > 1 end
      if whole then return nil end
    end
  end
  return tail
end

-- Reduces the parameters of the tail group (Sim:tail_group) whose gradients are complete as
-- a first part, once they are three quarters of its elements or more (Llama's block: its
-- MLP's, 82%, before its attention's backward), so that their optimizer step runs beside the
-- rest of its backward; its post_backward reduces the rest as the last part. The bits are
-- those of one reduction (Sim:reduce_parts).
function Sim:reduce_tail(g)
  if not g.split or g.opt_parts or partial(g, false) then return end
  local with, ready, total = {}, 0, 0
  for k, p in ipairs(g.params) do
    local n = trace.numel(p.shape)
    total = total + n
    if p.grad_ready then with[#with + 1], ready = k, ready + n end
  end
  if #with == #g.params or 4 * ready < 3 * total then return end
  for _, k in ipairs(with) do g.params[k].grad_ready = nil end
  self:reduce(g, with, g.param_dtype, true)
end

-- FSDPParamGroup.post_backward: reshard, then reduce-scatter the gradients it has (those
-- of this backward and of earlier ones without gradient sync).
function Sim:post_backward(g)
  g.training = POST_BACKWARD
  local s = g.state
  if not s.reduce_grads then
    if s.reshard_after_backward then self:reshard(g) end
    if g.has_grad then
      g.grads_accumulated = true
      self:emit({ stream = "compute", op = "accumulate_unsharded_grads", group = g })
    end
    g.has_grad = false
    self:emit({ stream = "compute", op = "post_backward", group = g })
    self:event("post_backward", g)
    return
  end
  local with = {}
  for k, p in ipairs(g.params) do
    if p.grad_ready then with[#with + 1] = k end
    p.grad_ready = nil
  end
  local grads_dtype = g.grads_accumulated and g.reduce_dtype or g.param_dtype
  g.has_grad, g.grads_accumulated = false, false
  if s.reshard_after_backward then self:reshard(g) end
  -- the rest of a group reduced in parts is its last part; a parameter whose rows no token
  -- looks up a part stepped already, its looked-up rows (Sim:reduce_parts)
  local part, rest, rows = g.split and g.opt_parts ~= nil, {}, {}
  for _, k in ipairs(with) do
    local list = part and g.params[k].final_rows == "reduced" and rows or rest
    list[#list + 1] = k
  end
  if #rest > 0 then self:reduce(g, rest, grads_dtype, part) end
  for _, k in ipairs(rows) do self:reduce(g, { k }, grads_dtype, true, "looked_up") end
  g.split = nil
  self:emit({ stream = "compute", op = "post_backward", group = g })
  self:event("post_backward", g)
end

return M
