-- Frozen parameters (requires_grad_(false)): the spec API (a parameter's and a module's
-- requires_grad_, assignment, tied parameters, one-line errors); the plan of
-- tests/specs/features/frozen_params.lua: which groups are frozen, which reduce-scatter
-- leaves which parameters out, no sharded gradients or optimizer state for a frozen group;
-- its rt_model (.frozen, no optimizer call) and the PyTorch twin's requires_grad_(False);
-- at one rank, in-place packed gradients for a group with frozen parameters.
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
check(count(c, "%.frozen = 1") == 2 and count(c, "%.grads_off = ") == 3,
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

util.finish()
