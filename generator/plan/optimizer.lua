-- The planner's optimizer steps (Sim methods, merged by planner.lua): optim.step() over the
-- groups with reduced gradients, in the order of their reductions, the checks that every
-- step of the training step sees the same parameters, and at one rank an embedding's step
-- split by the rows the step's tokens look up.
local errors = require("spec.errors")
local groups_of = require("plan.groups")
local hooks = require("plan.hooks")

local SHARDED, UNSHARDED = groups_of.SHARDED, groups_of.UNSHARDED

local M = { Sim = {} }
local Sim = M.Sim

-- optim.step() on the groups with reduced gradients (the others have grad None, which
-- torch.optim skips), then zero_grad. A group's k-th optimizer step of the training step
-- (opt_k; opt_per once the step is planned) counts PyTorch's state["step"]; opt_item is
-- the step's optimizer item (0-based), which picks the learning rate. The groups step in
-- the order their gradients were reduced, so the last reduction, which the CUDA backend
-- waits for only at its own group's optimizer line, overlaps the other groups' steps
-- (FSDP2's finalize_backward waits for every reduction before optimizer.step(); each
-- parameter's update is the same in any order).
function Sim:run_optimizer()
  self.n_optimizer = self.n_optimizer + 1
  if self.spec.grad_clip then
    self:emit({ stream = "compute", op = "clip_grad_norm" })
  end
  -- A group reduced in parts steps each part on its own, in the order of the parts.
  local ready = {}
  for _, g in ipairs(self.groups) do
    if g.opt_grads then
      if g.sharded ~= SHARDED or g.pending then
        g.stale = { at = self.section, was = g.pending and "being all-gathered"
          or g.sharded == UNSHARDED and "unsharded" or "sharded post-forward" }
      end
      g.opt_steps = (g.opt_steps or 0) + 1
      for _, part in ipairs(g.opt_parts or { { seq = g.reduced_seq } }) do
        ready[#ready + 1] = { g = g, seq = part.seq, reduction = part.reduction }
      end
    end
  end
  table.sort(ready, function(a, b)
    if a.seq ~= b.seq then return a.seq < b.seq end
    return a.g.index < b.g.index
  end)
  for _, o in ipairs(ready) do
    local g = o.g
    -- a part of one parameter stepped by rows (reductions.lua Sim:reduce_parts)
    self:emit({ stream = "compute", op = "optimizer", group = g, opt_k = g.opt_steps,
      opt_item = self.n_optimizer - 1, grads = g.opt_grads, reduction = o.reduction,
      rows = o.reduction and o.reduction.rows })
  end
  for _, g in ipairs(self.groups) do g.opt_grads, g.opt_parts = nil, nil end
end

-- The runtime skips the parameters that no backward of the step reaches (one grad_none
-- flag each), so every optimizer step of a group must see the same parameters with
-- gradients; and gradients reduced after the last optimizer step would carry over.
function Sim:check_optimizer_steps()
  local opt_steps, with = {}, {}
  for _, st in ipairs(self.steps) do
    if st.op == "optimizer" then
      opt_steps[#opt_steps + 1] = st
      with[st.group] = with[st.group] or {}
      for k in pairs(st.grads) do with[st.group][k] = true end
    end
  end
  for _, st in ipairs(opt_steps) do
    local g = st.group
    st.opt_per = g.opt_steps
    for k, p in ipairs(g.params) do
      if with[g][k] and not st.grads[k] then
        errors.raise(string.format("parameter '%s' has a gradient at one optimizer step of the step and none (grad None) at another; fsdpgen plans one set of parameters with gradients per training step (allowed: optimizer steps that see the same parameters with gradients)",
          p.fqn), self.spec.line)
      end
    end
  end
  if self.n_optimizer == 0 then return end
  for _, g in ipairs(self.groups) do
    if g.opt_grads then
      errors.raise(string.format("group '%s' reduces gradients after the step's last optimizer step; they would carry into the next step (allowed: backwards before an optimizer item)",
        g.name), self.spec.line)
    end
  end
end

-- The parameters optimizer step st steps: its group's (its reduction's, if any) that have a
-- gradient in the step.
function M.stepped_params(st)
  local in_reduction = {}
  for _, k in ipairs(st.reduction and st.reduction.params or {}) do in_reduction[k] = true end
  local ps = {}
  for k, p in ipairs(st.group.params) do
    if st.grads[k] and (not st.reduction or in_reduction[k]) then ps[#ps + 1] = p end
  end
  return ps
end

-- Whether op reads its j-th input as a table whose rows the step's input tokens look up.
function M.token_lookup(op, j)
  local t = op.ins[j]
  return op.kind == "embedding" and j == 2 and #t.shape == 2 and hooks.unhooked(op.ins[1]).is_input
    and op.ins[1] ~= t
end

-- Whether an optimizer step can take the rows a step's tokens look up apart from the others:
-- token inputs, one optimizer item a step (a row's only update in it), no clipping (whose
-- coefficient from a NaN norm would make a zero gradient NaN). Sim:split_token_rows,
-- reductions.lua Sim:mark_final_rows.
function M.rows_apart(spec)
  local n = 0
  for _, item in ipairs(spec.step) do
    if item.kind == "optimizer" then n = n + 1 end
  end
  return spec.input.tokens and n == 1 and not spec.grad_clip
end

-- The parameters that only lookups of the step's input tokens read (an embedding not tied
-- to an output head): their gradient is exactly zero in every row no token looks up.
local function token_lookup_params(graph)
  local ok = {}
  for _, op in ipairs(graph.ops) do
    for j, t in ipairs(op.ins) do
      if t.is_param then
        ok[t] = M.token_lookup(op, j) and ok[t] ~= false or false
      end
    end
  end
  return ok
end

-- At one rank, an optimizer step whose parameters all have a gradient only in the rows the
-- step's tokens look up (token_lookup_params) is split in two (`rows`): the rows no token
-- looks up ("unused") are stepped with a zero gradient (their moments decay, weight decay
-- applies: the bits of stepping them after the backward) by a line of its own at the head
-- of the optimizer section, which needs nothing of the backward, so the CUDA backend's
-- optimizer stream runs it beside the forward and backward; the line in the step's place
-- steps the rows looked up ("looked_up"). Only where the step steps the group once (one
-- optimizer item, opt_per 1): that update of an unused row is then its only one in the
-- step, and no lookup of the step reads the row; and without clipping, whose coefficient
-- from a NaN norm would make the zero gradients NaN too. Llama 1B's untied embedding:
-- 128256 rows, at most 8192 of them looked up by a step's tokens, so nearly all of its
-- 7 GB of AdamW traffic leaves the end of the step.
function Sim:split_token_rows()
  if not M.rows_apart(self.spec) then return end
  local lookups = token_lookup_params(self.graph)
  local first, split = nil, {}   -- the optimizer section's first line; the lines split
  for i, st in ipairs(self.steps) do
    local g = st.group
    if st.op == "optimizer" then
      first = first or i
      local ok = g.shard == 1 and g.replicate == 1 and st.opt_per == 1
      for _, p in ipairs(M.stepped_params(st)) do ok = ok and lookups[p] == true end
      if ok then split[#split + 1] = st end
    end
  end
  for j = #split, 1, -1 do
    local st, early = split[j], {}
    for k, v in pairs(st) do early[k] = v end
    st.rows, early.rows = "looked_up", "unused"
    table.insert(self.steps, first, early)
  end
end

return M
