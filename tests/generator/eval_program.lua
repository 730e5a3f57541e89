-- The eval program (planner.lua run_eval: model.eval(), a no_grad forward, reshard() on
-- every FSDP module), planned for every spec: what it may and may not contain, the step
-- after one where FSDP2's bookkeeping of no-grad forwards changes it, and where that makes
-- the eval unavailable.
-- Run from the repository root: lua5.4 tests/generator/eval_program.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local util = require("tests.generator.step_c")
local check = util.check

local TRAINING_ONLY = { reduce_scatter = true, all_reduce = true, optimizer = true, backward = true,
  loss_grad = true, post_backward = true, accumulate_unsharded_grads = true, clip_grad_norm = true,
  recompute = true, recompute_begin = true }

local available, with_dropout, with_pf = 0, 0, 0
for _, path in ipairs(util.all_specs()) do
  local ok, plan = pcall(util.plan, path)
  if ok and not plan.eval_unavailable then
    available = available + 1
    local ev = plan.eval_plan
    local bad, losses, grads = {}, 0, 0
    for _, st in ipairs(ev.steps) do
      if TRAINING_ONLY[st.op] then bad[#bad + 1] = st.op end
      if st.op == "eval_loss" then losses = losses + 1 end
    end
    local kinds = {}
    for _, op in ipairs(ev.graph.ops) do
      kinds[op.kind] = true
      for _, t in ipairs(op.outs) do
        if t.requires_grad then grads = grads + 1 end
      end
    end
    check(#bad == 0 and losses == 1 and grads == 0 and not kinds.dropout and not kinds.post_backward_hook,
      string.format("%s: the eval has one loss, no training op (%s), no tensor requiring grad (%d), no dropout "
        .. "or post-backward hook", path, table.concat(bad, ", "), grads))
    local dropout = false
    for _, op in ipairs(plan.graph.ops) do dropout = dropout or op.kind == "dropout" end
    if dropout then with_dropout = with_dropout + 1 end
    -- reshard_after_forward = int: model.reshard() frees the post-forward shards.
    local pf = {}
    for _, g in ipairs(ev.groups) do
      if g.post_forward_world and g.post_forward_world ~= g.shard then pf[g.index] = true end
    end
    local freed = {}
    for _, st in ipairs(ev.steps) do
      if st.op == "reshard" and st.from == "sharded_post_forward" then freed[st.group.index] = true end
    end
    for k in pairs(pf) do
      with_pf = with_pf + 1
      check(freed[k], string.format("%s: reshard() frees group %d's post-forward shard", path, k))
    end
  end
end
check(available >= 50, string.format("the eval program is available for %d specs", available))
check(with_dropout >= 3, string.format("%d specs with dropout in the step have none in the eval", with_dropout))
check(with_pf >= 1, string.format("%d groups with an int reshard_after_forward checked", with_pf))

-- The step after an eval. A root without parameters: the eval's last post-forward is the
-- last block, which the next step's backward has resharded when FSDP2's prefetch from the
-- first block (its post-forward index 0 of the step, so the eval's last record before it)
-- unshards it again: one more all-gather of it, dropped by the final callback.
local function fsdp_lines(p)
  local t = {}
  for _, st in ipairs(p.steps) do
    if st.group then t[#t + 1] = st.op .. " " .. st.group.name end
  end
  return t
end
local plan = util.plan("tests/specs/features/mixed_precision_mlp3.lua")
local after = plan.after_eval_plan
local extra = {}
if after then
  local base, i = fsdp_lines(plan), 1
  for _, l in ipairs(fsdp_lines(after)) do
    if base[i] == l then i = i + 1 else extra[#extra + 1] = l end
  end
  if i <= #base then extra[#extra + 1] = "missing " .. base[i] end
end
check(not plan.eval_unavailable and table.concat(extra, ", ") == "all_gather 2, all_gather_drop 2"
  and after.counts["backward all_gather"] == plan.counts["backward all_gather"] + 1,
  "paramless root: the step after an eval all-gathers the last block once more and drops it ("
    .. table.concat(extra, ", ") .. ")")
-- With the root's own parameters (unsharded through backward) the same prefetch is a no-op.
plan = util.plan("tests/specs/features/lr_schedule_warmup_cosine.lua")
check(not plan.eval_unavailable and not plan.after_eval_plan,
  "root with parameters: the step after an eval is the step")
-- A second backward over a retained graph pops one more post-forward record than the step
-- made: after an eval it would be one of the eval's, which depends on the batch count.
plan = util.plan("tests/torch/step_programs/retain_graph.lua")
check(plan.eval_unavailable and plan.eval_unavailable:find("would pop a record of the eval's forward", 1, true),
  "retained graph, two backwards: eval unavailable (" .. tostring(plan.eval_unavailable) .. ")")

-- A step of non-root forwards only, whose root forward cannot take the spec's input: the
-- eval is unavailable, the build is not refused.
local tmp = os.tmpname() .. ".lua"
local f = assert(io.open(tmp, "w"))
f:write([[
local nn, fsdp = require("nn"), require("fsdp")
local model = nn.Sequential{ nn.Linear(8, 4), nn.Linear(4, 4) }
for i = 1, 2 do fsdp.fully_shard(model[i]) end
fsdp.fully_shard(model)
return fsdp.spec{ name = "nonroot_only", model = model, world_size = 2, input = { shape = { 4, 4 } },
  loss = "sum", optimizer = { "sgd", lr = 1e-2 }, step = { { "forward", module = "1" }, "backward", "optimizer" } }
]])
f:close()
ok, plan = pcall(util.plan, tmp)
os.remove(tmp)
check(ok and plan.eval_unavailable and plan.eval_unavailable:find("model(inp) on the spec's input, fails: linear", 1, true),
  "non-root forwards only, the root's forward failing on the input: planned, eval unavailable ("
    .. tostring(ok and plan.eval_unavailable or plan and plan.msg or plan) .. ")")
util.finish()
