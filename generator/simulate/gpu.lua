-- Reads a GPU table (gpus/<name>.lua: pure data, no code runs with access to anything)
-- and checks that it has every figure the simulator needs.
local M = {}

local NUMBERS = { "bf16_tflops", "hbm_gbps", "memory_gb", "smem_block_kib", "net_gbps",
  "net_efficiency", "alpha_base_us", "alpha_nvlink_step_us", "alpha_net_step_us" }
local KERNEL = { "gemm", "attention_fwd", "attention_bwd", "elementwise", "norm", "loss", "copy",
  "optimizer", "launch_us" }

-- The GPU kinds there are tables for, sorted.
function M.kinds(root)
  local out = {}
  local p = io.popen("ls '" .. root .. "/generator/simulate/gpus' 2>/dev/null")
  for f in p:lines() do
    local n = f:match("^([%w_]+)%.lua$")
    if n then out[#out + 1] = n end
  end
  p:close()
  table.sort(out)
  return out
end

-- Returns the table of GPU `name`, or nil and a one-line reason.
function M.load(root, name)
  local kinds = M.kinds(root)
  local known = false
  for _, k in ipairs(kinds) do known = known or k == name end
  if not known then
    return nil, string.format("unknown GPU '%s' (allowed: %s)", tostring(name),
      table.concat(kinds, ", "))
  end
  local path = root .. "/generator/simulate/gpus/" .. name .. ".lua"
  local chunk, err = loadfile(path, "t", {})
  if not chunk then return nil, "cannot read " .. path .. ": " .. tostring(err) end
  local ok, t = pcall(chunk)
  if not ok or type(t) ~= "table" then return nil, path .. " does not return a table" end
  for _, key in ipairs(NUMBERS) do
    if type(t[key]) ~= "number" then return nil, path .. ": " .. key .. " must be a number" end
  end
  for _, coll in ipairs({ "all_gather", "reduce_scatter", "all_reduce" }) do
    if type(t.nvlink) ~= "table" or type(t.nvlink[coll]) ~= "number" then
      return nil, path .. ": nvlink." .. coll .. " must be a number"
    end
  end
  for kname, k in pairs(t.kernels or {}) do
    for _, key in ipairs(KERNEL) do
      if type(k[key]) ~= "number" then
        return nil, path .. ": kernels." .. kname .. "." .. key .. " must be a number"
      end
    end
    k.name = kname   -- cost.lua counts fsdpgen's kernels as its CUDA backend launches them
  end
  if not (t.kernels and t.kernels.fsdpgen) then
    return nil, path .. ": kernels.fsdpgen is missing"
  end
  for _, key in ipairs({ "cudnn_attention_fwd", "cudnn_attention_bwd" }) do
    if type(t.kernels.fsdpgen[key]) ~= "number" then
      return nil, path .. ": kernels.fsdpgen." .. key .. " must be a number"
    end
  end
  t.kind = name
  return t
end

return M
