-- Model FLOPs of one training step, from the step's traced ops, with bench/flops.py's
-- convention (PaLM, appendix B): 6 * N + 12 * L * T * d per token. Counted per op, so that
-- it holds for any spec, not only the benchmark's two configs:
--   - an op that reads parameters (linear, norms, ...) costs 6 * rows * numel(params), rows
--     being its input's elements over the last dim (2 forward, 4 backward per weight); a
--     frozen one (requires_grad false: fine-tuning, LoRA's base) 4, its weight gradient
--     not being the model's work (2 forward, 2 for its input's gradient, counted as PaLM
--     counts it for a first layer, whether or not the input needs one); an embedding's
--     table is only looked up and costs nothing (a table tied to an output linear is
--     counted there), nor does a parameter times a number (tensor * number, an
--     element-wise scale);
--   - an attention op costs 12 * rows(q) * keys * width(q): Q K^T and A V, forward and
--     backward, over the full T x T product (no causal halving, as PaLM counts).
-- Activation recompute is not model work and is not counted (replayed ops are not in the
-- graph). For a Transformer whose every op sees all B * T tokens, every parameter trained,
-- this is exactly 6 * N * B * T + 12 * L * T * d * B * T, N the parameters outside
-- lookup-only embeddings.
local trace = require("spec.trace")

local M = {}

-- An op's input rows: its elements over the last dim (a [B, T, d] activation: B * T).
local function rows(t)
  if #t.shape == 0 then return 1 end
  return trace.numel(t.shape) // t.shape[#t.shape]
end

-- Items (tokens for token models, samples for float inputs) of one forward on one rank,
-- as the training binary counts them (runtime/train/data_feed.c train_items_per_step).
local function items_per_forward(spec)
  local s = spec.input.shape
  if spec.input.tokens then return s[1] * s[2] end
  return s[1]
end

-- The items (tokens, or samples) one rank's step reads: its forwards' inputs.
function M.rank_tokens(spec)
  local n_forward = 0
  for _, it in ipairs(spec.step) do
    if it.kind == "forward" then n_forward = n_forward + 1 end
  end
  return n_forward * items_per_forward(spec)
end

-- The counts of one training step of `plan` (planner.plan's result):
--   params         distinct parameters of the model (tied ones once)
--   matmul_params  N: those read by an op other than an embedding lookup
--   param_flops    6 * rows * numel summed over the ops that read parameters, one rank
--   attn_flops     the attention term, one rank
--   rank_flops     param_flops + attn_flops: one rank's model FLOPs per step
--   rank_tokens    items one rank trains on per step (every forward item's batch)
--   step_flops     rank_flops * world: model FLOPs per step, all ranks
--   step_tokens    rank_tokens * world
--   flops_per_token  step_flops / step_tokens (an integer when it divides, else a float)
function M.count(plan)
  local spec = plan.spec
  local seen, used = {}, {}
  local c = { params = 0, matmul_params = 0, param_flops = 0, attn_flops = 0 }
  for _, op in ipairs(plan.graph.ops) do
    if op.kind == "attention" then
      local q, k = op.ins[1], op.ins[2]
      c.attn_flops = c.attn_flops + 12 * rows(q) * k.shape[#k.shape - 1] * q.shape[#q.shape]
    end
    for i, t in ipairs(op.ins) do
      if t.is_param then
        if not seen[t] then seen[t] = true; c.params = c.params + trace.numel(t.shape) end
        if not (op.kind == "embedding" and i == 2) and op.kind ~= "scale" then
          if not used[t] then
            used[t] = true
            c.matmul_params = c.matmul_params + trace.numel(t.shape)
          end
          c.param_flops = c.param_flops + (t.requires_grad and 6 or 4) * rows(op.ins[1]) * trace.numel(t.shape)
        end
      end
    end
  end
  c.rank_flops = c.param_flops + c.attn_flops
  c.rank_tokens = M.rank_tokens(spec)
  c.step_flops = c.rank_flops * spec.world_size
  c.step_tokens = c.rank_tokens * spec.world_size
  if c.step_tokens > 0 and c.step_flops % c.step_tokens == 0 then
    c.flops_per_token = c.step_flops // c.step_tokens
  else
    c.flops_per_token = c.step_tokens > 0 and c.step_flops / c.step_tokens or 0
  end
  return c
end

-- A FLOP count as people read it: 1.23 GFLOP, 4.56 TFLOP.
function M.human(f)
  local units = { { 1e15, "PFLOP" }, { 1e12, "TFLOP" }, { 1e9, "GFLOP" }, { 1e6, "MFLOP" },
    { 1e3, "kFLOP" } }
  for _, u in ipairs(units) do
    if f >= u[1] then return string.format("%.3g %s", f / u[1], u[2]) end
  end
  return string.format("%d FLOP", f)
end

return M
