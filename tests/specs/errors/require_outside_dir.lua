-- expect: 3: error: cannot require '../../generator/main': a spec may require nn, fsdp, models or a module of its own directory by its name
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local m = require("../../generator/main")
