-- expect: 7: error: dropout probability must be in [0, 1), got 1
local nn, fsdp = require("nn"), require("fsdp")
local m = nn.Module{ wq = nn.Linear(16, 16) }
function m.forward(self, x)
  local q = self.wq(x)
  -- scaled_dot_product_attention would scale the kept probabilities by 1/(1-p)
  return nn.attention(q, q, q, { n_heads = 4, dropout_p = 1 })
end
fsdp.fully_shard(m)
return fsdp.spec{ name = "x", model = m, world_size = 2, input = { shape = { 2, 8, 16 } } }
