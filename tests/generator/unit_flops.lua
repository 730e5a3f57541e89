-- Unit tests of model FLOPs per step (generator/plan/flops.lua) on tiny specs counted by hand:
-- PaLM's 6 * N + 12 * L * T * d per token (N without lookup-only embeddings, tied tables
-- counted once), 4 per frozen weight, per-op rows for float models, microbatches and world size multiply,
-- activation checkpointing adds nothing. The benchmark configs against bench/flops.py:
-- tests/bench/run.sh. Run from the repository root: lua5.4 tests/generator/unit_flops.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path

local util = require("tests.generator.step_c")
local flops = require("plan.flops")
local check = util.check

local tmp = os.tmpname()
local function count(text)
  local f = assert(io.open(tmp, "w"))
  f:write(text)
  f:close()
  return flops.count(util.plan(tmp))
end

local function spec(model, shard, extra)
  return string.format([[
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = %s
%s
return fsdp.spec{ name = "f", model = model, world_size = 2, %s }
]], model, shard, extra)
end

local per_layer = [[for _, l in ipairs(model.layers) do fsdp.fully_shard(l) end
fsdp.fully_shard(model)]]
local tokens = [[input = { batch = 3, seq_len = 8 }, loss = "cross_entropy"]]

-- Transformer, 1 layer, dim 4, vocab 10, max_seq_len 8, tied: tok 40 + pos 32 + block 228
-- (norms 16, wq..wo 64, w1 64+16, w2 64+4) + norm 8 = 308; N = 308 - pos 32 = 276;
-- seq 8: 6 * 276 + 12 * 1 * 8 * 4 = 2040 per token; 2 ranks x 3 x 8 = 48 tokens per step.
local gpt = "models.Transformer{ n_layers = 1, dim = 4, n_heads = 2, vocab_size = 10, "
  .. "max_seq_len = 8, dropout_p = 0%s }"
local c = count(spec(gpt:format(""), per_layer, tokens))
check(c.params == 308 and c.matmul_params == 276,
  string.format("tiny tied Transformer: 308 parameters, N 276 (got %d, %d)", c.params,
    c.matmul_params))
check(c.flops_per_token == 2040 and c.step_tokens == 48 and c.step_flops == 2040 * 48,
  string.format("tiny Transformer: 2040 FLOPs/token, 48 tokens, %d FLOPs per step "
    .. "(got %s, %d, %d)", 2040 * 48, tostring(c.flops_per_token), c.step_tokens, c.step_flops))
check(c.rank_flops * 2 == c.step_flops and c.rank_tokens == 24, "one rank: half the step (2 ranks)")
check(c.attn_flops == 12 * 24 * 8 * 4, "attention term 12 * rows 24 * keys 8 * width 4")

-- Activation checkpointing recomputes the block in backward: not model FLOPs.
local ck = count(spec(gpt:format(", checkpoint_activations = true"), per_layer, tokens))
check(ck.step_flops == c.step_flops,
  string.format("checkpointed activations: the same %d FLOPs (got %d)", c.step_flops,
    ck.step_flops))

-- Two microbatches (two forwards, one optimizer step): twice the tokens and FLOPs.
local mb = count(spec(gpt:format(""), per_layer, tokens
  .. [[, step = { "forward", "backward", "forward", "backward", "optimizer" }]]))
check(mb.step_tokens == 96 and mb.step_flops == 2 * c.step_flops,
  string.format("two microbatches: 96 tokens, twice the FLOPs (got %d, %d)", mb.step_tokens,
    mb.step_flops))

-- Llama, 1 layer, dim 4, 2 heads, 1 kv head, ffn 8, vocab 10: tok 40 + block 152 (norms 8,
-- wq 16, wk 8, wv 8, wo 16, w1/w2/w3 96) + norm 4 + output 40 = 236; N = 236 - tok 40 = 196;
-- seq 8: 6 * 196 + 12 * 8 * 4 = 1560.
local l = count(spec("models.Llama{ n_layers = 1, dim = 4, n_heads = 2, n_kv_heads = 1, "
  .. "ffn_dim = 8, vocab_size = 10, max_seq_len = 8 }", per_layer, tokens))
check(l.params == 236 and l.matmul_params == 196 and l.flops_per_token == 1560,
  string.format("tiny Llama (GQA, untied): 236 parameters, N 196, 1560 FLOPs/token "
    .. "(got %d, %d, %s)", l.params, l.matmul_params, tostring(l.flops_per_token)))

-- The same Llama with its attention frozen (wq 16, wk 8, wv 8, wo 16: 48 parameters): a frozen
-- weight costs 4 a row, not 6 (no weight gradient), 1560 - 2 * 48 = 1464; N unchanged.
local lf = count(spec("models.Llama{ n_layers = 1, dim = 4, n_heads = 2, n_kv_heads = 1, "
  .. "ffn_dim = 8, vocab_size = 10, max_seq_len = 8 }\nmodel.layers[1].attention:requires_grad_(false)",
  per_layer, tokens))
check(lf.matmul_params == 196 and lf.flops_per_token == 1464,
  string.format("tiny Llama, attention frozen: N 196, 1464 FLOPs/token (got %d, %s)", lf.matmul_params,
    tostring(lf.flops_per_token)))

-- A float model: MLP(3) is in_proj 3 -> 12 (+12 bias) and out_proj 12 -> 3 (+3 bias) = 87
-- parameters, on 5 samples per rank: 6 * 5 * 87 per rank, no attention.
local m = count(spec("models.MLP(3)", "fsdp.fully_shard(model)",
  [[input = { shape = { 5, 3 } }, loss = "sum"]]))
check(m.params == 87 and m.rank_flops == 6 * 5 * 87 and m.step_tokens == 10
  and m.attn_flops == 0,
  string.format("float MLP(3): 87 parameters, %d FLOPs per rank, 10 samples per step "
    .. "(got %d, %d, %d)", 6 * 5 * 87, m.params, m.rank_flops, m.step_tokens))

check(flops.human(854945280) == "855 MFLOP" and flops.human(1.4e13) == "14 TFLOP",
  "human-readable counts")

os.remove(tmp)
util.finish()
