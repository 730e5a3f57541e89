-- Llama-style decoder: RMSNorm, rotary position embeddings, grouped-query attention and a
-- SwiGLU feed-forward; no biases, untied output. Presets for common sizes; LoRA adapters on
-- the chosen linears (torchtune's lora_llama3 builders: lora_modules, lora_rank, ...).
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
  lora_modules = { nil, "list", optional = true }, lora_rank = { 8, "posint" },
  lora_alpha = { 16.0, "number" }, lora_dropout = { 0.0, "prob" },
}

-- The linears LoRA may adapt, by their attribute names (torchtune's q_proj, k_proj, v_proj,
-- output_proj, w1, w2, w3 and the output head).
local LORA_TARGETS = { "wq", "wk", "wv", "wo", "w1", "w2", "w3", "output" }

-- lora_modules: a list of LORA_TARGETS names, each at most once; returns them as a set.
local function lora_set(list)
  if list == nil then return {} end
  local allowed, set, n = {}, {}, 0
  for _, name in ipairs(LORA_TARGETS) do allowed[name] = true end
  local want = "a non-empty list of " .. table.concat(LORA_TARGETS, ", ")
  if type(list) ~= "table" then errors.raise("Llama: lora_modules must be " .. want) end
  for _ in pairs(list) do n = n + 1 end
  if n == 0 or n ~= #list then errors.raise("Llama: lora_modules must be " .. want) end
  for i, name in ipairs(list) do
    if not allowed[name] or set[name] then
      errors.raise(string.format("Llama: lora_modules[%d] %s %s (allowed: %s)", i, tostring(name),
        set[name] and "is given twice" or "is not one of its linears", want))
    end
    set[name] = true
  end
  return set
end

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

-- A bias-free linear, a LoRALinear where lora_modules names it.
local function linear(a, lora, name, in_f, out_f)
  if not lora[name] then return nn.Linear(in_f, out_f, { bias = false }) end
  return nn.LoRALinear(in_f, out_f, { bias = false, rank = a.lora_rank, alpha = a.lora_alpha,
    dropout = a.lora_dropout })
end

local function block(a, lora)
  local hd = a.dim // a.n_heads
  local attn = nn.new_module("Attention", Attention)
  attn.wq = linear(a, lora, "wq", a.dim, a.n_heads * hd)
  attn.wk = linear(a, lora, "wk", a.dim, a.n_kv_heads * hd)
  attn.wv = linear(a, lora, "wv", a.dim, a.n_kv_heads * hd)
  attn.wo = linear(a, lora, "wo", a.n_heads * hd, a.dim)
  rawset(attn, "n_heads", a.n_heads)
  rawset(attn, "n_kv_heads", a.n_kv_heads)
  rawset(attn, "theta", a.rope_theta)
  local ff = nn.new_module("FeedForward", FeedForward)
  ff.w1 = linear(a, lora, "w1", a.dim, a.ffn_dim)
  ff.w2 = linear(a, lora, "w2", a.ffn_dim, a.dim)
  ff.w3 = linear(a, lora, "w3", a.dim, a.ffn_dim)
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
  local lora = lora_set(a.lora_modules)
  for _ = 1, a.n_layers do layers:append(block(a, lora)) end
  m.layers = layers
  m.norm = nn.RMSNorm(a.dim, { eps = a.norm_eps })
  m.output = linear(a, lora, "output", a.dim, a.vocab_size)
  return m
end

return M
