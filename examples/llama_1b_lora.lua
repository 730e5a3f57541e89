-- examples/llama_1b_lora.lua: Llama 1B (examples/llama_1b.lua's model, batch and grouping)
-- fine-tuned with LoRA as torchtune's llama3_2/1B_lora_single_device config does it: rank 64,
-- alpha 128, no adapter dropout, adapters on q, v and the attention's output projection and on
-- the feed-forward's three linears; everything else frozen, the final norm included. alpha /
-- rank is 2, so each adapter's scale is folded into lora_b's GEMM (docs/cuda.md "A scale
-- folded into its linear"). `fsdpgen simulate --gpu h100` compares its step with the full
-- fine-tune's (bench/RESULTS.md, "LoRA"): less memory (no gradients or optimizer state for
-- the base), more element-wise work (the adapters' adds, their memory-bound GEMMs).
-- Size: large (plans anywhere in a second; trains on GPUs with --cuda)
-- Run:  ./fsdpgen simulate examples/llama_1b_lora.lua --gpu h100
--       ./fsdpgen run examples/llama_1b_lora.lua --cuda -- --load-hf DIR --steps 100 --data TOKENS.u32
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")

local model = models.Llama{ preset = "1B", lora_modules = { "wq", "wv", "wo", "w1", "w2", "w3" },
                            lora_rank = 64, lora_alpha = 128 }
model:requires_grad_(false)
for _, p in ipairs(nn.adapter_params(model)) do p:requires_grad_(true) end
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { mp_policy = mp })
end
fsdp.fully_shard(model, { mp_policy = mp })

return fsdp.spec{
  name = "llama_1b_lora", model = model, world_size = 1,
  input = { batch = 4, seq_len = 2048 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 3e-4, weight_decay = 0.01 },
}
