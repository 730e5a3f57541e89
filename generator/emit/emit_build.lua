-- Emits everything `fsdpgen build` writes for a spec besides the schedule: the step of
-- the sharded model and of its non-sharded reference, the training binary's main, the
-- conformance test, build.ninja (CPU) and build_cuda.ninja (--cuda), from the files in
-- templates/. Files are written only
-- when their content changes, so rebuilding an unchanged spec recompiles nothing.
local buffer = require("util.buffer")
local emit_step = require("emit.emit_step")
local schedule = require("emit.schedule")

local M = {}

-- Fills @KEY@ placeholders; an unknown key is a bug in the template.
local function fill(text, vars)
  return (text:gsub("@(%u+)@", function(k)
    local v = vars[k]
    if v == nil then error("template placeholder @" .. k .. "@ has no value") end
    return tostring(v)
  end))
end

-- How the CUDA binaries reach MPI (mpirun bootstrap): linked by mpicc against
-- librt_mpi.a where mpicc exists, else against the stub that explains how to get it.
function M.mpi()
  local p = io.popen("command -v mpicc 2>/dev/null")
  local found = p:read("a") ~= ""
  p:close()
  if found then
    return { LINKER = "mpicc", MPILIB = "librt_mpi.a", MPININJA = "subninja runtime/mpi.ninja",
      MPINOTE = "MPI found: the binary runs under mpirun (one rank per process)." }
  end
  return { LINKER = "gcc", MPILIB = "librt_mpi_stub.a", MPININJA = "",
    MPINOTE = "no mpicc: built without MPI (install libopenmpi-dev and rebuild for mpirun)." }
end

-- Writes the generated files for `plan` and its `reference` plan into dir (relative to
-- root, or absolute). Returns the list of { path, changed }.
function M.write(root, dir, plan, reference, spec_path)
  local spec = plan.spec
  local spec_file = spec_path:match("[^/]+$")
  local name = spec.name
  local id = emit_step.ident(name)
  local out = {}
  local function put(file, text)
    local base = dir:sub(1, 1) == "/" and dir or (root .. "/" .. dir)
    local path, changed = buffer.write_if_changed(base .. "/" .. file, text)
    if not path then error(changed, 0) end
    out[#out + 1] = { path = path, changed = changed }
  end
  put(name .. ".schedule", schedule.render(plan, spec_file))
  put(name .. ".layout", schedule.render_layout(plan, spec_file))
  put(name .. "_step.c", emit_step.render(plan, spec_file, id))
  put(name .. "_reference_step.c", emit_step.render(reference, spec_file, id .. "_reference", true))
  local vars = { NAME = name, ID = id, SPEC = spec_file, VERSION = schedule.VERSION, DIR = dir,
    WORLD = spec.world_size }
  for k, v in pairs(M.mpi()) do vars[k] = v end
  for _, t in ipairs({ { "main.c.in", name .. "_main.c" }, { "test.c.in", name .. "_test.c" },
                       { "build.ninja.in", "build.ninja" }, { "build_cuda.ninja.in", "build_cuda.ninja" } }) do
    vars.FILE = t[2]
    put(t[2], fill(assert(buffer.read(root .. "/templates/" .. t[1])), vars))
  end
  return out
end

return M
