-- expect: 4: error: attempt to index a nil value
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
-- The real string library is out of reach: the generator's own string functions stay intact.
getmetatable("").__index.format = nil
