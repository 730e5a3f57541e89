-- expect: 10: error: step[4] backpropagates again through 'layers.1', checkpointed by nn.checkpoint_module, whose graph an earlier backward retained: PyTorch 2.11's composable checkpoint(module) recomputes a forward once and fails at the second (allowed: nn.checkpoint or checkpoint_activations, which recompute at every backward, or no retain_graph)
-- FSDP2's twin of this spec fails in the second backward (AttributeError: '_GeneratorContextManager'
-- object has no attribute 'args'); with checkpoint_activations = true instead it runs
-- (tests/specs/features/retain_graph_ckpt.lua).
local fsdp, models, nn = require("fsdp"), require("models"), require("nn")
local model = models.Transformer{ n_layers = 2, dropout_p = 0 }
nn.checkpoint_module(model.layers[2])
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)
return fsdp.spec{
  name = "x", model = model, world_size = 1, input = { batch = 2, seq_len = 8 }, loss = "cross_entropy",
  step = { "forward", { "backward", retain_graph = true }, "forward", "backward", "optimizer" },
}
