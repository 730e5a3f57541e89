-- The step over time: walks the plan's lines in order and places each on its stream
-- (compute, the all-gather copy-in and collective, reduce-scatter, all-reduce) with the
-- waits the CUDA backend issues (runtime/cuda/step/backend.c, docs/cuda.md "Streams"):
--   * the all-gather copy-in waits for compute only at the syncs: all_gather_sync lines,
--     and after every all_gather_wait and reshard_post_forward; the collective follows
--     its copy-in; compute waits for it at its all_gather_wait (then copies out);
--   * a reduce-scatter's copy-in runs on compute after compute waited for the previous
--     reduce-scatter's collective; the collective (and, with HSDP, the all-reduce on its
--     stream) follows, then the view-out; compute waits for the previous reduction's
--     view-out at the end of the line; a direct (one-rank) reduction is one copy on the
--     reduce-scatter stream;
--   * clipping waits for every reduction, a group's optimizer step for the reduction in
--     flight only where it reduces that group; the step ends when every stream is done.
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
-- net_gbps }. Returns { lines = { {boxes = {{lane, s, e, part}}, wait, phase, st} },
-- phases = { {name, compute, exposed = {ag, rs, ar, tail}, start, finish} }, step,
-- hw_flops (what the kernels execute, recomputation included) }.
function M.run(plan, topo)
  local gpu, k = topo.gpu, topo.k
  local tc = 0                      -- compute stream's time
  local free = { ag_copy = 0, ag = 0, rs = 0, ar = 0 }
  -- The links a collective uses (NVLink, or the network once it spans nodes) are shared:
  -- collectives of different streams on one fabric take turns (each would get part of the
  -- bandwidth if they ran at once; taking turns ends them at about the same total time).
  local link = { nvlink = 0, net = 0, none = 0 }
  local sync_t = 0                  -- compute's time at the last all-gather sync
  local ag_done = {}
  local rs_pending, post_pending    -- done times of the reduction in flight
  local pending_group               -- the group it reduces
  local post_kind = "rs"           -- the stream its view-out follows
  local lines, phases, by_name = {}, {}, {}
  local hw_flops = 0
  local classes = {}

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
    local c = cost.step(st, plan, gpu, k)
    hw_flops = hw_flops + c.hw_flops
    local rec = { st = st, boxes = {}, wait = 0, phase = p, class = c.class, issue = tc }
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
    local op = st.op
    if op == "all_gather_sync" then
      sync_t = tc
      rec.mark = { lane = "ag", t = tc }
    elseif op == "all_gather" then
      local s = math.max(free.ag_copy, sync_t)
      local ce = s + c.copy_in
      free.ag_copy = ce
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
      if st.direct then
        wait_for(rs_pending, "rs")
        wait_for(post_pending, "rs")
        local s = math.max(free.rs, tc)
        free.rs = s + c.copy_in
        rec.boxes[#rec.boxes + 1] = { lane = "rs", s = s, e = free.rs, part = "direct reduction" }
        rs_pending, post_pending, pending_group = free.rs, nil, st.group
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
      end
    elseif op == "all_reduce" then
      local prev = lines[i - 1]
      if prev and prev.ar_box then rec.boxes[#rec.boxes + 1] = prev.ar_box; prev.ar_box = nil end
    elseif op == "clip_grad_norm" or op == "optimizer" then
      if op == "clip_grad_norm" or st.group == pending_group then
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
  local step = tc
  for _, t in pairs(free) do step = math.max(step, t) end
  if #phases > 0 then
    local last = phases[#phases]
    last.exposed.tail = step - tc
    last.finish = step
  end
  return { lines = lines, phases = phases, step = step, hw_flops = hw_flops,
    classes = classes, compute_end = tc }
end

return M
