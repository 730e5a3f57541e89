-- The Hugging Face map's refusals (generator/emit/hf.lua), without a compiler: every example and
-- feature spec either maps (Llama or GPT-2, each parameter in exactly one tensor) or says why in
-- one line, and models that HF cannot express, or that were changed after their
-- constructor built them, are refused with their reason in the step C
-- (rt_model.hf_unavailable, which the binary prints at option parsing).
-- Run from the repository root: lua5.4 tests/hf/map.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local buffer = require("util.buffer")
local emit_step = require("emit.emit_step")
local hf = require("emit.hf")
local util = require("tests.generator.step_c")
local check = util.check

-- The examples and feature specs (custom models among them): a map (which emits), or a
-- reason.
local specs = {}
local ls = io.popen("ls examples/*.lua tests/specs/features/*.lua")
for f in ls:lines() do specs[#specs + 1] = f end
ls:close()
local mapped, refused = 0, 0
for _, path in ipairs(specs) do
  local plan = util.plan(path)
  local m, why = hf.map(plan)
  if m then
    local index = {}
    for i, e in ipairs(plan.params) do index[e[1]] = i - 1 end
    local ok, err = pcall(hf.emit, buffer.new(), plan, index)
    if ok then mapped = mapped + 1 else check(false, path .. ": map emits: " .. tostring(err)) end
  elseif type(why) == "string" and not why:find("\n") then
    refused = refused + 1
  else
    check(false, path .. ": neither a map nor a one-line reason")
  end
end
check(mapped > 0 and refused > 0, string.format("examples and feature specs: %d map (every parameter in one "
  .. "tensor), %d are refused with one line", mapped, refused))

-- Changed models, each from a spec text: the reason the map gives.
local head = [[
local fsdp, models, nn = require("fsdp"), require("models"), require("nn")
]]
local tail = [[
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)
return fsdp.spec{ name = "hf_map_case", model = model, world_size = 2,
  input = { batch = 2, seq_len = 8 }, loss = "cross_entropy", optimizer = { "sgd", lr = 0.1 } }
]]
local llama = 'local model = models.Llama{ n_layers = 2, dim = 16, n_heads = 2, vocab_size = 32, '
  .. 'max_seq_len = 8 }\n'
local gpt2 = 'local model = models.GPT2{ n_layers = 2, dim = 16, n_heads = 2, vocab_size = 32, '
  .. 'max_seq_len = 8 }\n'
local cases = {
  { "a plain Llama maps", llama, nil },
  { "a plain GPT-2 maps", gpt2, nil },
  { "a non-causal Transformer", 'local model = models.Transformer{ n_layers = 2, dim = 16, '
    .. 'n_heads = 2, vocab_size = 32, max_seq_len = 8, use_attn_mask = false }\n', "is causal" },
  { "a Llama with its output tied to the embedding",
    llama .. "model.output.weight = model.tok_embeddings.weight\n", "(or their ties)" },
  { "a Llama block with another rotary theta",
    llama .. "model.layers[1].attention.theta = 1.0\n", "changed 'theta'" },
  { "a GPT-2 block with another feed-forward",
    gpt2 .. "model.layers[2].feed_forward = nn.Sequential{ nn.Linear(16, 64), nn.Linear(64, 16) }\n",
    "its modules are not" },
  { "a GPT-2 with its own forward",
    gpt2 .. "model.forward = function(self, t) return self.output(self.tok_embeddings(t)):float() end\n",
    "changed 'forward'" },
}
local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)
for _, c in ipairs(cases) do
  local path = dir .. "/hf_map_case.lua"
  local f = assert(io.open(path, "w"))
  f:write(head .. c[2] .. tail)
  f:close()
  local ok, plan = pcall(util.plan, path)
  if not ok then
    check(false, c[1] .. ": plans (" .. tostring(type(plan) == "table" and plan.msg or plan) .. ")")
  else
    local m, why = hf.map(plan)
    if not c[3] then
      check(m ~= nil, c[1] .. " (" .. (m and m.arch or tostring(why)) .. ")")
    else
      local text = emit_step.render(plan, path, "case")
      check(not m and why:find(c[3], 1, true) ~= nil and text:find(".hf_unavailable =\n", 1, true)
        and not text:find(".hf = ", 1, true), c[1] .. " is refused: " .. tostring(why))
    end
  end
end
os.execute("rm -rf " .. dir)

util.finish()
