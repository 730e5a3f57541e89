-- expect: 3: error: stack overflow (a function that calls itself without end?)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local function depth(n) return 1 + depth(n + 1) end
depth(1)
