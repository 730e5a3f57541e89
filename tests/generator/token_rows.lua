-- Optimizer steps split by rows (generator/plan/optimizer.lua Sim:split_token_rows): at one
-- rank, the step of parameters that only lookups of the input tokens read (an untied
-- embedding) is two lines, the rows no token looks up first in the optimizer section (they
-- need nothing of the backward) and the rows looked up in the step's own place. A tied
-- embedding (generator/plan/reductions.lua Sim:reduce_parts) is two parts of the root's
-- reduction: the rows no token looks up after the output head's backward ("final"), the
-- rows looked up after the lookups ("looked_up"). Checked on small specs: the lines, their
-- order and schedule text, the step C (rt_step_optimizer_rows, the model's .optimizer_rows
-- and its reductions' .rows), the gradient buffers' zeroing; and that nothing is split
-- where a row's update could see another gradient or a second update: two ranks, replicas,
-- a position embedding (looked up by arange, not the tokens) in the same line, two
-- optimizer items a step, clipping (a NaN norm makes the zero gradients NaN too). The bits
-- are tests/cuda_step/run.sh's (llama_w1_bf16 and gpt2_w1_tied_rows against their twins
-- without parts, on the CPU and the emulator).
-- Run from the repository root: lua5.4 tests/generator/token_rows.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local schedule = require("emit.schedule")

local util = require("tests.generator.step_c")
local check = util.check

-- A 2-block model `kind` ("Llama", or "Transformer" with weight_tying = `tied`) at `world`
-- ranks (a number, or the spec's mesh field), blocks and root sharded; `extra` is Lua run before the root's fully_shard (the
-- model is `model`), `opts` more spec fields.
local function plan_model(kind, world, extra, opts, tied)
  local args = kind == "Llama" and "n_layers = 2, dim = 16, n_heads = 2, n_kv_heads = 1, vocab_size = 32, max_seq_len = 8"
    or string.format("n_layers = 2, dim = 8, n_heads = 2, vocab_size = 32, max_seq_len = 8, weight_tying = %s",
      tostring(tied))
  return util.plan_source(string.format([[
local fsdp, models = require("fsdp"), require("models")
local model = models.%s{ %s }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
%s
fsdp.fully_shard(model)
return fsdp.spec{ name = "rows_probe", model = model, %s,
  input = { batch = 2, seq_len = 8 }, loss = "cross_entropy", optimizer = { "adamw", lr = 1e-3 }%s }
]], kind, args, extra or "", type(world) == "string" and world or "world_size = " .. world,
    opts and (", " .. opts) or ""))
end

-- The optimizer lines as "group[#reduction] rows", in schedule order.
local function opt_lines(plan)
  local out = {}
  for _, st in ipairs(plan.steps) do
    if st.op == "optimizer" then
      out[#out + 1] = (st.group.name == "" and "root" or st.group.name)
        .. (st.reduction and st.reduction.index > 0 and "#" .. st.reduction.index or "")
        .. (st.rows and " " .. st.rows or "")
    end
  end
  return table.concat(out, " | ")
end

-- One rank, a Llama: the root's embedding part is split, its unused rows first.
local plan, code = plan_model("Llama", 1)
-- (the last block in two parts: tests/generator/reduce_parts.lua)
local want = "root#2 unused | root#1 | layers.1 | layers.0#1 | layers.0#2 | root#2 looked_up"
check(opt_lines(plan) == want, "one rank: the embedding's part split, its unused rows first: " .. opt_lines(plan))
local texts = {}
for _, st in ipairs(plan.steps) do
  if st.rows then texts[#texts + 1] = schedule.step_line(st, plan) end
end
check(#texts == 2 and texts[1]:find("of tok_embeddings.weight, the rows no token of the step looks up", 1, true)
  and texts[2]:find("of tok_embeddings.weight, the rows the step's tokens look up", 1, true),
  "the schedule says which rows each line steps")
local first_opt = code:find("rt_step_optimizer", 1, true)
check(first_opt and code:find("rt_step_optimizer_rows(R, 0, 2, 1, 1, 0, RT_ROWS_UNUSED);", 1, true) == first_opt,
  "the step C's first optimizer call steps the unused rows")
local last_rows = select(2, code:gsub("rt_step_optimizer", "%0"))
check(last_rows == 6 and code:find("rt_step_optimizer_rows(R, 0, 2, 1, 1, 0, RT_ROWS_LOOKED_UP);", 1, true)
  > code:find("rt_step_optimizer(R, 1, 2, 1, 1, 0);", 1, true),
  string.format("the looked-up rows are stepped after the blocks (%d optimizer calls)", last_rows))
check(code:find(".optimizer_rows = 1,", 1, true), "the model table asks the backend for the rows' mask")

-- The embedding a group of its own (as torchtitan shards it): its whole reduction's step is
-- split.
local own = plan_model("Llama", 1, "fsdp.fully_shard(model.tok_embeddings)")
check(opt_lines(own):find("^tok_embeddings unused |") and opt_lines(own):find("| tok_embeddings looked_up")
  and select(2, opt_lines(own):gsub("unused", "")) == 1,
  "the embedding's own group: split: " .. opt_lines(own))

-- Nothing split where a row could see another gradient or a second update.
local cases = {
  { "two ranks", { "Llama", 2 } },
  { "two replicas (HSDP, one shard rank)", { "Llama", "mesh = { replicate = 2, shard = 1 }" } },
  { "a tied embedding at two ranks", { "Transformer", 2, nil, nil, true } },
  { "a tied embedding with clipping", { "Transformer", 1, nil, "grad_clip = 1.0", true } },
  { "a tied embedding, two optimizer items a step", { "Transformer", 1, nil,
    [[step = { "forward", "backward", "optimizer", "forward", "backward", "optimizer" }]], true } },
  { "a position embedding in the same line", { "Transformer", 1, nil, nil, false } },
  { "two optimizer items a step", { "Llama", 1, nil,
    [[step = { "forward", "backward", "optimizer", "forward", "backward", "optimizer" }]] } },
  -- a NaN norm makes every gradient NaN, the zero ones too
  { "clipping (the embedding a group of its own)", { "Llama", 1, "fsdp.fully_shard(model.tok_embeddings)",
    "grad_clip = 1.0" } },
}
for _, c in ipairs(cases) do
  local p, pc = plan_model(table.unpack(c[2], 1, 5))
  local n = 0
  for _, st in ipairs(p.steps) do
    if st.rows then n = n + 1 end
  end
  check(n == 0 and not pc:find("optimizer_rows", 1, true),
    string.format("%s: no line split (%d): %s", c[1], n, opt_lines(p)))
end

-- The untied Transformer's token embedding alone (its position embedding a group of its
-- own): split; the position embedding's group not.
local split_tok = plan_model("Transformer", 1, "fsdp.fully_shard(model.tok_embeddings)\n"
  .. "fsdp.fully_shard(model.pos_embeddings)", nil, false)
local lines = opt_lines(split_tok)
check(lines:find("tok_embeddings unused", 1, true) and lines:find("tok_embeddings looked_up", 1, true)
  and not lines:find("pos_embeddings unused", 1, true),
  "an untied Transformer: its token embedding split, its position embedding not: " .. lines)

-- A tied embedding at one rank: the root in four parts, the embedding's rows no token looks
-- up stepped after the output head's backward, its rows looked up at the end.
local tied, tc = plan_model("Transformer", 1, nil, nil, true)
check(opt_lines(tied) == "root#1 | root#2 final | layers.1 | layers.0 | root#3 | root#4 looked_up",
  "a tied embedding: the root's norm and the embedding's unused rows before the blocks: " .. opt_lines(tied))
local parts, texts2 = {}, {}
for _, st in ipairs(tied.steps) do
  if st.op == "reduce_scatter" and st.group.name == "" then
    local ps = {}
    for i, k in ipairs(st.reduction.params) do ps[i] = st.group.params[k].fqn end
    parts[#parts + 1] = table.concat(ps, ",") .. (st.reduction.rows and " " .. st.reduction.rows or "")
  end
  if st.rows then texts2[#texts2 + 1] = schedule.step_line(st, tied) end
end
check(table.concat(parts, " | ") == "norm.weight,norm.bias | tok_embeddings.weight final | "
  .. "pos_embeddings.weight | tok_embeddings.weight looked_up",
  "the root's parts: " .. table.concat(parts, " | "))
check(#texts2 == 2 and texts2[1]:find("the rows no token of the step looks up (their gradient final", 1, true)
  and texts2[2]:find("the rows the step's tokens look up", 1, true), "the schedule says which rows each part steps")
check(tc:find("rt_step_optimizer_rows(R, 0, 2, 1, 1, 0, RT_ROWS_FINAL);", 1, true)
  and tc:find("rt_step_optimizer_rows(R, 0, 4, 1, 1, 0, RT_ROWS_LOOKED_UP);", 1, true)
  and tc:find(".rows = RT_ROWS_FINAL", 1, true) and tc:find(".rows = RT_ROWS_LOOKED_UP", 1, true)
  and tc:find(".optimizer_rows = 1,", 1, true), "the step C steps both parts by rows and the model's reductions say so")
-- The gradient buffer the first two parts end zeroes the embedding (unless the head assigns
-- it); the one the last two end does not: the lookups add to the head's gradient.
local ended = {}
for bf, ps in pairs(tied.part_reads) do
  local names = {}
  for i, p in ipairs(ps) do names[i] = p.fqn end
  ended[#ended + 1] = table.concat(names, ",")
end
table.sort(ended)
check(#ended == 2 and ended[1] == "norm.weight,norm.bias,tok_embeddings.weight" and ended[2] == "pos_embeddings.weight",
  "the parts' gradient buffers zero what they read, not the embedding after its final rows: "
  .. table.concat(ended, " | "))

util.finish()
