-- The planner's FSDPState hooks (Sim methods, merged by planner.lua; _fsdp_state.py): pre- and
-- post-forward, pre-backward and the root's final callback, the trace hooks that call them
-- as the spec's model runs, and the names of the traced ops' outputs.
local errors = require("spec.errors")
local groups_of = require("plan.groups")
local trace = require("spec.trace")

local FORWARD, PRE_BACKWARD, POST_BACKWARD = groups_of.FORWARD, groups_of.PRE_BACKWARD, groups_of.POST_BACKWARD
local IDLE, UNSHARDED = groups_of.IDLE, groups_of.UNSHARDED

local M = { Sim = {} }
local Sim = M.Sim

-- t before FSDP's post-backward hooks (identity ops over a block's inputs whose outputs
-- share their buffers): a block's output as the previous block wrote it.
function M.unhooked(t)
  while t.producer and t.producer.kind == "post_backward_hook" do t = t.producer.ins[t.out_index] end
  return t
end

function Sim:state_pre_forward(s, args)
  if s.training == PRE_BACKWARD then
    -- Activation-checkpoint recompute inside backward: only make sure params are there.
    local g = s.group
    if g and g.sharded ~= UNSHARDED then
      self:unshard(g)
      self:wait_for_unshard(g)
    end
    if g then self:use_params(g) end
    return args
  end
  s.training = FORWARD
  -- cast_forward_inputs: every state whose policy sets param_dtype (with params or not,
  -- fp32 included) casts its floating inputs to it, as FSDP2's _pre_forward.
  local pd = s.mp.param_dtype
  if pd and s.mp.cast_forward_inputs then
    for i = 1, args.n or #args do
      local a = args[i]
      if trace.is_tensor(a) and trace.is_float(a.dtype) and a.dtype ~= pd then
        args[i] = trace.record("cast", { a }, { { shape = a.shape, dtype = pd } }, { to = pd })
      end
    end
  end
  local g = s.group
  if g then
    g.training = FORWARD
    self:unshard(g)
    self:wait_for_unshard(g)
    self:use_params(g)
    if not trace.in_recompute() then
      -- RegisterPostBackwardFunction over the inputs that require grad: its backward node
      -- (created before the module's ops) is where post_backward fires.
      local idx, ins = {}, {}
      for i = 1, args.n or #args do
        local a = args[i]
        if trace.is_tensor(a) and a.requires_grad then
          idx[#idx + 1] = i
          ins[#ins + 1] = a
        end
      end
      if #ins > 0 then
        local specs = {}
        for i, a in ipairs(ins) do specs[i] = { shape = a.shape, dtype = a.dtype } end
        local outs = { trace.record("post_backward_hook", ins, specs, { state = s }) }
        for k, i in ipairs(idx) do args[i] = outs[k] end
      end
    end
  end
  for _, t in ipairs(s.fwd_prefetch) do
    if t.group then self:prefetch(t.group, FORWARD) end
  end
  return args
end

-- The indices of the outputs that s's MixedPrecisionPolicy.output_dtype casts (floating
-- tensors of another dtype), or nil.
local function output_casts(s, outs)
  local d, idx = s.mp.output_dtype, {}
  if not d then return nil end
  for i = 1, outs.n or #outs do
    local t = outs[i]
    if trace.is_tensor(t) and trace.is_float(t.dtype) and t.dtype ~= d then idx[#idx + 1] = i end
  end
  return #idx > 0 and idx or nil
end

function Sim:state_post_forward(s, outs)
  if s.training == PRE_BACKWARD then
    -- FSDP2 returns early in a recompute, without the output cast below, so the
    -- recomputed region would not replay its forward.
    if s.mp.output_dtype and output_casts(s, outs) then
      errors.raise(string.format("group '%s' has mp_policy output_dtype = %s inside an activation-checkpointed region: FSDP2 skips that cast when recomputing (allowed: output_dtype on groups outside checkpointed regions)",
        s.name, s.mp.output_dtype), s.line)
    end
    return
  end
  local g = s.group
  if g then
    if not trace.in_recompute() then
      self:reshard(g)
      self.post_forward_order[#self.post_forward_order + 1] = g
      g.post_forward_indices[#g.post_forward_indices + 1] = #self.post_forward_order
    end
    g.training = IDLE
  end
  if not trace.in_recompute() then
    for i = 1, outs.n or #outs do
      local t = outs[i]
      if trace.is_tensor(t) and t.requires_grad then
        t.pre_backward_hooks = t.pre_backward_hooks or {}
        table.insert(t.pre_backward_hooks, s)
      end
    end
  end
  -- MixedPrecisionPolicy.output_dtype: floating outputs of another dtype are cast after
  -- the pre-backward hooks are registered (on the uncast outputs), as FSDP2 does.
  for _, i in ipairs(output_casts(s, outs) or {}) do
    local t, d = outs[i], s.mp.output_dtype
    outs[i] = trace.record("cast", { t }, { { shape = t.shape, dtype = d } }, { to = d })
  end
  s.training = IDLE
end

function Sim:state_pre_backward(s)
  if s.training ~= PRE_BACKWARD then self:reduce_parts(s) end
  s.training = PRE_BACKWARD
  self.final_queued = true
  local default = #s.bwd_prefetch == 0
  local g = s.group
  if g and g.training ~= PRE_BACKWARD then
    g.training = PRE_BACKWARD
    if s.unshard_in_backward then
      self:unshard(g)
      self:wait_for_unshard(g)
      self:use_params(g)
    end
    if default then self:backward_prefetch(g) end
  end
  for _, t in ipairs(s.bwd_prefetch) do
    if t.group then self:prefetch(t.group, PRE_BACKWARD) end
  end
end

-- FSDPState._root_post_backward_final_callback, over all_states: a k-module list group is
-- visited k times, and a later visit finds it IDLE (set by the first), not POST_BACKWARD,
-- so FSDP2 2.11 runs its post_backward again: an event, no reduce-scatter (no gradients
-- are left) and no reshard (already sharded, or kept unsharded by reshard_after_backward).
function Sim:final_callback()
  for _, s in ipairs(self.all_states) do
    local g = s.group
    if g then
      if g.training ~= POST_BACKWARD then self:post_backward(g) end
      g.training = IDLE
    end
    s.training = IDLE
    if self.is_last_backward then
      s.modules_to_run = {}
      if g then
        if g.pending then
          -- A mistargeted prefetch nobody waited for: its result is dropped.
          self:emit({ stream = "compute", op = "all_gather_drop", group = g, ag = g.pending.seq,
            direct = g.pending.direct })
          g.pending = nil
        end
        g.post_forward_indices = {}
      end
    end
  end
  if self.is_last_backward then self.post_forward_order, self.eval_records = {}, 0 end
  self.final_queued = false
end

function Sim:trace_hooks()
  local sim = self
  return {
    pre_forward = function(module, args)
      local s = rawget(module, "_fsdp_state")
      if not s or s.name == nil then return args end
      if next(s.modules_to_run) ~= nil then return args end   -- not the group's first module
      for _, m in ipairs(s.modules) do s.modules_to_run[m] = true end
      return sim:state_pre_forward(s, args)
    end,
    post_forward = function(module, _, outs)
      local s = rawget(module, "_fsdp_state")
      if not s or s.name == nil then return end
      s.modules_to_run[module] = nil
      if next(s.modules_to_run) ~= nil then return end        -- not the group's last module
      sim:state_post_forward(s, outs)
    end,
    on_op = function(op)
      sim:label(op)
      if trace.in_recompute() then
        sim.recompute_ops[#sim.recompute_ops + 1] = op
      end
      if op.kind ~= "post_backward_hook" then
        sim:emit({ stream = "compute", op = trace.in_recompute() and "recompute" or "forward", node = op, label = op.label })
      end
      for _, t in ipairs(op.ins) do
        if t.is_param then
          local g = sim.owner[t]
          if g and g.sharded ~= UNSHARDED and not trace.in_recompute() then
            errors.raise(string.format("parameter '%s' of group '%s' is used while its group is sharded (used outside the modules passed to fully_shard)",
              t.fqn, g.name))
          end
        end
      end
    end,
  }
end

-- Stable names for op outputs: the innermost module's FQN and the op kind (with #k for
-- repeats and @f for the f-th forward of the step), so a one-line spec change renames
-- little in the schedule.
function Sim:label(op)
  local scope = op.scope[#op.scope]
  local fqn = scope and rawget(scope, "_fqn") or ""
  local base = (fqn ~= "" and (fqn .. ".") or "") .. op.kind
  local key = base .. "@" .. self.section
  local n = (self.label_counts[key] or 0) + 1
  self.label_counts[key] = n
  local label = base .. (n > 1 and ("#" .. n) or "")
  if self.forward_index > 1 then label = label .. "@" .. self.forward_index end
  op.label = label
  for i, t in ipairs(op.outs) do
    t.label = #op.outs > 1 and (label .. ":" .. i) or label
  end
end

return M
