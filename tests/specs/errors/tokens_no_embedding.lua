-- expect: 9: error: the token input feeds no embedding (allowed: an embedding of the input; input = { shape = { ... } } for float models)
-- check pass: a token input cast to float traces; the binary needs an embedding's vocabulary.
local nn, fsdp = require("nn"), require("fsdp")
local M = {}
function M.forward(self, x) return self.lin(x:float()) end
local m = nn.new_module("M", M)
m.lin = nn.Linear(16, 16)
fsdp.fully_shard(m)
return fsdp.spec{ name = "x", model = m, world_size = 2, input = { batch = 4, seq_len = 16 },
  loss = "sum" }
