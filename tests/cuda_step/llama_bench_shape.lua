-- bench/specs/llama_1b.lua in small: world 1, bf16 parameters, per-block groups and the root,
-- AdamW, and the shapes that choose the same kernels (rows of a multiple of 256 for the
-- row-per-warp norms, head dim 64, grouped-query attention, a vocabulary of a multiple of 8).
-- tests/cuda_step/run.sh lists the kernels of its captured step (kernels/llama_bench_shape.txt).
local fsdp, models = require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = models.Llama{ n_layers = 2, dim = 256, n_heads = 4, n_kv_heads = 1, vocab_size = 512,
                            max_seq_len = 64 }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { mp_policy = mp })
end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{
  name = "llama_bench_shape", model = model, world_size = 1,
  input = { batch = 2, seq_len = 64 }, loss = "cross_entropy", optimizer = { "adamw", lr = 3e-4 },
}
