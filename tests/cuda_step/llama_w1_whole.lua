-- tests/specs/conformance/llama_w1_bf16.lua with every group's gradient divide factor set
-- to 1.0, which changes no value but makes each reduction a reduce-scatter over one rank
-- (not direct), so the root is not split into parts (generator/plan/reductions.lua
-- Sim:reduce_parts) and no gradients are in place (generator/memory/memory.lua
-- in_place_groups).
-- tests/cuda_step/run.sh trains both and wants the same bits: the output head's part
-- reduced and stepped beside the blocks' backward, and the optimizer rounding the
-- gradients as it reads them, change nothing.
local fsdp, models = require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = models.Llama{ n_layers = 2, dim = 48, n_heads = 4, n_kv_heads = 2, vocab_size = 64,
                            max_seq_len = 16 }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { mp_policy = mp })
end
fsdp.fully_shard(model, { mp_policy = mp })
for _, m in ipairs({ model, model.layers[1], model.layers[2] }) do m:set_gradient_divide_factor(1.0) end
return fsdp.spec{
  name = "llama_w1_whole", model = model, world_size = 1,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy", optimizer = { "adamw", lr = 1e-3 },
}
