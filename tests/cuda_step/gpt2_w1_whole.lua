-- tests/specs/features/gpt2_w1_tied_rows.lua with every group's gradient divide factor set
-- to 1.0, which changes no value but makes each reduction a reduce-scatter over one rank
-- (not direct), so the root is not split into parts (generator/plan/reductions.lua
-- Sim:reduce_parts) and no gradients are in place.
-- tests/cuda_step/run.sh trains both and wants the same bits: the tied embedding's rows no
-- token looks up stepped beside the blocks' backward change nothing.
local fsdp, models = require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = models.GPT2{ n_layers = 2, dim = 32, n_heads = 2, vocab_size = 97, max_seq_len = 16,
                           dropout_p = 0 }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { mp_policy = mp })
end
fsdp.fully_shard(model, { mp_policy = mp })
for _, m in ipairs({ model, model.layers[1], model.layers[2] }) do m:set_gradient_divide_factor(1.0) end
return fsdp.spec{
  name = "gpt2_w1_whole", model = model, world_size = 1,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy", optimizer = { "adamw", lr = 3e-3 },
}
