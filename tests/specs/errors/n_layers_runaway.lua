-- expect: 3: error: ModelArgs: n_layers must be at most 5000 (a spec makes at most 20000 parameters)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 1000000000 }
