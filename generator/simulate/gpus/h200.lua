-- NVIDIA H200 SXM 141GB (HBM3e): the simulator's figures for `fsdpgen simulate --gpu h200`.
-- Pure data (generator/simulate/gpu.lua). The H200 is the H100's chip with more and faster
-- memory: the peaks, NVLink, network and the kernel efficiencies (fractions of the peaks,
-- fitted on an H100, not measured on an H200) are h100.lua's; memory differs.
return {
  name = "H200 SXM 141GB HBM3e",
  -- NVIDIA H200 Tensor Core GPU datasheet (SXM): 989 TFLOP/s bf16 dense, 4.8 TB/s HBM3e,
  -- 141 GB; NVLink 4: 900 GB/s per GPU in both directions together.
  bf16_tflops = 989.4,
  hbm_gbps = 4800,
  memory_gb = 141,
  -- Shared memory a thread block may have (opt-in; CUDA C++ Programming Guide, "Technical
  -- Specifications per Compute Capability", 9.0): 227 KiB.
  smem_block_kib = 227,
  -- Collective bus bandwidths (GB/s, nccl-tests' busbw: size x (n-1)/n / time for
  -- all-gather and reduce-scatter, 2 x that for all-reduce) at large sizes.
  nvlink = {
    -- assumption: ring all-gather and reduce-scatter at 80% of NVLink 4's 450 GB/s per
    -- direction (NVLS, NVLink SHARP, does not take part in them).
    all_gather = 360, reduce_scatter = 360,
    -- nccl-tests all_reduce_perf on 8x H100 SXM5 (NVLS): 460-480 GB/s busbw ("NCCL-tests
    -- in practice", docs.alayanew.com, 2026-05-06); the lower end.
    all_reduce = 460,
  },
  -- Inter-node: one NIC per GPU. Default 400 Gb/s (ConnectX-7 NDR, as on DGX H100 and
  -- torchtitan's Grand Teton hosts); assumption: busbw at 92% of the line rate.
  net_gbps = 400,
  net_efficiency = 0.92,
  -- Latency (alpha), microseconds: NCCL's own tuning model (src/graph/tuning.cc, Ring,
  -- Simple protocol): baseLat 8.4 per collective, hwLat 3.4 per ring step over NVLink and
  -- 14 per step over the network.
  alpha_base_us = 8.4,
  alpha_nvlink_step_us = 3.4,
  alpha_net_step_us = 14.0,
  -- Kernel efficiencies (fraction of the peaks above), by implementation.
  kernels = {
    -- fsdpgen's CUDA backend, fitted to one Llama 1B step under ncu on one H100
    -- (bench/RESULTS.md "Where the time goes": GEMMs 78.5 ms at about 770 TFLOP/s, attention
    -- 30.0 ms, AdamW 14.0 ms at bandwidth, FSDP copies 9.7 ms) and to the measured steps
    -- of GPT-2 124M (44.63 ms) and Llama 1B (163.09 ms).
    fsdpgen = {
      gemm = 0.78,            -- 770 / 989.4
      attention_fwd = 0.205,  -- of the causal half of QK^T and PV: 5.5 ms on Llama 1B
      attention_bwd = 0.115,  -- 2.5 forwards' flops: dK/dV 14.9 + dQ 8.9 + D 0.7 ms
      -- cuDNN's fused flash attention where the op may use it (memory/attention.lua): not
      -- yet measured in the step; PyTorch's SDPA on the same shapes stands in for it
      -- (bench/attention.sh, Llama 1B: forward 0.18 ms, backward 0.66 ms per layer)
      cudnn_attention_fwd = 0.385,
      cudnn_attention_bwd = 0.263,
      elementwise = 0.72,     -- activations, adds, rotary, embedding: 7.7 + 3.1 + 2.7 ms
      norm = 0.35,            -- RMSNorm forward and backward: 5.7 ms
      loss = 0.63,            -- cross-entropy over the packed logits: 3.0 ms
      copy = 0.82,            -- FSDP copy-in/out and view-out: 9.7 ms for 26.8 GB
      optimizer = 0.89,       -- AdamW: 14.0 ms for 28 bytes x 1.50 G parameters
      launch_us = 24.0,       -- per kernel: ramp-up, tails and the gaps between kernels,
                              -- fitted to both steps (ncu: 154.6 ms of kernels in the
                              -- 163 ms Llama step, 842 launches) when cost.lua counted
                              -- fewer kernels than the binary launches (no operand
                              -- copies, column sums or packed additions), so that small
                              -- kernels are overpriced here; to be refitted to ncu's count
                              -- of each kernel
    },
    -- PyTorch 2.11 FSDP2 eager: cuBLAS GEMMs as above, SDPA's flash attention
    -- (bench/attention.sh on Llama 1B's shapes: forward 0.18 ms, backward 0.66 ms per
    -- layer), unfused element-wise kernels, foreach AdamW (assumed 60% of bandwidth);
    -- elementwise_passes fitted to bench/RESULTS.md's torch_eager Llama 1B row (214.30 ms).
    torch = {
      gemm = 0.78,
      attention_fwd = 0.385,  -- 68.7 GFLOP (causal half) in 0.18 ms
      attention_bwd = 0.263,  -- 2.5 x that in 0.66 ms
      elementwise = 0.72,
      norm = 0.35,
      loss = 0.63,
      copy = 0.82,
      optimizer = 0.60,       -- foreach AdamW: several passes over the states
      launch_us = 24.0,
      elementwise_passes = 4.0,  -- fp32 upcasts and unfused ops: 4x fsdpgen's bytes (fitted)
    },
  },
}
