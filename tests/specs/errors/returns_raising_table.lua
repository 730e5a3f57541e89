-- expect: 6: error: the spec must return fsdp.spec{ ... }, got a table
-- A table whose __index raises: the loader must not index it through the metatable.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.MLP(16)
fsdp.fully_shard(model)
return setmetatable({}, { __index = function() error("no such field") end })
