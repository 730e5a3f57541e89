-- expect: 3: error: first line second line
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
error("first line\nsecond line")
