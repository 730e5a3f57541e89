-- Frozen parameters (requires_grad_(false)): the spec API (a parameter's and a module's
-- requires_grad_, assignment, tied parameters, one-line errors); the plan of
-- tests/specs/features/frozen_params.lua: which groups are frozen, which reduce-scatter
-- leaves which parameters out, no sharded gradients or optimizer state for a frozen group;
-- its rt_model (.frozen, no optimizer call) and the PyTorch twin's requires_grad_(False);
-- at one rank, in-place packed gradients for a group with frozen parameters; in a group with
-- frozen parameters (frozen_params, frozen_between: first, middle and last, padded shards;
-- frozen_llama_w1_bf16: packed, in place), gradients and optimizer state for the others
-- alone: the buffers' bytes, the rt_model numbers, no gradient for a frozen one.
-- Run from the repository root: lua5.4 tests/generator/frozen_params.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path

local util = require("tests.generator.step_c")
local check = util.check
local errors = require("spec.errors")

local function count(text, pat) return select(2, text:gsub(pat, "")) end

-- A spec around a model body (`body` freezes; the model is `model`).
local function source(body, opts)
  return [[
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2, vocab_size = 8, max_seq_len = 16, dim = 16, n_heads = 4,
                                  dropout_p = 0, weight_tying = ]] .. tostring(opts and opts.tied or false) .. [[ }
]] .. body .. [[

for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)
return fsdp.spec{ name = "frozen", model = model, world_size = 2, input = { batch = 2, seq_len = 8 } }
]]
end

local function frozen_names(plan)
  local out = {}
  for _, e in ipairs(plan.spec.model:named_parameters()) do
    if not e[2].requires_grad then out[#out + 1] = e[1] end
  end
  return table.concat(out, " ")
end

-- the API: methods return their receiver, a module's covers every parameter below it
local plan = util.plan_source(source([[
assert(model.layers[1].attention:requires_grad_(false) == model.layers[1].attention)
local p = model.norm.weight
assert(p:requires_grad_(false) == p and p:requires_grad_() == p and p.requires_grad == true)
model.pos_embeddings.weight.requires_grad = false
]]))
check(frozen_names(plan) == "pos_embeddings.weight layers.0.attention.wq.weight layers.0.attention.wk.weight "
  .. "layers.0.attention.wv.weight layers.0.attention.wo.weight",
  "a module's requires_grad_(false) freezes each parameter below it, assignment one, requires_grad_() "
  .. "unfreezes: " .. frozen_names(plan))

-- a tied parameter is one parameter: freezing the embedding freezes the output head
plan = util.plan_source(source("model.tok_embeddings:requires_grad_(false)", { tied = true }))
local head
for _, e in ipairs(plan.spec.model:named_parameters()) do
  if e[1] == "tok_embeddings.weight" then head = e end
end
check(head and #head[3] == 2 and head[3][2] == "output.weight" and head[2].requires_grad == false,
  "weight tying: the embedding's requires_grad_(false) also freezes output.weight (one parameter, two names)")

-- errors: one line each, at the call or at the spec
local function spec_error(body)
  local ok, err = pcall(util.plan_source, source(body))
  return not ok and errors.is_spec_error(err) and not err.internal and err.msg or tostring(err)
end
local msg = spec_error("model.norm:requires_grad_(0)")
check(msg == "requires_grad_ expects true or false, got 0", "requires_grad_(0): " .. msg)
msg = spec_error("model.norm.weight.requires_grad = nil")
check(msg == "parameter 'norm.weight': requires_grad must be true or false, got nil",
  "requires_grad = nil: " .. msg)
msg = spec_error("model:requires_grad_(false)")
check(msg:find("^the loss does not require a gradient") ~= nil, "every parameter frozen: " .. msg)

-- the feature spec: frozen groups, reductions, memory, rt_model, twin
plan = util.plan("tests/specs/features/frozen_params.lua")
local frozen = {}
for _, g in ipairs(plan.groups) do
  if g.frozen then frozen[#frozen + 1] = '"' .. g.name .. '"' end
end
check(table.concat(frozen, " ") == '"tok_embeddings" "layers.0"',
  "frozen groups: the embedding's and the first block's (" .. table.concat(frozen, " ") .. ")")
local sched = require("emit.schedule").render(plan, "frozen_params.lua")
local rs = {}
for name, rest in sched:gmatch('\n  rs       reduce_scatter%s+"([^"]*)"%s+([^\n]*)') do
  rs[#rs + 1] = { name = name, no_grad = rest:match("no grad: (.*)$") }
end
local ok = #rs == 3
for _, r in ipairs(rs) do
  if r.name == "layers.1" then
    ok = ok and r.no_grad == "layers.1.attention.wq.weight, layers.1.attention.wk.weight, "
      .. "layers.1.attention.wv.weight, layers.1.attention.wo.weight"
  elseif r.name == "" then ok = ok and r.no_grad == "pos_embeddings.weight"
  else ok = ok and r.name == "layers.2" and r.no_grad == nil end
end
check(ok, string.format("3 reduce-scatters (layers.2, the root without pos_embeddings, layers.1 without "
  .. "its attention), none for the frozen groups (%d)", #rs))
local persistent = {}
for _, b in ipairs(plan.memory.buffers) do
  if b.kind == "persistent" then persistent[b.name] = true end
end
ok = persistent['"tok_embeddings" sharded params'] and persistent['"layers.0" sharded params']
  and persistent['"layers.1" sharded grads'] and persistent['"layers.1" optimizer state']
for _, g in ipairs({ "tok_embeddings", "layers.0" }) do
  ok = ok and not persistent['"' .. g .. '" sharded grads'] and not persistent['"' .. g .. '" optimizer state']
end
check(ok, "the memory plan: a frozen group's sharded params alone; a group with a frozen part keeps "
  .. "its gradients and optimizer state")
local step, c = util.step_c(plan, true)
check(count(c, "%.params_off = [%w_]+, %.frozen = 1") == 2 and count(c, "%.grads_off = ") == 3,
  "rt_model: the 2 frozen groups say so and have no gradients' offset, the other 3 do")
local stepped = {}
for g in step:gmatch("rt_step_optimizer%(R, (%d+),") do stepped[#stepped + 1] = g end
table.sort(stepped)
check(table.concat(stepped, " ") == "0 3 4", "the optimizer steps groups 0, 3 and 4, not the frozen 1 and 2 ("
  .. table.concat(stepped, " ") .. ")")
local twin = require("emit.emit_torch").text(plan, "frozen_params.lua", ".")
local listed = {}
for fqn in twin:gmatch('model%.get_parameter%("([^"]+)"%)%.requires_grad_%(False%)') do
  listed[#listed + 1] = fqn
end
check(#listed == 18 and listed[1] == "tok_embeddings.weight" and listed[2] == "pos_embeddings.weight",
  string.format("the twin freezes the same 18 parameters before fully_shard (%d: %s, ...)", #listed,
    table.concat(listed, ", ", 1, math.min(3, #listed))))

-- one rank, bf16: a reduction that leaves out only frozen parameters stays in place and
-- packed (memory.lua in_place_groups, grad_assigns.packed_groups), as without them
plan = util.plan("tests/specs/features/frozen_llama_w1_bf16.lua")
sched = require("emit.schedule").render(plan, "frozen_llama_w1_bf16.lua")
local line = sched:match('\n  rs       reduce_scatter%s+"layers%.0"%s+([^\n]*)') or ""
check(line:find("in place: the backward wrote the sharded grads in bf16", 1, true) ~= nil
  and line:find("no grad: layers.0.attention.wq.weight", 1, true) ~= nil,
  "frozen_llama_w1_bf16: the block with a frozen attention reduces in place, packed: " .. line)

-- A group with frozen parameters: its sharded gradients (fp32, or param_dtype packed), its
-- optimizer state (AdamW: 2 buffers) and its unsharded gradients (times the shard world)
-- hold the padded shards of its trainable parameters alone, one after another in group
-- order; rt_model says where (frozen_numel; frozen, frozen_before per parameter, the
-- unsharded_offset of a trainable one), and no frozen parameter has a gradient's name (G_)
-- or a gradient view in the step C.
local function mixed_groups(path, want)
  local p = util.plan(path)
  local bufs = {}
  for _, b in ipairs(p.memory.buffers) do bufs[b.name] = b end
  local _, c = util.step_c(p, true)
  local seen = {}
  for _, g in ipairs(p.groups) do
    local frozen, trainable, before, entries_ok = 0, 0, {}, true
    for _, l in ipairs(g.layout.params) do
      if l.param.requires_grad then
        before[l.param] = frozen
        trainable = trainable + l.shard_numel
      else
        frozen = frozen + l.shard_numel
      end
    end
    if frozen > 0 and not g.frozen then
      seen[#seen + 1] = '"' .. g.name .. '"'
      local q = '"' .. g.name .. '"'
      local eb = g.packed_grads and 2 or 4
      local grads, state = bufs[q .. " sharded grads" .. (g.packed_grads and " (bf16)" or "")],
        bufs[q .. " optimizer state"]
      local ugrads = bufs[q .. " unsharded grads"] or bufs[q .. " unsharded grads (in place)"]
      local ok = grads and grads.size == eb * trainable and state and state.size == 8 * trainable
        and ugrads and ugrads.size == eb * trainable * g.shard
      check(ok, string.format("%s group %s: sharded grads %s, optimizer state %s, unsharded grads %s bytes = "
        .. "%d trainable elements of %d per rank (x %d bytes, x 2 states; x %d ranks)", path:match("[^/]+$"), q,
        grads and grads.size, state and state.size, ugrads and ugrads.size, trainable, g.layout.shard_numel, eb,
        g.shard))
      local gline = c:match("{%.name = " .. q:gsub("%p", "%%%0") .. ", [^\n]*")
      local lines = {}
      for k, l in ipairs(g.layout.params) do
        local fqn = l.param.fqn
        local e = c:match('{%.fqn = "' .. fqn:gsub("%p", "%%%0") .. '"[^\n]*') or ""
        local off = e:match("%.unsharded_offset = (%d+)")
        local fb = tonumber(e:match("%.frozen_before = (%d+)") or "0")
        local named = c:find("G_" .. fqn:gsub("[^%w_]", "_") .. "%f[^%w_]") ~= nil
        if l.param.requires_grad then
          entries_ok = entries_ok and not e:find("%.frozen = 1") and fb == before[l.param]
            and tonumber(off) == (l.offset - before[l.param]) * g.shard and named
        else
          entries_ok = entries_ok and e:find("%.frozen = 1") ~= nil and not off and not named
        end
        lines[k] = fqn .. (l.param.requires_grad and "" or " (frozen)")
      end
      check(entries_ok and gline and gline:find("%.frozen_numel = " .. frozen .. ",") ~= nil,
        string.format("%s group %s: .frozen_numel = %d; each frozen parameter .frozen = 1, no unsharded "
          .. "offset nor G_ name; each other its frozen_before and its offset less it (x %d ranks): %s",
          path:match("[^/]+$"), q, frozen, g.shard, table.concat(lines, ", ")))
    end
  end
  check(table.concat(seen, " ") == want, string.format("%s: the groups with frozen parameters beside "
    .. "trainable ones are %s (%s)", path:match("[^/]+$"), want, table.concat(seen, " ")))
end
mixed_groups("tests/specs/features/frozen_params.lua", '"" "layers.1"')
mixed_groups("tests/specs/features/frozen_between.lua", '"0" "1"')
mixed_groups("tests/specs/features/frozen_llama_w1_bf16.lua", '"layers.0"')

-- frozen_between: frozen first, in the middle and last, shards padded (7 and 5 rows on 2
-- ranks): the group's gradients are a.bias, b.bias and c.weight's padded shards, 4 + 4 + 21
plan = util.plan("tests/specs/features/frozen_between.lua")
local g0 = plan.groups[2]
local got = {}
for _, l in ipairs(g0.layout.params) do got[#got + 1] = tostring(l.grad_offset) end
check(g0.name == "0" and g0.layout.grad_numel == 29 and table.concat(got, " ") == "nil 0 nil 4 8 nil",
  string.format("frozen_between group \"0\": 29 elements of gradients, a.bias at 0, b.bias at 4, c.weight at 8, "
    .. "the frozen a.weight, b.weight and c.bias none (%s: %s)", g0.layout.grad_numel, table.concat(got, " ")))

-- a group all frozen, or none: as before (no frozen_numel, frozen_before or per-parameter frozen)
for _, path in ipairs({ "examples/llama_finetune.lua", "examples/tiny.lua" }) do
  local _, text = util.step_c(util.plan(path), true)
  check(not text:find("frozen_numel", 1, true) and not text:find("frozen_before", 1, true)
    and not text:find("%.frozen = 1, %.init"), path .. ": no group with frozen and trainable parameters, "
    .. "none of their numbers")
end

util.finish()
