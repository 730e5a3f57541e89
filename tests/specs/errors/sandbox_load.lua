-- expect: 3: error: 'load' is not available in a spec
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local f = load("return 1")
