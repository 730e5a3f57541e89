-- NVIDIA A100 SXM4 80GB: the simulator's figures for `fsdpgen simulate --gpu a100`. Pure
-- data (generator/simulate/gpu.lua). No fsdpgen kernel was measured on an A100: the
-- kernel efficiencies are h100.lua's fractions of the peak except where a comment cites
-- another source.
return {
  name = "A100 SXM4 80GB",
  -- NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB): 312 TFLOP/s bf16 dense, 2,039 GB/s
  -- HBM2e, 80 GB; NVLink 3: 600 GB/s per GPU in both directions together (300 each way).
  bf16_tflops = 312.0,
  hbm_gbps = 2039,
  memory_gb = 80,
  -- Shared memory a thread block may have (opt-in; CUDA C++ Programming Guide, "Technical
  -- Specifications per Compute Capability", 8.0): 163 KiB.
  smem_block_kib = 163,
  nvlink = {
    -- assumption: ring all-gather and reduce-scatter at 80% of 300 GB/s per direction
    all_gather = 240, reduce_scatter = 240,
    -- nccl-tests all_reduce_perf on 8x A100 SXM4: 230-250 GB/s busbw ("NCCL-tests in
    -- practice", docs.alayanew.com, 2026-05-06); the lower end
    all_reduce = 230,
  },
  -- NVIDIA DGX A100 datasheet: eight 200 Gb/s HDR InfiniBand ports, one per GPU;
  -- assumption: busbw at 92% of the line rate.
  net_gbps = 200,
  net_efficiency = 0.92,
  -- NCCL src/graph/tuning.cc (Ring, Simple), as in h100.lua
  alpha_base_us = 8.4,
  alpha_nvlink_step_us = 3.4,
  alpha_net_step_us = 14.0,
  kernels = {
    fsdpgen = {
      gemm = 0.78, attention_fwd = 0.205, attention_bwd = 0.115, elementwise = 0.72,
      norm = 0.35, loss = 0.63, copy = 0.82, optimizer = 0.89, launch_us = 24.0,
      -- cuDNN's fused flash attention: not measured on an A100; FlashAttention-2's figures
      -- below stand in for it
      cudnn_attention_fwd = 0.60, cudnn_attention_bwd = 0.48,
    },
    torch = {
      gemm = 0.78,
      -- FlashAttention-2 (Dao, 2023; SDPA's kernel on an A100), causal, head dim 128,
      -- seq 8k: about 190 TFLOP/s forward and 150 backward on an A100 80GB
      attention_fwd = 0.60,
      attention_bwd = 0.48,
      elementwise = 0.72, norm = 0.35, loss = 0.63, copy = 0.82, optimizer = 0.60,
      launch_us = 24.0, elementwise_passes = 4.0,
    },
  },
}
