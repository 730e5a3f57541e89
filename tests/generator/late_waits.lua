-- One shard rank's all-gathers waited for at their first reader
-- (generator/memory/late_waits.lua): where a group's unsharded parameters are first read
-- after other groups' all-gathers were waited for (Llama's root, its embedding looked up
-- in the shard), compute waits for it there and its copy runs beside theirs. Checked on
-- small specs: where the root's wait goes (before the fused add and final norm, after the
-- last block's wait), that its all-gather alone is beside, in the schedule text and the
-- step C (RT_AG_BESIDE); that the memory plan's peak is the one without the move; that
-- HSDP over one shard rank moves it too, as does a tied embedding (the lookup reads the
-- shards, the head the copy); and that nothing moves at two ranks, in the backward (the
-- next group's prefetch is waited for after the group's first use) or in the eval. The
-- stream order is test_stream_order's (tests/train/run.sh), the bits cuda_step's
-- (llama_w1_bf16 on the CPU and the emulator).
-- Run from the repository root: lua5.4 tests/generator/late_waits.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local schedule = require("emit.schedule")
local late_waits = require("memory.late_waits")

local util = require("tests.generator.step_c")
local check = util.check

-- A 2-block model `kind` ("Llama", or "Transformer" with weight_tying = `tied`) at `world`
-- ranks, blocks and root sharded with bf16 parameters (so that residual adds and norms
-- fuse); `extra` is Lua run before the root's fully_shard. keep_unsharded = false: every
-- all-gather copies, as FSDP2's (kept ones copy nothing to wait for: plan/keep.lua).
local function plan_model(kind, world, extra, tied)
  local args = kind == "Llama" and "n_layers = 2, dim = 16, n_heads = 2, n_kv_heads = 1, vocab_size = 32, max_seq_len = 8"
    or string.format("n_layers = 2, dim = 8, n_heads = 2, vocab_size = 32, max_seq_len = 8, weight_tying = %s",
      tostring(tied))
  return util.plan_source(string.format([[
local fsdp, models = require("fsdp"), require("models")
local model = models.%s{ %s }
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { mp_policy = mp }) end
%s
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{ name = "late_probe", model = model, world_size = %d, keep_unsharded = false,
  input = { batch = 2, seq_len = 8 }, loss = "cross_entropy", optimizer = { "adamw", lr = 1e-3 } }
]], kind, args, extra or "", world))
end

local function gname(g) return g.name == "" and "root" or g.name end

-- The moved waits and the all-gathers beside, as "group@section" lists.
local function marks(plan)
  local late, beside = {}, {}
  for _, st in ipairs(plan.steps) do
    if st.late then late[#late + 1] = gname(st.group) .. "@" .. st.phase end
    if st.beside then beside[#beside + 1] = gname(st.group) .. "@" .. st.phase end
  end
  return table.concat(late, " "), table.concat(beside, " ")
end

-- The index of the first step matching f, or nil.
local function index(plan, f)
  for i, st in ipairs(plan.steps) do
    if f(st) then return i end
  end
end

-- One rank, a Llama: the root's wait follows the last block's and precedes the residual add
-- that the final norm is fused with.
local plan, code = plan_model("Llama", 1)
local late, beside = marks(plan)
check(late == "root@forward" and beside == "root@forward",
  string.format("one rank, a Llama: the root's forward wait moved (%s), its all-gather beside (%s)", late, beside))
local w = index(plan, function(st) return st.late end)
local last_block = index(plan, function(st) return st.op == "all_gather_wait" and st.group.name == "layers.1"
  and st.phase == "forward" end)
local nxt, after = plan.steps[w + 1], plan.steps[w + 2]
check(last_block and last_block < w and nxt.node and nxt.node.kind == "add" and nxt.fused_norm == after
  and after.node.kind == "rms_norm",
  "the root's wait comes after the last block's, right before the add fused with the final norm")
local first_root_read = index(plan, function(st)
  if st.phase ~= "forward" or not st.node then return false end
  for _, t in ipairs(st.node.ins) do
    if t.fqn == "norm.weight" or t.fqn == "output.weight" then return true end
  end
end)
check(first_root_read == w + 2, "nothing reads the root's unsharded parameters before its wait")
local text = schedule.step_line(plan.steps[w], plan)
local ag = plan.steps[index(plan, function(st) return st.beside end)]
check(text:find("at its first reader (FSDP2: at the pre-forward)", 1, true)
  and schedule.step_line(ag, plan):find("on a stream of its own, beside the next groups' copies", 1, true),
  "the schedule says where the wait is and that the copy runs beside the others")
local _, n_beside = code:gsub("RT_AG_BESIDE", "")
check(n_beside == 1 and code:find('rt_step_all_gather_direct(R, 0, "FORWARD", ', 1, true)
  and code:match('rt_step_all_gather_direct%(R, 0, "FORWARD", [^;]*RT_AG_BESIDE%);'),
  string.format("the step C copies the root's forward all-gather beside, and no other (%d)", n_beside))

-- The memory plan: the blocks' copies may start earlier (at the sync before the root's
-- issue, no longer at its wait), at the step's start, where little is live: the peak is
-- the one without the move.
local mark = late_waits.mark
late_waits.mark = function() return 0 end
local unmoved = plan_model("Llama", 1)
late_waits.mark = mark
check(plan.memory.peak == unmoved.memory.peak,
  string.format("the memory plan's peak is the one without the move (%d, %d bytes)", plan.memory.peak,
    unmoved.memory.peak))

-- The embedding a group of its own (as torchtitan shards it): the root ([norm, output])
-- waits at the final norm too; the embedding's group (nothing copied) where FSDP2 waits.
local own = plan_model("Llama", 1, "fsdp.fully_shard(model.tok_embeddings, { mp_policy = mp })")
late, beside = marks(own)
check(late == "root@forward" and beside == "root@forward",
  string.format("the embedding a group of its own: the root's wait moved (%s; beside %s)", late, beside))

-- A tied embedding (GPT-2's): the lookup reads the shards, so the root's wait moves down
-- to the final norm, its first reader of the copy (the output head's weight).
local tied = plan_model("Transformer", 1, nil, true)
late, beside = marks(tied)
local tw = index(tied, function(st) return st.late end)
local lookup = index(tied, function(st) return st.node and st.node.kind == "embedding" and st.phase == "forward" end)
local norm_at = tw and tied.steps[tw + 2]
check(late == "root@forward" and beside == "root@forward" and lookup and lookup < tw
  and norm_at and norm_at.node.kind == "layer_norm",
  string.format("a tied embedding: the root's wait moved after the lookup to the final norm (%s; beside %s)",
    late, beside))

-- HSDP over replicas of one shard rank: its all-gathers are copies too, and the root's
-- wait moves as at one GPU.
local hsdp = util.plan_source([[
local fsdp, models = require("fsdp"), require("models")
local model = models.Llama{ n_layers = 2, dim = 16, n_heads = 2, n_kv_heads = 1, vocab_size = 32, max_seq_len = 8 }
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { mp_policy = mp }) end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{ name = "late_probe", model = model, mesh = { replicate = 2, shard = 1 },
  input = { batch = 2, seq_len = 8 }, loss = "cross_entropy", optimizer = { "adamw", lr = 1e-3 } }
]])
late, beside = marks(hsdp)
check(late == "root@forward" and beside == "root@forward",
  string.format("HSDP 2 x 1: the root's wait moved (%s; beside %s)", late, beside))

-- Nothing moves where the first reader comes first, or where no other wait precedes it.
local cases = {
  { "two ranks (all-gathers are collectives)", { "Llama", 2 } },
}
for _, c in ipairs(cases) do
  local p = plan_model(table.unpack(c[2], 1, 4))
  late, beside = marks(p)
  check(late == "" and beside == "", string.format("%s: no wait moved (%s; beside %s)", c[1], late, beside))
end

-- The eval's forward waits where FSDP2 does (it reads the embedding unsharded), and the
-- step after an eval is the step's.
late = marks(plan.eval_plan)
check(plan.eval_plan and late == "" and not plan.after_eval_plan,
  "the eval: its forward's waits unmoved; the step after it is the step (moved)")

util.finish()
