-- Writes the `.schedule` file: a deterministic, fixed-column text of the planned step
-- (header with every group's layout and policy, one line per step, the memory plan's
-- peak and what is live there), meant to be reviewed and diffed like code: a one-line
-- spec change changes only the lines whose meaning changed. The arena offsets, which
-- shift with almost any change, go to `<name>.layout` (arena_layout.lua).
local trace = require("spec.trace")
local buffer = require("util.buffer")
local memory = require("memory.memory")
local units = require("util.units")
local arena_layout = require("memory.arena_layout")
local attention = require("memory.attention")
local rope_pairs = require("memory.rope_pairs")
local stacked = require("memory.stacked_linears")

local M = {}

M.VERSION = "fsdpgen 0.1"

local shape_str = trace.shape_str

local function num(x)
  if math.type(x) == "integer" then return tostring(x) end
  local s = string.format("%.6g", x)
  return s
end

-- Run-length form of per-rank row counts: "2x3,1,0x4".
local function runs(list)
  local out, i = {}, 1
  while i <= #list do
    local j = i
    while j < #list and list[j + 1] == list[i] do j = j + 1 end
    out[#out + 1] = (j > i) and (list[i] .. "x" .. (j - i + 1)) or tostring(list[i])
    i = j + 1
  end
  return table.concat(out, ",")
end

local function quoted(name) return '"' .. name .. '"' end

local function raf_str(g)
  if not g.post_forward_world then return "false" end
  if g.post_forward_world == g.shard then return "true" end
  return tostring(g.post_forward_world)
end

local function reduce_str(g)
  local f = g.factors
  local s = g.reduce_dtype .. " " .. f.op
  if f.premul then s = s .. "(x" .. num(f.premul) .. ")" end
  if f.pre then s = s .. " pre/" .. num(f.pre) end
  if f.post then s = s .. " post/" .. num(f.post) end
  return s
end

-- The parameters of a part of a split reduction (reductions.lua Sim:reduce_parts).
local function part_params(g, r)
  local ps = {}
  for i, k in ipairs(r.params) do ps[i] = g.params[k].fqn end
  return table.concat(ps, ", ")
end

-- A reduction of some of g's parameters names the ones it leaves out (no gradient), part k
-- of n of a split reduction (step st) the ones it reduces.
local function without_grads(g, r, st)
  if r.index == 0 then return "" end
  if r.part then
    local rows = r.rows == "final" and " (its rows no token of the step looks up: their gradient is final)"
      or r.rows == "looked_up" and " (its rows the step's tokens look up)" or ""
    return string.format("; part %d of %d: %s%s", st.part, st.parts, part_params(g, r), rows)
  end
  local left, k = {}, 1
  for i, p in ipairs(g.params) do
    if r.params[k] == i then k = k + 1 else left[#left + 1] = p.fqn end
  end
  return "; no grad: " .. table.concat(left, ", ")
end

-- A tensor by the name of what computed it. FSDP's post-backward hook passes a group's
-- inputs through unchanged (memory.base): the name is the tensor before it, so that adding
-- or removing a group renames nothing in the lines that read its inputs.
local function tensor_ref(t)
  while t.producer and t.producer.kind == "post_backward_hook" do t = t.producer.ins[t.out_index] end
  if t.is_param then return t.fqn end
  if t.is_input then return "input" end
  if t.is_target then return "targets" end
  return t.label or "?"
end

local function node_detail(op)
  local ins = {}
  for i, t in ipairs(op.ins) do ins[i] = tensor_ref(t) end
  local o = op.outs[1]
  local s = (o and (shape_str(o.shape) .. " " .. o.dtype) or "")
  if #ins > 0 then s = s .. " <- " .. table.concat(ins, ", ") end
  if op.kind == "scale" then s = s .. " times " .. num(op.attrs.scale) end  -- a review sees it change
  local alpha = (op.original or op).out_scale  -- a scale folded in (scaled_linears.lua)
  if alpha then s = s .. " times " .. num(alpha) end
  return s
end

-- What a step acts on: a group, a region or a tensor.
local function step_target(st)
  if st.group then return quoted(st.group.name) end
  if st.op == "clip_grad_norm" or st.op == "all_gather_sync" then return "all groups" end
  if st.region then return "region " .. st.region.id end
  return st.label or st.node.label or st.node.kind
end

-- A stable name for a step (no running numbers, so inserting a step renames nothing):
-- its section, op and target.
function M.step_name(st)
  return string.format("%s%d %s %s", st.phase, st.section, st.op, step_target(st))
end

function M.step_line(st, plan)
  local g = st.group
  local name, detail = "", ""
  if st.op == "all_gather" and st.kept then
    name = quoted(g.name)
    detail = st.across and "nothing to copy: the unsharded params are kept across steps (one rank)"
      or "nothing to copy: its reshard kept the unsharded params (one rank)"
  elseif st.op == "all_gather" and st.direct then
    name = quoted(g.name)
    local from_shard, also = {}, {}  -- packing.lua mark_params
    for _, l in ipairs(g.layout.params) do
      if l.param.from_shard then from_shard[#from_shard + 1] = l.param.fqn end
      if l.param.shard_lookups then also[#also + 1] = l.param.fqn end
    end
    detail = string.format("%d x %s straight into the unsharded params (one rank: no "
      .. "collective%s%s%s)", g.layout.shard_numel, g.param_dtype,
      st.beside and "; on a stream of its own, beside the next groups' copies" or "",
      #from_shard == 0 and ""
        or "; not copied, as lookups read them from the shards: " .. table.concat(from_shard, ", "),
      #also == 0 and "" or "; lookups read " .. table.concat(also, ", ") .. " from the shards too")
  elseif st.op == "all_gather" then
    local L = g.layout
    local ranks = st.from_post_forward and g.post_forward_world or g.shard
    local per = st.from_post_forward and (L.padded_numel // g.post_forward_world) or L.shard_numel
    name = quoted(g.name)
    detail = string.format("%d x %s per rank -> %d, %s (%d ranks)", per, g.param_dtype,
      per * ranks, st.from_post_forward and "post-forward group" or "shard group", ranks)
  elseif st.op == "all_gather_wait" then
    name = quoted(g.name)
    detail = st.kept and "nothing to wait for (kept)"
      or st.late and "wait for the direct all-gather, at its first reader (FSDP2: at the pre-forward)"
      or st.direct and "wait for the direct all-gather"
      or string.format("wait for the all-gather, copy-out %d params", #g.params)
  elseif st.op == "all_gather_drop" then
    name = quoted(g.name)
    detail = st.kept and "drop the kept unsharded params (mistargeted prefetch)"
      or st.direct and "wait for the direct all-gather, drop the unsharded params (mistargeted prefetch)"
      or "wait for the all-gather, drop it (mistargeted prefetch)"
  elseif st.op == "reshard" then
    name = quoted(g.name)
    detail = st.across and "keep unsharded params (kept across steps, one rank)"
      or st.keep and "keep unsharded params for the next all-gather (one rank)"
      or st.from == "unsharded" and "free unsharded params" or "free post-forward shard"
  elseif st.op == "reshard_post_forward" then
    name = quoted(g.name)
    detail = string.format("keep 1/%d of the unsharded params, free the rest", g.post_forward_world)
  elseif st.op == "reduce_scatter" then
    name = quoted(g.name)
    local L = st.reduction.layout
    if st.in_place and g.packed_grads then
      detail = string.format("%d x %s in place: the backward wrote the sharded grads in %s (one rank)",
        L.padded_numel, g.reduce_dtype, g.param_dtype)
    elseif st.in_place then
      detail = string.format("%d x %s in place: the backward wrote the sharded grads (one rank), "
        .. "the optimizer reads them as %s", L.padded_numel, g.reduce_dtype, g.param_dtype)
    elseif st.direct then
      detail = string.format("%d x %s straight into the sharded grads (one rank, values unchanged)",
        L.padded_numel, g.reduce_dtype)
    else
      detail = string.format("%d x %s -> %d per rank, %s", L.padded_numel, g.reduce_dtype,
        L.shard_numel, reduce_str(g))
    end
    detail = detail .. without_grads(g, st.reduction, st)
  elseif st.op == "all_reduce" then
    name = quoted(g.name)
    detail = string.format("%d x %s over %d replicas", st.reduction.layout.shard_numel, g.reduce_dtype,
      g.replicate)
  elseif st.op == "accumulate_unsharded_grads" then
    name = quoted(g.name)
    detail = "keep unsharded grads (no gradient sync)"
  elseif st.op == "post_backward" then
    name = quoted(g.name)
  elseif st.op == "optimizer" then
    name = quoted(g.name)
    local r = st.reduction
    detail = string.format("%s on %d fp32 shard elements", plan.spec.optimizer.kind,
      r and r.layout.shard_numel or g.layout.grad_numel)  -- a frozen parameter's none
    if r then detail = detail .. " of " .. part_params(g, r) end
    -- optimizer.lua Sim:split_token_rows; reductions.lua Sim:reduce_parts ("final")
    if st.rows == "unused" then
      detail = detail .. ", the rows no token of the step looks up (gradient 0: nothing of the backward)"
    elseif st.rows == "final" then
      detail = detail .. ", the rows no token of the step looks up (their gradient final: no lookup adds to it)"
    elseif st.rows == "looked_up" then
      detail = detail .. ", the rows the step's tokens look up"
    end
    if st.opt_per > 1 then detail = detail .. string.format(" (the group's optimizer step %d of %d)", st.opt_k, st.opt_per) end
    if plan.spec.lr_schedule then detail = detail .. string.format(", lr of item %d", st.opt_item) end
    -- (by rows: a parameter read from the shards, with nothing to cast; plan/keep.lua)
    if st.across and not st.rows then detail = detail .. ", then cast into the unsharded params kept across steps" end
  elseif st.op == "all_gather_sync" then
    name = "all groups"
    detail = "all-gather streams wait for compute (" .. st.why .. ")"
  elseif st.op == "clip_grad_norm" then
    name = "all groups"
    detail = string.format("scale grads by min(1, %s / global norm), norm over the shard group", num(plan.spec.grad_clip))
  elseif st.op == "recompute_begin" then
    name = "region " .. st.region.id
    detail = "recompute checkpointed forward"
  elseif st.op == "eval_loss" then
    name = st.label
    detail = "the eval's loss on this rank"
  else
    local op = st.node
    name = st.label or op.label or op.kind
    detail = (st.op == "backward" and "grad of " or "") .. op.kind .. " " .. node_detail(op)
    if (op.original or op).folded then
      detail = detail .. " (folded into the linear: same buffer)"
    elseif memory.is_view(op) then
      detail = detail .. " (view: same buffer)"
    end
    if st.grad_alias then detail = detail .. " (no copy: the inputs' gradients share its buffer)" end
    if st.fused_add then detail = detail .. " (one kernel with the add above)" end
    if st.stacked then
      detail = detail .. " (stacked: in the call" .. (st.stacked.split and "s" or "") .. " of "
        .. st.stacked.call.label .. ")"
    end
    local pair = st.rope_pair
    if pair and st == pair.call then
      detail = detail .. " (rotary pair: one call for " .. rope_pairs.label(pair) .. ")"
    elseif pair then
      detail = detail .. " (rotary pair: in the call of " .. (pair.b.label or "?") .. ")"
    end
    if st.stack and st.stack.split then
      local frozen = 0
      for _, m in ipairs(st.stack.ops) do frozen = frozen + (m.ins[2].requires_grad and 0 or 1) end
      detail = detail .. " (stacked: one input-gradient call for " .. stacked.label(st.stack)
        .. (frozen == 0 and ", one weight-gradient call each)"
          or frozen == #st.stack.ops and "; frozen: no weight gradient)"
          or ", one weight-gradient call for each trainable one)")
    elseif st.stack then
      detail = detail .. " (stacked: one call for " .. stacked.label(st.stack) .. ")"
    end
  end
  local ev = st.event and (st.event.kind .. " " .. st.event.state) or ""
  return string.format("  %-8s %-22s %-44s %s%s", st.stream, st.op, name, detail,
    ev ~= "" and ("  [" .. ev .. "]") or "")
end

-- The schedule lines of plan's program, one heading per section.
local function sections(b, plan, prefix, what)
  local section
  for _, st in ipairs(plan.steps) do
    if st.section ~= section then
      section = st.section
      b:line("")
      b:line("%s%s%d (%s item %d: %s)", prefix, st.phase, st.section, what, st.section, st.phase)
      b:line("  %-8s %-22s %-44s %s", "stream", "op", "group / tensor", "detail")
    end
    b:line("%s", M.step_line(st, plan))
  end
end

-- What runs each attention op (memory/attention.lua): one line where fsdpgen's kernels run
-- them all for one reason; else the spec's choice, then per program (the step, the eval) a
-- line per run of consecutive ops of one shape and outcome (cudnn, or fsdpgen and why not).
local ATTENTION = {
  auto = "auto: per shape, the faster of cuDNN and fsdpgen's kernels, measured at start",
  cudnn = "cudnn: cuDNN wherever the GPU's cuDNN takes the shape, else fsdpgen's kernels",
}

local function attention_ops(p)
  local t = {}
  for _, op in ipairs(p and p.graph.ops or {}) do
    if op.kind == "attention" then t[#t + 1] = op end
  end
  return t
end

-- The labels of ops[i..j]: "layers.{0..15}.attention.attention" where they count up in one
-- place, else "first .. last (n ops)".
local function label_run(ops, i, j)
  local first, last = ops[i].label or "?", ops[j].label or "?"
  if i == j then return first end
  local pre, suf = first:match("^(.-)%d+(.*)$")
  local a = pre and tonumber(first:sub(#pre + 1, #first - #suf))
  for k = i, j do
    if a and ops[k].label ~= pre .. (a + k - i) .. suf then a = nil end
  end
  if a then return string.format("%s{%d..%d}%s", pre, a, a + j - i, suf) end
  return string.format("%s .. %s (%d ops)", first, last, j - i + 1)
end

local function attention_lines(b, plan)
  local step = attention_ops(plan)
  if #step == 0 then return end
  local function what(op)
    return attention.shape_str(op) .. "  " .. (op.attention.cudnn and "cudnn" or "fsdpgen: " .. op.attention.why)
  end
  local asked, eval = plan.spec.attention, attention_ops(plan.eval_plan)
  local one = step[1].attention.why  -- fsdpgen everywhere for one reason: one line
  for _, op in ipairs(step) do one = one and op.attention.why == one and one end
  for _, op in ipairs(eval) do one = one and op.attention.why == one and one end
  if one or asked == "fsdpgen" then
    b:line("attention  %s: fsdpgen's kernels everywhere: %s", asked, one or "the spec's choice")
    return
  end
  b:line("attention  %s (CUDA; the CPU runs fsdpgen's)", ATTENTION[asked])
  for _, prog in ipairs({ { "step", step }, { "eval", eval } }) do
    local ops, i = prog[2], 1
    while i <= #ops do
      local j = i
      while ops[j + 1] and what(ops[j + 1]) == what(ops[i]) do j = j + 1 end
      b:line("  %-4s %-36s %s", prog[1], label_run(ops, i, j), what(ops[i]))
      i = j + 1
    end
  end
end

function M.render(plan, spec_file)
  local spec = plan.spec
  local b = buffer.new()
  b:line("# %s.schedule: generated by %s from %s; do not edit.", spec.name, M.VERSION, spec_file)
  b:line("spec       %s", spec.name)
  b:line("mesh       world %d = replicate %d x shard %d", spec.world_size, spec.mesh.replicate, spec.mesh.shard)
  b:line("input      %s %s%s", shape_str(spec.input.shape), spec.input.dtype, spec.input.tokens and " (tokens)" or "")
  b:line("loss       %s", spec.loss)
  local o = spec.optimizer
  local okeys = {}
  for k in pairs(o) do
    if k ~= "kind" then okeys[#okeys + 1] = k end
  end
  table.sort(okeys)
  local ostr = {}
  for _, k in ipairs(okeys) do ostr[#ostr + 1] = k .. "=" .. (type(o[k]) == "number" and num(o[k]) or tostring(o[k])) end
  b:line("optimizer  %s %s", o.kind, table.concat(ostr, " "))
  local ls = spec.lr_schedule
  if ls then
    local decay = ls.decay == "constant" and "" or
      string.format(" total_steps=%d min_lr=%s", ls.total_steps, num(ls.min_lr))
    b:line("lr_schedule %s warmup_steps=%d%s, optimizer step i = %d x training step + item", ls.decay,
      ls.warmup_steps, decay, plan.n_optimizer)
  end
  if spec.grad_clip then b:line("grad_clip  %s", num(spec.grad_clip)) end
  local items = {}
  for i, it in ipairs(spec.step) do
    local s = it.kind
    if it.output then s = s .. "(output " .. it.output .. ")" end
    if it.is_last_backward == false then s = s .. "(not last)" end
    if it.retain_graph then s = s .. "(retain_graph)" end
    if it.async_op then s = s .. "(async_op)" end
    if it.value ~= nil then s = s .. "(" .. tostring(it.value) .. (it.recurse == false and ", recurse=false" or "") .. ")" end
    if it.module and it.module ~= "" then s = s .. " on " .. quoted(it.module) end
    items[i] = s
  end
  b:line("step       %s", table.concat(items, ", "))
  attention_lines(b, plan)
  b:line("")
  b:line("groups")
  for _, g in ipairs(plan.groups) do
    local L = g.layout
    b:line("  group %s", quoted(g.name))
    b:indent()
    local db = trace.dtype_bytes[g.param_dtype]
    b:line("  params %d, numel %d, shard %d per rank, all-gather %d x %s -> %d (%s per rank -> %s)", #g.params, L.numel,
      L.shard_numel, L.shard_numel, g.param_dtype, L.ag_out_numel, units.bytes(L.shard_numel * db),
      units.bytes(L.ag_out_numel * db))
    b:line("  reshard_after_forward %s, reshard_after_backward %s, gradient sync %s, reduce %s, placement %s%s",
      raf_str(g), tostring(g.state.reshard_after_backward), tostring(g.state.reduce_grads), reduce_str(g),
      g.state.placement, g.state.offload and ", offload cpu" or "")
    local fp, bp = {}, {}
    for _, t in ipairs(g.state.fwd_prefetch) do fp[#fp + 1] = quoted(t.name) end
    for _, t in ipairs(g.state.bwd_prefetch) do bp[#bp + 1] = quoted(t.name) end
    if #fp > 0 then b:line("  forward prefetch %s", table.concat(fp, ", ")) end
    if #bp > 0 then b:line("  backward prefetch %s", table.concat(bp, ", ")) end
    if g.frozen then b:line("  frozen: every parameter (requires_grad false): no gradients, no optimizer state")
    elseif L.grad_numel < L.shard_numel then
      local n = 0
      for _, p in ipairs(L.params) do n = n + (p.grad_offset and 0 or 1) end
      b:line("  frozen: %d of %d params (marked below): gradients and optimizer state for the others alone, %d of %d"
        .. " per rank", n, #L.params, L.grad_numel, L.shard_numel)
    end
    b:line("  %-44s %-14s %4s %6s %8s %8s  %s", "param", "shape", "dim", "chunk", "offset", "shard", "rows per rank (pad)")
    for _, p in ipairs(L.params) do
      local names = #p.param.names > 1 and (" (tied: " .. table.concat(p.param.names, ", ", 2) .. ")") or ""
      local frozen = p.param.requires_grad == false and not g.frozen and "  frozen" or ""
      b:line("  %-44s %-14s %4d %6d %8d %8d  %s (%d)%s%s", p.fqn, shape_str(p.shape), p.dim, p.chunk, p.offset,
        p.shard_numel, runs(p.rows), p.pad_rank0, names, frozen)
    end
    b:dedent()
  end
  sections(b, plan, "", "step")
  local ev = plan.eval_plan
  b:line("")
  if plan.eval_unavailable then
    b:line("eval       not available: %s", plan.eval_unavailable)
  else
    b:line("eval       model.eval(); per validation batch: with torch.no_grad(): loss = %s(model(inp)); reshard() on every FSDP module",
      spec.loss)
    sections(b, ev, "eval_", "eval")
    b:line("")
    b:line("eval memory: predicted peak %d (%s; arena %d with alignment; the persistent buffers are the step's)",
      ev.memory.peak, units.bytes(ev.memory.peak), ev.memory.arena)
    local after = plan.after_eval_plan
    b:line("")
    if after then
      b:line("step after an eval: FSDP2 keeps the eval's post-forward records until the next last backward, and its backward prefetch targets them")
      sections(b, after, "after_eval_", "step")
      b:line("")
      b:line("step after an eval memory: predicted peak %d (%s; arena %d with alignment)", after.memory.peak,
        units.bytes(after.memory.peak), after.memory.arena)
    else
      b:line("step after an eval: the step above (FSDP2's backward prefetch of the eval's records unshards nothing)")
    end
  end
  local mem = plan.memory
  b:line("")
  b:line("memory (bytes per rank; KiB, MiB, GiB: 2^10, 2^20, 2^30 bytes; every buffer's offset and lifetime: %s.layout)",
    spec.name)
  b:line("  predicted peak   %d (%s; arena %d with alignment)", mem.peak, units.bytes(mem.peak), mem.arena)
  if plan.groups[1] and plan.groups[1].state.offload then
    local host = 0  -- the runtime's rt_step_persistent_end
    for _, buf in ipairs(mem.buffers) do
      if buf.kind == "persistent" then host = math.max(host, buf.offset + buf.size) end
    end
    b:line("  offload_policy   [0, %d) in pinned host memory (CUDA backend: %d bytes on the device)", host,
      mem.arena - host)
  end
  arena_layout.summary_lines(b, mem, plan.steps, M.step_name)
  return b:text()
end

-- The .layout text (every buffer's offset and lifetime; see arena_layout.lua).
function M.render_layout(plan, spec_file)
  return arena_layout.render(plan, spec_file, M.VERSION, M.step_name)
end

-- Writes DIR/<name>.schedule and DIR/<name>.layout where their content changed. Returns
-- { { path, changed }, ... } (or nil, err).
function M.write(plan, dir, spec_path)
  local spec_file = spec_path:match("[^/]+$")
  local out = {}
  for _, f in ipairs({ { ".schedule", M.render }, { ".layout", M.render_layout } }) do
    local path, changed = buffer.write_if_changed(dir .. "/" .. plan.spec.name .. f[1], f[2](plan, spec_file))
    if not path then return nil, changed end
    out[#out + 1] = { path = path, changed = changed }
  end
  return out
end

return M
