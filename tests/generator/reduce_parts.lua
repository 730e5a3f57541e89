-- Reductions in parts (generator/plan/reductions.lua Sim:reduce_parts): at one rank, a group
-- whose backward spans other groups' (a Llama root: the output head and the final norm
-- first, the embedding last) reduces the gradients that are complete at the next group's
-- first pre-backward as one part and the rest at its post-backward, and the optimizer
-- steps each part on its own, in the order the parts were reduced; the block reduced last
-- (Sim:tail_group) reduces its MLP's gradients as a first part (Sim:reduce_tail). Checked
-- on a small Llama at one rank: the parts' parameters and order, their schedule lines, the
-- step C (`.part = 1` in the reductions table, rt_step_reduce_direct and rt_step_optimizer
-- with the part's index) and the optimizer order; and that nothing is split where the bits
-- could change or nothing is gained: clipping, two ranks, a divide factor (no direct
-- reduction), a second backward before the optimizer, the other blocks.
-- Run from the repository root: lua5.4 tests/generator/reduce_parts.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local schedule = require("emit.schedule")

local util = require("tests.generator.step_c")
local check = util.check

-- A 2-block Llama at `world` ranks, blocks and root sharded; `extra` is Lua run after the
-- groups are made (the model is `model`), `opts` more spec fields.
local function plan_llama(world, extra, opts)
  return util.plan_source(string.format([[
local fsdp, models = require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = models.Llama{ n_layers = 2, dim = 16, n_heads = 2, n_kv_heads = 1, vocab_size = 32,
                            max_seq_len = 8 }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { mp_policy = mp }) end
fsdp.fully_shard(model, { mp_policy = mp })
%s
return fsdp.spec{ name = "parts_probe", model = model, world_size = %d,
  input = { batch = 2, seq_len = 8 }, loss = "cross_entropy", optimizer = { "adamw", lr = 1e-3 }%s }
]], extra or "", world, opts and (", " .. opts) or ""))
end

-- The plan's reductions and optimizer steps of the root (group 1), as "rs a,b" / "opt a,b"
-- (parameter FQNs; "all" for the whole group), in schedule order.
local function root_lines(plan)
  local out = {}
  for _, st in ipairs(plan.steps) do
    if (st.op == "reduce_scatter" or st.op == "optimizer") and st.group.index == 1 then
      local names = {}
      if st.reduction and st.reduction.index > 0 then
        for i, k in ipairs(st.reduction.params) do names[i] = st.group.params[k].fqn end
      else
        names[1] = "all"
      end
      out[#out + 1] = (st.op == "optimizer" and "opt " or "rs ") .. table.concat(names, ",")
        .. (st.rows and " (" .. st.rows .. ")" or "")
    end
  end
  return table.concat(out, " | ")
end

local HEAD = "norm.weight,output.weight"
-- (the embedding's part is also split by rows: tests/generator/token_rows.lua)
local parts = "rs " .. HEAD .. " | rs tok_embeddings.weight | opt tok_embeddings.weight (unused) | opt "
  .. HEAD .. " | opt tok_embeddings.weight (looked_up)"
local whole = "rs all | opt all"

-- One rank: the head's part before the blocks' backward, the embedding's after them.
local plan, code = plan_llama(1)
check(root_lines(plan) == parts, "one rank: the root reduced and stepped in two parts: " .. root_lines(plan))
local order, lines = {}, {}
for _, st in ipairs(plan.steps) do
  if st.op == "optimizer" and st.rows ~= "unused" then
    order[#order + 1] = st.group.name .. (st.reduction and "#" .. st.reduction.index or "")
  end
  if st.op == "reduce_scatter" and st.reduction.part and st.group.index == 1 then
    lines[#lines + 1] = schedule.step_line(st, plan)
  end
end
check(table.concat(order, " ") == "#1 layers.1 layers.0#1 layers.0#2 #2",
  "the optimizer steps the head's part, the blocks (the last in two parts), then the embedding's part: "
  .. table.concat(order, " "))
local first_block_rs
for i, st in ipairs(plan.steps) do
  if st.op == "reduce_scatter" and st.group.index ~= 1 then first_block_rs = first_block_rs or i end
end
local head_rs
for i, st in ipairs(plan.steps) do
  if st.op == "reduce_scatter" and st.reduction.part and st.part == 1 and st.group.index == 1 then head_rs = i end
end
check(head_rs and first_block_rs and head_rs < first_block_rs,
  "the head's part is reduced before any block's reduction")
check(#lines == 2 and lines[1]:find("; part 1 of 2: norm.weight, output.weight", 1, true)
  and lines[2]:find("; part 2 of 2: tok_embeddings.weight", 1, true),
  "the schedule says part 1 of 2 and part 2 of 2 with their parameters")
check(select(2, code:gsub("%.part = 1}", "")) == 4,
  "the step C's reductions table marks both parts of the root and of the last block")
check(code:find("rt_step_reduce_direct%(R, 0, 1,") and code:find("rt_step_reduce_direct%(R, 0, 2,")
  and code:find("rt_step_optimizer%(R, 0, 1, 1, 1, 0%)")
  and code:find("rt_step_optimizer_rows%(R, 0, 2, 1, 1, 0, RT_ROWS_LOOKED_UP%)"),
  "the step C reduces and steps the root's parts 1 and 2 by index")
check(plan.counts["backward reduce_scatter"] == nil, "one rank: no reduce-scatter counted (FSDP2 2.11)")

-- Nothing split where the bits could change or nothing is gained.
local cases = {
  { "clipping", 1, nil, "grad_clip = 1.0" },
  { "two ranks", 2 },
  { "a divide factor of 1 (a reduce-scatter, not direct)", 1, "model:set_gradient_divide_factor(1.0)" },
  { "two backwards before the optimizer", 1, nil,
    [[step = { "forward", { "backward", retain_graph = true }, "backward", "optimizer" }]] },
}
for _, c in ipairs(cases) do
  local p = plan_llama(c[2], c[3], c[4])
  local n = 0
  for _, st in ipairs(p.steps) do
    if st.reduction and st.reduction.part and st.group.index == 1 then n = n + 1 end
  end
  local want = c[1] == "two backwards before the optimizer" and "rs all | rs all | opt all" or whole
  check(n == 0 and root_lines(p) == want, string.format("%s: no parts (%d): %s", c[1], n, root_lines(p)))
end

-- A block reduces whole at its post-backward, but the last one (its step is what follows
-- the backward): its MLP's gradients, complete first, as a part, then the rest.
local blocks = {}
for _, st in ipairs(plan.steps) do
  if st.op == "reduce_scatter" and st.group.index ~= 1 then
    local names = {}
    for i, k in ipairs(st.reduction.params) do names[i] = st.group.params[k].fqn:match("[^.]+%.[^.]+$") end
    blocks[#blocks + 1] = st.group.name .. (st.reduction.part and " " .. table.concat(names, ",") or "")
  end
end
local want_blocks = "layers.1 | layers.0 w1.weight,w2.weight,w3.weight"
  .. " | layers.0 attention_norm.weight,wq.weight,wk.weight,wv.weight,wo.weight,ffn_norm.weight"
check(table.concat(blocks, " | ") == want_blocks,
  "the blocks reduced whole but the last, in two parts (its MLP's weights first): " .. table.concat(blocks, " | "))

-- A tied embedding (the output head's weight): its gradient has the head's contribution
-- before the blocks' backward and the embedding's after. Where the lookups' rows can be
-- told apart (tests/generator/token_rows.lua), the root is four parts; with two optimizer
-- items a step it is not split (a part would end the buffer that holds the head's
-- contribution).
local tied = util.plan_source([[
local fsdp, models = require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2, vocab_size = 10, max_seq_len = 8, dim = 8, n_heads = 2,
  weight_tying = true }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)
return fsdp.spec{ name = "tied_probe", model = model, world_size = 1,
  input = { batch = 2, seq_len = 8 }, loss = "cross_entropy", optimizer = { "adamw", lr = 1e-3 },
  step = { "forward", "backward", "optimizer", "forward", "backward", "optimizer" } }
]])
check(root_lines(tied) == whole .. " | " .. whole,
  "a tied embedding, two optimizer items a step: the root reduced whole: " .. root_lines(tied))
-- and its last block whole too: the root's whole step follows the backward anyway
-- (reductions.lua Sim:tail_group)
local tied_parts = 0
for _, st in ipairs(tied.steps) do
  if st.op == "reduce_scatter" and st.reduction.part then tied_parts = tied_parts + 1 end
end
check(tied_parts == 0, string.format("a tied embedding: no block reduced in parts (%d parts)", tied_parts))

-- Every spec of the repository: each parameter's contributions since its last reduction
-- are in the one unsharded gradient buffer that its next reduction reads (or accumulates
-- from), and no reduction ends a buffer holding contributions of a parameter it does not
-- reduce: a part never strands a gradient. Parts reduced one after another read the
-- buffer the first ends (memory.lua part_reads), so they count as one reduction here.
for _, path in ipairs(util.all_specs()) do
  local ok, plan = pcall(util.plan, path)
  if not ok then
    check(false, path .. ": plan failed")
  else
    local bad
    local at = {}  -- parameter -> the buffers its contributions since its last reduction are in
    for i, st in ipairs(plan.steps) do
      if (st.op == "backward" or st.op == "loss_grad") and st.bufs.ugrad then
        for _, t in ipairs(st.node.ins) do
          local g = t.requires_grad and t.is_param and plan.owner[t]
          local b = g and st.bufs.ugrad[g.index]
          if b then
            at[t] = at[t] or {}
            at[t][b] = true
          end
        end
      elseif st.op == "accumulate_unsharded_grads" then
        for _, t in ipairs(st.group.params) do at[t] = nil end
      elseif st.op == "reduce_scatter" and not st.bufs.acc
          and not (plan.steps[i - 1].op == "reduce_scatter" and plan.steps[i - 1].group == st.group) then
        local reduced = {}
        for j = i, #plan.steps do
          local r = plan.steps[j]
          if r.op ~= "reduce_scatter" or r.group ~= st.group then break end
          for _, k in ipairs(r.reduction.params) do reduced[st.group.params[k]] = true end
        end
        for _, t in ipairs(st.group.params) do
          local bs = at[t] or {}
          if reduced[t] then
            for b in pairs(bs) do
              if b ~= st.bufs.ugrad then bad = bad or string.format("step %d: %s's gradient is in another buffer", i, t.fqn) end
            end
            at[t] = nil
          elseif bs[st.bufs.ugrad] then
            bad = bad or string.format("step %d ends the buffer of %s's contributions without reducing it", i, t.fqn)
          end
        end
      end
    end
    check(not bad, string.format("%s: every gradient reduced from the buffer its contributions are in%s", path,
      bad and (" (" .. bad .. ")") or ""))
  end
end

util.finish()
