-- Benchmark config (bench/run.sh): GPT-2 124M (12 layers, dim 768, 12 heads, vocab 50257,
-- learned positions, tied output), seq 1024, batch 16, one GPU. FSDP2's usual wrapping:
-- fully_shard per block and the root, bf16 parameters with fp32 gradient reduction,
-- AdamW. bench/torch_fsdp2.py builds the same model (`--config gpt2_124m`).
local fsdp, models = require("fsdp"), require("models")

local model = models.GPT2{ size = "124M", dropout_p = 0 }
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { mp_policy = mp })
end
fsdp.fully_shard(model, { mp_policy = mp })

return fsdp.spec{
  name = "bench_gpt2_124m", model = model, world_size = 1,
  input = { batch = 16, seq_len = 1024 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 3e-4 },
}
