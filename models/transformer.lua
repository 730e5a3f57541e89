-- Transformer (PyTorch's distributed test helper): token + learned position embeddings,
-- pre-norm blocks of causal multi-head attention and a GELU feed-forward, final LayerNorm
-- and an output projection (optionally tied to the token embedding); fp32 logits.
local nn = require("spec.nn")
local errors = require("spec.errors")
local args = require("models.args")
local decoder = require("models.decoder")

local M = {}

local schema = {
  n_layers = { 2, "posint" }, vocab_size = { 8, "posint" }, max_seq_len = { 16, "posint" },
  dim = { 16, "posint" }, n_heads = { 4, "posint" }, dropout_p = { 0.1, "prob" },
  weight_tying = { true, "bool" }, checkpoint_activations = { false, "bool" },
  use_attn_mask = { true, "bool" },
}

function M.ModelArgs(given)
  local a = args.resolve(given, schema, "ModelArgs")
  if a.dim % a.n_heads ~= 0 then
    errors.raise(string.format("ModelArgs: n_heads %d must divide dim %d", a.n_heads, a.dim))
  end
  return a
end

local Attention = {}
function Attention.forward(self, x)
  local q, k, v = self.wq(x), self.wk(x), self.wv(x)
  local o = nn.attention(q, k, v, { causal = self.causal, n_heads = self.n_heads, dropout_p = self.dropout_p })
  return self.resid_dropout(self.wo(o))
end

local function attention(a)
  local m = nn.new_module("Attention", Attention)
  m.wq = nn.Linear(a.dim, a.dim, { bias = false })
  m.wk = nn.Linear(a.dim, a.dim, { bias = false })
  m.wv = nn.Linear(a.dim, a.dim, { bias = false })
  m.wo = nn.Linear(a.dim, a.dim, { bias = false })
  m.resid_dropout = nn.Dropout(a.dropout_p)
  rawset(m, "n_heads", a.n_heads)
  rawset(m, "dropout_p", a.dropout_p)  -- also inside attention, as PyTorch's test Transformer
  rawset(m, "causal", a.use_attn_mask)
  return m
end

local FeedForward = {}
function FeedForward.forward(self, x)
  return self.resid_dropout(self.w2(self.gelu(self.w1(x))))
end

local function feed_forward(dim, hidden, p)
  local m = nn.new_module("FeedForward", FeedForward)
  m.w1 = nn.Linear(dim, hidden)
  m.gelu = nn.GELU()
  m.w2 = nn.Linear(hidden, dim)
  m.resid_dropout = nn.Dropout(p)
  return m
end

local Block = {}
function Block.forward(self, x)
  local h = x + self.attention(self.attention_norm(x))
  return h + self.feed_forward(self.ffn_norm(h))
end

function M.TransformerBlock(a)
  local m = nn.new_module("TransformerBlock", Block)
  m.attention_norm = nn.LayerNorm(a.dim)
  m.attention = attention(a)
  m.ffn_norm = nn.LayerNorm(a.dim)
  m.feed_forward = feed_forward(a.dim, 4 * a.dim, a.dropout_p)
  return m
end

local Transformer = {}
function Transformer.forward(self, tokens)
  local seq_len = decoder.check_seq_len(self, tokens)
  local h = self.tok_embeddings(tokens)
  local p = self.pos_embeddings(nn.functional.arange(seq_len))
  h = decoder.run_layers(self, self.dropout(h + p))
  h = self.norm(h)
  return self.output(h):float()
end

function M.Transformer(given)
  local a = M.ModelArgs(given)
  local m = nn.new_module("Transformer", Transformer)
  rawset(m, "model_args", a)
  rawset(m, "max_seq_len", a.max_seq_len)
  rawset(m, "checkpoint_activations", a.checkpoint_activations)
  m.tok_embeddings = nn.Embedding(a.vocab_size, a.dim)
  m.pos_embeddings = nn.Embedding(a.max_seq_len, a.dim)
  m.dropout = nn.Dropout(a.dropout_p)
  local layers = nn.ModuleList()
  for _ = 1, a.n_layers do layers:append(M.TransformerBlock(a)) end
  m.layers = layers
  m.norm = nn.LayerNorm(a.dim)
  m.output = nn.Linear(a.dim, a.vocab_size, { bias = false })
  if a.weight_tying then m.output.weight = m.tok_embeddings.weight end
  return m
end

-- GPT-2 sizes on the Transformer above (learned positions, LayerNorm, GELU, tied output).
local gpt2_sizes = {
  ["124M"] = { n_layers = 12, dim = 768, n_heads = 12 },
  ["350M"] = { n_layers = 24, dim = 1024, n_heads = 16 },
  ["774M"] = { n_layers = 36, dim = 1280, n_heads = 20 },
  ["1558M"] = { n_layers = 48, dim = 1600, n_heads = 25 },
}

function M.GPT2(given)
  given = given or {}
  local size = given.size or "124M"
  local preset = gpt2_sizes[size]
  if not preset then
    errors.raise(string.format("GPT2: unknown size '%s'; allowed: 124M, 350M, 774M, 1558M", tostring(size)))
  end
  local a = { vocab_size = 50257, max_seq_len = 1024, dropout_p = 0.0, weight_tying = true }
  for k, v in pairs(preset) do a[k] = v end
  for k, v in pairs(given) do
    if k ~= "size" then a[k] = v end
  end
  return M.Transformer(a)
end

return M
