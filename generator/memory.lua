-- Static memory plan: every buffer of one rank (sharded state, all-gather and
-- reduce-scatter buffers, unsharded parameters and gradients, activations and their
-- gradients) gets a lifetime over the schedule's steps and an offset in one arena. The
-- predicted peak is the arena's high-water mark, which the runtime checks.
local trace = require("trace")

local M = {}

local ALIGN = 256

local function align(n) return (n + ALIGN - 1) // ALIGN * ALIGN end

local function Q(g) return '"' .. g.name .. '"' end

local function bytes(numel, dtype) return numel * trace.dtype_bytes[dtype] end

-- Scratch an op keeps for its backward beyond its inputs/outputs.
local function scratch_bytes(op)
  if op.kind == "attention" then
    local q = op.ins[1].shape
    local B, T = q[1], q[#q - 1]
    if #q == 2 then B, T = 1, q[1] end
    return B * op.attrs.n_heads * T * T * 4
  end
  if op.kind == "layer_norm" or op.kind == "rms_norm" then
    local s = op.ins[1].shape
    return 2 * 4 * trace.numel(s) // s[#s]
  end
  return 0
end

-- Builds buffers with [first, last] step intervals, then assigns offsets.
function M.plan(plan)
  local steps = plan.steps
  local bufs = {}
  local function buf(name, kind, size, first, last)
    if size <= 0 then return nil end
    local b = { name = name, kind = kind, bytes = align(size), first = first, last = last or first }
    bufs[#bufs + 1] = b
    return b
  end
  local n = #steps
  local opt_states = ({ adam = 2, adamw = 2, sgd = (plan.spec.optimizer.momentum or 0) > 0 and 1 or 0 })[plan.spec.optimizer.kind]

  -- Persistent per group: fp32 sharded params, their gradients, optimizer state.
  for _, g in ipairs(plan.groups) do
    local sb = bytes(g.layout.shard_numel, "fp32")
    buf(Q(g) .. " sharded params", "persistent", sb, 0, n + 1)
    buf(Q(g) .. " sharded grads", "persistent", sb, 0, n + 1)
    if opt_states > 0 then buf(Q(g) .. " optimizer state", "persistent", sb * opt_states, 0, n + 1) end
  end

  -- Walk the steps: open/close transient buffers.
  local open = {}   -- key -> buffer
  local function start(key, name, kind, size, i)
    if open[key] then return open[key] end
    local b = buf(name, kind, size, i, i)
    open[key] = b
    return b
  end
  local function touch(key, i)
    local b = open[key]
    if b and i > b.last then b.last = i end
  end
  local function stop(key, i)
    local b = open[key]
    if b then
      if i > b.last then b.last = i end
      open[key] = nil
    end
  end

  local tensor_last = {}   -- tensor -> buffer (activation)
  local grad_buf = {}      -- tensor -> buffer (its gradient)
  local function act(t, i)
    if t.is_param or t.is_input or t.is_target then return end
    local b = tensor_last[t]
    if b then
      if i > b.last then b.last = i end
    end
  end

  for i, st in ipairs(steps) do
    local g = st.group
    if st.op == "all_gather" then
      local L = g.layout
      local dt = g.param_dtype
      local ws = st.sub and g.pf_size or g.shard
      local in_numel = st.sub and (g.layout.padded_numel // g.pf_size) or L.shard_numel
      start("ag_in " .. st.ag, Q(g) .. " all-gather input", "all_gather", bytes(in_numel, dt), i)
      start("ag_out " .. st.ag, Q(g) .. " all-gather output", "all_gather", bytes(in_numel * ws, dt), i)
      if st.sub then stop("pf " .. g.index, i) end
    elseif st.op == "all_gather_wait" or st.op == "all_gather_drop" then
      stop("ag_in " .. st.ag, i)
      stop("ag_out " .. st.ag, i)
      if st.op == "all_gather_wait" then
        start("unsharded " .. g.index, Q(g) .. " unsharded params", "unsharded", bytes(g.layout.padded_numel, g.param_dtype), i)
      end
    elseif st.op == "reshard" then
      stop("unsharded " .. g.index, i)
      stop("pf " .. g.index, i)
    elseif st.op == "reshard_post_forward" then
      stop("unsharded " .. g.index, i)
      start("pf " .. g.index, Q(g) .. " post-forward shard", "unsharded",
        bytes(g.layout.padded_numel // g.pf_size, g.param_dtype), i)
    elseif st.op == "reduce_scatter" then
      -- One reduce-scatter in flight: the previous one's buffers are freed now.
      for k in pairs(open) do
        if k:match("^rs ") then stop(k, i) end
      end
      stop("ugrad " .. g.index, i)
      stop("accgrad " .. g.index, i)
      start("rs " .. st.rs .. " in", Q(g) .. " reduce-scatter input", "reduce_scatter", bytes(g.layout.padded_numel, g.reduce_dtype), i)
      start("rs " .. st.rs .. " out", Q(g) .. " reduce-scatter output", "reduce_scatter", bytes(g.layout.shard_numel, g.reduce_dtype), i)
    elseif st.op == "accumulate_unsharded_grads" then
      stop("ugrad " .. g.index, i)
      start("accgrad " .. g.index, Q(g) .. " accumulated unsharded grads", "grads", bytes(g.layout.padded_numel, g.reduce_dtype), i)
    elseif st.op == "forward" or st.op == "recompute" then
      local op = st.node
      for _, t in ipairs(op.ins) do act(t, i) end
      for _, t in ipairs(op.outs) do
        local b = buf((st.op == "recompute" and "recomputed " or "") .. st.label, "activation",
          bytes(trace.numel(t.shape), t.dtype) + 0, i, i)
        if b then tensor_last[t] = b end
      end
      local sb = scratch_bytes(op)
      if sb > 0 then
        local b = buf(st.label .. " saved stats", "activation", sb, i, i)
        op.scratch_buf = b
      end
    elseif st.op == "backward" or st.op == "loss_grad" then
      local op = st.node
      -- Reads saved inputs and outputs and the output gradients; writes input gradients
      -- and (for parameters) the group's unsharded gradients.
      for _, t in ipairs(op.ins) do act(t.recomputed or t, i) end
      for _, t in ipairs(op.outs) do
        act(t.recomputed or t, i)
        local gb = grad_buf[t]
        if gb and i > gb.last then gb.last = i end
      end
      if op.scratch_buf and i > op.scratch_buf.last then op.scratch_buf.last = i end
      for _, t in ipairs(op.ins) do
        if t.requires_grad and t.is_param then
          local pg = plan.owner[t]
          if pg then
            start("ugrad " .. pg.index, Q(pg) .. " unsharded grads", "grads", bytes(pg.layout.padded_numel, pg.param_dtype), i)
          end
        elseif t.requires_grad and not grad_buf[t] and t.producer then
          grad_buf[t] = buf("grad of " .. (t.label or "?"), "activation_grad", bytes(trace.numel(t.shape), t.dtype), i, i)
        end
      end
    end
  end
  for k in pairs(open) do stop(k, n) end

  -- First-fit offsets in order of allocation (activations of recomputed regions end at
  -- their last forward use; backward reads the recomputed copies).
  table.sort(bufs, function(a, b)
    if a.first ~= b.first then return a.first < b.first end
    if a.bytes ~= b.bytes then return a.bytes > b.bytes end
    return a.name < b.name
  end)
  local live = {}
  local peak = 0
  for _, b in ipairs(bufs) do
    -- drop buffers that ended before this one starts
    local keep = {}
    for _, l in ipairs(live) do
      if l.last >= b.first then keep[#keep + 1] = l end
    end
    live = keep
    table.sort(live, function(x, y) return x.offset < y.offset end)
    local off = 0
    for _, l in ipairs(live) do
      if off + b.bytes <= l.offset then break end
      off = math.max(off, l.offset + l.bytes)
    end
    b.offset = off
    live[#live + 1] = b
    if off + b.bytes > peak then peak = off + b.bytes end
  end
  local totals = {}
  for _, b in ipairs(bufs) do totals[b.kind] = (totals[b.kind] or 0) + b.bytes end
  return { buffers = bufs, peak = peak, totals = totals }
end

return M
