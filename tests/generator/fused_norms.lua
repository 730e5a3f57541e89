-- A residual add and the norm of its sum in one call (generator/plan/planner.lua
-- residual_before_norm issues the add just before its norm; generator/memory/memory.lua
-- marks the pair; the norm's step calls rt_residual_rmsnorm_packed_forward or
-- rt_residual_layernorm_packed_forward). Checked on Llama 1B and GPT-2 124M (both norms of
-- every block and the final one, past the FSDP steps between a block's last add and the
-- next block's norm), on every repository spec (each pair adjacent, one 16-bit dtype, the
-- add's step without a call, a call for each pair), a checkpointed block (its last add
-- stays where it ran) and fp32 (no pair); and the simulator prices a pair as one launch.
-- Run from the repository root: lua5.4 tests/generator/fused_norms.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local cost = require("simulate.cost")
local gpu = require("simulate.gpu")

local util = require("tests.generator.step_c")
local check = util.check

local function count(text, pat) return select(2, text:gsub(pat, "")) end

local function pairs_of(plan)
  local n = 0
  for i, st in ipairs(plan.steps) do
    if st.fused_norm then
      n = n + 1
      assert(plan.steps[i + 1] == st.fused_norm and st.fused_norm.fused_add == st)
    end
  end
  return n
end

-- Llama 1B: 16 blocks x 2 norms, each after an add (the first block's attention_norm reads
-- the embedding: alone).
local llama = util.plan("examples/llama_1b.lua")
local step = util.step_c(llama, true)
check(pairs_of(llama) == 32 and count(step, "rt_residual_rmsnorm_packed_forward%(") == 32
  and count(step, "rt_rmsnorm_packed_forward%(") == 1 and count(step, "rt_residual_packed_forward%(") == 0,
  string.format("llama_1b: 32 adds computed with their norms (%d pairs, %d calls), the embedding's norm alone",
    pairs_of(llama), count(step, "rt_residual_rmsnorm_packed_forward%(")))
-- a block's last add runs after the next block's all-gather wait, just before its norm
local moved
for i, st in ipairs(llama.steps) do
  if st.op == "forward" and st.node.label == "layers.3.add#2" then
    moved = llama.steps[i - 1].op == "all_gather_wait" and llama.steps[i - 1].group.name == "layers.4"
      and llama.steps[i + 1].node and llama.steps[i + 1].node.label == "layers.4.attention_norm.rms_norm"
  end
end
check(moved, "llama_1b: layers.3.add#2 is issued after layers.4's all-gather wait, just before its norm")

-- GPT-2 124M: LayerNorm with a bias, 12 blocks x 2 norms and ln_f, each after an add but
-- the first block's ln_1 (it reads the embeddings' sum, a broadcast add: alone).
local gpt2 = util.plan("examples/gpt2_124m.lua")
step = util.step_c(gpt2, true)
local call = step:match("rt_residual_layernorm_packed_forward%(([^;]*)%);") or ""
local nargs = select(2, call:gsub("%b()", ""):gsub(",", "")) + 1   -- top-level commas
check(pairs_of(gpt2) == 24 and count(step, "rt_residual_layernorm_packed_forward%(") == 24
  and count(step, "rt_layernorm_packed_forward%(") == 1 and nargs == 14 and not call:find("NULL"),
  string.format("gpt2_124m: 24 adds computed with their LayerNorms (%d pairs, %d calls of %d arguments, with "
    .. "mean, rstd, weight and bias), the first block's ln_1 alone", pairs_of(gpt2),
    count(step, "rt_residual_layernorm_packed_forward%("), nargs))

-- Every spec: the pairs as memory.lua marks them (one 16-bit dtype), and as many fused calls
-- as adds left to them. (The FSDP steps keep their order: only compute steps move.)
local total = 0
local specs = util.each_planned(function(path, plan, text)
  local bad
  local n = pairs_of(plan)
  total = total + n
  for _, st in ipairs(plan.steps) do
    if st.fused_norm then
      local add, norm = st.node, st.fused_norm.node
      if not (add.kind == "add" and (norm.kind == "rms_norm" or norm.kind == "layer_norm")
          and add.outs[1].dtype ~= "fp32") then
        bad = "a pair of " .. add.kind .. " and " .. norm.kind
      end
    end
  end
  local calls = count(text, "rt_residual_rmsnorm_packed_forward%(") + count(text, "rt_residual_layernorm_packed_forward%(")
  if calls ~= count(text, "%(computed with the [a-z_]+ below, in its call%)") then
    bad = "as many fused calls as adds left to them"
  end
  check(not bad, string.format("%s: %d residual adds computed with their norms%s", path, n,
    bad and (": " .. bad) or ""))
end)
check(total >= 40, string.format("%d pairs in %d specs", total, specs))

-- A checkpointed block: its last add stays where it ran (no reorder inside a region); fp32,
-- or rows not whole 16-byte groups (the packed kernels' RT_KCHECK_PACKED_ROWS): no pair.
local function llama_src(extra, dtype, dim)
  return string.format([[
local fsdp, models, nn = require("fsdp"), require("models"), require("nn")
local model = models.Llama{ n_layers = 2, dim = %d, n_heads = 2, n_kv_heads = 2, vocab_size = 64, max_seq_len = 16 }
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = %q, reduce_dtype = "fp32" }
%s
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { mp_policy = mp }) end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{ name = "fused_norms_probe", model = model, world_size = 2,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy", optimizer = { "adamw", lr = 1e-3 } }
]], dim or 64, dtype, extra)
end
local ck = util.plan_source(llama_src("nn.checkpoint_module(model.layers[1])", "bf16"))
local last_add
for i, st in ipairs(ck.steps) do
  if st.op == "forward" and st.node.label == "layers.0.add#2" then last_add = ck.steps[i + 1] end
end
check(last_add and last_add.op == "reshard" and pairs_of(ck) == 3, string.format("a checkpointed first block: "
  .. "its last add is followed by its reshard (%s), 3 pairs (%d)", last_add and last_add.op or "?", pairs_of(ck)))
check(pairs_of(util.plan_source(llama_src("", "fp32"))) == 0, "fp32: no add computed with its norm")
check(pairs_of(util.plan_source(llama_src("", "bf16", 44))) == 0, "dim 44 (not a multiple of 8): no add computed "
  .. "with its norm")

-- The simulator: a pair is one launch, and the norm reads no sum.
local h100 = assert(gpu.load(".", "h100"))
local k = h100.kernels.fsdpgen
local fused, apart = 0, 0
for _, st in ipairs(llama.steps) do
  if st.fused_norm then
    local nx = st.fused_norm
    fused = fused + cost.step(st, llama, h100, k).compute + cost.step(nx, llama, h100, k).compute
    st.fused_norm, nx.fused_add = nil, nil
    apart = apart + cost.step(st, llama, h100, k).compute + cost.step(nx, llama, h100, k).compute
    st.fused_norm, nx.fused_add = nx, st
  end
end
local saved_launches = 32 * k.launch_us * 1e-6
check(apart - fused > saved_launches, string.format("simulated: the 32 pairs %.3f ms in one call each, %.3f ms "
  .. "apart (more than the %d launches, %.3f ms, saved)", fused * 1e3, apart * 1e3, 32, saved_launches * 1e3))
util.finish()
