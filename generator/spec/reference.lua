-- The non-sharded reference of a spec, for the conformance test: the same model, step
-- program and policies, planned on a mesh of replicate = world x shard = 1, so every rank
-- holds full parameters and gradients are all-reduced with the same divide factor (what
-- PyTorch's tests compare FSDP against: a replicated model with all-reduced gradients).
-- Its all-gathers copy the shards as FSDP2 does (keep_unsharded = false), so that a spec
-- at one rank, which keeps its unsharded parameters, is compared with the plain copies.
local M = {}

-- Turns a freshly loaded spec into its reference (in place).
function M.transform(spec)
  local world = spec.world_size
  spec.mesh = { replicate = world, shard = 1 }
  spec.keep_unsharded = false
  for _, s in ipairs(spec.states) do
    s.mesh = nil
    -- A post-forward group inside a shard group of one rank is the group itself.
    if math.type(s.reshard_after_forward) == "integer" then s.reshard_after_forward = true end
  end
  return spec
end

return M
