-- Seed conformance: every event list and communication count asserted in
-- TestFullyShardPrefetch and TestFullyShardCommunication (shared/seeds/
-- test_fully_shard_comm.py), rebuilt here with the seed's own logic and compared exactly
-- with `fsdpgen events` / `fsdpgen counts` on the specs in tests/specs/seed/.
--
-- Each seed test patches only some FSDPParamGroup methods (unshard, post_backward and
-- sometimes reshard), so our full event stream is filtered to the kinds that test records.
-- Where the seed logs a reshard of a group that is already sharded, our stream lists
-- effective reshards only (docs/cli.md, "Events"); those lines are marked `dropped` below with the
-- reason, and the comparison leaves them out.
-- Run from the repository root: lua5.4 tests/generator/seed_conformance.lua
local passed, failed = 0, 0
local SPECS = "tests/specs/seed/"

local function run(cmd, spec)
  local p = io.popen("./fsdpgen " .. cmd .. " " .. SPECS .. spec .. ".lua 2>&1")
  local out = p:read("a")
  local ok = p:close()
  return out, ok
end

local function events_of(spec, kinds, skip_forward)
  local out, ok = run("events", spec)
  local list = {}
  if not ok then return nil, out end
  local keep = {}
  for _, k in ipairs(kinds) do keep[k] = true end
  local in_forward = true
  for line in out:gmatch("[^\n]+") do
    local state, kind, group = line:match('^(%S+) (%S+) "(.*)"$')
    if not state then return nil, "unparsable line: " .. line end
    if state ~= "FORWARD" then in_forward = false end
    if keep[kind] and not (skip_forward and in_forward) then
      list[#list + 1] = string.format('%s %s "%s"', state, kind, group)
    end
  end
  return list
end

local function E(kind, group, state) return string.format('%s %s "%s"', state, kind, group) end

local function compare(name, got, want, err)
  if not got then
    failed = failed + 1
    print("FAIL " .. name .. ": fsdpgen failed: " .. tostring(err))
    return
  end
  local n = math.max(#got, #want)
  for i = 1, n do
    if got[i] ~= want[i] then
      failed = failed + 1
      print(string.format("FAIL %s: event %d: got %s, want %s", name, i, tostring(got[i]), tostring(want[i])))
      print("  got:  " .. table.concat(got, " | "))
      print("  want: " .. table.concat(want, " | "))
      return
    end
  end
  passed = passed + 1
  print(string.format("PASS %s: %d events equal", name, #want))
end

local function extend(a, b)
  for _, x in ipairs(b) do a[#a + 1] = x end
  return a
end

local function filter(list, pred)
  local out = {}
  for _, x in ipairs(list) do
    if pred(x) then out[#out + 1] = x end
  end
  return out
end
local function not_unshard(e) return not e:match("^%S+ unshard ") end

local F, PB, PO = "FORWARD", "PRE_BACKWARD", "POST_BACKWARD"

-- ------------------------------------------------------------------ test_fully_shard_backward_prefetch

for _, raf in ipairs({ "true", "false", "2", "none" }) do
  for _, ckpt in ipairs({ "none", "utils", "composable" }) do
    -- _test_backward_prefetch_forward_backward
    local want = {
      E("unshard", "", F), E("unshard", "layers.0", F), E("unshard", "layers.1", F), E("unshard", "layers.2", F),
    }
    local bwd = {}
    if raf ~= "none" then bwd[#bwd + 1] = E("unshard", "", PB) end
    extend(bwd, {
      E("unshard", "layers.2", PB), E("unshard", "layers.1", PB), E("post_backward", "layers.2", PO),
      E("unshard", "layers.0", PB), E("post_backward", "layers.1", PO), E("post_backward", "layers.0", PO),
      E("post_backward", "", PO),
    })
    if raf == "false" then bwd = filter(bwd, not_unshard) end
    extend(want, bwd)
    local name = string.format("bwd_prefetch_raf_%s_ckpt_%s", raf, ckpt)
    compare(name, events_of(name, { "unshard", "post_backward" }), want)

    -- _test_backward_prefetch_multi_forward
    local fwd = {
      E("unshard", "", F), E("unshard", "layers.0", F), E("unshard", "layers.1", F), E("unshard", "layers.2", F),
    }
    if raf ~= "none" then fwd[#fwd + 1] = E("unshard", "", F) end
    extend(fwd, { E("unshard", "layers.0", F), E("unshard", "layers.1", F), E("unshard", "layers.2", F) })
    if raf == "false" then
      for _ = 1, 4 do table.remove(fwd) end  -- expected_events[:-4]
    end
    bwd = {}
    if raf ~= "none" then bwd[#bwd + 1] = E("unshard", "", PB) end
    extend(bwd, {
      E("unshard", "layers.2", PB), E("unshard", "layers.1", PB), E("post_backward", "layers.2", PO),
      E("unshard", "layers.0", PB), E("post_backward", "layers.1", PO), E("post_backward", "layers.0", PO),
    })
    if raf == "false" then bwd = filter(bwd, not_unshard) end
    extend(bwd, {
      E("unshard", "layers.2", PB), E("unshard", "layers.1", PB), E("post_backward", "layers.2", PO),
      E("unshard", "layers.0", PB), E("post_backward", "layers.1", PO), E("post_backward", "layers.0", PO),
      E("post_backward", "", PO),
    })
    name = string.format("multi_forward_raf_%s_ckpt_%s", raf, ckpt)
    compare(name, events_of(name, { "unshard", "post_backward" }), extend(fwd, bwd))
  end
end

-- _test_backward_prefetch_unused_in_backward(True)
compare("unused_in_backward", events_of("unused_in_backward", { "unshard", "post_backward" }), {
  E("unshard", "0", F), E("unshard", "1.lin1", F), E("unshard", "1.lin2", F),
  -- first backward (loss2, not the last backward)
  E("unshard", "1.lin2", PB), E("unshard", "1.lin1", PB), E("post_backward", "1.lin2", PO),
  E("unshard", "0", PB), E("post_backward", "0", PO), E("post_backward", "1.lin1", PO),
  -- last backward (loss1)
  E("unshard", "0", PB), E("post_backward", "1.lin1", PO), E("post_backward", "0", PO),
  E("post_backward", "1.lin2", PO),
})

-- ------------------------------------------------------------------ test_set_modules_to_forward_prefetch

local expected_backward_default = {
  E("unshard", "", PB), E("unshard", "layers.3", PB), E("unshard", "layers.2", PB),
  E("reshard", "layers.3", PO), E("post_backward", "layers.3", PO),
  E("unshard", "layers.1", PB), E("reshard", "layers.2", PO), E("post_backward", "layers.2", PO),
  E("unshard", "layers.0", PB), E("reshard", "layers.1", PO), E("post_backward", "layers.1", PO),
  E("reshard", "layers.0", PO), E("post_backward", "layers.0", PO),
  E("reshard", "", PO), E("post_backward", "", PO),
}
local all_kinds = { "unshard", "reshard", "post_backward" }

compare("set_forward_prefetch_1", events_of("set_forward_prefetch_1", all_kinds), extend({
  E("unshard", "", F), E("unshard", "layers.0", F), E("unshard", "layers.1", F), E("reshard", "layers.0", F),
  E("unshard", "layers.2", F), E("reshard", "layers.1", F), E("unshard", "layers.3", F),
  E("reshard", "layers.2", F), E("reshard", "layers.3", F), E("reshard", "", F),
}, expected_backward_default))

compare("set_forward_prefetch_2", events_of("set_forward_prefetch_2", all_kinds), extend({
  E("unshard", "", F), E("unshard", "layers.0", F), E("unshard", "layers.1", F), E("unshard", "layers.2", F),
  E("reshard", "layers.0", F), E("unshard", "layers.3", F), E("reshard", "layers.1", F),
  E("reshard", "layers.2", F), E("reshard", "layers.3", F), E("reshard", "", F),
}, expected_backward_default))

-- ------------------------------------------------------------------ test_set_modules_to_backward_prefetch

local expected_forward_default = {
  E("unshard", "", F), E("unshard", "layers.0", F), E("reshard", "layers.0", F),
  E("unshard", "layers.1", F), E("reshard", "layers.1", F), E("unshard", "layers.2", F),
  E("reshard", "layers.2", F), E("unshard", "layers.3", F), E("reshard", "layers.3", F), E("reshard", "", F),
}

compare("set_backward_prefetch_1", events_of("set_backward_prefetch_1", all_kinds), extend({ table.unpack(expected_forward_default) }, {
  E("unshard", "", PB), E("unshard", "layers.3", PB), E("unshard", "layers.2", PB),
  E("reshard", "layers.3", PO), E("post_backward", "layers.3", PO),
  E("unshard", "layers.1", PB), E("reshard", "layers.2", PO), E("post_backward", "layers.2", PO),
  E("unshard", "layers.0", PB), E("reshard", "layers.1", PO), E("post_backward", "layers.1", PO),
  E("reshard", "layers.0", PO), E("post_backward", "layers.0", PO),
  E("reshard", "", PO), E("post_backward", "", PO),
}))

compare("set_backward_prefetch_2", events_of("set_backward_prefetch_2", all_kinds), extend({ table.unpack(expected_forward_default) }, {
  E("unshard", "", PB), E("unshard", "layers.3", PB), E("unshard", "layers.2", PB), E("unshard", "layers.1", PB),
  E("reshard", "layers.3", PO), E("post_backward", "layers.3", PO),
  E("unshard", "layers.0", PB), E("reshard", "layers.2", PO), E("post_backward", "layers.2", PO),
  E("reshard", "layers.1", PO), E("post_backward", "layers.1", PO),
  E("reshard", "layers.0", PO), E("post_backward", "layers.0", PO),
  E("reshard", "", PO), E("post_backward", "", PO),
}))

-- ------------------------------------------------------------------ test_set_modules_to_backward_prefetch_inside_ac

local W = function(i) return string.format("layers.%d.feed_forward.w1", i) end
local EMB = "tok_embeddings, pos_embeddings"
compare("backward_prefetch_inside_ac", events_of("backward_prefetch_inside_ac", { "unshard", "reshard" }, true), {
  E("unshard", "norm, output", PB), E("unshard", "layers.2", PB), E("reshard", "norm, output", PO),
  E("unshard", W(2), PB), E("unshard", "layers.1", PB), E("reshard", W(2), PO), E("reshard", "layers.2", PO),
  E("unshard", W(1), PB), E("unshard", "layers.0", PB), E("reshard", W(1), PO), E("reshard", "layers.1", PO),
  E("unshard", W(0), PB), E("unshard", EMB, PB), E("reshard", W(0), PO), E("reshard", "layers.0", PO),
  E("reshard", EMB, PO),
  -- dropped: the seed then logs `reshard "tok_embeddings, pos_embeddings"` and
  -- `reshard "norm, output"` once more at the end of backward; both groups are already
  -- sharded by then (no-op reshards), and our stream lists effective reshards only.
})

-- ------------------------------------------------------------------ TestFullyShardCommunication

local function counts_of(spec)
  local out, ok = run("counts", spec)
  if not ok then return nil, out end
  local c = {}
  for line in out:gmatch("[^\n]+") do
    local phase, coll, n = line:match("^(%S+) (%S+) (%d+)$")
    c[phase .. " " .. coll] = tonumber(n)
  end
  return c
end

local function compare_counts(name, want)
  local got, err = counts_of(name)
  if not got then
    failed = failed + 1
    print("FAIL " .. name .. ": fsdpgen failed: " .. tostring(err))
    return
  end
  local keys = {}
  for k in pairs(want) do keys[#keys + 1] = k end
  table.sort(keys)
  local desc = {}
  for _, k in ipairs(keys) do
    if got[k] ~= want[k] then
      failed = failed + 1
      print(string.format("FAIL %s: %s = %s, want %d", name, k, tostring(got[k]), want[k]))
      return
    end
    desc[#desc + 1] = k .. " " .. want[k]
  end
  passed = passed + 1
  print(string.format("PASS %s: %s", name, table.concat(desc, ", ")))
end

-- _test_communication_count: num_blocks = 2, so 3 groups.
local num_blocks = 2
for _, raf in ipairs({ "true", "false", "2", "none" }) do
  local bwd_ag = raf == "none" and num_blocks or (raf == "false" and 0 or num_blocks + 1)
  compare_counts("comm_count_raf_" .. raf, {
    ["forward all_gather"] = num_blocks + 1, ["backward all_gather"] = bwd_ag,
    ["backward reduce_scatter"] = num_blocks + 1,
  })
end

compare_counts("manual_reshard_raf_false", {
  ["forward all_gather"] = 3, ["backward all_gather"] = 3, ["backward reduce_scatter"] = 3,
})

-- _test_set_reshard_after_forward_by_communication_count
for _, v in ipairs({ "true", "false", "none" }) do
  for _, recurse in ipairs({ "true", "false" }) do
    local bwd_ag
    if v == "none" then
      bwd_ag = num_blocks
    elseif v == "true" then
      bwd_ag = recurse == "true" and num_blocks + 1 or 1
    else
      bwd_ag = recurse == "true" and 0 or num_blocks
    end
    compare_counts(string.format("set_raf_%s_recurse_%s", v, recurse), {
      ["forward all_gather"] = num_blocks + 1, ["backward all_gather"] = bwd_ag,
      ["backward reduce_scatter"] = num_blocks + 1,
    })
  end
end

print(string.format("%d passed, %d failed", passed, failed))
os.exit(failed == 0 and 0 or 1)
