-- Microbatching step programs against the collective counts of FSDP2's own tests
-- (test_fully_shard_training.py): every combination of test_gradient_accumulation (1-D and
-- 2-D meshes, reshard_after_forward true, false and 2, the modes "all", "some_mlps" and
-- "root_only", reshard_after_backward, HSDP's reduce_scatter_only; the same skips), whose
-- expected all-gather, reduce-scatter and all-reduce counts over one iteration of three
-- microbatches are restated here from the test's formulas; then test_1f1b_microbatching
-- (explicit async unshards, reshard_after_backward on the last microbatch only) on the
-- Transformer, whose counts follow from the same rules. Run from the repository root:
-- lua5.4 tests/generator/microbatching.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path

local util = require("tests.generator.step_c")
local check = util.check

local tmp = os.tmpname()
local NUM_MLPS, NUM_MICROBATCHES = 3, 3

local function plan_text(text)
  local f = assert(io.open(tmp, "w"))
  f:write(text)
  f:close()
  return util.plan(tmp)
end

-- Totals over every phase of the step (CommDebugMode counts all of them).
local function totals(plan)
  local t = { all_gather = 0, reduce_scatter = 0, all_reduce = 0 }
  for key, n in pairs(plan.counts) do
    local what = key:match("^%S+ (%S+)$")
    t[what] = t[what] + n
  end
  return t
end

-- ---------------------------------------------------------------------------- test_gradient_accumulation

-- The test gives the root the MLPs' reshard_after_forward, and its counts assume that the
-- root does not reshard after forward: PyTorch clamped the root to false then. Since
-- PyTorch 2.8 an explicit value is respected and only the default keeps the root
-- unsharded, so the root here takes the default.

-- The step items of set_backward_flags(model, is_last_microbatch).
local function backward_flags(mode, rab, rs_only, last)
  local setter = rs_only and "set_requires_all_reduce" or "set_requires_gradient_sync"
  local v = tostring(last)
  local items = {}
  local function add(s) items[#items + 1] = s end
  if mode == "all" then
    add(string.format('{ "%s", %s }', setter, v))
    if not rab then add(string.format('{ "set_reshard_after_backward", %s }', v)) end
  elseif mode == "some_mlps" then
    for k = 1, 2 do   -- model[1 : 1 + 2]: the first two MLPs, FQNs "1" and "2"
      add(string.format('{ "%s", %s, module = "%d" }', setter, v, k))
      if not rab then add(string.format('{ "set_reshard_after_backward", %s, module = "%d" }', v, k)) end
    end
  else   -- root_only
    add(string.format('{ "%s", %s, recurse = false }', setter, v))
    if not rab then add(string.format('{ "set_reshard_after_backward", %s, recurse = false }', v)) end
  end
  return items
end

local function accumulation_spec(mesh, raf, mode, rab, rs_only)
  local step = {}
  for k = 1, NUM_MICROBATCHES do
    for _, item in ipairs(backward_flags(mode, rab, rs_only, k == NUM_MICROBATCHES)) do step[#step + 1] = item end
    step[#step + 1] = '"forward"'
    step[#step + 1] = '"backward"'
  end
  step[#step + 1] = '"optimizer"'
  return string.format([[
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local modules = { nn.Linear(32, 32) }
for _ = 1, %d do modules[#modules + 1] = models.MLP(32) end
local model = nn.Sequential(modules)
local opts = { mesh = %s, reshard_after_forward = %s }
for k = 2, #modules do fsdp.fully_shard(model[k], opts) end
fsdp.fully_shard(model, { mesh = opts.mesh })
return fsdp.spec{ name = "accumulation_probe", model = model, mesh = opts.mesh,
  input = { shape = { 2, 32 } }, loss = "sum", optimizer = { "adam", lr = 1e-2 },
  step = { %s } }
]], NUM_MLPS, mesh, tostring(raf), table.concat(step, ", "))
end

-- The test's expectations, restated.
local function expected_accumulation(ndim, raf, mode, rab, rs_only)
  local rs = NUM_MLPS + 1
  if mode == "some_mlps" then
    rs = rs + (NUM_MLPS - 2 + 1) * (NUM_MICROBATCHES - 1)
  elseif mode == "root_only" then
    rs = rs + NUM_MLPS * (NUM_MICROBATCHES - 1)
  end
  local ar = ndim == 2 and rs or 0
  if rs_only then rs = (NUM_MLPS + 1) * NUM_MICROBATCHES end
  local ag = NUM_MLPS + 1
  if raf ~= false then
    ag = (ag + NUM_MLPS) * NUM_MICROBATCHES
  elseif rab then
    ag = ag * NUM_MICROBATCHES
  elseif mode == "root_only" then
    ag = ag + NUM_MLPS * (NUM_MICROBATCHES - 1)
  end
  return { all_gather = ag, reduce_scatter = rs, all_reduce = ar }
end

local meshes = { { "{ replicate = 1, shard = 4 }", 1 }, { "{ replicate = 2, shard = 2 }", 2 } }
local combos = 0
for _, m in ipairs(meshes) do
  for _, raf in ipairs({ true, false, 2 }) do
    for _, mode in ipairs({ "all", "some_mlps", "root_only" }) do
      for _, rab in ipairs({ false, true }) do
        for _, rs_only in ipairs({ false, true }) do
          local skip = (not rab and (raf ~= false or mode == "some_mlps")) or (m[2] ~= 2 and rs_only)
          if not skip then
            combos = combos + 1
            local name = string.format("gradient_accumulation mesh %dD, reshard_after_forward %s, %s, reshard_after_backward %s%s",
              m[2], tostring(raf), mode, tostring(rab), rs_only and ", reduce_scatter_only" or "")
            local ok, plan = pcall(plan_text, accumulation_spec(m[1], raf, mode, rab, rs_only))
            if not ok then
              check(false, name .. ": plan failed: " .. tostring(type(plan) == "table" and plan.msg or plan))
            else
              local got, want = totals(plan), expected_accumulation(m[2], raf, mode, rab, rs_only)
              for _, what in ipairs({ "all_gather", "reduce_scatter", "all_reduce" }) do
                check(got[what] == want[what], string.format("%s: %s %d (FSDP2's test expects %d)", name, what,
                  got[what], want[what]))
              end
            end
          end
        end
      end
    end
  end
end
check(combos == 33, string.format("test_gradient_accumulation: %d combinations run (33 of 72 after the test's skips)", combos))

-- ---------------------------------------------------------------------------- test_1f1b_microbatching

local function microbatch_spec(explicit_unshard, rab)
  local step = {}
  if explicit_unshard then step[1] = '{ "unshard", async_op = true }' end
  for k = 1, NUM_MICROBATCHES do
    local v = tostring(k == NUM_MICROBATCHES)
    step[#step + 1] = string.format('{ "set_requires_gradient_sync", %s }', v)
    step[#step + 1] = string.format('{ "set_is_last_backward", %s }', v)
    if not rab then step[#step + 1] = string.format('{ "set_reshard_after_backward", %s }', v) end
    step[#step + 1] = '"forward"'
    step[#step + 1] = '"backward"'
  end
  step[#step + 1] = '"optimizer"'
  return string.format([[
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ dropout_p = 0 }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { reshard_after_forward = false }) end
fsdp.fully_shard(model, { reshard_after_forward = false })
return fsdp.spec{ name = "microbatch_probe", model = model, world_size = 2,
  input = { batch = 2, seq_len = 16 }, loss = "sum", optimizer = { "adamw", lr = 1e-2 },
  step = { %s } }
]], table.concat(step, ", "))
end

-- Per phase: the explicit unshards all-gather every group once; a forward all-gathers the
-- groups not already unsharded (all of them after a backward that resharded); nothing is
-- resharded after forward, so backward all-gathers nothing; the last microbatch's backward
-- reduce-scatters every group once.
local GROUPS = 3   -- the root and two blocks
for _, explicit in ipairs({ false, true }) do
  for _, rab in ipairs({ false, true }) do
    local name = string.format("1f1b_microbatching use_explicit_unshard %s, reshard_after_backward %s",
      tostring(explicit), tostring(rab))
    local plan = plan_text(microbatch_spec(explicit, rab))
    local fwd_batches = rab and (explicit and NUM_MICROBATCHES - 1 or NUM_MICROBATCHES) or (explicit and 0 or 1)
    local want = {
      ["unshard all_gather"] = explicit and GROUPS or nil,
      ["forward all_gather"] = fwd_batches > 0 and GROUPS * fwd_batches or nil,
      ["backward reduce_scatter"] = GROUPS,
    }
    for _, key in ipairs({ "unshard all_gather", "forward all_gather", "backward all_gather", "backward reduce_scatter" }) do
      check(plan.counts[key] == want[key], string.format("%s: %s %s (expected %s)", name, key,
        tostring(plan.counts[key] or 0), tostring(want[key] or 0)))
    end
    -- The explicit unshards' all-gathers are waited for in the first forward, in order.
    if explicit then
      local first_forward, waits = nil, {}
      for _, st in ipairs(plan.steps) do
        first_forward = first_forward or (st.phase == "forward" and st.section)
        if st.op == "all_gather_wait" then waits[#waits + 1] = st.phase .. st.section .. " " .. st.group.name end
      end
      local f = "forward" .. first_forward
      check(table.concat(waits, "; ", 1, GROUPS) == string.format("%s ; %s layers.0; %s layers.1", f, f, f),
        name .. ": the first forward waits for the explicit all-gathers: " .. table.concat(waits, "; "))
    end
  end
end

os.remove(tmp)
util.finish()
