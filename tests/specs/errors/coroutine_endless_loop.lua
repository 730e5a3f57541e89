-- expect: 3: error: the spec ran 200000 lines without finishing
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local co = coroutine.wrap(function() while true do end end)
co()
