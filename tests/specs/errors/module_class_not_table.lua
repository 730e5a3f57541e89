-- expect: 6: error: nn.new_module(name, class): class must be a table of its methods ({ forward = function(self, x) ... end }), got number
-- A number where the class goes was an internal error of the planner; a number where the
-- name goes reached the PyTorch twin as one (spec_fuzz --seed 1206 --emit).
local nn, fsdp = require("nn"), require("fsdp")
local Child = { forward = function(self, x) return x end }
local child = nn.new_module("Child", 5)
fsdp.fully_shard(child)
return fsdp.spec{ name = "x", model = child, world_size = 2, input = { shape = { 4, 16 } }, loss = "sum" }
