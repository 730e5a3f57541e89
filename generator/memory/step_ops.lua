-- The ops a backward step's call computes. Most compute their own; some compute others' too,
-- in one call on the last of their steps, and the others none: a stack of linears
-- (stacked_linears.lua) and a pair of rotary embeddings (rope_pairs.lua). memory.lua reads
-- and writes their buffers on the call's step; grad_assigns.lua and the emitter take the
-- call's ops in this order.
local M = {}

function M.ops(st)
  if st.stack then return st.stack.ops end
  if st.stacked then return {} end
  local pair = st.rope_pair
  if pair and st.op == "backward" then
    if st == pair.call then return { pair.a, pair.b } end
    return {}
  end
  return { st.node }
end

return M
