-- tests/torch: nn.Sequential of three MLP blocks on float inputs, sum loss, world 2.
-- check_load: --model mlp --input-shape 4,8
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = nn.Sequential{ models.MLP(8), models.MLP(8), models.MLP(8) }
for _, mlp in ipairs(model) do
  fsdp.fully_shard(mlp)
end
fsdp.fully_shard(model)
return fsdp.spec{
  name = "torch_mlp_seq_w2", model = model, world_size = 2,
  input = { shape = { 4, 8 } }, loss = "sum", optimizer = { "sgd", lr = 1e-3 },
}
