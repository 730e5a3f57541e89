-- expect: 3: error: stack overflow (a function that calls itself without end?)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local function depth(n, a, b, c, d, e, f, g, h) return 1 + depth(n + 1, a, b, c, d, e, f, g, h) end
depth(1) -- nine arguments a call: the stack overflows after ~100,000 calls, before the line limit
