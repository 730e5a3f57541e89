-- NCCL's cost of one collective, as its ring algorithm runs: a latency alpha (a base per
-- collective plus one hop per ring step, over NVLink inside a node and over the network
-- between nodes) plus size x (n-1)/n over the bus bandwidth (2 x that for an all-reduce),
-- the way nccl-tests defines busbw. The bus bandwidth is NVLink's while the ring stays in
-- one node, and the network's per-GPU rate once it spans nodes (each GPU has its NIC).
local M = {}

-- The world's layout: `gpn` GPUs per node, `nodes` nodes, ranks numbered node by node.
-- A mesh puts rank r = replica x shard + s (runtime/fsdp: the shard dim is the inner one).

-- How many nodes a group of `n` ranks spaced `stride` apart spans.
local function nodes_spanned(n, stride, gpn)
  if n <= 1 then return 1 end
  local span = (n - 1) * stride + 1           -- ranks from the first to the last member
  if stride >= gpn then return n end          -- every member on its own node
  return math.max(1, math.ceil(span / gpn))
end

-- Seconds for collective `kind` ("all_gather", "reduce_scatter", "all_reduce") of `bytes`
-- (the all-gather's output, the reduce-scatter's input, the all-reduce's buffer) over n
-- ranks spaced `stride` apart. Returns seconds, and "nvlink" or "net".
function M.time(kind, bytes, n, stride, topo)
  if n <= 1 then return 0, "none" end
  local gpu = topo.gpu
  local spanned = nodes_spanned(n, stride, topo.gpus_per_node)
  local net = spanned > 1
  local busbw
  if net then
    busbw = topo.net_gbps / 8 * gpu.net_efficiency
  else
    busbw = gpu.nvlink[kind]
  end
  local steps = (kind == "all_reduce") and 2 * (n - 1) or (n - 1)
  local net_hops = net and math.min(steps, (kind == "all_reduce" and 2 or 1) * spanned) or 0
  local alpha = gpu.alpha_base_us + (steps - net_hops) * gpu.alpha_nvlink_step_us
    + net_hops * gpu.alpha_net_step_us
  local factor = (n - 1) / n * (kind == "all_reduce" and 2 or 1)
  return alpha * 1e-6 + bytes * factor / (busbw * 1e9), net and "net" or "nvlink"
end

M.nodes_spanned = nodes_spanned

return M
