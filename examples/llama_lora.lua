-- examples/llama_lora.lua: LoRA fine-tuning as torchtune runs it with FSDP2 (Hu et al. 2021):
-- LoRA adapters on the attention's projections, the feed-forward and the output head
-- (models.Llama's lora_modules; nn.LoRALinear), the rest of the model frozen, the adapters
-- trainable (nn.adapter_params, as torchtune's get_adapter_params and set_trainable_params).
-- Each block's group holds its frozen weights and its adapters: FSDP2 gathers both for the
-- forward and the backward, but reduce-scatters the adapters' gradients alone, and only
-- they have sharded gradients and AdamW state (`./fsdpgen plan` shows how small those are).
-- On Llama 1B with torchtune's 1B LoRA (examples/llama_1b_lora.lua: rank 64 on wq, wv, wo
-- and the MLP) one GPU's plan is 21.8 GiB where the full fine-tune's is 36.1 (20.1 and 34.4
-- with keep_unsharded = false: the blocks' unsharded weights freed after their forward and
-- cast again, the frozen ones too, at every all-gather).
-- Start from trained weights with --load-hf DIR (a LlamaForCausalLM directory of this size;
-- the adapters keep their initialization, lora_b zeros, so the first step is the loaded
-- model's); --save-hf DIR writes the weights with the adapters merged in (W + alpha/rank B A),
-- --save-peft DIR the adapters alone for PEFT (PeftModel.from_pretrained(base, DIR)), which
-- --load-peft DIR reads back onto a --load-hf base.
-- Size: small (trains on a CPU in seconds; tests/examples/run.sh trains it)
-- Run:  ./fsdpgen run examples/llama_lora.lua -- --steps 30 --log-every 10
--       ./fsdpgen plan examples/llama_lora.lua   (frozen rows, adapters' gradients and state)
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")

local model = models.Llama{ n_layers = 4, dim = 64, n_heads = 4, n_kv_heads = 2, vocab_size = 256,
                            max_seq_len = 32,
                            lora_modules = { "wq", "wk", "wv", "wo", "w1", "w2", "w3", "output" },
                            lora_rank = 8, lora_alpha = 16 }
model:requires_grad_(false)
for _, p in ipairs(nn.adapter_params(model)) do p:requires_grad_(true) end
for _, layer in ipairs(model.layers) do fsdp.fully_shard(layer) end
fsdp.fully_shard(model)

return fsdp.spec{
  name = "llama_lora", model = model, world_size = 2,
  input = { batch = 4, seq_len = 32 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 3e-3, weight_decay = 0.01 },
}
