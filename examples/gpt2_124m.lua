-- examples/gpt2_124m.lua: GPT-2 124M (12 layers, dim 768, 12 heads, vocab 50257, learned
-- positions, tied output) sharded as FSDP2 users shard it: fully_shard per block, then the
-- root, bf16 parameters with fp32 gradient reduction (MixedPrecisionPolicy), AdamW; seq
-- 1024, batch 16. It is also the benchmark's config (bench/specs/gpt2_124m.lua links to
-- this file, hence its name; bench/torch_fsdp2.py builds the same model with
-- `--config gpt2_124m`). One GPU as written: set world_size = N for N GPUs.
-- Size: large (plans anywhere in a second; trains on GPUs with --cuda)
-- Run:  ./fsdpgen plan examples/gpt2_124m.lua          (the plan and its memory, on any machine)
--       ./fsdpgen run examples/gpt2_124m.lua --cuda -- --steps 100 --data TOKENS.u16
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
