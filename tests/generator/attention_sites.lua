-- Which attention ops may run on cuDNN (generator/memory/attention.lua) and what the step C
-- calls for them: on small specs of one bf16 self-attention block (or fp32, or two blocks of
-- different head counts), every reason an op keeps fsdpgen's kernels, the sites (one per
-- shape, rt_step_attention_* with their index) and the scratch planned for cuDNN's
-- workspace (and its spare bytes for a gradient no tensor needs), and the spec's
-- `attention` choice in the .schedule.
-- Run from the repository root: lua5.4 tests/generator/attention_sites.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local schedule = require("emit.schedule")
local util = require("tests.generator.step_c")
local check = util.check

-- A block x -> wo(attention(wq x, wk x, wv x)) over a [2, 16, 64] input, sum loss. `body`:
-- the forward's attention lines (q, k, v and o in scope); `mp`: bf16 mixed precision;
-- `extra`: more spec keys.
local function spec(body, mp, extra)
  return string.format([[
local nn, fsdp = require("nn"), require("fsdp")
local Block = {}
function Block.forward(self, x)
  local q, k, v = self.wq(x), self.wk(x), self.wv(x)
  %s
  return self.wo(o)
end
local Root = {}
function Root.forward(self, x) return self.b2(self.b1(x)) end
local function block()
  local b = nn.new_module("Block", Block)
  b.wq, b.wk, b.wv, b.wo = nn.Linear(64, 64), nn.Linear(64, 64), nn.Linear(64, 64), nn.Linear(64, 64)
  return b
end
local root = nn.new_module("Root", Root)
root.b1, root.b2 = block(), block()
local mp = %s
fsdp.fully_shard(root.b1, { mp_policy = mp })
fsdp.fully_shard(root.b2, { mp_policy = mp })
fsdp.fully_shard(root, { mp_policy = mp })
return fsdp.spec{ name = "attn_sites", model = root, world_size = 2, input = { shape = { 2, 16, 64 } },
  loss = "sum", optimizer = { "adamw", lr = 1e-3 }%s }
]], body, mp and 'fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }' or "nil",
    extra or "")
end

local PLAIN = "local o = nn.attention(q, k, v, { n_heads = 4, causal = true })"

-- Plans the spec text: the plan, its step C (flat; the training step's sections, then the
-- site table and the model) and the .schedule's attention lines.
local function plan_of(text)
  local path = os.tmpname() .. ".lua"
  local h = assert(io.open(path, "w"))
  h:write(text)
  h:close()
  local ok, plan = pcall(util.plan, path)
  if not ok then
    os.remove(path)
    return nil, tostring(type(plan) == "table" and plan.msg or plan)
  end
  local c = util.flat((util.emit_c(path, plan)), true)
  os.remove(path)
  c = util.step_part(c) .. (c:match("\nstatic const rt_model_attention.*$") or
    c:match("\nconst rt_model .*$"))
  local lines = {}
  for l in schedule.render(plan, "spec.lua"):gmatch("[^\n]+") do
    if l:match("^attention ") or (lines[1] and l:match("^  %a%a%a%a ") and not l:match("^  group")) then
      lines[#lines + 1] = l
    end
    if l == "groups" then break end
  end
  return plan, c, lines
end

local function ops_of(plan)
  local t = {}
  for _, op in ipairs(plan.graph.ops) do
    if op.kind == "attention" then t[#t + 1] = op end
  end
  return t
end

local function count(c, pat) return select(2, c:gsub(pat, "")) end

-- The plain block: both ops on site 0; the call forms; the scratch for cuDNN's workspace.
do
  local plan, c, lines = plan_of(spec(PLAIN, true))
  local ops = plan and ops_of(plan) or {}
  check(#ops == 2 and ops[1].attention.cudnn and ops[2].attention.cudnn, "bf16 block: both attention ops may run "
    .. "on cuDNN" .. (plan and "" or " (" .. tostring(c) .. ")"))
  c = c or ""
  check(count(c, "rt_step_attention_forward%(R, 0, ") == 2 and count(c, "rt_step_attention_backward%(R, 0, ") == 2
    and count(c, "rt_attention_lowmem_packed_[fb]") == 0,
    "bf16 block: the step calls site 0 for both forwards and backwards, no kernel directly")
  -- rows = B*NH*T = 2*4*16; rowsum (256-aligned) + the larger of the fp32 dQ (rows x HD 16:
  -- 8192 bytes) and the deterministic backward's 16-bit dP (B*NH x T x T, T rounded up to
  -- 64: 65536 bytes) + 1 MiB
  local want = 512 + 65536 + 1048576
  check(c:find("{.B = 2, .T = 16, .NH = 4, .NKV = 4, .HD = 16, .causal = 1, .dtype = RT_BF16, .scratch_bytes = "
    .. want .. ", .ld_dq = 0, .ld_dk = 0, .ld_dv = 0}", 1, true) ~= nil
    and count(c, "%.nattention = 1, %.attention = attention") == 1,
    "bf16 block: one site, its scratch " .. want .. " bytes (rowsum, dP, 1 MiB)")
  check(c:find(".attention_choice = RT_ATTENTION_AUTO,", 1, true) ~= nil, "the default choice is RT_ATTENTION_AUTO")
  check(lines[1] == "attention  auto: per shape, the faster of cuDNN and fsdpgen's kernels, measured at start "
    .. "(CUDA; the CPU runs fsdpgen's)" and lines[2] and lines[2]:match("^  step b{1..2}%.attention +"
    .. "%[2, 16%] 4/4 heads x 16 bf16 causal  cudnn$") ~= nil,
    ".schedule: the choice, then one line for the step's run of ops: " .. tostring(lines[2]))
end

-- Bias-free q, k and v linears are stacked in backward (memory/stacked_linears.lua) where
-- their input needs a gradient (b2's; b1 reads the spec's input): b2's attention gradients
-- are slices of one [32, 192] matrix, its site says so, and the eval's forwards use the
-- step's sites.
do
  local text = spec(PLAIN, true):gsub("nn%.Linear%(64, 64%)", "nn.Linear(64, 64, { bias = false })")
  local plan, c = plan_of(text)
  local ops = plan and ops_of(plan) or {}
  c = c or ""
  check(#ops == 2 and ops[1].attention.cudnn and c:find(".ld_dq = 0, .ld_dk = 0, .ld_dv = 0}", 1, true) ~= nil
    and c:find(".ld_dq = 192, .ld_dk = 192, .ld_dv = 192}", 1, true) ~= nil
    and count(c, "%.nattention = 2, %.attention = attention") == 1
    and count(c, "rt_step_attention_backward%(R, 1, F%(B_stacked_grads_of_b2_wv_linear %+ 256, ") == 1,
    "stacked q, k, v: b2's site has its gradients' rows 192 long, b1's dense rows"
      .. (plan and "" or " (" .. tostring(c) .. ")"))
  check(plan and plan.eval_plan ~= nil and #ops_of(plan.eval_plan) == 2,
    "stacked q, k, v: the eval's two forwards call the step's two sites")
end

-- The choice: "cudnn" says so; "fsdpgen" keeps every op on the kernels, one line.
do
  local _, c, lines = plan_of(spec(PLAIN, true, ', attention = "cudnn"'))
  check(c and c:find(".attention_choice = RT_ATTENTION_CUDNN,", 1, true) ~= nil
    and lines[1]:match("^attention  cudnn: ") ~= nil,
    "attention = \"cudnn\": RT_ATTENTION_CUDNN, and the .schedule says it")
  local plan
  plan, c, lines = plan_of(spec(PLAIN, true, ', attention = "fsdpgen"'))
  local ops = plan and ops_of(plan) or {}
  check(ops[1] and not ops[1].attention.cudnn and count(c, "rt_step_attention_") == 0 and #lines == 1
    and lines[1] == "attention  fsdpgen: fsdpgen's kernels everywhere: the spec's choice",
    "attention = \"fsdpgen\": no site, one .schedule line: " .. tostring(lines[1]))
end

-- Each reason an op keeps fsdpgen's kernels (the step's ops; the eval's keep theirs: fp32).
local REASONS = {
  { "fp32", PLAIN, false, "fp32 (cuDNN's is bf16 or fp16)" },
  -- memory.lua packs no output of an op that reads one tensor twice (its kernel's gradients
  -- would add before rounding): that comes first
  { "attention(q, q, q)", "local o = nn.attention(q, q, q, { n_heads = 4 })", true, "output not packed 16-bit" },
  { "q also added to the output", "local o = nn.attention(q, k, v, { n_heads = 4 }) + q", true,
    "q has 2 readers (its gradient adds)" },
}
for _, r in ipairs(REASONS) do
  local plan, c = plan_of(spec(r[2], r[3]))
  local ops = plan and ops_of(plan) or {}
  check(ops[1] and ops[1].attention.why == r[4] and count(c, "rt_step_attention_") == 0,
    string.format("%s: fsdpgen's kernels, because \"%s\" (got %s)", r[1], r[4],
      tostring(ops[1] and ops[1].attention.why or c)))
end

-- A k that needs no gradient (its linear frozen, its block's input needing none: b1's, as
-- LoRA's frozen wk in a first block): cuDNN still runs the op, its backward gets NULL for dk
-- and the site's scratch ends in spare bytes for the dK cuDNN writes (B*T*NKV*HD*2: 4096).
do
  local text = spec(PLAIN, true):gsub("local mp = ", "root.b1.wk:requires_grad_(false)\nlocal mp = ")
  local plan, c = plan_of(text)
  local ops = plan and ops_of(plan) or {}
  c = c or ""
  local want = 512 + 65536 + 1048576
  check(ops[1] and ops[1].attention.cudnn and ops[2].attention.cudnn
    and count(c, "rt_step_attention_backward%(R, %d, F%([%w_]+, %d+%), NULL, F%(") == 1
    and c:find(".scratch_bytes = " .. (want + 4096) .. ", .ld_dq = 0, .ld_dk = 0, .ld_dv = 0, .spare_bytes = 4096}",
      1, true) ~= nil and c:find(".scratch_bytes = " .. want .. ", .ld_dq = 0, .ld_dk = 0, .ld_dv = 0}", 1, true),
    "b1's k without a gradient: cuDNN's site with 4096 spare bytes after the workspace, dk NULL in its backward"
      .. (plan and "" or " (" .. tostring(c) .. ")"))
end

-- Activation checkpointing keeps fp32 storage: the reason, on the attention line itself.
do
  local body = "local o = nn.checkpoint(function(a, b, c) return nn.attention(a, b, c, { n_heads = 4 }) end, q, k, v)"
  local plan, c, lines = plan_of(spec(body, true))
  local ops = plan and ops_of(plan) or {}
  check(ops[1] and ops[1].attention.why == "checkpointed (fp32 storage)" and lines[1] ==
    "attention  auto: fsdpgen's kernels everywhere: checkpointed (fp32 storage)",
    "checkpointed attention: fsdpgen's kernels, said once: " .. tostring(lines[1] or c))
end

-- Two shapes (4 and 2 heads): two sites, each op calling its own.
do
  local Two = spec("local o = nn.attention(q, k, v, { n_heads = self.heads })", true)
    :gsub("root.b1, root.b2 = block%(%), block%(%)", "root.b1, root.b2 = block(), block()\nroot.b1.heads, "
      .. "root.b2.heads = 4, 2")
  local plan, c = plan_of(Two)
  c = c or ""
  check(plan and count(c, "rt_step_attention_forward%(R, 0, ") == 1
    and count(c, "rt_step_attention_forward%(R, 1, ") == 1
    and c:find(".NH = 2, .NKV = 2, .HD = 32", 1, true) ~= nil and count(c, "%.nattention = 2,") == 1,
    "two head counts: sites 0 and 1, one call each")
end

util.finish()
