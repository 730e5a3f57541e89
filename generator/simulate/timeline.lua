-- The step over time: walks the plan's lines in order and places each on its stream
-- (compute, the all-gather copy-in and collective, reduce-scatter, all-reduce) with the
-- waits the CUDA backend issues (runtime/cuda/step/backend.c, docs/cuda.md "Streams"):
--   * the all-gather copy-in waits for compute only at the syncs: all_gather_sync lines,
--     and after every all_gather_wait and reshard_post_forward; the collective follows
--     its copy-in; compute waits for it at its all_gather_wait (then copies out); one
--     shard rank's all-gather waited for at its first reader (memory/late_waits.lua, `beside`)
--     copies on the collective stream instead;
--   * a reduce-scatter's copy-in runs on compute after compute waited for the previous
--     reduce-scatter's collective; the collective (and, with HSDP, the all-reduce on its
--     stream) follows, then the view-out; compute waits for the previous reduction's
--     view-out at the end of the line; a direct (one-rank) reduction is one copy on the
--     reduce-scatter stream;
--   * without clipping, each group's optimizer step runs on the optimizer stream as soon as
--     its group's last reduction is done, beside the backward of the groups after it (the
--     rows no token looks up, optimizer.lua Sim:split_token_rows, from the step's start);
--     compute waits for that stream at the next all-gather sync or reduction;
--   * with clipping (or topo.optimizer_stream == "compute": RT_OPTIMIZER_STREAM, and
--     PyTorch's step after the backward), clipping waits for every reduction, a group's
--     optimizer step on compute for the reduction in flight only where it reduces that
--     group; the step ends when every stream is done.
-- Kernels of different streams do not slow each other (docs/simulate.md).
-- Returns the boxes of every line and the totals by phase.
local cost = require("simulate.cost")
local nccl = require("simulate.nccl")
local trace = require("spec.trace")

local M = {}

local function dbytes(dtype) return trace.dtype_bytes[dtype] or 4 end

-- Seconds of the collective of line st, and where it ran ("nvlink", "net", "none").
local function collective(st, topo)
  local g = st.group
  if st.op == "all_gather" then
    if st.direct then return 0, "none" end
    local L = g.layout
    local n = st.from_post_forward and g.post_forward_world or g.shard
    local per = st.from_post_forward and (L.padded_numel // g.post_forward_world) or L.shard_numel
    return nccl.time("all_gather", per * n * dbytes(g.param_dtype), n, 1, topo)
  elseif st.op == "reduce_scatter" then
    if st.direct then return 0, "none" end
    local L = st.reduction.layout
    return nccl.time("reduce_scatter", L.padded_numel * dbytes(g.reduce_dtype), g.shard, 1, topo)
  elseif st.op == "all_reduce" then
    local L = st.reduction.layout
    local bytes = L.shard_numel * dbytes(g.reduce_dtype)
    return nccl.time("all_reduce", bytes, g.replicate, g.shard, topo)
  end
  return 0, "none"
end

-- plan: the planner's plan; topo = { gpu, k (kernel efficiencies), gpus_per_node,
-- net_gbps, optimizer_stream ("side" or "compute"), attention_backward (cuDNN's:
-- "deterministic" or "atomic") }. Returns { lines = { {boxes = {{lane, s, e, part}}, wait,
-- phase, st} }, phases = { {name, compute, exposed = {ag, rs, ar, tail}, start, finish} },
-- step, hw_flops (what the kernels execute, recomputation included), optimizer ({total,
-- after}: the optimizer stream's time, and how much of it ends after compute's; nil without
-- that stream) }.
function M.run(plan, topo)
  local gpu, k = topo.gpu, topo.k
  local tc = 0                      -- compute stream's time
  local free = { ag_copy = 0, ag = 0, rs = 0, ar = 0, opt = 0 }
  local side_optimizer = topo.optimizer_stream ~= "compute"
  for _, st in ipairs(plan.steps) do
    if st.op == "clip_grad_norm" then side_optimizer = false end
  end
  local reduced = {}                -- group -> when its last reduction is done; a part too
  local function reduced_at(st, t)
    reduced[st.group] = t
    if st.reduction.part then reduced[st.reduction] = t end
  end
  local opt_boxes = {}              -- the optimizer stream's
  -- The links a collective uses (NVLink, or the network once it spans nodes) are shared:
  -- collectives of different streams on one fabric take turns (each would get part of the
  -- bandwidth if they ran at once; taking turns ends them at about the same total time).
  local link = { nvlink = 0, net = 0, none = 0 }
  local sync_t = 0                  -- compute's time at the last all-gather sync
  local ag_done = {}
  local rs_pending, post_pending    -- done times of the reduction in flight
  local pending_group               -- the group it reduces (a part: its reduction)
  local post_kind = "rs"           -- the stream its view-out follows
  local lines, phases, by_name = {}, {}, {}
  local hw_flops = 0
  local classes, launches = {}, {}  -- kernel time and launches by cost.lua's class
  local copies, copy_launches = 0, 0  -- the FSDP copies' time and calls on the collectives' streams
  local function copy_beside(d) copies, copy_launches = copies + d, copy_launches + (d > 0 and 1 or 0) end

  local function phase_of(st)
    local key = st.section .. " " .. st.phase
    local p = by_name[key]
    if not p then
      p = { name = st.phase, section = st.section, compute = 0, start = tc,
        exposed = { ag = 0, rs = 0, ar = 0, tail = 0 } }
      by_name[key] = p
      phases[#phases + 1] = p
    end
    return p
  end

  for i, st in ipairs(plan.steps) do
    local p = phase_of(st)
    local c = cost.step(st, plan, gpu, k, topo.attention_backward)
    hw_flops = hw_flops + c.hw_flops
    if (c.launches or 0) > 0 then launches[c.class] = (launches[c.class] or 0) + c.launches end
    local rec = { st = st, boxes = {}, wait = 0, phase = p, class = c.class, issue = tc, cost = c }
    lines[i] = rec
    -- compute waits until `t` (a side stream's event), the wait charged to `what`
    local function wait_for(t, what)
      if t and t > tc then
        rec.wait = rec.wait + (t - tc)
        p.exposed[what] = p.exposed[what] + (t - tc)
        rec.wait_on = what
        tc = t
      end
    end
    local function on_compute(d, part)
      if d > 0 then
        rec.boxes[#rec.boxes + 1] = { lane = "compute", s = tc, e = tc + d, part = part }
        p.compute = p.compute + d
        classes[c.class] = (classes[c.class] or 0) + d
        tc = tc + d
      end
    end
    -- compute waits for the optimizer stream (a second iteration's sync or reduction): the
    -- time counts as this phase's compute
    local function wait_optimizer()
      if free.opt > tc then
        p.compute = p.compute + (free.opt - tc)
        tc = free.opt
      end
    end
    local op = st.op
    if side_optimizer and (op == "all_gather_sync" or op == "reduce_scatter") then
      wait_optimizer()
    end
    if op == "all_gather_sync" then
      sync_t = tc
      rec.mark = { lane = "ag", t = tc }
    elseif op == "all_gather" and st.kept then
      -- its reshard kept the parameters (plan/keep.lua): nothing to copy or wait for
      ag_done[st.ag] = 0
    elseif op == "all_gather" and st.beside then
      -- one shard rank's copy on the collective stream (late_waits.lua): after the copy-in
      -- stream's sync, beside the copy-ins issued after it
      local s = math.max(free.ag, free.ag_copy, sync_t)
      free.ag = s + c.copy_in
      copy_beside(c.copy_in)
      rec.boxes[#rec.boxes + 1] = { lane = "ag", s = s, e = free.ag, part = "copy-in" }
      ag_done[st.ag] = free.ag
    elseif op == "all_gather" then
      local s = math.max(free.ag_copy, sync_t)
      local ce = s + c.copy_in
      free.ag_copy = ce
      copy_beside(c.copy_in)
      rec.boxes[#rec.boxes + 1] = { lane = "ag", s = s, e = ce, part = "copy-in" }
      local done = ce
      local coll, where = collective(st, topo)
      if coll > 0 then
        local cs = math.max(free.ag, ce, link[where])
        done = cs + coll
        free.ag, link[where] = done, done
        rec.boxes[#rec.boxes + 1] = { lane = "ag", s = cs, e = done, part = "all-gather",
          where = where }
      end
      ag_done[st.ag] = done
    elseif op == "all_gather_wait" or op == "all_gather_drop" then
      wait_for(ag_done[st.ag], "ag")
      on_compute(c.compute, "copy-out")
      if op == "all_gather_wait" then sync_t = tc end
    elseif op == "reshard_post_forward" then
      on_compute(c.compute, "post-forward shard")
      sync_t = tc
    elseif op == "reduce_scatter" then
      if st.in_place then
        -- the backward wrote the sharded grads on compute: its optimizer step waits for that
        reduced_at(st, tc)
      elseif st.direct then
        wait_for(rs_pending, "rs")
        wait_for(post_pending, "rs")
        local s = math.max(free.rs, tc)
        free.rs = s + c.copy_in
        copy_beside(c.copy_in)
        rec.boxes[#rec.boxes + 1] = { lane = "rs", s = s, e = free.rs, part = "direct reduction" }
        rs_pending, post_pending = free.rs, nil
        pending_group = st.reduction.part and st.reduction or st.group
        reduced_at(st, free.rs)
      else
        wait_for(rs_pending, "rs")
        on_compute(c.compute, "copy-in")
        local coll, where = collective(st, topo)
        local s = math.max(free.rs, tc, coll > 0 and link[where] or 0)
        local done = s + coll
        if coll > 0 then link[where] = done end
        rec.boxes[#rec.boxes + 1] = { lane = "rs", s = s, e = done, part = "reduce-scatter",
          where = where }
        local nxt = plan.steps[i + 1]
        local post
        if nxt and nxt.op == "all_reduce" and nxt.rs == st.rs then
          -- HSDP: the all-reduce stream takes over (recorded on the all_reduce line)
          free.rs = done
          local ar_t, ar_where = collective(nxt, topo)
          local ar_s = math.max(free.ar, done, ar_t > 0 and link[ar_where] or 0)
          if ar_t > 0 then link[ar_where] = ar_s + ar_t end
          post = ar_s + ar_t + c.copy_out
          free.ar = post
          rec.ar_box = { lane = "ar", s = ar_s, e = post, part = "all-reduce", where = ar_where }
        else
          post = done + c.copy_out
          free.rs = post
          if c.copy_out > 0 then
            rec.boxes[#rec.boxes + 1] = { lane = "rs", s = done, e = post, part = "view-out" }
          end
        end
        wait_for(post_pending, post_kind)
        rs_pending, post_pending, pending_group = done, post, st.group
        post_kind = rec.ar_box and "ar" or "rs"
        reduced_at(st, post)
      end
    elseif op == "all_reduce" then
      local prev = lines[i - 1]
      if prev and prev.ar_box then rec.boxes[#rec.boxes + 1] = prev.ar_box; prev.ar_box = nil end
    elseif op == "optimizer" and side_optimizer then
      -- the rows no token looks up need only the step's tokens: from the step's start
      local ready = st.rows == "unused" and 0 or reduced[st.reduction or st.group] or tc
      local s = math.max(free.opt, ready)
      free.opt = s + c.compute
      rec.boxes[#rec.boxes + 1] = { lane = "opt", s = s, e = free.opt, part = "optimizer" }
      opt_boxes[#opt_boxes + 1] = rec.boxes[#rec.boxes]
      classes[c.class] = (classes[c.class] or 0) + c.compute
    elseif op == "clip_grad_norm" or op == "optimizer" then
      if op == "clip_grad_norm" or ((st.reduction or st.group) == pending_group and st.rows ~= "unused") then
        wait_for(rs_pending, "rs")
        wait_for(post_pending, post_kind)
        rs_pending, post_pending, pending_group = nil, nil, nil
      end
      local d = c.compute
      if op == "clip_grad_norm" then
        d = d + nccl.time("all_reduce", 8, plan.spec.mesh.shard, 1, topo)
      end
      on_compute(d, op)
    else
      on_compute(c.compute, op)
    end
    rec.start = rec.boxes[1] and rec.boxes[1].s or tc
    p.finish = tc
  end
  -- the step ends when every stream is done: what is left after compute counts as the
  -- last phase's exposed communication
  -- (the optimizer steps that end after compute count as the last phase's compute)
  local step = tc
  for _, t in pairs(free) do step = math.max(step, t) end
  local after, opt_total = 0, 0
  for _, b in ipairs(opt_boxes) do
    after = after + math.max(0, b.e - math.max(b.s, tc))
    opt_total = opt_total + (b.e - b.s)
  end
  if #phases > 0 then
    local last = phases[#phases]
    last.compute = last.compute + after
    last.exposed.tail = step - tc - after
    last.finish = step
  end
  return { lines = lines, phases = phases, step = step, hw_flops = hw_flops,
    classes = classes, launches = launches, copies = copies, copy_launches = copy_launches,
    compute_end = tc,
    optimizer = #opt_boxes > 0 and { total = opt_total, after = after } or nil }
end

return M
