-- expect: 6: error: error() with a table value
-- (The spec's own error() with no message position is the spec's error, not fsdpgen's.)
local nn, fsdp = require("nn"), require("fsdp")
local model = nn.Module{
  lin = nn.Linear(4, 4),
  forward = function(self, x) error({ code = 1 }) end,
}
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 2, input = { shape = { 2, 4 } } }
