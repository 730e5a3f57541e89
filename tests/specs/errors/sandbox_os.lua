-- expect: 4: error: 'os' is not available in a spec: specs run in a sandbox
local nn, fsdp, models = require("nn"), require("fsdp"), require("models")
local model = models.MLP(4)
os.execute("touch /tmp/fsdpgen_sandbox_escape")
