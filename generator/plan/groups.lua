-- The FSDP states and parameter groups of a spec's model, as FSDPState._lazy_init finds
-- them (one state per fully_shard call, a group per state with parameters), and the
-- states' training and sharding values the planner's Sim moves them through.
local errors = require("spec.errors")
local layout = require("plan.layout")

local M = {}

M.FORWARD, M.PRE_BACKWARD, M.POST_BACKWARD, M.IDLE = "FORWARD", "PRE_BACKWARD", "POST_BACKWARD", "IDLE"
M.SHARDED, M.SHARDED_POST_FORWARD, M.UNSHARDED = "sharded", "sharded_post_forward", "unsharded"
local IDLE, SHARDED = M.IDLE, M.SHARDED

local function assign_names(model)
  for _, e in ipairs(model:named_modules()) do rawset(e[2], "_fqn", e[1]) end
  local params = model:named_parameters()
  for _, e in ipairs(params) do
    e[2].fqn = e[1]
    e[2].names = e[3]
  end
  return params
end

-- Resolves reshard_after_forward into the post-forward shard size: nil (keep unsharded),
-- the shard size (reshard fully) or a smaller divisor (reshard into a sub-group).
local function post_forward_world(raf, is_root, unset, shard)
  if unset then raf = not is_root end
  if raf == false then return nil end
  if raf == true then return shard end
  if raf == 1 then return nil end     -- PyTorch: int 1 means "world size 1", i.e. False
  return raf
end

-- The model's FSDP states, its groups, its named parameters, parameter -> group, and
-- FSDPState._lazy_init's all_states.
function M.build(spec)
  local model = spec.model
  local all_params = assign_names(model)
  local states, seen, names_of = {}, {}, {}
  -- FSDPState._lazy_init's all_states: one entry per sharded module in named_modules
  -- order, so a list group's state appears once per module (FSDP2 2.11 does not dedup).
  local all_states = {}
  for _, e in ipairs(model:named_modules()) do
    local s = rawget(e[2], "_fsdp_state")
    if s then
      all_states[#all_states + 1] = s
      if not seen[s] then
        seen[s] = true
        states[#states + 1] = s
        names_of[s] = {}
      end
      -- The group's name: its modules' FQNs in named_modules order.
      local names = names_of[s]
      names[#names + 1] = e[1]
    end
  end
  local root = rawget(model, "_fsdp_state")
  local owner = {}
  local groups = {}
  for _, s in ipairs(states) do
    s.name = table.concat(names_of[s], ", ")
    s.is_root = s == root
    s.training = IDLE
    s.modules_to_run = {}
    s.group = nil
    if #s.params > 0 then
      for _, p in ipairs(s.params) do
        if owner[p] then
          errors.raise(string.format("parameter '%s' is shared with group '%s'; put tied modules in one group with fully_shard({a, b})",
            p.fqn, owner[p].name), s.line)
        end
      end
      local mesh = s.mesh or spec.mesh
      local g = {
        index = #groups + 1, state = s, name = s.name, params = s.params,
        shard = mesh.shard, replicate = mesh.replicate,
        post_forward_world = post_forward_world(s.reshard_after_forward, s.is_root,
          s.reshard_after_forward_unset, mesh.shard),
        param_dtype = s.mp.param_dtype or "fp32",
        reduce_dtype = s.mp.reduce_dtype or s.mp.param_dtype or "fp32",
        sharded = SHARDED, training = IDLE, pending = nil, post_forward_indices = {},
        grads_accumulated = false,
      }
      g.layout = layout.group(s.params, mesh.shard, s.placement)
      -- no parameter requires grad (requires_grad_(false)): the group is never reduced or
      -- stepped, so it has no sharded gradients or optimizer state (memory.lua)
      g.frozen = true
      for _, p in ipairs(s.params) do
        if p.requires_grad then g.frozen = false end
      end
      g.factors = layout.divide_factors(mesh.shard, mesh.shard * mesh.replicate, g.reduce_dtype,
        s.divide_factor, s.force_sum)
      for _, p in ipairs(s.params) do
        owner[p] = g
        p.dtype = g.param_dtype         -- what compute sees after the all-gather cast
      end
      s.group = g
      groups[#groups + 1] = g
    end
  end
  -- States that fully_shard made outside the model's tree take no part.
  return states, groups, all_params, owner, all_states
end

return M
