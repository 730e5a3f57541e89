-- examples/llama_1b.lua: the Llama "1B" preset (16 layers, dim 2048, 32 heads, 8 kv
-- heads, SwiGLU 8192, vocab 128256, untied output: 1.5 B parameters) sharded as FSDP2
-- users shard it: fully_shard per block, then the root, bf16 parameters with fp32
-- gradient reduction, AdamW; seq 2048, batch 4. It is also the benchmark's config
-- (bench/specs/llama_1b.lua links to this file, hence its name; bench/torch_fsdp2.py
-- builds the same model with `--config llama_1b`). The memory plan, which sizes the CUDA
-- arena, predicts 39.3 GB per GPU at batch 4 (it stores compute buffers as fp32, but for
-- the packed 16-bit ones: docs/cuda.md "Numbers"), 2.5 GB of it the unsharded bf16
-- parameters, kept across steps at one rank and written by AdamW (docs/spec.md
-- keep_unsharded). One GPU as written: set world_size = N.
-- Size: large (plans anywhere in a second; trains on GPUs with --cuda)
-- Run:  ./fsdpgen plan examples/llama_1b.lua
--       ./fsdpgen run examples/llama_1b.lua --cuda -- --steps 100 --data TOKENS.u32
local fsdp, models = require("fsdp"), require("models")

local model = models.Llama{ preset = "1B" }
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { mp_policy = mp })
end
fsdp.fully_shard(model, { mp_policy = mp })

return fsdp.spec{
  name = "bench_llama_1b", model = model, world_size = 1,
  input = { batch = 4, seq_len = 2048 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 3e-4 },
}
