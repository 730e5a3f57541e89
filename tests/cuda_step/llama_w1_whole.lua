-- tests/specs/conformance/llama_w1_bf16.lua with the root's gradient divide factor set to
-- 1.0, which changes no value but makes the root's reduction a reduce-scatter over one rank
-- (not direct), so it is not split into parts (generator/plan/planner.lua
-- Sim:reduce_parts). tests/cuda_step/run.sh trains both and wants the same bits: the
-- output head's part reduced and stepped beside the blocks' backward changes nothing.
local fsdp, models = require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = models.Llama{ n_layers = 2, dim = 48, n_heads = 4, n_kv_heads = 2, vocab_size = 64,
                            max_seq_len = 16 }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { mp_policy = mp })
end
fsdp.fully_shard(model, { mp_policy = mp })
model:set_gradient_divide_factor(1.0)
return fsdp.spec{
  name = "llama_w1_whole", model = model, world_size = 1,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy", optimizer = { "adamw", lr = 1e-3 },
}
