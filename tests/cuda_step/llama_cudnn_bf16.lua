-- Llama at the bench models' head dim (64) in bf16 on 2 ranks, grouped-query (4 heads, 2 kv),
-- sequence 128: the shape cuDNN's fused attention takes, where the small specs' head dims
-- (4 to 16) may be refused. tests/cuda_step/run.sh runs it on a GPU only, with
-- RT_ATTENTION=cudnn: both blocks' attention on one cuDNN site, against the CPU.
local fsdp, models = require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = models.Llama{ n_layers = 2, dim = 256, n_heads = 4, n_kv_heads = 2, vocab_size = 256,
                            max_seq_len = 128 }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { mp_policy = mp })
end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{
  name = "llama_cudnn_bf16", model = model, world_size = 2,
  input = { batch = 2, seq_len = 128 }, loss = "cross_entropy", optimizer = { "adamw", lr = 1e-3 },
}
