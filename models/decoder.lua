-- Pieces the decoder models (Transformer, Llama) share: the input length check and the
-- loop over their blocks, each checkpointed when the model asks for it.
local errors = require("spec.errors")
local nn = require("spec.nn")

local M = {}

function M.check_seq_len(model, tokens)
  if not require("spec.trace").is_tensor(tokens) or #tokens.shape ~= 2 then
    errors.raise(string.format("%s expects token ids [batch, seq_len], got %s", rawget(model, "_type"),
      require("spec.trace").is_tensor(tokens) and require("spec.trace").shape_str(tokens.shape) or type(tokens)))
  end
  local seq_len = tokens.shape[2]
  if seq_len > model.max_seq_len then
    errors.raise(string.format("input seq_len %d exceeds the model's max_seq_len %d", seq_len, model.max_seq_len))
  end
  return seq_len
end

-- h through model.layers in order (nn.checkpoint around each with checkpoint_activations).
function M.run_layers(model, h)
  for i = 1, #model.layers do
    local layer = model.layers[i]
    if model.checkpoint_activations then
      h = nn.checkpoint(layer, h)
    else
      h = layer(h)
    end
  end
  return h
end

return M
