-- expect: 3: error: ModelArgs: n_layers must be at most 512, got 1000000000
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 1000000000 }
