-- FSDP2's CPUOffloadPolicy on every group (bf16 compute, fp32 reduction): the sharded fp32
-- parameters, their gradients and the AdamW state stay in pinned host memory. The numbers
-- do not change; on the CUDA backend the copy-in, the reduction's view-out, clipping and
-- the optimizer read and write them over the bus, and the device holds the rest of the
-- arena only.
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.Transformer{ n_layers = 2, dropout_p = 0, weight_tying = false }
local mp = fsdp.MixedPrecisionPolicy{ param_dtype = "bf16", reduce_dtype = "fp32" }
for _, layer in ipairs(model.layers) do
  fsdp.fully_shard(layer, { mp_policy = mp, offload_policy = fsdp.CPUOffloadPolicy{} })
end
fsdp.fully_shard(model, { mp_policy = mp, offload_policy = "cpu" })
return fsdp.spec{
  name = "offload_cpu", model = model, world_size = 2,
  input = { batch = 2, seq_len = 16 }, loss = "cross_entropy",
  optimizer = { "adamw", lr = 1e-2 }, grad_clip = 1.0,
}
