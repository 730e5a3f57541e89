-- expect: 3: error: the spec ran 200000 lines without finishing
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
for _ = 1, 10 do pcall(function() while true do end end) end
