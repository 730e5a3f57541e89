-- expect: 3: error: no module 'modles' (no tests/specs/errors/modles.lua; a spec may require nn, fsdp, models or a module of its own directory)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local m = require("modles")
