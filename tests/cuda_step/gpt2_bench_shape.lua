-- bench/specs/gpt2_124m.lua in small: world 1, bf16 parameters, per-block groups and the root,
-- AdamW, GPT-2's LayerNorms, GELU, biases and tied output, and the shapes that choose the same
-- kernels (rows of a multiple of 256 for the row-per-warp norms, head dim 64, an odd
-- vocabulary as 50257). tests/cuda_step/run.sh lists the kernels of its captured step
-- (kernels/gpt2_bench_shape.txt).
local fsdp, models = require("fsdp"), require("models")
local model = models.GPT2{ n_layers = 2, dim = 256, n_heads = 4, vocab_size = 509, max_seq_len = 64,
                           dropout_p = 0 }
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { mp_policy = mp })
end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{
  name = "gpt2_bench_shape", model = model, world_size = 1,
  input = { batch = 2, seq_len = 64 }, loss = "cross_entropy", optimizer = { "adamw", lr = 3e-4 },
}
