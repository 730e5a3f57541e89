-- Linears stacked in backward (generator/memory/stacked_linears.lua): the marks on Llama 1B
-- and GPT-2 124M (q, k and v one stack a block, and Llama's w1 and w3 another: their
-- columns and row lengths; the step C's linear backwards on the stacked weights, one for
-- q, k, v, three for w1, w3, whose weight gradients are not side by side; the rotary
-- embeddings', the attention site's and swiglu's row lengths), every repository spec (each
-- stack's C as its marks say), each rule that keeps linears apart or splits a stack on
-- small Llama specs, LoRA's stacks (the frozen base with lora_a, through LoRA's adds: their
-- columns, lora_b's row lengths, weight gradients for the adapters alone; frozen linears
-- alone), and the simulator (fsdpgen's calls price the stack's FLOPs; PyTorch's kernel sets
-- keep a linear each).
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local cost = require("simulate.cost")
local gpu = require("simulate.gpu")

local util = require("tests.generator.step_c")
local check, args_of = util.check, util.args_of

local function count(text, pat) return select(2, text:gsub(pat, "")) end

-- The plan's stacks; of `kind` only ("attention": q, k, v; "feed_forward": w1, w3).
local function stacks_of(plan, kind)
  local t = {}
  for _, st in ipairs(plan.steps) do
    if st.stack and (not kind or (st.stack.ops[1].label or ""):find(kind, 1, true)) then t[#t + 1] = st.stack end
  end
  return t
end


-- Each q, k, v stack's call in text: rt_linear_packed_backward with OC = ld, and its
-- columns.
local function check_model(path, want_stacks, want_ld, want_cols, site_lds)
  local plan = util.plan(path)
  local ss = stacks_of(plan, "attention")
  local cols_ok = #ss == want_stacks
  for _, s in ipairs(ss) do
    local cols = {}
    for i, op in ipairs(s.ops) do cols[i] = op.outs[1].grad_slice.col end
    cols_ok = cols_ok and s.ld == want_ld and table.concat(cols, ",") == want_cols and not s.split
  end
  check(cols_ok, string.format("%s: %d q, k, v stacks (want %d), rows of %d, columns %s", path, #ss, want_stacks,
    ss[1] and ss[1].ld or 0, want_cols))
  local step, full = util.step_c(plan, true)
  local stacked_calls = 0
  for call in step:gmatch("rt_linear_packed_backward%b()") do
    local a = args_of(call .. ";")
    if tonumber(a[9]) == want_ld then stacked_calls = stacked_calls + 1 end
  end
  check(stacked_calls == want_stacks and count(step, "stacked: in the call of [%w%.#_]+%)") == 2 * want_stacks,
    string.format("%s: %d linear backwards of OC %d, and %d steps that leave theirs to them", path, stacked_calls,
      want_ld, count(step, "stacked: in the call of [%w%.#_]+%)")))
  check(full:find(site_lds, 1, true) ~= nil, path .. ": the attention site's gradient rows: " .. site_lds)
  return plan, step
end

local llama, lstep = check_model("examples/llama_1b.lua", 16, 3072, "0,2048,2560",
  ".ld_dq = 0, .ld_dk = 0, .ld_dv = 3072}")
-- the rotations' backwards, a pair a call (rope_pairs.lua): k's row length, then q's
local ropes = 0
for call in lstep:gmatch("rt_rope_pair_packed_backward%b()") do
  local a = args_of(call .. ";")
  if a[6] == "3072" then ropes = ropes + 1 end
  if a[12] == "3072" then ropes = ropes + 1 end
end
check(ropes == 32, string.format("llama_1b: 32 rotary backwards write rows of 3072 (%d)", ropes))
local gpt2 = check_model("examples/gpt2_124m.lua", 12, 2304, "0,768,1536",
  ".ld_dq = 2304, .ld_dk = 2304, .ld_dv = 2304}")
check(#stacks_of(gpt2) == 12, "gpt2_124m: no other stack (c_fc is one linear)")

-- Llama's w1 and w3: placed side by side in the unsharded parameters (w2 is registered
-- between them), one stack a block, split (their gradients keep the group's order): the
-- input gradient over both weights (OC 16384, no weight gradient), then each weight's
-- gradient from its 8192 columns of the rows of 16384; swiglu writes da and db there.
local ffn = stacks_of(llama, "feed_forward")
local ffn_ok = #ffn == 16
for _, s in ipairs(ffn) do
  local w1, w3 = s.ops[1].ins[2], s.ops[2] and s.ops[2].ins[2]
  local g = llama.owner[w1]
  local words = {}
  for _, l in ipairs(g.layout.params) do words[l.param] = l.unsharded_word end
  ffn_ok = ffn_ok and s.split and s.ld == 16384 and #s.ops == 2 and w1.fqn:find("w1") and w3.fqn:find("w3")
    and words[w3] == words[w1] + 8192 * 2048 // 2 and s.ops[2].outs[1].grad_slice.col == 8192
end
check(ffn_ok, string.format("llama_1b: %d w1 + w3 stacks (want 16), split, rows of 16384, w3's weight after w1's",
  #ffn))
local dx, dw, other = 0, 0, 0
for call in lstep:gmatch("rt_linear_packed_backward%b()") do
  local a = args_of(call .. ";")
  if a[9] == "16384" and a[2] == "NULL" and a[#a - 1] == "16384" and a[1] ~= "NULL" then dx = dx + 1
  elseif a[9] == "8192" and a[1] == "NULL" and a[#a - 1] == "16384" then dw = dw + 1
  elseif a[9] == "8192" or a[9] == "16384" then other = other + 1 end
end
check(dx == 16 and dw == 32 and other == 0, string.format("llama_1b: the w1 + w3 backwards: %d input-gradient calls "
  .. "over rows of 16384 (want 16), %d weight-gradient calls on 8192 of their columns (want 32), %d others", dx, dw,
  other))
local swiglus = 0
for call in lstep:gmatch("rt_swiglu_packed_backward%b()") do
  local a = args_of(call .. ";")
  if table.concat(a, ",", #a - 2) == "8192,16384,16384" then swiglus = swiglus + 1 end
end
check(swiglus == 16, string.format("llama_1b: 16 swiglu backwards write da and db in rows of 16384 (%d)", swiglus))
check(count(lstep, "in the calls of [%w%.#_]+%)") == 16 and not lstep:find("add_packed", 1, true),
  "llama_1b: w3's step leaves its backward to w1's calls; no packed addition left")

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
-- The stacks of a probe: q, k, v ones and w1, w3 ones, and how many of them are split.
local function nstacks(opts)
  local plan = util.plan_source(llama_src(opts))
  local split = 0
  for _, s in ipairs(stacks_of(plan)) do split = split + (s.split and 1 or 0) end
  return #stacks_of(plan, "attention"), #stacks_of(plan, "feed_forward"), split
end
local function probe(opts, want, what)
  local a, f, sp = nstacks(opts)
  check(a == want[1] and f == want[2] and sp == want[3], string.format("%s: %d q, k, v and %d w1, w3 stacks, %d "
    .. "split (want %d, %d, %d)", what, a, f, sp, want[1], want[2], want[3]))
end
probe({}, { 2, 2, 2 }, "bf16 at 2 ranks: two stacks a block, w1 + w3 split")
probe({ fp32 = true }, { 0, 0, 0 }, "fp32: no stack (fp32 gradients add in the GEMM)")
probe({ world = 3 }, { 2, 2, 4 }, "3 ranks (64 rows: shard padding between the unsharded gradients): all split")
probe({ extra = "nn.checkpoint_module(model.layers[1])" }, { 1, 1, 1 },
  "a checkpointed block (fp32 storage): its linears apart, the other block stacked")
probe({ extra = "fsdp.fully_shard(model.layers[1].attention.wk, { mp_policy = mp })" }, { 1, 2, 2 },
  "wk in a group of its own: that block's q, k, v apart")
probe({ extra = "fsdp.fully_shard(model.layers[1].feed_forward.w3, { mp_policy = mp })" }, { 2, 1, 1 },
  "w3 in a group of its own: that block's w1, w3 apart")

-- LoRA (torchtune's adapters, the base frozen): Llama 1B's 1B LoRA config stacks wq, wq's
-- lora_a, wk, wv and wv's lora_a (through LoRA's adds of q and v) and w1, w1's lora_a, w3 and
-- w3's lora_a, split (frozen weights have no gradient); the first block's attention input
-- needs no gradient (the embedding and its norm frozen), so 31 stacks.
local lora = util.plan("examples/llama_1b_lora.lua")
local want_cols = { attention = "0,2048,2112,2624,3136", feed_forward = "0,8192,8256,16448" }
local lora_ok, nlora = true, { attention = 0, feed_forward = 0 }
for kind, cols in pairs(want_cols) do
  for _, s in ipairs(stacks_of(lora, kind)) do
    local c, trainable = {}, 0
    for i, op in ipairs(s.ops) do
      c[i] = op.outs[1].grad_slice.col
      trainable = trainable + (op.ins[2].requires_grad and 1 or 0)
    end
    nlora[kind] = nlora[kind] + 1
    lora_ok = lora_ok and s.split and table.concat(c, ",") == cols and trainable == 2
  end
end
check(lora_ok and nlora.attention == 15 and nlora.feed_forward == 16, string.format("llama_1b_lora: %d attention "
  .. "stacks (want 15), %d feed-forward stacks (want 16), split, columns %s and %s, two trainable linears each",
  nlora.attention, nlora.feed_forward, want_cols.attention, want_cols.feed_forward))
-- the slices through LoRA's add: q's sum, the base's output and lora_b's output share q's columns
local through = 0
for _, s in ipairs(stacks_of(lora, "attention")) do
  local y = s.ops[1].outs[1]
  for _, op in ipairs(lora.graph.ops) do
    if op.kind == "add" and op.ins[1] == y then
      local l = require("memory.memory").base(op.ins[2])
      if op.outs[1].grad_slice and op.outs[1].grad_slice.col == 0 and l.grad_slice and l.grad_slice.col == 0 then
        through = through + 1
      end
    end
  end
end
check(through == 15, string.format("llama_1b_lora: %d of 15 q sums share the base's and lora_b's columns", through))

-- The step C of the small LoRA spec: per stack one input-gradient call over its width (144:
-- 64 + 8 + 32 + 32 + 8; 400: 192 + 8 + 192 + 8) and one weight-gradient call for each of its two
-- lora_a's (rows of the stack's width, none for a frozen weight); lora_b's backward reads its
-- columns (ld_dout) and, in a stack, writes lora_a's output's (ld_dinp), wo's and w2's
-- lora_b dense (0, 0).
local lstack = util.plan("tests/specs/features/lora_llama_stacked_bf16.lua")
local ltext = util.step_c(lstack, true)
local din, dwc, lb_in, lb_dense = 0, 0, 0, 0
for call in ltext:gmatch("rt_linear_packed_backward%b()") do
  local a = args_of(call .. ";")
  local ld = a[#a - 1]
  if a[1] ~= "NULL" and a[2] == "NULL" and a[9] == ld and (ld == "144" or ld == "400") and a[#a] == "0" then
    din = din + 1
  elseif a[1] == "NULL" and a[9] == "8" and (ld == "144" or ld == "400") then
    dwc = dwc + 1
  end
end
for call in ltext:gmatch("rt_linear_scaled_packed_backward%b()") do
  local a = args_of(call .. ";")
  if (a[#a] == "144" or a[#a] == "400") and a[#a - 1] == a[#a] then lb_in = lb_in + 1
  elseif a[#a] == "0" and a[#a - 1] == "0" then lb_dense = lb_dense + 1 end
end
check(din == 4 and dwc == 8 and lb_in == 8 and lb_dense == 4, string.format("lora_llama_stacked_bf16: %d stacked "
  .. "input-gradient calls (want 4), %d lora_a weight-gradient calls on their columns (want 8), %d lora_b backwards "
  .. "in rows of a stack (want 8), %d dense (want 4)", din, dwc, lb_in, lb_dense))
-- a stack of frozen linears alone (lora_llama_bf16's w1 and w3): no weight-gradient call; its
-- adapters' dropout and unfolded scale (16 / 6) keep q and v apart
local frozen = util.plan("tests/specs/features/lora_llama_bf16.lua")
local ftext = util.step_c(frozen, true)
local fcalls = 0
for call in ftext:gmatch("rt_linear_packed_backward%b()") do
  local a = args_of(call .. ";")
  if a[#a - 1] == "384" then fcalls = fcalls + 1 end
end
check(#stacks_of(frozen, "feed_forward") == 2 and #stacks_of(frozen, "attention") == 0 and fcalls == 2
  and ftext:find("frozen: no weight gradient", 1, true) ~= nil, string.format("lora_llama_bf16: %d w1 + w3 stacks "
  .. "(want 2), %d q, k, v stacks (want 0), %d calls in rows of 384 (want 2: the input gradients alone)",
  #stacks_of(frozen, "feed_forward"), #stacks_of(frozen, "attention"), fcalls))

-- The simulator: fsdpgen's stack is priced on its last step with the stack's FLOPs (a split
-- one's launches: the input gradient's GEMM and each weight's), the others' steps free;
-- PyTorch's kernel sets price a linear each.
local h100 = assert(gpu.load(".", "h100"))
local function gemm(plan, k, kind)
  local flops, t, steps, launches = 0, 0, 0, 0
  for _, st in ipairs(plan.steps) do
    local s = st.stack or st.stacked
    if s and s.ops[1].label:find(kind, 1, true) then
      local c = cost.step(st, plan, h100, k)
      flops, t, launches = flops + c.hw_flops, t + c.compute, launches + c.launches
      if c.compute > 0 then steps = steps + 1 end
    end
  end
  return flops, t, steps, launches
end
for _, case in ipairs({ { "attention", "q, k, v", 48, 32 }, { "feed_forward", "w1, w3", 32, 48 } }) do
  local ff, ft, fs, fl = gemm(llama, h100.kernels.fsdpgen, case[1])
  local tf, tt, ts = gemm(llama, h100.kernels.torch, case[1])
  check(math.abs(ff - tf) < 1e-6 * tf and fs == 16 and ts == case[3] and fl == case[4] and ft < tt,
    string.format("simulated %s backward of llama_1b: fsdpgen %d steps, %d launches, %.2f ms; torch eager %d steps "
      .. "%.2f ms; the same %.3g FLOPs", case[2], fs, fl, ft * 1e3, ts, tt * 1e3, ff))
end
-- LoRA's stacks: the input gradient over the stack's width and the two lora_a's weight
-- gradients, the FLOPs of PyTorch's five (four) products, in three launches
local lora_cases = { { "attention", "wq ... wv's lora_a", 15, 75 }, { "feed_forward", "w1 ... w3's lora_a", 16, 64 } }
for _, case in ipairs(lora_cases) do
  local ff, ft, fs, fl = gemm(lora, h100.kernels.fsdpgen, case[1])
  local tf, tt, ts = gemm(lora, h100.kernels.torch, case[1])
  check(math.abs(ff - tf) < 1e-6 * tf and fs == case[3] and ts == case[4] and fl == 3 * case[3] and ft < tt,
    string.format("simulated %s backward of llama_1b_lora: fsdpgen %d steps, %d launches, %.2f ms; torch eager %d "
      .. "steps %.2f ms; the same %.3g FLOPs", case[2], fs, fl, ft * 1e3, ts, tt * 1e3, ff))
end
util.finish()
