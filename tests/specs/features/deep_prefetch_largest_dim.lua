-- Six layers, each prefetching the next three in forward and the previous two in
-- backward, parameters sharded on their largest dim over 3 ranks (uneven chunks).
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 6, dim = 24, n_heads = 4, vocab_size = 10, dropout_p = 0 }
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer, { shard_placement = "largest_dim" }) end
fsdp.fully_shard(model, { shard_placement = "largest_dim" })
local L = model.layers
for i = 1, #L do
  local f, b = {}, {}
  for j = i + 1, math.min(i + 3, #L) do f[#f + 1] = L[j] end
  for j = i - 1, math.max(i - 2, 1), -1 do b[#b + 1] = L[j] end
  if #f > 0 then L[i]:set_modules_to_forward_prefetch(f) end
  if #b > 0 then L[i]:set_modules_to_backward_prefetch(b) end
end
return fsdp.spec{
  name = "deep_prefetch_largest_dim", model = model, world_size = 3,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy", optimizer = { "sgd", lr = 0.1, momentum = 0.9 },
}
