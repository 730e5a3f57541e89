-- Parameters read from the shards (generator/memory/packing.lua mark_params): at one
-- shard rank, every embedding lookup reads the fp32 sharded parameters (the lookup's
-- output is rounded to its dtype anyway); a parameter that only lookups read is not
-- copied by its all-gather (rt_model.h from_shard), and the schedule line names it.
-- Checked on Llama 1B (its untied embedding), GPT-2 124M (the tied embedding is looked up
-- in the shards and copied for the head), the same Llama at two ranks (nothing), and on
-- every repository spec: a parameter marked so is only in a group of one shard rank, only
-- lookups read it, and no line of the step C reads its unsharded slot; every lookup in a
-- group of one shard rank reads the shards, and no other.
-- Run from the repository root: lua5.4 tests/generator/shard_reads.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local emit_step = require("emit.emit_step")
local schedule = require("emit.schedule")
local cost = require("simulate.cost")
local gpu = require("simulate.gpu")
local trace = require("spec.trace")

local util = require("tests.generator.step_c")
local check = util.check

local function from_shard(plan)
  local fqns = {}
  for _, g in ipairs(plan.groups) do
    for _, l in ipairs(g.layout.params) do
      if l.param.from_shard then fqns[#fqns + 1] = l.param.fqn end
    end
  end
  table.sort(fqns)
  return table.concat(fqns, ", ")
end

local function count(text, pat) return select(2, text:gsub(pat, "")) end

-- The C's lookups of parameter `fqn`: how many read its group's sharded parameters, how
-- many anything else (its unsharded offset, P_, which a parameter read from the shards
-- has none of).
local function lookups(c, fqn)
  local name = "P_" .. fqn:gsub("[^%w]+", "_")
  local sharded, other = 0, 0
  for args in c:gmatch("rt_embedding_[%w_]*forward(%b())") do  -- into fp32 or 16-bit storage
    if args:find("_sharded_params", 1, true) then sharded = sharded + 1 end
    if args:find(name, 1, true) then other = other + 1 end
  end
  return sharded, other
end

-- Llama 1B: the untied embedding; its lookup in the step and in the eval program.
local llama = util.plan("examples/llama_1b.lua")
local c = emit_step.render(llama, "llama_1b.lua", llama.spec.name)
check(from_shard(llama) == "tok_embeddings.weight", "llama_1b: only the untied embedding is read from the "
  .. "shards (" .. from_shard(llama) .. ")")
local sharded, other = lookups(c, "tok_embeddings.weight")
check(sharded == 2 and other == 0, string.format("llama_1b: the step's and the eval's lookups read "
  .. "B_root_sharded_params (%d), none P_tok_embeddings_weight (%d)", sharded, other))
check(count(c, "%.from_shard = 1") == 1, "llama_1b: its parameter table marks one parameter .from_shard")
check(count(c, "#define P_tok_embeddings_weight ") == 0 and count(c, "#define P_output_weight ") == 1,
  "llama_1b: no unsharded offset for the embedding, one for the output head")
-- Its root's all-gather as FSDP2 makes it (keep_unsharded = false: at one rank the root is
-- otherwise kept across steps and copies nothing, plan/keep.lua).
local llama_copied = util.plan("examples/llama_1b.lua", function(s) s.keep_unsharded = false end)
local line
for _, st in ipairs(llama_copied.steps) do
  if st.op == "all_gather" and st.group.name == "" then line = line or schedule.step_line(st, llama_copied) end
end
check(line and line:find("not copied, as lookups read them from the shards: tok_embeddings.weight", 1, true),
  "llama_1b: the root's all-gather line names what it does not copy: " .. tostring(line))

-- The simulator prices the root's copy without the embedding: 6 bytes per element of the
-- packed head, 8 of the fp32 final norm.
local h100 = assert(gpu.load(".", "h100"))
local k = h100.kernels.fsdpgen
for _, st in ipairs(llama_copied.steps) do
  if st.op == "all_gather" and st.group.name == "" then
    local root, bytes = st.group, 0
    for _, l in ipairs(root.layout.params) do
      local p = l.param
      if not p.from_shard then bytes = bytes + trace.numel(p.shape) * (p.packed and 6 or 8) end
    end
    local want = bytes / (h100.hbm_gbps * 1e9 * k.copy) + k.launch_us * 1e-6
    local got = cost.step(st, llama_copied, h100, k).copy_in
    check(math.abs(got - want) < 1e-12 and bytes < 0.6 * root.layout.shard_numel * 6, string.format(
      "llama_1b: the simulator's root copy moves %.2f GB (%.3f ms), not the embedding's", bytes / 1e9, got * 1e3))
    break
  end
end

-- GPT-2 124M: the tied embedding is the head's weight too: copied, for the head. The
-- position embedding only lookups read. Both lookups read the shards, so the root's copy
-- is waited for at the final norm (late_waits.lua).
local gpt2 = util.plan("examples/gpt2_124m.lua")
check(from_shard(gpt2) == "pos_embeddings.weight", "gpt2_124m: the position embedding only (the tied "
  .. "token embedding is the head's weight too): " .. from_shard(gpt2))
local gc = emit_step.render(gpt2, "gpt2_124m.lua", gpt2.spec.name)
sharded, other = lookups(gc, "tok_embeddings.weight")
check(sharded == 4 and other == 0, string.format("gpt2_124m: the step's and the eval's four lookups read "
  .. "B_root_sharded_params (%d), none P_tok_embeddings_weight (%d)", sharded, other))
check(count(gc, "#define P_tok_embeddings_weight ") == 1 and count(gc, "P_tok_embeddings_weight") >= 3,
  "gpt2_124m: the tied weight keeps its unsharded offset, which the head reads")
line = nil
for _, st in ipairs(gpt2.steps) do
  if st.op == "all_gather" and st.group.name == "" then line = line or schedule.step_line(st, gpt2) end
end
check(line and line:find("lookups read tok_embeddings.weight from the shards too", 1, true)
  and line:find("beside the next groups' copies", 1, true),
  "gpt2_124m: the root's all-gather line says the lookups read the tied weight's shards: " .. tostring(line))

-- Llama at two ranks: its shards are not its layout.
local w2 = util.plan_source([[
local fsdp, models = require("fsdp"), require("models")
local model = models.Llama{ n_layers = 2, dim = 48, n_heads = 4, n_kv_heads = 2, vocab_size = 64, max_seq_len = 16 }
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { mp_policy = mp }) end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{ name = "shard_reads_w2", model = model, world_size = 2,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy", optimizer = { "adamw", lr = 1e-3 } }
]])
check(from_shard(w2) == "", "a Llama at two ranks reads nothing from the shards (" .. from_shard(w2) .. ")")

-- Every repository spec: marked parameters are in one-rank groups, only lookups read them,
-- and the C never reads their unsharded slot.
local marked = 0
local specs = util.each_planned(function(path, plan, code)
  local bad
  for _, g in ipairs(plan.groups) do
    for _, l in ipairs(g.layout.params) do
      local p = l.param
      if p.from_shard then
        marked = marked + 1
        if g.shard ~= 1 then bad = p.fqn .. " in a group of " .. g.shard .. " shard ranks" end
        for _, op in ipairs(plan.graph.ops) do
          for j, t in ipairs(op.ins) do
            if t == p and not (op.kind == "embedding" and j == 2) then
              bad = p.fqn .. " read by " .. op.kind .. " at input " .. j
            end
          end
        end
        local name = ("P_" .. p.fqn:gsub("[^%w]+", "_")):gsub("%p", "%%%0")
        if code:find("_unsharded_params[_%w]* %+ " .. name .. "%f[^%w_]") then
          bad = p.fqn .. "'s unsharded slot read in the C"
        end
      end
    end
  end
  -- each lookup in the shards exactly where its weight's group has one shard rank
  local want = 0
  for _, prog in ipairs({ plan, plan.eval_plan or false, plan.after_eval_plan or false }) do
    for _, st in ipairs(prog and prog.steps or {}) do
      local op = st.node
      if st.op == "forward" and op.kind == "embedding" and op.ins[2].lookup_shard then want = want + 1 end
    end
  end
  local got = 0
  for args in code:gmatch("rt_embedding_[%w_]*forward(%b())") do
    if args:find("_sharded_params", 1, true) then got = got + 1 end
  end
  if got ~= want then bad = string.format("%d lookups read the shards, %d planned to", got, want) end
  check(not bad, path .. ": parameters read from the shards as planned" .. (bad and (": " .. bad) or ""))
end)
check(marked >= 4, string.format("%d parameters of %d specs read from the shards", marked, specs))
util.finish()
