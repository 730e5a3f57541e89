-- Attention dropout (nn.attention's dropout_p; models.Transformer's dropout_p, as PyTorch's
-- test Transformer): the traced op keeps p in training only; the step calls the
-- rt_attention_lowmem_*dropout_* kernels with the op's RNG site, forward and backward of one
-- op on one site and a recomputed forward on its original's; the eval program and p = 0 call
-- the plain kernels; .draws_rng is set by attention dropout alone; cuDNN is refused with the
-- reason in the .schedule; the PyTorch twin draws the binary's masks: its dropout_sites
-- are the forwards' dropout sites in the step's order, with their element counts.
-- Run from the repository root: lua5.4 tests/generator/attention_dropout.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path

local util = require("tests.generator.step_c")
local check, args_of = util.check, util.args_of

local function count(text, pat) return select(2, text:gsub(pat, "")) end

-- The dropout calls of a step C text: { dir = "forward" | "backward", p, site } each, in order.
local function drop_calls(text)
  local out = {}
  for call, dir in text:gmatch("(rt_attention_lowmem_[%w_]*dropout_(%a+)%b();)") do
    local a = args_of(call)
    out[#out + 1] = { dir = dir, p = a[#a - 2], seed = a[#a - 1],
      site = tonumber(a[#a]:match("^rt_step_rng_stream%(R, (%d+)%)$")) }
  end
  return out
end

-- bf16, two layers, p 0.1: packed calls, one site per layer, forward and backward alike
local plan = util.plan("tests/specs/features/transformer_attn_dropout_bf16.lua")
local step, c = util.step_c(plan, true)
local calls = drop_calls(step)
local fwd, bwd = {}, {}
for _, k in ipairs(calls) do
  local list = k.dir == "forward" and fwd or bwd
  list[#list + 1] = k
end
local ok = #fwd == 2 and #bwd == 2 and count(step, "rt_attention_lowmem_packed_dropout_forward%(") == 2
  and count(step, "rt_attention_lowmem_packed_dropout_backward%(") == 2
for _, k in ipairs(calls) do ok = ok and k.p == "0.1f" and k.seed == "R->seed" and k.site ~= nil end
check(ok, string.format("transformer_attn_dropout_bf16: 2 packed dropout forwards and 2 backwards, p 0.1f, "
  .. "the step's seed and an RNG site each (%d, %d)", #fwd, #bwd))
check(#fwd == 2 and #bwd == 2 and fwd[1].site ~= fwd[2].site and bwd[1].site == fwd[2].site
  and bwd[2].site == fwd[1].site, "each op's backward draws on its forward's site (layers backward in "
  .. "reverse), the two layers on two sites: " .. (fwd[1] and fwd[1].site or "?") .. ", "
  .. (fwd[2] and fwd[2].site or "?"))
local eval = c:match("\n// %-%-%-%- eval_.*$") or ""
check(count(eval, "dropout_forward%(") == 0 and count(eval, "rt_attention_lowmem_[%w_]*forward%(") == 2,
  "its eval program: the plain attention calls (model.eval() turns dropout off)")
check(c:find(".draws_rng = 1,", 1, true) ~= nil, "its rt_model says the step draws random numbers")
for _, op in ipairs(plan.graph.ops) do
  if op.kind == "attention" then
    check(op.attrs.dropout_p == 0.1 and op.attention.cudnn == false
      and op.attention.why == "dropout (cuDNN would draw its own masks, not the step's)",
      "op " .. op.label .. ": p 0.1, cuDNN refused: " .. tostring(op.attention.why))
  end
end
local sched = require("emit.schedule").render(plan, "spec.lua")
check(sched:find("causal dropout 0.1  fsdpgen: dropout (cuDNN would draw its own masks, not the step's)",
  1, true) ~= nil, "the .schedule's attention line gives p and why cuDNN is refused")
local twin = require("emit.emit_torch").text(plan, "spec.lua", ".")
check(count(twin, "dropout_p=0%.1 if self%.training else 0%.0%)") == 1,
  "the PyTorch twin: attention's dropout_p in training (one Attention forward)")

-- The twin's dropout_sites: { site, elements } each, in its order.
local function twin_sites(text)
  local out = {}
  for site, n in text:match("dropout_sites=%[(.-)%],"):gmatch("%((%d+), (%d+)%)") do
    out[#out + 1] = { site = tonumber(site), n = tonumber(n) }
  end
  return out
end
local attn
for _, op in ipairs(plan.graph.ops) do if op.kind == "attention" then attn = op end end
local B, T = require("memory.attention").dims(attn)
local probs, found = B * attn.attrs.n_heads * T * T, {}
for _, k in ipairs(twin_sites(twin)) do if k.n == probs then found[#found + 1] = k.site end end
check(#found == 2 and found[1] == fwd[1].site and found[2] == fwd[2].site,
  string.format("the twin's dropout_sites: the attention forwards' sites with B*NH*T*T = %d elements", probs))

-- checkpointed blocks (the seed spec's Transformer, default p 0.1): the recomputed forward
-- draws the original's masks
plan = util.plan("tests/specs/seed/set_backward_prefetch_1.lua")
step = util.step_c(plan, true)
local sites, recomputed = {}, 0
for _, s in ipairs(util.compute_steps(step)) do
  for _, call in ipairs(s.calls) do
    local k = drop_calls(call)[1]
    if k and k.dir == "forward" then
      if s.kind == "recompute" then
        recomputed = recomputed + 1
        ok = ok and sites[k.site]
      else
        sites[k.site] = true
      end
    end
  end
end
check(recomputed == 4 and ok, string.format("set_backward_prefetch_1: %d recomputed attention forwards, each on "
  .. "the site of a forward", recomputed))
-- the twin lists every dropout of the forward (F.dropout's and attention's) in the order the
-- step calls them, recomputes not again
local order = {}
for _, s in ipairs(util.compute_steps(step)) do
  for _, call in ipairs(s.calls) do
    local site = call:match("^rt_[%w_]*dropout_forward%(.*rt_step_rng_stream%(R, (%d+)%)")
    if site and s.kind ~= "recompute" then order[#order + 1] = site end
  end
end
local listed = {}
for i, k in ipairs(twin_sites(require("emit.emit_torch").text(plan, "spec.lua", "."))) do listed[i] = k.site end
check(#order == 13 and table.concat(order, " ") == table.concat(listed, " "),
  string.format("set_backward_prefetch_1's twin: the %d forward dropout sites in the step's order (%s)", #order,
  table.concat(listed, " ")))

-- p = 0: no dropout anywhere, so the ops qualify for cuDNN (their sites' calls), no RNG
plan = util.plan("tests/specs/conformance/transformer_w2_bf16.lua")
step, c = util.step_c(plan, true)
check(count(c, "dropout") == 0 and count(step, "rt_step_attention_forward%(") == 2
  and c:find(".draws_rng = 0,", 1, true) ~= nil,
  "transformer_w2_bf16 (dropout_p = 0): no dropout call, the cuDNN sites' calls, no RNG")

-- attention dropout alone draws random numbers
local src = [[
local nn, fsdp = require("nn"), require("fsdp")
local m = nn.Module{ wq = nn.Linear(16, 16) }
function m.forward(self, x)
  local q = self.wq(x)
  return nn.attention(q, q, q, { n_heads = 4, dropout_p = 0.25 })
end
fsdp.fully_shard(m)
return fsdp.spec{ name = "only_attn_dropout", model = m, world_size = 2, input = { shape = { 2, 8, 16 } } }
]]
local p2, c2 = util.plan_source(src)
check(c2:find(".draws_rng = 1,", 1, true) ~= nil and count(c2, "rt_attention_lowmem_dropout_forward%(") == 1
  and count(c2, "0%.25f") >= 2, "a spec whose only dropout is attention's: .draws_rng = 1, fp32 dropout calls")
local n = 0
for _, op in ipairs(p2.eval_plan and p2.eval_plan.graph.ops or {}) do
  if op.kind == "attention" then n = n + (op.attrs.dropout_p and 1 or 0) end
end
check(n == 0, "its eval program's attention records no dropout")

util.finish()
