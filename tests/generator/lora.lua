-- LoRA (nn.LoRALinear, models.Llama's lora_modules, nn.adapter_params, nn.init): the module's
-- parameters, initialization and traced math (torchtune's LoRALinear: the base linear plus
-- alpha/rank times lora_b(lora_a(dropout(x)))); the Llama option's linears and one-line
-- errors; nn.init's kinds and errors; the plan of tests/specs/features/lora_llama_bf16.lua
-- (the base frozen, the adapters reduced and stepped alone); the PyTorch twin's scaling;
-- the Hugging Face map (each adapted weight saved merged with its adapters' indices and
-- alpha/rank; --save-peft's adapter_config.json; a model without adapters as before).
-- Run from the repository root: lua5.4 tests/generator/lora.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path

local util = require("tests.generator.step_c")
local check = util.check
local errors = require("spec.errors")

local function count(text, pat) return select(2, text:gsub(pat, "")) end

-- A spec of a small Llama built with `args` (a Lua table's text) and then `body`.
local function source(args, body)
  return [[
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Llama{ n_layers = 2, dim = 32, n_heads = 4, n_kv_heads = 2, vocab_size = 64,
                            max_seq_len = 16, ffn_dim = 48, ]] .. args .. [[ }
]] .. (body or "") .. [[

for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)
return fsdp.spec{ name = "lora", model = model, world_size = 2, input = { batch = 2, seq_len = 16 },
  loss = "cross_entropy", optimizer = { "adamw", lr = 1e-3 } }
]]
end

local function spec_error(args, body)
  local ok, err = pcall(util.plan_source, source(args, body))
  return not ok and errors.is_spec_error(err) and not err.internal and err.msg or tostring(err)
end

-- the module: FQNs in torchtune's order, lora_b zeros, lora_a a Linear's kaiming uniform
local plan = util.plan_source(source([[lora_modules = { "wq", "w2" }, lora_rank = 4, lora_alpha = 6,
  lora_dropout = 0.1]], [[
model:requires_grad_(false)
for _, p in ipairs(nn.adapter_params(model)) do p:requires_grad_(true) end]]))
local names, trainable = {}, {}
for _, e in ipairs(plan.spec.model:named_parameters()) do
  if e[1]:find("^layers%.0%.") then names[#names + 1] = e[1]:sub(10) end
  if e[2].requires_grad then trainable[#trainable + 1] = e[1] end
end
check(table.concat(names, " ") == "attention_norm.weight attention.wq.weight attention.wq.lora_a.weight "
  .. "attention.wq.lora_b.weight attention.wk.weight attention.wv.weight attention.wo.weight ffn_norm.weight "
  .. "feed_forward.w1.weight feed_forward.w2.weight feed_forward.w2.lora_a.weight "
  .. "feed_forward.w2.lora_b.weight feed_forward.w3.weight",
  "lora_modules { wq, w2 }: each a LoRALinear (weight, lora_a.weight, lora_b.weight), the rest Linear: "
  .. table.concat(names, " "))
check(table.concat(trainable, " ") == "layers.0.attention.wq.lora_a.weight layers.0.attention.wq.lora_b.weight "
  .. "layers.0.feed_forward.w2.lora_a.weight layers.0.feed_forward.w2.lora_b.weight "
  .. "layers.1.attention.wq.lora_a.weight layers.1.attention.wq.lora_b.weight "
  .. "layers.1.feed_forward.w2.lora_a.weight layers.1.feed_forward.w2.lora_b.weight",
  "nn.adapter_params: the 8 adapter weights in named_parameters order, all that stay trainable")
local wq = plan.spec.model.layers[1].attention.wq
local w2 = plan.spec.model.layers[1].feed_forward.w2
check(rawget(wq, "_type") == "LoRALinear" and wq.lora_b.weight.init.kind == "zeros"
  and wq.lora_a.weight.init.kind == "uniform" and wq.lora_a.weight.init.bound == 1 / math.sqrt(32)
  and w2.lora_a.weight.init.bound == 1 / math.sqrt(48) and wq.weight.init.bound == 1 / math.sqrt(32)
  and wq.lora_a.weight.shape[1] == 4 and wq.lora_b.weight.shape[2] == 4 and wq.dropout ~= nil,
  "LoRALinear(32, 32, rank 4): lora_b zeros, lora_a and the weight uniform in 1/sqrt(in), lora_a [4, in], "
  .. "lora_b [out, 4], a Dropout for lora_dropout 0.1")

-- the math: linear, lora_a(dropout(x)), lora_b, the scale alpha/rank, the add
local kinds, scale = {}, nil
local site = plan.spec.model.layers[1].attention.wq.lora_b.weight
for i, op in ipairs(plan.graph.ops) do
  if op.ins[2] == site and op.kind == "linear" then
    for j = i - 3, i + 2 do kinds[#kinds + 1] = plan.graph.ops[j].kind end
    scale = plan.graph.ops[i + 1].attrs.scale
  end
end
check(table.concat(kinds, " ") == "linear dropout linear linear scale add" and scale == 1.5,
  "LoRALinear's forward: " .. table.concat(kinds, " ") .. ", scale " .. tostring(scale)
  .. " (alpha 6 / rank 4), as torchtune's")
local p0 = util.plan_source(source([[lora_modules = { "wq" }]]))
check(rawget(p0.spec.model.layers[1].attention.wq, "dropout") == nil
  and p0.spec.model.layers[1].attention.wq.lora_a.weight.shape[1] == 8,
  "defaults: rank 8, no dropout module (torchtune's Identity for lora_dropout 0)")

-- errors, one line each
local msg = spec_error([[lora_modules = { "wq", "wz" }]])
check(msg:find("^Llama: lora_modules%[2%] wz is not one of its linears %(allowed: a non%-empty list of wq, wk, wv, "
  .. "wo, w1, w2, w3, output%)$") ~= nil, "an unknown linear: " .. msg)
msg = spec_error([[lora_modules = { "wq", "wq" }]])
check(msg:find("lora_modules%[2%] wq is given twice") ~= nil, "a linear twice: " .. msg)
msg = spec_error([[lora_modules = {}]])
check(msg:find("^Llama: lora_modules must be a non%-empty list") ~= nil, "an empty list: " .. msg)
msg = spec_error([[lora_modules = "wq"]])
check(msg:find("^Llama: lora_modules must be a non%-empty list") ~= nil, "a string: " .. msg)
msg = spec_error([[lora_modules = { "wq" }, lora_rank = 0]])
check(msg == "Llama: lora_rank must be a positive integer, got 0", "lora_rank 0: " .. msg)
msg = spec_error([[lora_modules = { "wq" }, lora_dropout = 1]])
check(msg == "Llama: lora_dropout must be a number in [0, 1), got 1", "lora_dropout 1: " .. msg)
msg = spec_error("", [[local l = nn.LoRALinear(8, 8, { rank = 2, alpha = -1 })]])
check(msg == "LoRALinear: alpha must be a positive number, got -1", "LoRALinear alpha -1: " .. msg)
msg = spec_error("", [[local l = nn.LoRALinear(8, 8, { alpha = 2 })]])
check(msg == "LoRALinear: rank must be a positive integer, got nil", "LoRALinear without rank: " .. msg)
msg = spec_error("", [[nn.adapter_params(model.norm.weight)]])
check(msg == "adapter_params expects a module", "adapter_params of a parameter: " .. msg)

-- nn.init: the kinds the binary draws, one-line errors for others
local p1 = util.plan_source(source("", [[
assert(nn.init.zeros_(model.norm.weight) == model.norm.weight)
nn.init.ones_(model.output.weight)
nn.init.normal_(model.tok_embeddings.weight, 0, 0.02)
nn.init.uniform_(model.layers[1].attention.wq.weight, -0.1, 0.1)]]))
local m = p1.spec.model
check(m.norm.weight.init.kind == "zeros" and m.output.weight.init.kind == "ones"
  and m.tok_embeddings.weight.init.kind == "normal" and m.tok_embeddings.weight.init.std == 0.02
  and m.layers[1].attention.wq.weight.init.kind == "uniform" and m.layers[1].attention.wq.weight.init.bound == 0.1,
  "nn.init.zeros_, ones_, normal_(0, std), uniform_(-b, b) set the kind the binary draws and return the parameter")
local p2 = util.plan_source(source("", [[
nn.init.kaiming_uniform_(model.output.weight, math.sqrt(5))
nn.init.kaiming_uniform_(model.layers[1].feed_forward.w2.weight)]]))
local kb = p2.spec.model.output.weight.init.bound
local kb2 = p2.spec.model.layers[1].feed_forward.w2.weight.init.bound
check(math.abs(kb - 1 / math.sqrt(32)) < 1e-15 and math.abs(kb2 - math.sqrt(6 / 48)) < 1e-15,
  string.format("nn.init.kaiming_uniform_: a = sqrt(5) is a Linear's 1/sqrt(fan_in) (%.6g), a = 0 "
    .. "sqrt(6/fan_in) (%.6g)", kb, kb2))
msg = spec_error("", "nn.init.kaiming_uniform_(model.norm.weight)")
check(msg:find("^nn.init.kaiming_uniform_: fan in cannot be computed") ~= nil, "kaiming_uniform_ of a 1-D: " .. msg)
msg = spec_error("", "nn.init.normal_(model.norm.weight, 1, 0.02)")
check(msg == "nn.init.normal_: mean 1, std 0.02: fsdpgen draws mean 0 and std >= 0", "normal_ mean 1: " .. msg)
msg = spec_error("", "nn.init.uniform_(model.norm.weight, 0, 1)")
check(msg == "nn.init.uniform_: [0, 1]: fsdpgen draws symmetric bounds [-b, b]", "uniform_(0, 1): " .. msg)
msg = spec_error("", "nn.init.zeros_(model.norm)")
check(msg == "nn.init.zeros_ expects a parameter", "zeros_ of a module: " .. msg)
msg = spec_error("", "nn.init.normal_(model.norm.weight, 0, 0/0)")
check(msg:find("^nn.init.normal_: std must be a finite number") ~= nil, "normal_ std NaN: " .. msg)

-- nn.Parameter(shape, init): the same kinds, checked where the parameter is made (a bad one
-- reached the C emitter as a Lua error: spec_fuzz --seed 1204)
local ok, err = pcall(util.plan_source, source("", [[
local p, q = nn.Parameter({ 8 }, { kind = "normal" }), nn.Parameter({ 8 }, { kind = "uniform", bound = 0.5 })
assert(p.init.kind == "normal" and p.init.std == 1 and q.init.bound == 0.5 and nn.Parameter({ 8 }).init.std == 1)]]))
check(ok, "nn.Parameter's init: normal's std defaults to 1 (torch.nn.init.normal_'s), uniform takes its bound "
  .. tostring(err))
local allowed = ' (allowed: { kind = "zeros" }, { kind = "ones" }, { kind = "normal", std = S }, '
  .. '{ kind = "uniform", bound = B }, S and B finite and >= 0)'
for _, c in ipairs({
  { "function() end", "function is not an initialization fsdpgen draws" },
  { '"normal"', '"normal" is not an initialization fsdpgen draws' },
  { "{ nil }", "kind nil is not one fsdpgen draws" },
  { '{ kind = "xavier" }', 'kind "xavier" is not one fsdpgen draws' },
  { '{ kind = "uniform" }', 'kind "uniform" needs bound, a finite number >= 0, got nil' },
  { '{ kind = "normal", std = -0.02 }', 'kind "normal" needs std, a finite number >= 0, got -0.02' },
  { '{ kind = "normal", std = 0/0 }', 'kind "normal" needs std, a finite number >= 0, got nan' },
  { '{ kind = "uniform", bound = "1" }', 'kind "uniform" needs bound, a finite number >= 0, got "1"' },
}) do
  msg = spec_error("", "local p = nn.Parameter({ 8 }, " .. c[1] .. ")")
  check(msg == "nn.Parameter's init: " .. c[2] .. allowed, "nn.Parameter init " .. c[1] .. ": " .. msg)
end
msg = spec_error("", 'local p = nn.Parameter({ 8 }, { kind = "zeros", std = 1 })')
check(msg == "unknown nn.Parameter init key 'std'; allowed: kind", "nn.Parameter init of kind zeros with a std: " .. msg)
msg = spec_error("", 'local p = nn.Parameter({ 8 }, { kind = "normal", sdt = 1 })')
check(msg == "unknown nn.Parameter init key 'sdt' (did you mean 'std'?); allowed: kind, std",
  "nn.Parameter init with a misspelt std: " .. msg)

-- the feature spec: the blocks' groups reduce and step their adapters alone
plan = util.plan("tests/specs/features/lora_llama_bf16.lua")
local sched = require("emit.schedule").render(plan, "lora_llama_bf16.lua")
local no_grad = sched:match('\n  rs       reduce_scatter%s+"layers%.0"%s+[^\n]*no grad: ([^\n]*)') or ""
check(no_grad:find("^layers%.0%.attention_norm%.weight, layers%.0%.attention%.wq%.weight,") ~= nil
  and not no_grad:find("lora", 1, true),
  "lora_llama_bf16: layers.0's reduce-scatter leaves out every base weight, no adapter: " .. no_grad:sub(1, 90))
local frozen_rows = count(sched, "  frozen\n")
check(frozen_rows == 2 * 9 + 3, "lora_llama_bf16: the schedule marks the 9 base weights of each block and the "
  .. "root's 3 frozen (" .. frozen_rows .. ")")

-- the twin multiplies by alpha/rank as the binary does
local twin = require("emit.emit_torch").text(plan, "lora_llama_bf16.lua", ".")
check(count(twin, "\n        h%d+ = h%d+ %* 2%.6666666666666665\n") == 1,
  "the PyTorch twin's LoRALinear scales the adapter's output by 16/6 written exactly (2.6666666666666665)")

-- the Hugging Face map: adapted weights merged on save; the adapters covered by them
local hf = require("emit.hf")
local map = hf.map(plan)
local merged = {}
for _, e in ipairs(map.tensors) do
  if e.lora then merged[#merged + 1] = e.name .. "=" .. e.lora[2]:gsub("%.lora_b%.weight$", "") end
end
check(#merged == 2 * 4 + 1 and merged[1] == "model.layers.0.self_attn.q_proj.weight=layers.0.attention.wq"
  and map.tensors[#map.tensors].lora and map.tensors[#map.tensors].lora.scale == 16 / 6,
  "the HF map merges q, v, o, down_proj of each block and lm_head with their adapters, scale alpha/rank ("
  .. #merged .. ": " .. (merged[1] or "") .. ")")
local _, c = util.step_c(plan, true)
check(count(c, "%.lora = {%d+, %d+}, %.lora_scale = 2%.6666666666666665") == 9,
  "the model C gives those 9 entries their adapters' indices and alpha/rank")
local peft = require("util.json").encode(map.peft, { float = tostring, sep = ",", colon = ":", empty = "{}" })
check(peft == '{"base_model_name_or_path":null,"bias":"none","fan_in_fan_out":false,"inference_mode":true,'
  .. '"lora_alpha":16.0,"lora_dropout":0.1,"modules_to_save":null,"peft_type":"LORA","r":6,'
  .. '"target_modules":["q_proj","v_proj","o_proj","down_proj","lm_head"],"task_type":"CAUSAL_LM",'
  .. '"use_dora":false,"use_rslora":false}', "--save-peft's adapter_config.json: PEFT's LoRA config with "
  .. "r, lora_alpha, lora_dropout and the HF modules adapted: " .. peft)
check(c:find("static const char hf_peft_config[] =", 1, true) and c:find(".peft_config = hf_peft_config", 1, true),
  "the model C holds that text for --save-peft")
_, c = util.step_c(util.plan("tests/hf/hf_llama.lua"), true)
check(not c:find(".lora", 1, true) and not c:find("peft", 1, true),
  "a Llama without adapters: no .lora and no PEFT config in its HF map")

util.finish()
