-- expect: 3: error: 'dofile' is not available in a spec
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
dofile("/etc/hostname")
