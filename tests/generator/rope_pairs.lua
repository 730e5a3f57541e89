-- Rotary embeddings in pairs (generator/memory/rope_pairs.lua): an attention's q and k
-- rotations in one call, forward (rt_rope_pair_packed_forward on k's step) and backward
-- (rt_rope_pair_packed_backward on q's). Checked on Llama 1B (16 pairs each way and in the
-- eval, no rotation alone, the call's operands), on every repository spec (each pair two
-- rotations of one 16-bit dtype, the later step making the call, a call for each pair),
-- the rules that keep rotations apart (fp32; a checkpointed block's backward, whose k
-- linear is no longer stacked; one input rotated twice; a rotation of a rotation; two
-- thetas), and the simulator (a pair is one launch).
-- Run from the repository root: lua5.4 tests/generator/rope_pairs.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local cost = require("simulate.cost")
local gpu = require("simulate.gpu")

local util = require("tests.generator.step_c")
local check, args_of = util.check, util.args_of

local function count(text, pat) return select(2, text:gsub(pat, "")) end

-- The plan's pairs by kind of step ("forward", "recompute", "backward").
local function pairs_of(plan)
  local n = { forward = 0, recompute = 0, backward = 0 }
  for _, st in ipairs(plan.steps) do
    local p = st.rope_pair
    if p and st == p.call then
      assert(plan.steps[p.at] == st)
      n[st.op] = n[st.op] + 1
    end
  end
  return n
end

-- Llama 1B: q (32 heads) and k (8) of every block; backward k's rotation first, both into
-- the q, k, v stack's gradient rows of 3072.
local llama = util.plan("examples/llama_1b.lua")
local step, c = util.step_c(llama, true)
local n = pairs_of(llama)
check(n.forward == 16 and n.backward == 16 and count(step, "rt_rope_pair_packed_forward%(") == 16
  and count(step, "rt_rope_pair_packed_backward%(") == 16 and count(c, "rt_rope_packed_") == 0,
  string.format("llama_1b: 16 pairs forward and 16 backward (%d, %d), a call each, no rotation alone (%d)",
    n.forward, n.backward, count(c, "rt_rope_packed_")))
local fa = args_of(step:match("rt_rope_pair_packed_forward%b();"))
local ba = args_of(step:match("rt_rope_pair_packed_backward%b();"))
check(fa[3] == "32" and fa[7] == "8" and fa[9] == "4" and fa[10] == "2048" and fa[11] == "64"
  and fa[13] == "RT_BF16", "llama_1b forward: q's 32 heads, then k's 8; B 4, T 2048, HD 64: " .. table.concat(fa, " "))
check(ba[3] == "8" and ba[6] == "3072" and ba[9] == "32" and ba[12] == "3072" and ba[5] == "RT_ASSIGN_1"
  and ba[11] == "RT_ASSIGN_1", "llama_1b backward: k's 8 heads, then q's 32, both assigned into rows of 3072: "
  .. table.concat(ba, " "))
local eval = c:match("\n// %-%-%-%- eval_.*$") or ""
check(count(eval, "rt_rope_pair_packed_forward%(") >= 16, string.format("llama_1b's eval: %d pair calls",
  count(eval, "rt_rope_pair_packed_forward%(")))

-- Every spec: the pairs as rope_pairs.lua marks them, and a call for each.
local total = 0
local specs = util.each_planned(function(path, plan, text)
  local bad
  for _, st in ipairs(plan.steps) do
    local p = st.rope_pair
    if p then
      local a, b = p.a, p.b
      if a.kind ~= "rotary" or b.kind ~= "rotary" or a.ins[1].dtype ~= b.ins[1].dtype
          or a.ins[1].dtype == "fp32" or p.call.op ~= st.op then
        bad = "a pair of " .. a.kind .. " and " .. b.kind
      end
      if st == p.call then
        total = total + 1
        if st.node ~= b then bad = "the call on the later step" end
      elseif st.node ~= a then
        bad = "the earlier step's op is a"
      end
    end
  end
  local calls = count(text, "rt_rope_pair_packed_forward%(") + count(text, "rt_rope_pair_packed_backward%(")
  if calls ~= count(text, "%(rotary pair: one call for ") then bad = "a call for each pair" end
  check(not bad, string.format("%s: rotary pairs%s", path, bad and (": " .. bad) or ""))
end)
check(total >= 40, string.format("%d pairs in %d specs", total, specs))

-- The rules that keep rotations apart.
local function llama_src(extra, dtype)
  return string.format([[
local fsdp, models, nn = require("fsdp"), require("models"), require("nn")
local model = models.Llama{ n_layers = 2, dim = 64, n_heads = 4, n_kv_heads = 2, vocab_size = 64, max_seq_len = 16 }
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = %q, reduce_dtype = "fp32" }
%s
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { mp_policy = mp }) end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{ name = "rope_pairs_probe", model = model, world_size = 2,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy", optimizer = { "adamw", lr = 1e-3 } }
]], dtype, extra)
end
n = pairs_of(util.plan_source(llama_src("", "bf16")))
check(n.forward == 2 and n.backward == 2, string.format("bf16: 2 pairs forward, 2 backward (%d, %d)", n.forward,
  n.backward))
n = pairs_of(util.plan_source(llama_src("", "fp32")))
check(n.forward + n.backward == 0, "fp32: no pair")
n = pairs_of(util.plan_source(llama_src("nn.checkpoint_module(model.layers[1])", "fp16")))
check(n.forward == 2 and n.recompute == 1 and n.backward == 1, string.format("fp16, a checkpointed first block: "
  .. "2 pairs forward, 1 recomputed, 1 backward (its k linear unstacked: %d, %d, %d)", n.forward, n.recompute,
  n.backward))

-- a module rotating y twice (`same`), y and its rotation (`chain`), or with two thetas
local function rot_src(body)
  return string.format([[
local nn, fsdp = require("nn"), require("fsdp")
local model = nn.Module{ name = "Rot" }
model.a = nn.Linear(16, 16)
model.b = nn.Linear(16, 16)
rawset(model, "_class", { forward = function(self, x)
  local y, z = self.a(x), self.b(x)
  %s
end })
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{ name = "rope_rules", model = model, world_size = 1, input = { shape = { 2, 8, 16 } },
  loss = "sum", optimizer = { "sgd", lr = 0.1 } }
]], body)
end
local function rot_pairs(body)
  local p = pairs_of(util.plan_source(rot_src(body)))
  return p.forward, p.backward
end
local f, b = rot_pairs("return nn.rotary(y, { n_heads = 2 }) + nn.rotary(z, { n_heads = 2 })")
check(f == 1 and b == 1, string.format("control, y and z rotated: a pair each way (%d, %d)", f, b))
f, b = rot_pairs("return nn.rotary(y, { n_heads = 2 }) + nn.rotary(y, { n_heads = 2 })")
check(f + b == 0, string.format("y rotated twice: no pair (%d, %d)", f, b))
f, b = rot_pairs("return nn.rotary(nn.rotary(y, { n_heads = 2 }), { n_heads = 2 }) + z")
check(f + b == 0, string.format("a rotation of a rotation: no pair (%d, %d)", f, b))
f, b = rot_pairs("return nn.rotary(y, { n_heads = 2 }) + nn.rotary(z, { n_heads = 2, theta = 500000 })")
check(f + b == 0, string.format("two thetas: no pair (%d, %d)", f, b))

-- The simulator: the earlier rotation of a pair adds no launch.
local h100 = assert(gpu.load(".", "h100"))
local k = h100.kernels.fsdpgen
local paired, apart = 0, 0
for _, st in ipairs(llama.steps) do
  local p = st.rope_pair
  if p and st ~= p.call then
    paired = paired + cost.step(st, llama, h100, k).launches
    st.rope_pair = nil
    apart = apart + cost.step(st, llama, h100, k).launches
    st.rope_pair = p
  end
end
check(paired == 0 and apart == 32, string.format("simulated: the earlier rotations of 32 pairs add %d launches "
  .. "(%d apart)", paired, apart))
util.finish()
