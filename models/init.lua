-- Built-in models, with the math and FQNs of PyTorch's FSDP test helpers (Transformer,
-- MLP, DoubleLinear) plus a Llama-style model and GPT-2 / Llama size presets.
local M = {}
local transformer = require("models.transformer")
local mlp = require("models.mlp")
local llama = require("models.llama")

M.ModelArgs = transformer.ModelArgs
M.Transformer = transformer.Transformer
M.TransformerBlock = transformer.TransformerBlock
M.GPT2 = transformer.GPT2
M.MLP = mlp.MLP
M.DoubleLinear = mlp.DoubleLinear
M.Llama = llama.Llama
M.LlamaArgs = llama.LlamaArgs

return M
