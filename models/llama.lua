-- Llama-style decoder: RMSNorm, rotary position embeddings, grouped-query attention and a
-- SwiGLU feed-forward; no biases, untied output. Presets for common sizes.
local nn = require("spec.nn")
local errors = require("spec.errors")
local args = require("models.args")
local decoder = require("models.decoder")

local M = {}

local schema = {
  n_layers = { 2, "posint" }, vocab_size = { 256, "posint" }, max_seq_len = { 64, "posint" },
  dim = { 64, "posint" }, n_heads = { 4, "posint" }, n_kv_heads = { nil, "posint", optional = true },
  ffn_dim = { nil, "posint", optional = true }, multiple_of = { 32, "posint" },
  norm_eps = { 1e-5, "number" }, rope_theta = { 10000.0, "number" },
  checkpoint_activations = { false, "bool" }, preset = { nil, "preset", optional = true },
}

local presets = {
  ["1B"] = { n_layers = 16, dim = 2048, n_heads = 32, n_kv_heads = 8, ffn_dim = 8192,
    vocab_size = 128256, max_seq_len = 2048, rope_theta = 500000.0 },
  ["3B"] = { n_layers = 28, dim = 3072, n_heads = 24, n_kv_heads = 8, ffn_dim = 8192,
    vocab_size = 128256, max_seq_len = 2048, rope_theta = 500000.0 },
  ["7B"] = { n_layers = 32, dim = 4096, n_heads = 32, n_kv_heads = 32, ffn_dim = 11008,
    vocab_size = 32000, max_seq_len = 2048 },
}

function M.LlamaArgs(given)
  given = given or {}
  local merged = {}
  if given.preset ~= nil then
    local p = presets[given.preset]
    if not p then
      errors.raise(string.format("Llama: unknown preset '%s'; allowed: 1B, 3B, 7B", tostring(given.preset)))
    end
    for k, v in pairs(p) do merged[k] = v end
  end
  for k, v in pairs(given) do
    if k ~= "preset" then merged[k] = v end
  end
  local s = {}
  for k, v in pairs(schema) do
    if k ~= "preset" then s[k] = v end
  end
  local a = args.resolve(merged, s, "Llama")
  a.n_kv_heads = a.n_kv_heads or a.n_heads
  if a.dim % a.n_heads ~= 0 then
    errors.raise(string.format("Llama: n_heads %d must divide dim %d", a.n_heads, a.dim))
  end
  if (a.dim // a.n_heads) % 2 ~= 0 then
    errors.raise(string.format("Llama: head dim %d must be even for rotary embeddings", a.dim // a.n_heads))
  end
  if a.n_heads % a.n_kv_heads ~= 0 then
    errors.raise(string.format("Llama: n_kv_heads %d must divide n_heads %d", a.n_kv_heads, a.n_heads))
  end
  if not a.ffn_dim then
    -- Llama's rule: 2/3 of 4*dim, rounded up to a multiple of `multiple_of`.
    local h = (2 * 4 * a.dim) // 3
    a.ffn_dim = a.multiple_of * ((h + a.multiple_of - 1) // a.multiple_of)
  end
  return a
end

local Attention = {}
function Attention.forward(self, x)
  local q = nn.rotary(self.wq(x), { n_heads = self.n_heads, theta = self.theta })
  local k = nn.rotary(self.wk(x), { n_heads = self.n_kv_heads, theta = self.theta })
  local v = self.wv(x)
  local o = nn.attention(q, k, v, { causal = true, n_heads = self.n_heads, n_kv_heads = self.n_kv_heads })
  return self.wo(o)
end

local FeedForward = {}
function FeedForward.forward(self, x)
  return self.w2(nn.swiglu(self.w1(x), self.w3(x)))
end

local Block = {}
function Block.forward(self, x)
  local h = x + self.attention(self.attention_norm(x))
  return h + self.feed_forward(self.ffn_norm(h))
end

local function block(a)
  local hd = a.dim // a.n_heads
  local attn = nn.new_module("Attention", Attention)
  attn.wq = nn.Linear(a.dim, a.n_heads * hd, { bias = false })
  attn.wk = nn.Linear(a.dim, a.n_kv_heads * hd, { bias = false })
  attn.wv = nn.Linear(a.dim, a.n_kv_heads * hd, { bias = false })
  attn.wo = nn.Linear(a.n_heads * hd, a.dim, { bias = false })
  rawset(attn, "n_heads", a.n_heads)
  rawset(attn, "n_kv_heads", a.n_kv_heads)
  rawset(attn, "theta", a.rope_theta)
  local ff = nn.new_module("FeedForward", FeedForward)
  ff.w1 = nn.Linear(a.dim, a.ffn_dim, { bias = false })
  ff.w2 = nn.Linear(a.ffn_dim, a.dim, { bias = false })
  ff.w3 = nn.Linear(a.dim, a.ffn_dim, { bias = false })
  local m = nn.new_module("TransformerBlock", Block)
  m.attention_norm = nn.RMSNorm(a.dim, { eps = a.norm_eps })
  m.attention = attn
  m.ffn_norm = nn.RMSNorm(a.dim, { eps = a.norm_eps })
  m.feed_forward = ff
  return m
end

local Llama = {}
function Llama.forward(self, tokens)
  decoder.check_seq_len(self, tokens)
  local h = decoder.run_layers(self, self.tok_embeddings(tokens))
  return self.output(self.norm(h)):float()
end

function M.Llama(given)
  local a = M.LlamaArgs(given)
  local m = nn.new_module("Llama", Llama)
  rawset(m, "model_args", a)
  rawset(m, "max_seq_len", a.max_seq_len)
  rawset(m, "checkpoint_activations", a.checkpoint_activations)
  m.tok_embeddings = nn.Embedding(a.vocab_size, a.dim)
  local layers = nn.ModuleList()
  for _ = 1, a.n_layers do layers:append(block(a)) end
  m.layers = layers
  m.norm = nn.RMSNorm(a.dim, { eps = a.norm_eps })
  m.output = nn.Linear(a.dim, a.vocab_size, { bias = false })
  return m
end

return M
