-- The Hugging Face export map of a spec's model (`--save-hf`, `--load-hf`): config.json's
-- fields and, for every tensor of HF's state dict, which parameters it comes from and how
-- (copy, transpose, q/k/v fused and transposed, rotary row permutation, zeros). Only
-- models.Llama (LlamaForCausalLM) and models.Transformer / models.GPT2 (GPT2LMHeadModel)
-- map; the runtime (runtime/train/hf.c) moves the bytes.
local c_text = require("emit.c_text")
local json_util = require("util.json")
local M = {}

-- config.json's text of a value: floats exact (the shortest decimal that reads back, always
-- with a '.' or an exponent), spaced as transformers writes it.
local function json_float(x)
  local s = c_text.num(x)
  return s:find("[%.eEn]") and s or s .. ".0"
end
local JSON = { float = json_float, sep = ", ", colon = ": ", empty = "{}" }
local NULL = json_util.null
local function json(v) return json_util.encode(v, JSON) end

-- ---------------------------------------------------------------------------- the model

-- Why model differs from a fresh build of its constructor (nil when it does not): another
-- module tree, a changed attribute or forward, other parameter names, shapes or ties.
local function differs(model, fresh)
  local a, b = model:named_modules(), fresh:named_modules()
  if #a ~= #b then return "its modules are not the ones the constructor builds" end
  for i = 1, #a do
    local ma, mb = a[i][2], b[i][2]
    if a[i][1] ~= b[i][1] or rawget(ma, "_type") ~= rawget(mb, "_type")
        or rawget(ma, "_class") ~= rawget(mb, "_class") then
      return string.format("module '%s' is not the constructor's", a[i][1])
    end
    local keys, seen = {}, {}
    for _, m in ipairs({ ma, mb }) do
      for k in pairs(m) do
        if type(k) == "string" and k:sub(1, 1) ~= "_" and k ~= "model_args" and not seen[k] then
          seen[k] = true
          keys[#keys + 1] = k
        end
      end
    end
    table.sort(keys)  -- the first difference by name: the same reason every time
    for _, k in ipairs(keys) do
      if rawget(ma, k) ~= rawget(mb, k) then
        return string.format("module '%s' has a changed '%s'", a[i][1], k)
      end
    end
  end
  local pa, pb = model:named_parameters(), fresh:named_parameters()
  if #pa ~= #pb then return "its parameters (or their ties) are not the constructor's" end
  for i = 1, #pa do
    local na, nb = pa[i][3], pb[i][3]
    if table.concat(na, ",") ~= table.concat(nb, ",")
        or table.concat(pa[i][2].shape, ",") ~= table.concat(pb[i][2].shape, ",") then
      return string.format("parameter '%s' (its name, shape or ties) is not the constructor's",
        pa[i][1])
    end
  end
  return nil
end

-- ---------------------------------------------------------------------------- maps

-- A tensor entry: HF name, op, source parameter FQNs, HF shape; heads for "rope".
local function t(name, op, src, shape, extra)
  local e = { name = name, op = op, src = src, shape = shape }
  for k, v in pairs(extra or {}) do e[k] = v end
  return e
end

local function llama(a)
  local hd = a.dim // a.n_heads
  local config = {
    { "architectures", { "LlamaForCausalLM" } }, { "model_type", "llama", "eq" },
    { "hidden_size", a.dim, "eq", 4096 }, { "intermediate_size", a.ffn_dim, "eq", 11008 },
    { "num_hidden_layers", a.n_layers, "eq", 32 },
    { "num_attention_heads", a.n_heads, "eq", 32 },
    { "num_key_value_heads", a.n_kv_heads, "eq", a.n_heads }, { "head_dim", hd, "eq", hd },
    { "hidden_act", "silu", "eq", "silu" },
    { "max_position_embeddings", a.max_seq_len, "min", 2048 },
    { "rms_norm_eps", a.norm_eps, "eq", 1e-6 }, { "vocab_size", a.vocab_size, "eq", 32000 },
    -- rope_theta for transformers 4, rope_parameters for 5; read from either
    { "rope_theta", a.rope_theta }, { "rope_scaling", nil },
    { "rope_parameters", { rope_theta = a.rope_theta, rope_type = "default" } },
    { "rope_parameters.rope_theta|rope_theta", a.rope_theta, "eq", 10000.0, check_only = true },
    { "rope_parameters.rope_type|rope_scaling.rope_type|rope_scaling.type", "default", "eq",
      "default", check_only = true },
    { "attention_bias", false, "eq", false }, { "mlp_bias", false, "eq", false },
    { "attention_dropout", 0.0 }, { "pretraining_tp", 1 },
    { "tie_word_embeddings", false, "eq", false }, { "torch_dtype", "float32" },
  }
  local d, q, kv, ff = a.dim, a.n_heads * hd, a.n_kv_heads * hd, a.ffn_dim
  local ts = {}
  local function add(...) ts[#ts + 1] = t(...) end
  add("model.embed_tokens.weight", "copy", { "tok_embeddings.weight" }, { a.vocab_size, d })
  for i = 0, a.n_layers - 1 do
    local f, h = "layers." .. i .. ".", "model.layers." .. i .. "."
    add(h .. "input_layernorm.weight", "copy", { f .. "attention_norm.weight" }, { d })
    add(h .. "self_attn.q_proj.weight", "rope", { f .. "attention.wq.weight" }, { q, d },
      { heads = a.n_heads })
    add(h .. "self_attn.k_proj.weight", "rope", { f .. "attention.wk.weight" }, { kv, d },
      { heads = a.n_kv_heads })
    add(h .. "self_attn.v_proj.weight", "copy", { f .. "attention.wv.weight" }, { kv, d })
    add(h .. "self_attn.o_proj.weight", "copy", { f .. "attention.wo.weight" }, { d, q })
    add(h .. "post_attention_layernorm.weight", "copy", { f .. "ffn_norm.weight" }, { d })
    add(h .. "mlp.gate_proj.weight", "copy", { f .. "feed_forward.w1.weight" }, { ff, d })
    add(h .. "mlp.up_proj.weight", "copy", { f .. "feed_forward.w3.weight" }, { ff, d })
    add(h .. "mlp.down_proj.weight", "copy", { f .. "feed_forward.w2.weight" }, { d, ff })
  end
  add("model.norm.weight", "copy", { "norm.weight" }, { d })
  add("lm_head.weight", "copy", { "output.weight" }, { a.vocab_size, d })
  return "llama", config, ts
end

local function gpt2(a)
  if not a.use_attn_mask then
    return nil, "Hugging Face's GPT-2 attention is causal; this Transformer has "
      .. "use_attn_mask = false"
  end
  local d = a.dim
  local config = {
    { "architectures", { "GPT2LMHeadModel" } }, { "model_type", "gpt2", "eq" },
    { "vocab_size", a.vocab_size, "eq", 50257 }, { "n_positions", a.max_seq_len, "eq", 1024 },
    { "n_embd", d, "eq", 768 }, { "n_layer", a.n_layers, "eq", 12 },
    { "n_head", a.n_heads, "eq", 12 },
    { "n_inner", NULL, "eq", NULL, alt = 4 * d },
    -- fsdpgen's GELU is the exact (erf) one: HF's "gelu", not GPT-2's tanh "gelu_new"
    { "activation_function", "gelu", "eq", "gelu_new" },
    { "layer_norm_epsilon", 1e-5, "eq", 1e-5 }, { "resid_pdrop", a.dropout_p },
    { "embd_pdrop", a.dropout_p }, { "attn_pdrop", a.dropout_p },
    { "scale_attn_weights", true, "eq", true },
    { "scale_attn_by_inverse_layer_idx", false, "eq", false },
    { "add_cross_attention", false, "eq", false },
    { "tie_word_embeddings", a.weight_tying, "eq", true }, { "torch_dtype", "float32" },
  }
  local ts = {}
  -- the hub's GPT-2 files name the tensors without "transformer.": accepted on load
  local function add(name, op, src, shape)
    ts[#ts + 1] = t("transformer." .. name, op, src, shape, { alt = name })
  end
  add("wte.weight", "copy", { "tok_embeddings.weight" }, { a.vocab_size, d })
  add("wpe.weight", "copy", { "pos_embeddings.weight" }, { a.max_seq_len, d })
  for i = 0, a.n_layers - 1 do
    local f, h = "layers." .. i .. ".", "h." .. i .. "."
    local att, ff = f .. "attention.", f .. "feed_forward."
    add(h .. "ln_1.weight", "copy", { f .. "attention_norm.weight" }, { d })
    add(h .. "ln_1.bias", "copy", { f .. "attention_norm.bias" }, { d })
    local qkv = { att .. "wq.weight", att .. "wk.weight", att .. "wv.weight" }
    add(h .. "attn.c_attn.weight", "qkv", qkv, { d, 3 * d })
    add(h .. "attn.c_attn.bias", "zeros", {}, { 3 * d })
    add(h .. "attn.c_proj.weight", "transpose", { att .. "wo.weight" }, { d, d })
    add(h .. "attn.c_proj.bias", "zeros", {}, { d })
    add(h .. "ln_2.weight", "copy", { f .. "ffn_norm.weight" }, { d })
    add(h .. "ln_2.bias", "copy", { f .. "ffn_norm.bias" }, { d })
    add(h .. "mlp.c_fc.weight", "transpose", { ff .. "w1.weight" }, { d, 4 * d })
    add(h .. "mlp.c_fc.bias", "copy", { ff .. "w1.bias" }, { 4 * d })
    add(h .. "mlp.c_proj.weight", "transpose", { ff .. "w2.weight" }, { 4 * d, d })
    add(h .. "mlp.c_proj.bias", "copy", { ff .. "w2.bias" }, { d })
  end
  add("ln_f.weight", "copy", { "norm.weight" }, { d })
  add("ln_f.bias", "copy", { "norm.bias" }, { d })
  if a.weight_tying then
    -- not written (HF ties it to wte); a file that has it must hold wte's values
    ts[#ts + 1] = t("lm_head.weight", "copy", { "tok_embeddings.weight" }, { a.vocab_size, d },
      { tied = true })
  else
    ts[#ts + 1] = t("lm_head.weight", "copy", { "output.weight" }, { a.vocab_size, d })
  end
  return "gpt2", config, ts
end

-- The map of plan's model: { arch, config, tensors }, or nil and why it has none.
function M.map(plan)
  local model = plan.spec.model
  local kind, a = rawget(model, "_type"), rawget(model, "model_args")
  local ctor, build
  if kind == "Llama" and a then
    ctor, build = require("models.llama").Llama, llama
  elseif kind == "Transformer" and a then
    ctor, build = require("models.transformer").Transformer, gpt2
  else
    return nil, "only models.Llama and models.GPT2 (models.Transformer) map to Hugging Face "
      .. "models; "
      .. "this spec's model is " .. tostring(kind)
  end
  local why = differs(model, ctor(a))
  if why then
    return nil, string.format("the %s model was changed after its constructor built it: %s", kind, why)
  end
  local arch, config, tensors = build(a)
  if not arch then return nil, config end
  local targets, seen = {}, {}
  for _, e in ipairs(tensors) do
    -- a LoRALinear's weight: saved merged with its adapters (torchtune's merged checkpoint);
    -- on load the adapters keep their initialization (lora_b zeros: the loaded model exactly)
    local f = #e.src == 1 and not e.tied and e.src[1]:match("^(.*)%.weight$")
    local owner = f and model:get(f)
    if owner and rawget(owner, "_type") == "LoRALinear" then
      e.lora = { f .. ".lora_a.weight", f .. ".lora_b.weight", scale = owner.alpha / owner.rank }
      local module = e.name:match("([^.]+)%.weight$")
      if not seen[module] then seen[module] = true; targets[#targets + 1] = module end
    end
  end
  -- The adapters alone as PEFT saves them (--save-peft): its LoRA config, in PEFT's names
  -- (alpha / r scales B A, as LoraConfig's lora_alpha / r; dropout off in inference).
  local peft = #targets > 0 and {
    peft_type = "LORA", task_type = "CAUSAL_LM", r = a.lora_rank, lora_alpha = a.lora_alpha + 0.0,
    lora_dropout = a.lora_dropout + 0.0, target_modules = targets, bias = "none",
    fan_in_fan_out = false, inference_mode = true, base_model_name_or_path = NULL,
    modules_to_save = NULL, use_rslora = false, use_dora = false,
  } or nil
  return { arch = arch, config = config, tensors = tensors, peft = peft }
end

-- ---------------------------------------------------------------------------- C

local OPS = { copy = "RT_HF_COPY", transpose = "RT_HF_TRANSPOSE", rope = "RT_HF_ROPE",
  qkv = "RT_HF_QKV", zeros = "RT_HF_ZEROS" }
local CHECKS = { eq = "RT_HF_EQ", min = "RT_HF_MIN" }

local function cstr(s) return '"' .. s:gsub('[\\"]', "\\%0") .. '"' end

-- Emits the map (static hf_config, hf_tensors, hf_map) into b (lines wrapped by
-- c_text.code); index maps a parameter FQN to its index in the parameter table. Returns the
-- rt_model initializer field, or nil and why the model has no Hugging Face form.
function M.emit(b, plan, index_of)
  local map, why = M.map(plan)
  if not map then return nil, why end
  b:line("")
  b:line("// ---- the Hugging Face map (generator/emit/hf.lua; --save-hf, --load-hf)")
  b:line("static const rt_hf_config hf_config[] = {")
  b:indent()
  for _, c in ipairs(map.config) do
    local check = c[3] and CHECKS[c[3]] or "RT_HF_NONE"
    local absent = c[3] and c[4] ~= nil and json(c[4]) or "NULL"
    c_text.code(b, "{.key = %s, .value = %s, .check = %s, .absent = %s, .alt = %s, "
      .. ".written = %d},",
      cstr(c[1]), cstr(json(c[2])), check, absent == "NULL" and "NULL" or cstr(absent),
      c.alt and cstr(json(c.alt)) or "NULL", c.check_only and 0 or 1)
  end
  b:dedent()
  b:line("};")
  b:line("static const rt_hf_tensor hf_tensors[] = {")
  b:indent()
  for _, e in ipairs(map.tensors) do
    local src = {}
    for i = 1, 3 do
      local fqn = e.src[i]
      if fqn and not index_of[fqn] then error("hf map: no parameter " .. fqn) end
      src[i] = fqn and tostring(index_of[fqn]) or "-1"
    end
    local lora = ""
    if e.lora then
      lora = string.format(", .lora = {%d, %d}, .lora_scale = %s", index_of[e.lora[1]],
        index_of[e.lora[2]], c_text.num(e.lora.scale))
    end
    c_text.code(b, "{.name = %s, .alt = %s, .op = %s, .src = {%s}, .heads = %d, .ndim = %d, "
      .. ".shape = {%s}, .tied = %d%s},", cstr(e.name), e.alt and cstr(e.alt) or "NULL", OPS[e.op],
      table.concat(src, ", "), e.heads or 0, #e.shape, table.concat(e.shape, ", "),
      e.tied and 1 or 0, lora)
  end
  b:dedent()
  b:line("};")
  local covered = {}
  for _, e in ipairs(map.tensors) do
    for _, fqn in ipairs(e.tied and {} or e.src) do covered[fqn] = (covered[fqn] or 0) + 1 end
    for _, fqn in ipairs(e.lora or {}) do covered[fqn] = (covered[fqn] or 0) + 1 end
  end
  for fqn in pairs(index_of) do
    if covered[fqn] ~= 1 then
      error("hf map: parameter " .. fqn .. " is mapped " .. (covered[fqn] or 0) .. " times")
    end
  end
  local peft = ""
  if map.peft then
    -- adapter_config.json's text, 60 characters of it a string literal (lines under 100 columns)
    b:line("static const char hf_peft_config[] =")
    b:indent()
    local text, parts = json(map.peft), {}
    for i = 1, #text, 60 do parts[#parts + 1] = text:sub(i, i + 59) end
    for i, part in ipairs(parts) do b:line("%s%s", cstr(part), i == #parts and ";" or "") end
    b:dedent()
    peft = ", .peft_config = hf_peft_config"
  end
  c_text.code(b, "static const rt_hf_map hf_map = {.arch = %s, .nconfig = %d, "
    .. ".config = hf_config, .ntensors = %d, .tensors = hf_tensors%s};",
    cstr(map.arch), #map.config, #map.tensors, peft)
  return ".hf = &hf_map,"
end

return M
