-- A tensor times a number (the op "scale": PyTorch's x * 0.37 and 2 * x), bf16 compute, fp32
-- reduction, two ranks: in each block a low-rank branch scaled as LoRA scales it
-- (lora_b(lora_a(x)) * 0.37, a number fp32 rounds), and 2 * x on the residual path, whose
-- gradient adds to the linears' in x's (the other scales assign theirs); the head reads a
-- scaled activation. Every scale's operands are packed (the embedding's gradient excepted).
-- Token input, cross-entropy loss.
local nn, fsdp = require("nn"), require("fsdp")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }

local Block = {}
function Block.forward(self, x)
  local skip = 2 * x  -- traced before the linears read x: its backward adds to x's gradient
  local h = nn.relu(self.base(x) + self.lora_b(self.lora_a(x)) * 0.37)
  return self.out(h) + skip
end

local function block()
  local b = nn.new_module("Block", Block)
  b.base = nn.Linear(16, 16)
  b.lora_a = nn.Linear(16, 4, { bias = false })
  b.lora_b = nn.Linear(4, 16, { bias = false })
  b.out = nn.Linear(16, 16)
  return b
end

local Root = {}
function Root.forward(self, tokens)
  local h = self.tok_embeddings(tokens)
  for _, layer in ipairs(self.layers) do h = layer(h) end
  return self.output(h * 0.5):float()
end

local root = nn.new_module("Root", Root)
root.tok_embeddings = nn.Embedding(32, 16)
root.layers = nn.ModuleList{ block(), block() }
root.output = nn.Linear(16, 32, { bias = false })
for _, layer in ipairs(root.layers) do fsdp.fully_shard(layer, { mp_policy = mp }) end
fsdp.fully_shard(root, { mp_policy = mp })
return fsdp.spec{
  name = "scale_bf16", model = root, world_size = 2,
  input = { batch = 2, seq_len = 8 }, loss = "cross_entropy", optimizer = { "adamw", lr = 1e-2 },
}
