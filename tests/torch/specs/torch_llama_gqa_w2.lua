-- tests/torch: Llama-style model with grouped-query attention (4 query heads, 2 kv
-- heads), RMSNorm, rotary embeddings, SwiGLU; world 2, cross-entropy on token data.
-- norm_eps and rope_theta are not the defaults, so that the check sees them arrive.
-- check_load: --model llama --data --batch 2 --seq-len 16 --n-heads 4 --n-kv-heads 2 --norm-eps 0.05 --rope-theta 10
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Llama{ n_layers = 2, dim = 32, n_heads = 4, n_kv_heads = 2, vocab_size = 256,
                            max_seq_len = 16, norm_eps = 0.05, rope_theta = 10.0 }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer)
end
fsdp.fully_shard(model)
return fsdp.spec{
  name = "torch_llama_gqa_w2", model = model, world_size = 2,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy", optimizer = { "adam", lr = 1e-2 },
}
