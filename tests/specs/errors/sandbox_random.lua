-- expect: 3: error: math.random is not available in a spec: planning is deterministic
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local n = math.random(1, 4)
