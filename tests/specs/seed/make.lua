-- Writes the seed-derived specs (one per scenario of shared/seeds/test_fully_shard_comm.py)
-- into this folder. Run from the repository root: lua5.4 tests/specs/seed/make.lua
-- The specs are committed; this script only keeps the 40-odd variants consistent.
local dir = "tests/specs/seed/"

local function write(name, body)
  local f = assert(io.open(dir .. name .. ".lua", "w"))
  f:write(body)
  f:close()
end

local function lua_raf(v)
  if v == "none" then return "nil" end
  return v
end

local header = 'local nn, fsdp, models = require("nn"), require("fsdp"), require("models")\n'

-- _init_transformer(n_layers, reshard_after_forward, checkpoint_impl)
local function transformer(n_layers, raf, ckpt)
  local s = string.format("local model = models.Transformer{ n_layers = %d%s }\n", n_layers,
    ckpt == "utils" and ", checkpoint_activations = true" or "")
  s = s .. "for _, layer in ipairs(model.layers) do\n"
  if ckpt == "composable" then s = s .. "  nn.checkpoint_module(layer)\n" end
  s = s .. string.format("  fsdp.fully_shard(layer, { reshard_after_forward = %s })\nend\n", lua_raf(raf))
  s = s .. string.format("fsdp.fully_shard(model, { reshard_after_forward = %s })\n", lua_raf(raf))
  return s
end

local function spec(name, extra)
  return string.format([[
return fsdp.spec{
  name = "%s", model = model, world_size = 4,
  input = { batch = 2, seq_len = 16 }, loss = "sum", optimizer = { "adam", lr = 1e-2 },%s
}
]], name, extra or "")
end

for _, raf in ipairs({ "true", "false", "2", "none" }) do
  for _, ckpt in ipairs({ "none", "utils", "composable" }) do
    local name = string.format("bwd_prefetch_raf_%s_ckpt_%s", raf, ckpt)
    write(name, string.format("-- Seed: TestFullyShardPrefetch._test_backward_prefetch_forward_backward\n" ..
      "-- (reshard_after_forward=%s, checkpoint_impl=%s).\n", raf, ckpt) ..
      header .. transformer(3, raf, ckpt) .. spec(name))
    name = string.format("multi_forward_raf_%s_ckpt_%s", raf, ckpt)
    write(name, string.format("-- Seed: TestFullyShardPrefetch._test_backward_prefetch_multi_forward\n" ..
      "-- (reshard_after_forward=%s, checkpoint_impl=%s): two forwards, one backward through both.\n", raf, ckpt) ..
      header .. transformer(3, raf, ckpt) .. spec(name, '\n  step = { "forward", "forward", "backward" },'))
  end
end

write("unused_in_backward", [[
-- Seed: TestFullyShardPrefetch._test_backward_prefetch_unused_in_backward: a Linear then a
-- DoubleLinear; backward through the second output first (not the last backward, graph
-- retained), then through the first.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local dim = 8
local model = nn.Sequential{ nn.Linear(dim, dim), models.DoubleLinear(dim) }
fsdp.fully_shard(model[1], { reshard_after_forward = true })
fsdp.fully_shard(model[2].lin1, { reshard_after_forward = true })
fsdp.fully_shard(model[2].lin2, { reshard_after_forward = true })
fsdp.fully_shard(model, { reshard_after_forward = true })
return fsdp.spec{
  name = "unused_in_backward", model = model, world_size = 4,
  input = { shape = { 4, dim } }, loss = "sum",
  step = { "forward", { "backward", output = 2, is_last_backward = false, retain_graph = true }, { "backward", output = 1 } },
}
]])

for _, n in ipairs({ 1, 2 }) do
  local name = "set_forward_prefetch_" .. n
  write(name, string.format([[
-- Seed: TestFullyShardPrefetch.test_set_modules_to_forward_prefetch, num_to_prefetch=%d:
-- each layer prefetches the next %d layer(s) in forward.
]], n, n) .. header .. transformer(4, "true", "utils") .. string.format([[
local n = %d
for i = 1, #model.layers - n do
  local targets = {}
  for j = 1, n do targets[j] = model.layers[i + j] end
  model.layers[i]:set_modules_to_forward_prefetch(targets)
end
]], n) .. spec(name))
  name = "set_backward_prefetch_" .. n
  write(name, string.format([[
-- Seed: TestFullyShardPrefetch.test_set_modules_to_backward_prefetch, num_to_prefetch=%d:
-- each layer prefetches the previous %d layer(s) in backward.
]], n, n) .. header .. transformer(4, "true", "utils") .. string.format([[
local n = %d
for i = n + 1, #model.layers do
  local targets = {}
  for j = 1, n do targets[j] = model.layers[i - j] end
  model.layers[i]:set_modules_to_backward_prefetch(targets)
end
]], n) .. spec(name))
end

write("backward_prefetch_inside_ac", [[
-- Seed: TestFullyShardPrefetch.test_set_modules_to_backward_prefetch_inside_ac (its first
-- backward, with default prefetching): blocks and their feed-forwards activation-
-- checkpointed, feed_forward.w1 sharded inside each block, embeddings and norm/output as
-- list groups, a root without parameters.
-- Differs from the seed: weight_tying = false, since the seed's tied output.weight would
-- sit in two groups ("norm, output" and the embeddings), which fsdpgen rejects as PyTorch's
-- _validate_no_duplicate_params does.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 3, weight_tying = false }
for _, layer in ipairs(model.layers) do
  nn.checkpoint_module(layer)
  nn.checkpoint_module(layer.feed_forward)
end
fsdp.fully_shard({ model.tok_embeddings, model.pos_embeddings })
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer.feed_forward.w1, { reshard_after_forward = true })
  fsdp.fully_shard(layer, { reshard_after_forward = true })
end
fsdp.fully_shard({ model.norm, model.output }, { reshard_after_forward = true })
fsdp.fully_shard(model, { reshard_after_forward = true })
return fsdp.spec{
  name = "backward_prefetch_inside_ac", model = model, world_size = 4,
  input = { batch = 2, seq_len = 16 }, loss = "sum",
}
]])

-- TestFullyShardCommunication: default ModelArgs (2 layers).
for _, raf in ipairs({ "true", "false", "2", "none" }) do
  local name = "comm_count_raf_" .. raf
  write(name, "-- Seed: TestFullyShardCommunication.test_fully_shard_communication_count (reshard_after_forward=" ..
    raf .. ").\n" .. header .. string.format([[
local model = models.Transformer{}
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { reshard_after_forward = %s })
end
fsdp.fully_shard(model, { reshard_after_forward = %s })
]], lua_raf(raf), lua_raf(raf)) .. spec(name))
end

write("manual_reshard_raf_false", "-- Seed: TestFullyShardCommunication.test_manual_reshard_with_reshard_after_forward_false:\n" ..
  "-- every sharded module resharded by hand between forward and backward.\n" .. header .. [[
local model = models.Transformer{}
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { reshard_after_forward = false })
end
fsdp.fully_shard(model, { reshard_after_forward = false })
]] .. spec("manual_reshard_raf_false", '\n  step = { "forward", "reshard", "backward" },'))

for _, v in ipairs({ "true", "false", "none" }) do
  for _, recurse in ipairs({ "true", "false" }) do
    local name = string.format("set_raf_%s_recurse_%s", v, recurse)
    local body = "local model = models.Transformer{}\n"
    if v == "none" then
      body = body .. "for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end\nfsdp.fully_shard(model)\n"
    else
      local init = v == "true" and "false" or "true"
      body = body .. string.format("for _, layer in ipairs(model.layers) do\n  fsdp.fully_shard(layer, { reshard_after_forward = %s })\nend\n", init)
      body = body .. string.format("fsdp.fully_shard(model, { reshard_after_forward = %s })\n", init)
      body = body .. string.format("model:set_reshard_after_forward(%s, { recurse = %s })\n", v, recurse)
    end
    write(name, string.format("-- Seed: TestFullyShardCommunication.test_set_reshard_after_forward (set_reshard_after_forward=%s, recurse=%s).\n",
      v, recurse) .. header .. body .. spec(name))
  end
end
