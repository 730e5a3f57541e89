-- One rank, GPT-2 with its tied output head (bf16 parameters, a group per block and the
-- root): the root is reduced in four parts (generator/plan/reductions.lua
-- Sim:reduce_parts). After the output head's backward the final norm is a part, and so is
-- the tied embedding's gradient in the rows no token of the step looks up, which only the
-- head's product reaches: the optimizer stream steps those rows beside the blocks'
-- backward (RT_ROWS_FINAL). The embedding's lookups then add to the head's gradient in
-- place, and the root's last two parts step the position embedding and the rows looked up.
-- A vocabulary of 97 over 32 tokens a step leaves most rows unused.
-- tests/cuda_step/run.sh trains it against tests/cuda_step/gpt2_w1_whole.lua (the same
-- model, stepped whole) and wants the same bits.
local fsdp, models = require("fsdp"), require("models")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
local model = models.GPT2{ n_layers = 2, dim = 32, n_heads = 2, vocab_size = 97, max_seq_len = 16,
                           dropout_p = 0 }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { mp_policy = mp })
end
fsdp.fully_shard(model, { mp_policy = mp })
return fsdp.spec{
  name = "gpt2_w1_tied_rows", model = model, world_size = 1,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy", optimizer = { "adamw", lr = 3e-3 },
}
