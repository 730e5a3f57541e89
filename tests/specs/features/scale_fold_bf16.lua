-- Scales folded into the linear they read (generator/memory/scaled_linears.lua): low-rank
-- branches scaled as LoRA scales them by powers of two, folded into lora_b's GEMM, on every
-- storage the fold takes: bf16 packed (the first block, widths multiples of 8, times 2),
-- bf16 in fp32 storage (the second, widths of 12, times 0.5), fp32 (the third, a group
-- without mixed precision, times 0.25), and a checkpointed block (the fourth, times 4: its
-- recompute folds too). lora_a's output is also read by `extra`, so lora_b's input gradient
-- adds to extra's. The head's scale, 0.37, is not a power of two and keeps its kernel.
-- Two ranks, AdamW with clipping. tests/cuda_step/scale_fold_twin.lua computes the same with
-- each folded scale after a scale by 1, which alone folds: tests/cuda_step/run.sh wants the
-- same bits on the CPU and the emulator.
local nn, fsdp = require("nn"), require("fsdp")
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }

local Block = {}
function Block.forward(self, x)
  local h = self.lora_a(x)
  local y = self.base(x) + self.lora_b(h) * self.s + self.extra(h)
  return nn.relu(y) + x
end

local function block(dim, rank, s)
  local b = nn.new_module("Block", Block)
  b.base = nn.Linear(dim, dim)
  b.lora_a = nn.Linear(dim, rank, { bias = false })
  b.lora_b = nn.Linear(rank, dim, { bias = false })
  b.extra = nn.Linear(rank, dim, { bias = false })
  b.s = s
  return b
end

local Root = {}
function Root.forward(self, tokens)
  local h = self.tok_embeddings(tokens)
  h = self.blocks[1](h)
  h = self.narrow(h)
  h = self.blocks[2](h)
  h = self.blocks[3](self.widen(h):float())
  h = self.blocks[4](h:to("bf16"))
  return self.output(h * 0.37):float()
end

local root = nn.new_module("Root", Root)
root.tok_embeddings = nn.Embedding(32, 16)
root.narrow = nn.Linear(16, 12)
root.widen = nn.Linear(12, 16)
root.blocks = nn.ModuleList{ block(16, 8, 2), block(12, 4, 0.5), block(16, 8, 0.25), block(16, 8, 4) }
root.output = nn.Linear(16, 32, { bias = false })
nn.checkpoint_module(root.blocks[4])
fsdp.fully_shard(root.blocks[1], { mp_policy = mp })
fsdp.fully_shard(root.blocks[2], { mp_policy = mp })
fsdp.fully_shard(root.blocks[3])
fsdp.fully_shard(root.blocks[4], { mp_policy = mp })
fsdp.fully_shard(root, { mp_policy = mp })
return fsdp.spec{
  name = "scale_fold_bf16", model = root, world_size = 2,
  input = { batch = 2, seq_len = 8 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 1e-2 }, grad_clip = 1.0,
}
