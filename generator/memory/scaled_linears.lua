-- Scales folded into the linear they read (rt_kernels.h rt_linear_scaled_forward): LoRA's
-- lora_b(h) * alpha / rank, where alpha / rank is a power of two (torchtune's 16 / 8 and
-- 128 / 64), becomes the GEMM's alpha, so that no kernel multiplies lora_b's output in the
-- forward, nor its gradient in the backward: a pass over the adapter's output each way.
-- Multiplying by a power of two is exact, so the bits are the scale kernel's. M.mark runs
-- after the packing marks (memory.lua) and folds a scale x * s where
--   * s, as the kernel multiplies by it (rounded to fp32), is a power of two (a negative one
--     would give some zeros the other sign than the scale's kernel does);
--   * x is the output of a bias-free linear in the same checkpointed region (or none), and
--     the scale is x's only reader (FSDP's hooks between them would be another);
--   * x and the scale's output are fp32 or bf16 of one dtype (fp16's subnormals begin at
--     2^-14 and would scale inexactly), stored alike (packing.lua: the same value and
--     gradient storage, as the scale's output becomes x's buffer).
-- Marks: the scale is a view (views.lua: its output is x's buffer, its gradient x's gradient
-- buffer; no kernel either way) with `folded` = the linear, which carries `out_scale` = the
-- number. The emitter passes it as the linear's alpha in its forward, recompute and
-- backward; the simulator prices no scale.
local M = {}

-- s as fp32 holds it (the scale kernel's and the GEMM's alpha).
local function fp32(s) return (string.unpack("f", string.pack("f", s))) end

-- Whether fp32 number s is a normal power of two.
local function power_of_two(s)
  if s <= 0 then return false end
  local e = math.floor(math.log(s, 2) + 0.5)
  return e >= -126 and e <= 127 and 2.0 ^ e == s
end

local FOLDABLE = { fp32 = true, bf16 = true }

-- Whether scale op may be folded into the linear that computes its input (the rules above);
-- readers: views.readers_of(graph).
local function foldable(op, readers)
  local x, y = op.ins[1], op.outs[1]
  local lin, rs = x.producer, readers[x] or {}
  if not (lin and lin.kind == "linear" and not lin.ins[3] and lin.region == op.region) then return false end
  if #rs ~= 1 or rs[1] ~= op or not power_of_two(fp32(op.attrs.scale)) then return false end
  return FOLDABLE[x.dtype] and y.dtype == x.dtype and (x.packed or false) == (y.packed or false)
    and (x.grad_packed or false) == (y.grad_packed or false)
end

-- Marks graph's foldable scales and their linears.
function M.mark(graph, readers)
  for _, op in ipairs(graph.ops) do
    if op.kind == "scale" and foldable(op, readers) then
      local lin = op.ins[1].producer
      op.view, op.folded, lin.out_scale = true, lin, fp32(op.attrs.scale)
    end
  end
end

return M
