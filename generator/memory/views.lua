-- Which buffer holds a tensor's value: FSDP's post-backward hooks and views (view casts,
-- scales folded into their linear) pass their input through (M.base); the ops that read each
-- tensor; the cross-entropy whose forward its loss gradient computes. Shared by the memory
-- stage's marks (memory.lua, packing.lua, grad_alias.lua, scaled_linears.lua); memory.lua
-- hands base, is_view and forward_with_loss_grad on.
local hooks = require("plan.hooks")

local M = {}

-- The tensor whose buffer holds t's value: FSDP's post-backward hook passes its inputs
-- through unchanged, and so does a view (mark_view_casts, scaled_linears.lua mark them).
function M.base(t)
  while t.producer and (t.producer.kind == "post_backward_hook" or M.is_view(t.producer)) do
    t = t.producer.ins[t.out_index]
  end
  return t
end

-- A cast to fp32 changes no stored value (compute buffers hold fp32 values rounded to
-- their dtype). When it is the only reader of an activation it is a view: output and
-- input share one buffer, and one gradient buffer (the input's gradient is the output's,
-- rounded to the input's dtype), so the fp32 logits of a bf16 model cost no copy and no
-- memory. A recomputed cast is a view when its original is. A scale folded into the linear
-- it reads is a view too (scaled_linears.lua): the linear writes the scaled values, and its
-- backward reads the scale's output gradient as its own; the dtype is the same, so the view
-- has nothing to round.
function M.is_view(op) return (op.original or op).view == true end

local unhooked = hooks.unhooked  -- t before FSDP's post-backward hooks (see M.base)

-- The ops that read each tensor, in graph order. through_hooks: the tensors before FSDP's
-- post-backward hooks, which are not readers themselves (the next block's ops read a
-- block's output).
function M.readers_of(graph, through_hooks)
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
function M.mark_view_casts(graph)
  local readers = M.readers_of(graph)
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

return M
