-- Llama with head dim 16 in bf16 on 2 ranks: on the CUDA backend its attention runs on the
-- tensor-core flash kernels (head dims that are multiples of 16), grouped-query, with a
-- sequence (72) that spans two key tiles and ends inside a query tile.
local fsdp, models = require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = models.Llama{ n_layers = 2, dim = 64, n_heads = 4, n_kv_heads = 2, vocab_size = 64,
                            max_seq_len = 72 }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { mp_policy = mp })
end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{
  name = "llama_tc_attention_bf16", model = model, world_size = 2,
  input = { batch = 2, seq_len = 72 }, loss = "cross_entropy", optimizer = { "adamw", lr = 1e-3 },
}
