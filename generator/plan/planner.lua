-- The FSDP2 planner: runs the spec's training step symbolically and reproduces what
-- PyTorch's fully_shard runtime would do, hook by hook (_fsdp_state.py,
-- _fsdp_param_group.py). Forward runs the traced model with FSDP's forward hooks;
-- backward walks the op graph in autograd's order (reverse creation order over the nodes
-- reachable from the loss), firing pre-backward hooks on module outputs and post-backward
-- hooks where the inputs' gradients are done, then the root's final callback.
-- The result is the ordered schedule (collectives, compute, frees) with its FSDP events.
--
-- The FSDP plan that M.plan hands the memory stage (memory.plan_all); each later stage
-- reads it and adds only its own fields:
--   spec        the loaded spec (model, mesh, optimizer, input, loss, ...)
--   groups      one per sharded state with parameters: index, name, params, shard,
--               replicate, post_forward_world (the ranks of the post-forward shard group),
--               param_dtype, reduce_dtype, layout (layout.group), factors, state
--   states      every FSDP state of the model (groups without parameters too)
--   params      the model's named parameters; owner: parameter -> group
--   graph       the traced op graph (trace.new_graph) the steps' nodes belong to
--   steps       the ordered program: { stream, op, section, phase, state, group?, node?,
--               label?, region?, reduction?, event?, direct?, from_post_forward?, from?, keep?,
--               kept?, ... }
--   events      FSDP events { state, kind, group, section }; counts: "PHASE OP" -> n
--   eval_plan   the eval program, a plan of the same shape (is_eval), where available;
--               eval_unavailable, a reason, where not
--   after_eval  the step that follows an eval (is_after_eval); the memory stage keeps it
--               as after_eval_plan where its steps differ from the step's (M.same_steps)
-- Post-forward resharding (fully_shard's reshard_after_forward) has one name all the way
-- down: the state's reshard_after_forward (as given; reshard_after_forward_unset where the
-- default applies), the group's post_forward_world, an all-gather's from_post_forward, the
-- memory plan's post_forward_shard buffer (the runtime's rt_model_group field: pf_world).
-- The memory stage adds plan.memory (and eval_plan.memory, after_eval_plan.memory) and
-- annotates steps, tensors and ops with their buffers (memory.lua's top).
-- The Sim's methods are in four files: this one (the simulation, FSDPParamGroup's unshard
-- and reshard, the step items), hooks.lua (FSDPState's hooks), reductions.lua
-- (post_backward and its reductions, in parts at one rank) and optimizer.lua (the
-- optimizer steps); groups.lua finds the model's states and groups; keep.lua marks one
-- rank's reshards that keep the unsharded parameters for the next all-gather.
local errors = require("spec.errors")
local fsdp = require("spec.fsdp")
local trace = require("spec.trace")
local groups_of = require("plan.groups")
local hooks = require("plan.hooks")
local keep = require("plan.keep")

local M = {}

local FORWARD, PRE_BACKWARD, IDLE = groups_of.FORWARD, groups_of.PRE_BACKWARD, groups_of.IDLE
local SHARDED, SHARDED_POST_FORWARD, UNSHARDED = groups_of.SHARDED, groups_of.SHARDED_POST_FORWARD,
  groups_of.UNSHARDED

-- Ops whose backward needs no saved activation (a checkpointed region is recomputed at
-- the first node that unpacks one).
local saves_nothing = { add = true, sum = true, cast = true, post_backward_hook = true, arange = true,
  scale = true }  -- a tensor times a number: MulBackward0 keeps the number alone

-- ---------------------------------------------------------------------------- simulation

local Sim = {}
Sim.__index = Sim
for _, part in ipairs({ hooks, require("plan.reductions"), (require("plan.optimizer")) }) do
  for name, method in pairs(part.Sim) do Sim[name] = method end
end

function M.new(spec)
  local states, groups, params, owner, all_states = groups_of.build(spec)
  -- The runtime keeps every group's persistent buffers in one place (rt_model_group offload).
  for _, g in ipairs(groups) do
    if (g.state.offload ~= nil) ~= (groups[1].state.offload ~= nil) then
      local on, off = g, groups[1]
      if not g.state.offload then on, off = off, on end
      errors.raise(string.format("group '%s' has an offload_policy and group '%s' has none; fsdpgen offloads every group's sharded state or none (allowed: the same offload_policy on every fully_shard call)",
        on.name, off.name), on.state.line)
    end
  end
  local sim = setmetatable({
    spec = spec, states = states, groups = groups, params = params, owner = owner,
    all_states = all_states,
    graph = trace.new_graph(), steps = {}, events = {},
    counts = {}, phase = nil, section = 0,
    post_forward_order = {}, final_queued = false,
    recomputed_regions = {},        -- the regions a backward has recomputed (recompute_again)
    is_last_backward = true,        -- this backward's (the final callback reads it)
    last_backward_flag = true,      -- set_is_last_backward's, kept across backwards
    pending = {},     -- forward results awaiting backward: { outs = {...}, targets = t }
    ag_seq = 0, rs_seq = 0,
    label_counts = {}, forward_index = 0, recompute_ops = {},
    n_optimizer = 0,  -- "optimizer" items run so far
    optimizer_next = false,  -- an optimizer item follows this one before any backward
    eval_records = 0,  -- post-forward records an eval left (Sim:after_eval)
  }, Sim)
  return sim
end

function Sim:emit(step)
  step.section = self.section
  step.phase = self.phase
  step.state = step.group and step.group.training   -- the state FSDP events carry
  self.steps[#self.steps + 1] = step
  return step
end

function Sim:event(kind, g, state)
  local e = { state = state or g.training, kind = kind, group = g.name, section = self.section }
  self.events[#self.events + 1] = e
  self.steps[#self.steps].event = e
end

function Sim:count(what)
  local key = self.phase .. " " .. what
  self.counts[key] = (self.counts[key] or 0) + 1
end

-- Whether g's all-gather is one rank's, from the shards: its collective leaves the buffer
-- as the copy-in wrote it, so the copy-in can write the unsharded parameters as the
-- copy-out would (rt_step_all_gather_direct), with no all-gather buffer and no copy-out.
-- Same events and counts; the unsharded parameters then live from the issue on.
local function direct_all_gather(g, from_post_forward)
  return g.shard == 1 and not from_post_forward
end

-- The ranks of the collective that gathers g: its post-forward sub-group (never one rank:
-- an integer reshard_after_forward of 1 means False) or its shard group.
local function all_gather_ranks(g, from_post_forward)
  return from_post_forward and g.post_forward_world or g.shard
end

-- FSDPParamGroup.unshard: issue the all-gather unless already unsharded or in flight. Over
-- one rank FSDP2 2.11 issues no collective (unshard's `world_size == 1` branch: the
-- copy-out reads the shards), so none is counted; the event is the same.
function Sim:unshard(g)
  if g.pending or g.sharded == UNSHARDED then return end
  local from_pf = g.sharded == SHARDED_POST_FORWARD
  self.ag_seq = self.ag_seq + 1
  g.pending = { seq = self.ag_seq, from_post_forward = from_pf,
    direct = direct_all_gather(g, from_pf) }
  self:emit({ stream = "ag", op = "all_gather", group = g, from_post_forward = from_pf,
    ag = self.ag_seq,
    direct = g.pending.direct })
  self:event("unshard", g)
  if all_gather_ranks(g, from_pf) > 1 then self:count("all_gather") end
end

function Sim:wait_for_unshard(g)
  if not g.pending then return end
  if g.pending.resharded_at then
    -- FSDP2's copy-out takes the group's all-gather group from its state, which the
    -- reshard made the full shard group's: it splits the post-forward group's output by
    -- the wrong sizes and fails (PyTorch 2.11: split_with_sizes_copy raises).
    errors.raise(string.format("step[%d] reshards group '%s' while its all-gather from the post-forward shards is in flight "
      .. "(an unshard with async_op, or a prefetch), and step[%d] waits for it: FSDP2 would copy that all-gather out as the "
      .. "full shard group's and fail (allowed: the all-gather waited for before the reshard, e.g. an unshard without "
      .. "async_op, or the reshard before the unshard)",
      g.pending.resharded_at, g.name, self.section), self.spec.line)
  end
  self:emit({ stream = "compute", op = "all_gather_wait", group = g, ag = g.pending.seq,
    from_post_forward = g.pending.from_post_forward, direct = g.pending.direct })
  g.pending = nil
  g.sharded = UNSHARDED
end

-- Compute is about to use g's unsharded parameters. After an optimizer step that found g
-- unsharded, sharded post-forward or with an all-gather in flight, those are the values
-- from before the step, as in FSDP2 (unshard is a no-op on an unsharded group): refused,
-- because the result then depends on the sharding (a run whose plan had resharded g
-- would all-gather the new values), and a user hardly means it.
function Sim:use_params(g)
  if not g.stale then return end
  errors.raise(string.format("step[%d] computes with group '%s', which the optimizer at step[%d] stepped while it "
    .. "was %s: it would use the parameters from before that step, as FSDP2 does; reshard it before the "
    .. "optimizer (set_reshard_after_backward(true) before its backward, or a \"reshard\" item)", self.section,
    g.name, g.stale.at, g.stale.was), self.spec.line)
end

-- FSDPParamGroup.reshard: after forward only if reshard_after_forward (into the
-- post-forward sub-group for an integer), otherwise back to the sharded state. Every
-- reshard that changes the group's state is an event: from unsharded, and from sharded
-- post-forward (a manual reshard() or a post-backward one: FSDPParam.to_sharded drops the
-- post-forward shard, so the group's next all-gather runs over the full shard group). A
-- reshard of a sharded group changes nothing and is not listed (FSDP2's test recording
-- lists that call; docs/cli.md "Events" says why fsdpgen does not).
function Sim:reshard(g)
  if g.training == FORWARD then
    if not g.post_forward_world then return end
    if g.post_forward_world ~= g.shard then
      if g.sharded ~= SHARDED_POST_FORWARD then
        local was = g.sharded
        g.sharded = SHARDED_POST_FORWARD
        self:emit({ stream = "compute", op = "reshard_post_forward", group = g })
        if was == UNSHARDED then self:event("reshard", g) end
      end
      return
    end
  end
  if g.sharded ~= SHARDED then
    local was = g.sharded
    g.sharded = SHARDED
    g.stale = nil
    if g.pending and g.pending.from_post_forward then g.pending.resharded_at = self.section end
    self:emit({ stream = "compute", op = "reshard", group = g, from = was })
    self:event("reshard", g)
  end
end

function Sim:prefetch(g, training)
  local old = g.training
  g.training = training
  self:unshard(g)
  g.training = old
end

-- FSDPParamGroup._backward_prefetch. After an eval (Sim:after_eval) the post-forward
-- records of its forward come first; popping one of them is noted (pops_eval_record).
function Sim:backward_prefetch(g)
  if g.training ~= PRE_BACKWARD then return end
  if #g.post_forward_indices == 0 then return end
  local idx = table.remove(g.post_forward_indices)
  if idx <= self.eval_records then self.pops_eval_record = g end
  if idx - 1 < 1 then return end
  self:prefetch(self.post_forward_order[idx - 1], PRE_BACKWARD)
end

-- ---------------------------------------------------------------------------- step items

function Sim:make_input()
  local inp = self.spec.input
  local t = trace.new_tensor(inp.shape, inp.dtype, false, nil)
  t.is_input = true
  t.forward_index = self.forward_index
  return t
end

-- model(inp), or a sharded module's forward (item.module_obj) on the same input: FSDP2's
-- root pre-forward then runs for the module's state, the first of the iteration.
function Sim:run_forward(item)
  local spec = self.spec
  self.forward_index = self.forward_index + 1
  -- FSDPState._root_pre_forward: the all-gather streams wait for compute once (the shards
  -- hold the optimizer's updates), not at each all-gather, so an all-gather issued after a
  -- group's compute still overlaps that compute. They wait again after each copy-out and
  -- post-forward reshard (all_gather_wait, reshard_post_forward; memory.lua places each
  -- all-gather's output clear of every buffer live since its last such point).
  self:emit({ stream = "ag", op = "all_gather_sync", why = "root pre-forward: the shards are current" })
  local inp = self:make_input()
  local outs
  if item.module_obj then
    local ok, res = pcall(function() return table.pack(item.module_obj(inp)) end)
    if not ok then
      if not errors.is_spec_error(res) then error(res, 0) end
      res.msg = string.format("step[%d]: forward on '%s' with the spec's input %s: %s", self.section,
        item.module, trace.shape_str(inp.shape) .. " " .. inp.dtype, res.msg)
      error(res, 0)
    end
    outs = res
  else
    outs = table.pack(spec.model(inp))
  end
  local targets
  if spec.loss == "cross_entropy" then
    targets = trace.new_tensor(inp.shape, inp.dtype, false, nil)
    targets.is_target = true
    targets.forward_index = self.forward_index
  end
  local list = {}
  for i = 1, outs.n do
    if not trace.is_tensor(outs[i]) then
      errors.raise(string.format("model forward returned %s as output %d; expected tensors", type(outs[i]), i), spec.line)
    end
    list[i] = outs[i]
  end
  if #list == 0 then errors.raise("model forward returned nothing", spec.line) end
  self.pending[#self.pending + 1] = { outs = list, targets = targets, input = inp }
end

-- Loss over the selected outputs of every pending forward: sum(out) (as the PyTorch tests'
-- model(inp).sum()) or mean cross-entropy, added together.
function Sim:build_loss(item)
  local loss
  if #self.pending == 0 then
    errors.raise("step: backward without a forward awaiting it (a backward frees its forwards' graphs unless it has retain_graph = true)", self.spec.line)
  end
  for _, f in ipairs(self.pending) do
    local sel = f.outs
    if item.output then
      if not f.outs[item.output] then
        errors.raise(string.format("step: backward output %d, but the model returns %d output(s)", item.output, #f.outs),
          self.spec.line)
      end
      sel = { f.outs[item.output] }
    end
    for _, o in ipairs(sel) do
      local l
      if self.spec.loss == "sum" then
        l = trace.record("sum", { o }, { { shape = {}, dtype = o.dtype } })
      else
        l = trace.record("cross_entropy", { o, f.targets }, { { shape = {}, dtype = "fp32" } }, { vocab = o.shape[#o.shape] })
      end
      loss = loss and trace.record("add", { loss, l }, { { shape = {}, dtype = "fp32" } }) or l
    end
  end
  if not loss.requires_grad and not self.is_eval then
    errors.raise("the loss does not require a gradient (it uses no parameter with requires_grad = true)",
      self.spec.line)
  end
  return loss
end

function Sim:run_backward(item)
  self.is_last_backward = item.is_last_backward
  if self.is_last_backward == nil then self.is_last_backward = self.last_backward_flag end
  -- Nor does a backward all-gather start before the backward does (FSDP2 issues it from a
  -- backward hook); its output may then reuse what the forward no longer needs.
  self:emit({ stream = "ag", op = "all_gather_sync", why = "backward: its all-gathers follow the forward" })
  local loss = self:build_loss(item)
  -- Nodes reachable from the loss through tensors that require grad, and how many of
  -- their backwards contribute to each parameter's gradient.
  local reach, order, pending = {}, {}, {}
  local stack = { loss.producer }
  while #stack > 0 do
    local op = table.remove(stack)
    if not reach[op] then
      reach[op] = true
      order[#order + 1] = op
      for _, t in ipairs(op.ins) do
        if t.requires_grad then
          if t.producer then
            stack[#stack + 1] = t.producer
          elseif t.is_param and self.owner[t] then
            pending[t] = (pending[t] or 0) + 1
          end
        end
      end
    end
  end
  -- As autograd's AccumulateGrad, a parameter's gradient exists once its last contribution
  -- of this backward is computed: a group's post_backward reduces only then (with several
  -- forwards before one backward, its earlier post_backwards only reshard).
  for _, g in ipairs(self.groups) do g.split = self:splits(g, pending) or nil end
  local function contributed(op)
    for _, t in ipairs(op.ins) do
      if pending[t] then
        pending[t] = pending[t] - 1
        if pending[t] == 0 then
          self.owner[t].has_grad = true
          t.grad_ready, t.grad_partial = true, nil
        else
          t.grad_partial = true  -- some of its contributions are in, not all (Sim:reduce_parts)
        end
      end
    end
  end
  table.sort(order, function(a, b) return a.id > b.id end)
  self:mark_final_rows(order)
  local tail = self:tail_group(order, pending)
  self:emit({ stream = "compute", op = "loss_grad", node = loss.producer, label = loss.label })
  contributed(loss.producer)
  -- This backward's replays of checkpointed regions (pair_recomputed); a retained graph's
  -- region backpropagated again is replayed again, into other buffers.
  local recomputed, replayed = {}, {}
  for _, op in ipairs(order) do
    for _, t in ipairs(op.outs) do
      for _, s in ipairs(t.pre_backward_hooks or {}) do self:state_pre_backward(s) end
    end
    local region = op.region and trace.outermost(op.region)
    if region and not recomputed[region] and not saves_nothing[op.kind] then
      recomputed[region] = true
      self:recompute_again(region)
      self:emit({ stream = "compute", op = "recompute_begin", region = region })
      self.recompute_ops = {}
      trace.replay(region)
      self:pair_recomputed(region, replayed)
    end
    if op.kind == "post_backward_hook" then
      local g = op.attrs.state.group
      if g then self:post_backward(g) end
    elseif op ~= loss.producer then
      self:emit({ stream = "compute", op = "backward", node = op, label = op.label, replayed = replayed })
      contributed(op)
      if tail then self:reduce_tail(tail) end
    end
  end
  if self.final_queued then self:final_callback() end
  -- Without retain_graph, autograd frees the graphs this backward ran through.
  if not item.retain_graph then self.pending = {} end
end

-- A region a backward recomputes; one that an earlier backward of its retained graph
-- recomputed already is refused where PyTorch 2.11 fails: composable checkpoint(module)
-- enters its recompute context, a generator's, once per forward (AttributeError at the
-- second), where torch.utils.checkpoint recomputes at every backward.
function Sim:recompute_again(region)
  if self.recomputed_regions[region] and region.module then
    errors.raise(string.format("step[%d] backpropagates again through '%s', checkpointed by nn.checkpoint_module, "
      .. "whose graph an earlier backward retained: PyTorch 2.11's composable checkpoint(module) recomputes a "
      .. "forward once and fails at the second (allowed: nn.checkpoint or checkpoint_activations, which recompute "
      .. "at every backward, or no retain_graph)", self.section, rawget(region.module, "_fqn") or "?"), self.spec.line)
  end
  self.recomputed_regions[region] = true
end

-- Backward reads the recomputed copies of a checkpointed region's activations: pair the
-- region's original ops with the replayed ones (same order; FSDP's post-backward hook
-- nodes are only created in the original forward), in `replayed`, the backward steps'
-- (memory.saved): each original op and output to its replay.
function Sim:pair_recomputed(region, replayed)
  local orig = {}
  for id = region.first, region.last do
    local op = self.graph.ops[id]
    if op.kind ~= "post_backward_hook" then orig[#orig + 1] = op end
  end
  for k, op in ipairs(orig) do
    local r = self.recompute_ops[k]
    if not r or r.kind ~= op.kind then
      error("recomputed region does not replay the same ops (forward is not deterministic)")
    end
    for i, t in ipairs(op.outs) do replayed[t] = r.outs[i] end
    replayed[op], r.original = r, op
  end
end

function Sim:run_manual_reshard(item)
  for _, s in ipairs(item.states) do
    if s.group then self:reshard(s.group) end
  end
end

-- FSDPModule.unshard on each named module: issue its group's all-gather (from IDLE, so
-- neither prefetching nor backward rules apply); with async_op the forward's pre-forward
-- waits for it, otherwise unshard waits at once.
function Sim:run_unshard(item)
  self:emit({ stream = "ag", op = "all_gather_sync", why = "unshard: the shards are current" })
  for _, s in ipairs(item.states) do
    local g = s.group
    if g then
      self:unshard(g)
      if not item.async_op then self:wait_for_unshard(g) end
    end
  end
end

-- The generated step repeats, so each step must end as it began (PyTorch's next iteration
-- starts from there): every group sharded with no all-gather in flight and no unreduced
-- gradients, no forward awaiting backward, and the flags the step items set back at the
-- values the step began with.
function Sim:check_step_repeats(flags)
  local function fail(msg) errors.raise(msg .. "; the generated step repeats, so it must end as it began", self.spec.line) end
  -- Causes before their effects: a forward without its backward leaves its groups
  -- unsharded, and so does a setter left changed.
  if #self.pending > 0 then fail("a forward has no backward by the end of the step") end
  if #self.post_forward_order > 0 then
    fail("the step's last backward is not a last backward (set_is_last_backward(true) before it)")
  end
  if not self.last_backward_flag then fail("set_is_last_backward is false when the step ends") end
  for _, s in ipairs(self.states) do
    for _, setter in ipairs(fsdp.step_setters) do
      local v = flags[s][setter.field]
      if s[setter.field] ~= v then
        fail(string.format("'%s' has %s(%s) when the step ends but %s when it begins", s.name, setter.kind,
          tostring(s[setter.field]), tostring(v)))
      end
    end
  end
  for _, g in ipairs(self.groups) do
    if g.sharded ~= SHARDED or g.pending then
      fail(string.format("group '%s' is %s when the step ends%s (reshard it: set_reshard_after_backward(true) before its last backward, or a \"reshard\" item)",
        g.name, g.sharded == SHARDED and "sharded" or "unsharded", g.pending and " with an all-gather in flight" or ""))
    end
    if g.grads_accumulated then
      fail(string.format("group '%s' holds unsharded gradients that no reduce-scatter took when the step ends (its last backward ran without gradient sync)",
        g.name))
    end
  end
end

-- The step items that run a phase, by kind (the phase is named as the kind).
local PHASE_RUNNERS = {
  forward = Sim.run_forward, backward = Sim.run_backward, reshard = Sim.run_manual_reshard,
  unshard = Sim.run_unshard, optimizer = Sim.run_optimizer,
}

-- Whether the step item after item i that reduces or steps (a backward or an optimizer) is
-- an optimizer.
function Sim:optimizer_follows(i)
  for j = i + 1, #self.spec.step do
    local k = self.spec.step[j].kind
    if k == "backward" then return false end
    if k == "optimizer" then return true end
  end
  return false
end

-- A forward residual add is issued just before the norm (M.NORMS) that reads it, past the
-- FSDP steps between them (a block's reshard after forward, the next block's all-gather
-- and its wait: none reads or writes an activation, and the add reads no parameter), so
-- that the two run as one kernel (memory.lua add_with_norm): the sum is normalised as it
-- is written, not read again. Events, counts and values are the same; only the add's
-- issue moves (Llama, GPT-2: each block's second add past the next block's all-gather
-- wait).
local PASSABLE = { reshard = true, all_gather = true, all_gather_wait = true }
M.NORMS = { rms_norm = true, layer_norm = true }
local unhooked = hooks.unhooked

local function residual_before_norm(steps)
  for i = #steps, 1, -1 do
    local st = steps[i]
    local op = st.op == "forward" and st.node
    if op and op.kind == "add" and not op.region and trace.numel(op.ins[1].shape) == trace.numel(op.ins[2].shape)
        and not op.ins[1].is_param and not op.ins[2].is_param then
      local j = i + 1
      while steps[j] and PASSABLE[steps[j].op] do j = j + 1 end
      local norm = steps[j] and steps[j].op == "forward" and steps[j].node
      if j > i + 1 and norm and M.NORMS[norm.kind] and not norm.region and unhooked(norm.ins[1]) == op.outs[1]
          and steps[j].section == st.section then
        table.remove(steps, i)
        table.insert(steps, j - 1, st)
      end
    end
  end
end

-- Runs the whole step program; returns the plan.
function Sim:run()
  local flags = {}
  for _, s in ipairs(self.states) do
    flags[s] = {}
    for _, setter in ipairs(fsdp.step_setters) do flags[s][setter.field] = s[setter.field] end
  end
  trace.begin(self.graph, self:trace_hooks())
  for i, item in ipairs(self.spec.step) do
    self.section = i
    self.optimizer_next = self:optimizer_follows(i)
    local run = PHASE_RUNNERS[item.kind]
    if run then
      self.phase = item.kind
      run(self, item)
    elseif item.field then
      for _, s in ipairs(item.states) do s[item.field] = item.value end
    elseif item.kind == "set_is_last_backward" then
      self.last_backward_flag = item.value
    end
  end
  trace.begin(nil, nil)
  residual_before_norm(self.steps)
  self:check_step_repeats(flags)
  self:check_optimizer_steps()
  self:split_token_rows()
  keep.mark(self)
  return self
end

-- The eval program (the binary's --val-every): `model.eval()`, then per validation batch
-- `with torch.no_grad(): loss = loss_fn(model(inp))` and reshard() on every FSDP module,
-- so it starts and ends with every group sharded. Its forward follows the step's FSDP rules (root kept
-- unsharded after forward, reshard_after_forward, forward prefetch lists); no grad means no
-- backward hooks, and model.eval() makes dropout the identity.
function Sim:run_eval()
  self.is_eval = true
  trace.begin(self.graph, self:trace_hooks(), { eval = true })
  self.section, self.phase = 1, "forward"
  self:run_forward({})
  local loss = self:build_loss({})
  self:emit({ stream = "compute", op = "eval_loss", node = loss.producer, label = loss.label })
  self.pending = {}
  self.section, self.phase = 2, "reshard"
  self:run_manual_reshard({ states = self.states })
  trace.begin(nil, nil)
  residual_before_norm(self.steps)
  return self
end

-- The state an eval program leaves for the next training step: FSDP2 records a no-grad
-- forward in its post-forward order too, and only a last backward clears that list, so
-- the next step's backward prefetch, where it finds no post-forward record of its own
-- before a group's, targets the eval's last post-forward group. One validation batch's
-- records: more only add earlier ones, which no step reaches unless it pops one of them
-- (pops_eval_record; plan_eval refuses that).
function Sim:after_eval(ev)
  self.is_after_eval = true
  self.eval_records = #ev.post_forward_order
  for i, eg in ipairs(ev.post_forward_order) do
    local g = self.groups[eg.index]
    self.post_forward_order[i] = g
    g.post_forward_indices[#g.post_forward_indices + 1] = i
  end
  return self
end

-- What a step's schedule line says, as data: two steps with equal keys read the same in
-- the schedule. Groups are compared by index (a spec gives every simulation the same
-- groups), tensors by what names them (a parameter, the input, the targets or a label).
local function tensor_key(t)
  while t.producer and t.producer.kind == "post_backward_hook" do t = t.producer.ins[t.out_index] end
  if t.is_param then return t end
  if t.is_input then return "input" end
  if t.is_target then return "targets" end
  return t.label or "?"
end

local function step_key(st)
  local k = { st.stream, st.op, st.direct or false, st.keep or false, st.kept or false, st.across or false,
    st.from_post_forward or false, st.from or false,
    st.why or false, st.label or false, st.grad_alias or false, st.opt_per or false,
    st.opt_k or false, st.opt_item or false, st.group and st.group.index or false,
    st.region and st.region.id or false, st.event and st.event.kind or false,
    st.event and st.event.state or false, st.part or false, st.parts or false,
    st.rows or false, st.stack and "stack" or st.stacked and "stacked" or false,
    st.rope_pair and (st == st.rope_pair.call and "pair call" or "pair") or false }
  local r = st.reduction
  if r then
    k[#k + 1] = r.index
    k[#k + 1] = r.layout.padded_numel
    k[#k + 1] = r.layout.shard_numel
    for _, i in ipairs(r.params) do k[#k + 1] = i end
  end
  local op = st.node
  if op then
    k[#k + 1] = op.kind
    k[#k + 1] = op.label or false
    k[#k + 1] = (op.original or op).view == true
    local o = op.outs[1]
    k[#k + 1] = o and o.dtype or false
    for _, d in ipairs(o and o.shape or {}) do k[#k + 1] = d end
    k[#k + 1] = "<-"
    for _, t in ipairs(op.ins) do k[#k + 1] = tensor_key(t) end
  end
  return k
end

-- Whether two programs run the same steps (compared field by field, not as printed text).
-- The memory stage compares the step after an eval with the step once both carry its
-- marks (view casts, gradient-aliasing adds).
function M.same_steps(a, b)
  if #a.steps ~= #b.steps then return false end
  for i, st in ipairs(a.steps) do
    local ka, kb = step_key(st), step_key(b.steps[i])
    if #ka ~= #kb then return false end
    for j, v in ipairs(ka) do
      if kb[j] ~= v then return false end
    end
  end
  return true
end

-- Plans the eval program (plan.eval_plan) and the training step that follows one
-- (plan.after_eval; the memory stage keeps it as plan.after_eval_plan only where it differs
-- from the step: the eval's last post-forward group is then sharded when the prefetch
-- targets it, e.g. the last block under a root without parameters, and FSDP2 all-gathers
-- it once more). Sets plan.eval_unavailable instead where the generated code cannot do
-- what FSDP2 would.
local function plan_eval(spec, plan)
  local function unavailable(why) plan.eval_unavailable = why end
  local ok, ev = pcall(function() return M.new(spec):run_eval() end)
  if not ok then
    -- The model's own forward on the spec's input failed (a step of non-root forwards only).
    trace.begin(nil, nil)
    if not errors.is_spec_error(ev) then error(ev, 0) end
    return unavailable("the eval's forward, model(inp) on the spec's input, fails: " .. ev.msg)
  end
  for _, g in ipairs(ev.groups) do
    if g.pending then
      return unavailable(string.format("the eval forward leaves a prefetch of group '%s' in flight (a forward prefetch list names a group that runs before it)", g.name))
    end
  end
  -- A list group with a module that no eval forward runs keeps that module in its
  -- modules-to-run set (only a backward's finalize clears it), so in FSDP2 2.11 the next
  -- forward skips the group's pre-forward and computes with sharded parameters.
  for _, s in ipairs(ev.states) do
    local left = {}
    for _, m in ipairs(s.modules) do
      if s.modules_to_run[m] then left[#left + 1] = "'" .. rawget(m, "_fqn") .. "'" end
    end
    if #left > 0 then
      return unavailable(string.format("module %s of list group '%s' does not run in the eval forward, so FSDP2 skips the group's pre-forward (no all-gather) in the next forward; only a backward resets it",
        table.concat(left, ", "), s.name))
    end
  end
  local after
  ok, after = pcall(function() return M.new(spec):after_eval(ev):run() end)
  if not ok then
    trace.begin(nil, nil)
    if not errors.is_spec_error(after) then error(after, 0) end
    return unavailable("the step after an eval: " .. after.msg)
  end
  if after.pops_eval_record then
    return unavailable(string.format("group '%s' has more backward pre-hooks than forwards in a step, so after an eval FSDP2's backward prefetch would pop a record of the eval's forward (which one depends on the number of validation batches)",
      after.pops_eval_record.name))
  end
  plan.eval_plan = ev
  plan.after_eval = after
end

-- `fsdpgen events`'s lines of a plan: STATE KIND "GROUP".
function M.event_lines(plan)
  local out = {}
  for i, e in ipairs(plan.events) do out[i] = string.format('%s %s "%s"', e.state, e.kind, e.group) end
  return out
end

-- `fsdpgen counts`'s lines of a plan: the three base collectives, HSDP's all-reduce, then
-- any other phase's (explicit unshards), each "PHASE OP N".
function M.count_lines(plan)
  local c = plan.counts
  local keys = { "forward all_gather", "backward all_gather", "backward reduce_scatter" }
  if plan.spec.mesh.replicate > 1 then keys[#keys + 1] = "backward all_reduce" end
  local listed, other = {}, {}
  for _, k in ipairs(keys) do listed[k] = true end
  for k in pairs(c) do
    if not listed[k] then other[#other + 1] = k end
  end
  table.sort(other)
  for _, k in ipairs(other) do keys[#keys + 1] = k end
  local lines = {}
  for i, k in ipairs(keys) do lines[i] = k .. " " .. (c[k] or 0) end
  return lines
end

function M.plan(spec)
  local sim = M.new(spec):run()
  -- No spec code runs after the simulation (its forwards were traced in it); the line
  -- hook would only slow the memory plan down several times.
  errors.track_spec_lines(false)
  -- The eval program and the step after one, planned the same way (their own traces).
  plan_eval(spec, sim)
  return sim
end

return M
