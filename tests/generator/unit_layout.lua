-- Unit tests of the sharding layout and gradient divide factors (generator/plan/layout.lua):
-- torch.chunk rows, padding, offsets, and PyTorch's _get_gradient_divide_factors.
-- Run from the repository root: lua5.4 tests/generator/unit_layout.lua
package.path = "generator/?.lua;./?.lua;" .. package.path
local layout = require("plan.layout")
local checks = require("tests.generator.step_c")
local check = checks.check

local function p(shape) return { shape = shape, fqn = "p" } end

local l = layout.param(p({ 5, 3 }), 4, "dim0")
check(table.concat(l.rows, ",") == "2,2,1,0", "d0=5 over 4 ranks: rows 2,2,1,0 (got " .. table.concat(l.rows, ",") .. ")")
check(l.shard_numel == 6 and l.padded_numel == 24, "d0=5 x 3 over 4: shard 6, padded 24")

l = layout.param(p({ 17, 257 }), 128, "dim0")
local ones = 0
for _, r in ipairs(l.rows) do ones = ones + r end
check(l.chunk == 1 and ones == 17 and l.rows[18] == 0 and l.shard_numel == 257,
  "[17, 257] over 128 ranks: chunk 1, ranks 17..127 empty, shard 257")

l = layout.param(p({ 64, 312 }), 8, "largest_dim")
check(l.dim == 1 and l.chunk == 39 and l.shard_numel == 39 * 64, "largest_dim of [64, 312]: dim 1, chunk 39")
l = layout.param(p({ 64, 64 }), 8, "largest_dim")
check(l.dim == 0, "largest_dim ties pick the first dim")

local g = layout.group({ { shape = { 17 } }, { shape = { 64, 4 } } }, 4, "dim0")
check(g.params[1].offset == 0 and g.params[2].offset == 5 and g.shard_numel == 5 + 64,
  "group offsets: [17] -> chunk 5 at 0, [64,4] at 5; shard 69")
check(g.ag_out_numel == 69 * 4, "group all-gather output = world x shard")

local function f(...) return layout.divide_factors(...) end
local d = f(4, 4, "fp32", nil, false)
check(d.op == "avg" and not d.pre and not d.post, "fp32, no factor, ws 4: AVG")
d = f(1, 1, "fp32", nil, false)
check(d.op == "sum", "fp32 at world size 1: SUM")
d = f(4, 4, "bf16", 8, false)
check(d.op == "premul_sum" and d.premul == 1 / 8, "bf16, factor 8 != ws 4: premul sum by 1/8")
d = f(4, 4, "fp32", 4, false)
check(d.op == "avg", "factor == ws: AVG")
d = f(128, 128, "fp16", nil, false)
check(d.op == "sum" and d.pre == 16 and d.post == 8, "fp16 ws 128: SUM with pre 16, post 8 (got " ..
  tostring(d.pre) .. ", " .. tostring(d.post) .. ")")
d = f(4, 4, "fp32", nil, true)
check(d.op == "sum" and d.post == 4 and not d.pre, "forced sum, fp32 ws 4: SUM then post-divide 4")
d = f(4, 8, "fp32", nil, false)
check(d.op == "avg" and d.ar_op == "avg", "HSDP 2x4: reduce-scatter and all-reduce AVG")

checks.finish()
