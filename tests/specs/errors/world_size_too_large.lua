-- expect: 6: error: world_size must be an integer from 1 to 65536, got 1048576
-- (Planning loops over the ranks: a runaway size must not run for hours.)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.MLP(16)
fsdp.fully_shard(model)
return fsdp.spec{ name = "x", model = model, world_size = 1 << 20, input = { shape = { 4, 16 } } }
