-- Which forward tensors the memory plan keeps for the backward: those a backward kernel
-- reads (memory.lua backward_reads), which are the ones PyTorch's autograd saves. In a
-- Llama block the pre-rotary q and k, and the outputs of wo and w2 (read by a rotation and
-- residual adds, whose gradients need none of their forward) are freed in the forward; the
-- norms' inputs and outputs, the rotated q and k, v, attention's output, w1's and w3's
-- outputs and swiglu's live into the backward. In a LoRA linear, lora_b's output and its
-- scaled copy are freed in the forward, lora_a's output (lora_b's input) is kept.
-- Run from the repository root: lua5.4 tests/generator/saved_activations.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path

local util = require("tests.generator.step_c")
local check = util.check

-- The activations of block 0 (names without "layers.0.") that live into the backward, and
-- those that do not, of the spec at path.
local function lifetimes(path)
  local plan = util.plan(path)
  local kept, freed = {}, {}
  for _, b in ipairs(plan.memory.buffers) do
    local name = b.kind == "activation" and b.name:match("^layers%.0%.(.*)$")
    if name and plan.steps[b.first].phase == "forward" then
      local list = plan.steps[b.last].phase == "forward" and freed or kept
      list[#list + 1] = name
    end
  end
  return table.concat(kept, " "), table.concat(freed, " ")
end

local kept, freed = lifetimes("tests/hf/hf_llama.lua")
check(kept == "attention_norm.rms_norm attention_norm.rms_norm saved stats attention.rotary attention.rotary#2 "
  .. "attention.wv.linear attention.attention attention.attention saved stats add ffn_norm.rms_norm "
  .. "ffn_norm.rms_norm saved stats feed_forward.w1.linear feed_forward.w3.linear feed_forward.swiglu add#2",
  "hf_llama block 0: kept for the backward what autograd saves: " .. kept)
check(freed == "attention.wq.linear attention.wk.linear attention.attention scratch attention.wo.linear "
  .. "feed_forward.w2.linear", "hf_llama block 0: freed in the forward: " .. freed)

kept, freed = lifetimes("tests/specs/features/lora_llama_bf16.lua")
local function has(list, name) return (" " .. list .. " "):find(" " .. name .. " ", 1, true) ~= nil end
local ok = true
for _, name in ipairs({ "attention.wq.lora_b.linear", "attention.wq.scale", "attention.wq.linear",
    "attention.wv.lora_b.linear", "attention.wv.scale", "attention.wv.linear", "feed_forward.w2.lora_b.linear",
    "feed_forward.w2.scale", "feed_forward.w2.linear", "feed_forward.w2.add" }) do
  ok = ok and has(freed, name) and not has(kept, name)
end
for _, name in ipairs({ "attention.wq.lora_a.linear", "attention.wq.dropout.dropout", "attention.wv.add",
    "feed_forward.w2.lora_a.linear", "feed_forward.swiglu" }) do
  ok = ok and has(kept, name)
end
check(ok, "lora_llama_bf16 block 0: each adapter's lora_b output, its scaled copy and the base linear's output "
  .. "freed in the forward; lora_a's output, the dropout's and v's sum kept (freed: " .. freed .. ")")

util.finish()
