-- q, k and v stacked in backward (generator/memory/stacked_linears.lua): the marks on Llama
-- 1B and GPT-2 124M (one stack a block, its columns and row length; the step C's one linear
-- backward on the stacked weights, the rotary embeddings' and the attention site's row
-- lengths, no packed addition left for q, k, v), every repository spec (each stack's C as
-- its marks say), each rule that keeps linears apart on small Llama specs, and the
-- simulator (fsdpgen's one call prices the stack's FLOPs; PyTorch's kernel sets keep three).
-- Run from the repository root: lua5.4 tests/generator/stacked_linears.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local emit_step = require("emit.emit_step")
local cost = require("simulate.cost")
local gpu = require("simulate.gpu")

local util = require("tests.generator.step_c")
local check, args_of = util.check, util.args_of

local function count(text, pat) return select(2, text:gsub(pat, "")) end

local function stacks_of(plan)
  local t = {}
  for _, st in ipairs(plan.steps) do
    if st.stack then t[#t + 1] = st.stack end
  end
  return t
end

-- The step C (without the eval's and the step-after-an-eval's programs), flat.
local function step_c(plan, name)
  local c = util.flat(emit_step.render(plan, name, plan.spec.name), true)
  return c:match("^(.-)\n// %-%-%-%- eval_") or c, c
end

-- Each stack's call in text: rt_linear_packed_backward with OC = ld, and its columns.
local function check_model(path, want_stacks, want_ld, want_cols, site_lds)
  local plan = util.plan(path)
  local ss = stacks_of(plan)
  local cols_ok = #ss == want_stacks
  for _, s in ipairs(ss) do
    local cols = {}
    for i, op in ipairs(s.ops) do cols[i] = op.outs[1].grad_slice.col end
    cols_ok = cols_ok and s.ld == want_ld and table.concat(cols, ",") == want_cols
  end
  check(cols_ok, string.format("%s: %d stacks (want %d), rows of %d, columns %s", path, #ss, want_stacks,
    ss[1] and ss[1].ld or 0, want_cols))
  local step, full = step_c(plan, path)
  local stacked_calls = 0
  for call in step:gmatch("rt_linear_packed_backward%b()") do
    local a = args_of(call .. ";")
    if tonumber(a[9]) == want_ld then stacked_calls = stacked_calls + 1 end
  end
  check(stacked_calls == want_stacks and count(step, "in the call of [%w%.#_]+%)") == 2 * want_stacks,
    string.format("%s: %d linear backwards of OC %d, and %d steps that leave theirs to them", path, stacked_calls,
      want_ld, count(step, "in the call of [%w%.#_]+%)")))
  check(full:find(site_lds, 1, true) ~= nil, path .. ": the attention site's gradient rows: " .. site_lds)
  return plan, step
end

local llama, lstep = check_model("examples/llama_1b.lua", 16, 3072, "0,2048,2560",
  ".ld_dq = 0, .ld_dk = 0, .ld_dv = 3072}")
local ropes = 0
for call in lstep:gmatch("rt_rope_packed_backward%b()") do
  local a = args_of(call .. ";")
  if a[#a] == "3072" then ropes = ropes + 1 end
end
check(ropes == 32, string.format("llama_1b: 32 rotary backwards write rows of 3072 (%d)", ropes))
check_model("examples/gpt2_124m.lua", 12, 2304, "0,768,1536", ".ld_dq = 2304, .ld_dk = 2304, .ld_dv = 2304}")

-- Every spec: a stack's linears read one input, their weights lie one after another, and its
-- steps' C is one call (the others a comment).
local total = 0
local specs = util.each_planned(function(path, plan, text)
  local bad
  for _, s in ipairs(stacks_of(plan)) do
    total = total + 1
    local x = s.ops[1].ins[1]
    for i, op in ipairs(s.ops) do
      if op.ins[1] ~= x or op.ins[3] then bad = "a linear of another input, or with a bias" end
      if i > 1 and op.outs[1].grad_slice.col ~= s.ops[i - 1].outs[1].grad_slice.col
          + s.ops[i - 1].outs[1].shape[#s.ops[i - 1].outs[1].shape] then
        bad = "columns not side by side"
      end
    end
  end
  check(not bad, string.format("%s: %d stacks%s", path, #stacks_of(plan), bad and (": " .. bad) or ""))
  if text and #stacks_of(plan) > 0 and not text:find("stacked_grads_of", 1, true) then
    check(false, path .. ": the stacked gradients have a buffer")
  end
end)
check(total >= 20, string.format("%d stacks in %d specs", total, specs))

-- The rules that keep linears apart, on a 2-block Llama at 2 ranks (q, k, v of 64, 16, 16).
local function llama_src(opts)
  return string.format([[
local fsdp, models, nn = require("fsdp"), require("models"), require("nn")
local model = models.Llama{ n_layers = 2, dim = %d, n_heads = 4, n_kv_heads = 1, vocab_size = 64, max_seq_len = 16 }
local mp = %s
%s
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { mp_policy = mp }) end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{ name = "stack_probe", model = model, world_size = %d,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy", optimizer = { "adamw", lr = 1e-3 } }
]], opts.dim or 64, opts.fp32 and "nil" or 'fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }',
    opts.extra or "", opts.world or 2)
end
local function nstacks(opts) return #stacks_of(util.plan_source(llama_src(opts))) end
check(nstacks({}) == 2, "bf16 at 2 ranks: one stack a block")
check(nstacks({ fp32 = true }) == 0, "fp32: no stack (fp32 gradients add in the GEMM)")
check(nstacks({ world = 3 }) == 0, "3 ranks (64 rows: shard padding between the unsharded gradients): no stack")
check(nstacks({ extra = "nn.checkpoint_module(model.layers[1])" }) == 1,
  "a checkpointed block (fp32 storage): its linears apart, the other block stacked")
check(nstacks({ extra = "fsdp.fully_shard(model.layers[1].attention.wk, { mp_policy = mp })" }) == 1,
  "wk in a group of its own: that block's linears apart")

-- The simulator: fsdpgen's stack is one call with the stack's FLOPs, the others' steps free;
-- PyTorch's kernel sets price three linears.
local h100 = assert(gpu.load(".", "h100"))
local function gemm(plan, k)
  local flops, t, calls = 0, 0, 0
  for _, st in ipairs(plan.steps) do
    if st.stack or st.stacked then
      local c = cost.step(st, plan, h100, k)
      flops, t = flops + c.hw_flops, t + c.compute
      if c.compute > 0 then calls = calls + 1 end
    end
  end
  return flops, t, calls
end
local ff, ft, fc = gemm(llama, h100.kernels.fsdpgen)
local tf, tt, tc = gemm(llama, h100.kernels.torch)
check(math.abs(ff - tf) < 1e-6 * tf and fc == 16 and tc == 48 and ft < tt, string.format("simulated q, k, v "
  .. "backward of llama_1b: fsdpgen %d calls %.2f ms, torch eager %d calls %.2f ms, the same %.3g FLOPs",
  fc, ft * 1e3, tc, tt * 1e3, ff))
util.finish()
