-- expect: 3: error: 'io' is not available in a spec
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local text = io.open("/etc/passwd"):read("a")
