-- The step C leaves the arena to the kernels: on the CUDA backend its views F(off, bytes)
-- and I(off, bytes) are device pointers, which host code must never read. Checked on the
-- step C of every spec (tests/specs, examples; the seed's two-forward specs
-- among them): no view is indexed or dereferenced outside a kernel call's pointer
-- arguments. Until 45b2742 (2026-11-24) a summed loss's gradient reached the cross-entropy as
-- F(off, 4)[0], a host read of device memory (a crash on a GPU; in the CUDA emulator a
-- read at issue, before the lazy compute stream wrote it).
-- Run from the repository root: lua5.4 tests/generator/device_pointers.lua
package.path = "generator/?.lua;./?.lua;./?/init.lua;" .. package.path
local emit_step = require("emit.emit_step")

local util = require("tests.generator.step_c")
local check = util.check

-- The first code line of text (comments aside) that reads an arena view on the host.
local function host_read(text)
  for line in text:gmatch("[^\n]+") do
    local code = line:gsub("//.*$", "")
    if code:find("[FI]%s*%b()%s*%[") or code:find("%*%s*[FI]%s*%b()") then return line:match("^%s*(.-)%s*$") end
  end
  return nil
end

local n, summed = 0, 0
for _, path in ipairs(util.all_specs()) do
  local plan = util.plan(path)
  local ok, text = pcall(emit_step.render, plan, path, plan.spec.name)
  if not ok then
    check(false, path .. ": step C emitted: " .. tostring(type(text) == "table" and text.msg or text))
  else
    n = n + 1
    text = util.flat(text)  -- views as F(offset, bytes), one line per call
    local bad = host_read(text)
    if bad then check(false, path .. ": the step C reads an arena view on the host: " .. bad) end
    -- specs whose loss gradient is an arena value (several forwards before one backward)
    if text:find("rt_cross_entropy_backward%([^;]*F%(%d+, 4%), RT_") or text:find("rt_sum_loss_backward%([^;]*F%(%d+, 4%), RT_") then
      summed = summed + 1
    end
  end
end
check(n > 0 and summed > 0, string.format("%d specs' step C read no arena view on the host (%d of them pass a "
  .. "summed loss's gradient, an arena scalar, to the loss kernel as a pointer)", n, summed))

-- The check itself: the old form of the loss gradient, and a dereference, are reported.
check(host_read("    rt_sum_loss_backward(F(0, 512), 128, F(512, 4)[0], RT_ASSIGN_1);") ~= nil,
  "an indexed view (F(off, 4)[0]) is reported")
check(host_read("    float x = *I(64, 4);") ~= nil, "a dereferenced view (*I(off, 4)) is reported")
check(host_read("    rt_zero(F(0, 16), 4);  // F(0, 16)[0] in a comment") == nil,
  "a view passed as a pointer, and one in a comment, are not")

util.finish()
