-- The step C's description of the model (emit_step.lua writes it first): the parameter
-- table (shapes, groups, initialisation, tied names), each group with its planned layout,
-- reductions and persistent buffers, and the FSDP events and collective counts a program
-- expects.
local c_text = require("emit.c_text")
local check = require("emit.check")

local M = {}

local cstr, note, num, code, shape_init = c_text.cstr, c_text.note, c_text.num, c_text.code, c_text.shape_init
local C_DTYPE, C_ROWS = c_text.DTYPE, c_text.ROWS
local C_INIT = { zeros = "RT_INIT_ZEROS", ones = "RT_INIT_ONES", normal = "RT_INIT_NORMAL", uniform = "RT_INIT_UNIFORM" }
local internal = check.internal

-- A parameter's group and its layout in that group.
function M.param_layout(plan, p)
  local g = plan.owner[p]
  for _, l in ipairs(g.layout.params) do
    if l.param == p then return g, l end
  end
end

-- Parameter table: every parameter owned by a group, in named_parameters order.
function M.param_table(plan)
  local list, index = {}, {}
  for _, e in ipairs(plan.params) do
    local p = e[2]
    local g = plan.owner[p]
    if not g then internal("parameter '%s' in no fully_shard group", e[1]) end
    list[#list + 1] = p
    index[p] = #list - 1
  end
  return list, index
end

-- The parameters that some backward of the step gives a gradient; the others keep grad
-- None in FSDP2, which the optimizer skips (rt_model_param grad_none).
local function params_with_grad(plan)
  local with = {}
  for _, st in ipairs(plan.steps) do
    if st.op == "backward" or st.op == "loss_grad" then
      for _, t in ipairs(st.node.ins) do
        if t.is_param and t.requires_grad then with[t] = true end
      end
    end
  end
  return with
end

function M.params(b, plan, list)
  local with_grad = params_with_grad(plan)
  for i, p in ipairs(list) do
    if #p.names > 1 then
      local names = {}
      for k = 2, #p.names do names[#names + 1] = cstr(p.names[k]) end
      code(b, "static const char* const param%d_aliases[] = {%s, NULL};", i - 1,
        table.concat(names, ", "))
    end
  end
  b:line("")
  b:line("// Offsets in elements: in one rank's block of the group (sharded parameters and")
  b:line("// gradients) and in the group's unsharded gradients; in 4-byte words in its unsharded")
  b:line("// parameters.")
  b:line("static const rt_model_param params[] = {")
  b:indent()
  for i, p in ipairs(list) do
    local g, l = M.param_layout(plan, p)
    local init = p.init or { kind = "normal", std = 1 }
    local scale = init.std or init.bound or 0
    local f = { ".fqn = " .. cstr(p.fqn) }
    if #p.names > 1 then f[#f + 1] = ".aliases = param" .. (i - 1) .. "_aliases" end
    f[#f + 1] = string.format(".ndim = %d, .shape = %s, .group = %d", #p.shape, shape_init(p.shape),
      g.index - 1)
    -- in a group with frozen parameters a frozen one has no gradient, and the others' are
    -- the trainable parameters' alone (layout.lua grad_offset)
    if l.grad_offset then
      f[#f + 1] = string.format(".block_offset = %d, .unsharded_offset = %d, .unsharded_word = %d",
        l.offset, l.grad_offset * g.shard, l.unsharded_word)
      if l.grad_offset ~= l.offset then f[#f + 1] = ".frozen_before = " .. (l.offset - l.grad_offset) end
    else
      f[#f + 1] = string.format(".block_offset = %d, .unsharded_word = %d, .frozen = 1", l.offset,
        l.unsharded_word)
    end
    f[#f + 1] = ".init = " .. C_INIT[init.kind]
    if scale ~= 0 then f[#f + 1] = ".init_scale = " .. num(scale) end
    if p.packed then f[#f + 1] = ".packed = 1" end
    if p.from_shard then f[#f + 1] = ".from_shard = 1" end
    if not with_grad[p] then f[#f + 1] = ".grad_none = 1" end
    code(b, "{%s},", table.concat(f, ", "))
  end
  b:dedent()
  b:line("};")
end

-- A group's planned layout per shard rank: a table of its parameters' rows for each
-- distinct layout (ranks alike share one; they differ only where torch.chunk gives a
-- rank fewer rows), and `group<i>_plan`, the table of each rank.
local function emit_group_plan(b, g)
  local gi = g.index - 1
  local tables, by_rank = {}, {}
  for r = 1, g.shard do
    local rows = {}
    for k, l in ipairs(g.layout.params) do
      local shard = l.rows[r] * l.inner
      rows[k] = string.format("{%d, %d, %d, %d}", l.dim, l.shard_numel, l.offset, shard)
    end
    local key = table.concat(rows, ",")
    if not tables[key] then
      tables[key] = string.format("group%d_rank%d", gi, r - 1)
      b:line("static const rt_fsdp_param_plan %s[] = {", tables[key])
      b:indent()
      for k, row in ipairs(rows) do
        local line = row .. ","
        local fqn = "  // " .. g.params[k].fqn
        if #line + #fqn + 4 * b.depth <= c_text.WIDTH then code(b, "%s%s", line, fqn)
        else
          note(b, "%s", g.params[k].fqn)
          code(b, "%s", line)
        end
      end
      b:dedent()
      b:line("};")
    end
    by_rank[r] = tables[key]
  end
  local distinct = {}
  for _, t in pairs(tables) do distinct[#distinct + 1] = t end
  if #distinct == 1 and g.shard > 1 then
    b:line("// %s on every one of the %d shard ranks", by_rank[1], g.shard)
  end
  code(b, "static const rt_fsdp_param_plan* const group%d_plan[] = {%s};", gi,
    table.concat(by_rank, ", "))
end

-- The groups table; `names` maps the step's buffers to their names (c_text.arena_names).
function M.groups(b, plan, index, opt_states, names)
  for _, g in ipairs(plan.groups) do
    if g.shard ~= plan.spec.mesh.shard or g.replicate ~= plan.spec.mesh.replicate then
      internal("group '%s' with its own mesh", g.name)
    end
  end
  for _, g in ipairs(plan.groups) do
    local gi = g.index - 1
    local ids = {}
    for k, p in ipairs(g.params) do ids[k] = tostring(index[p]) end
    b:line("")
    note(b, "group %d %s: its parameters (indices into params), and where each lies in a rank's "
      .. "block: dim, block numel, offset in the block, the rank's shard numel", g.index,
      cstr(g.name))
    code(b, "static const int group%d_params[] = {%s};", gi, table.concat(ids, ", "))
    emit_group_plan(b, g)
    if g.reductions then
      for _, r in ipairs(g.reductions) do
        local ks, fqns = {}, {}
        for i, k in ipairs(r.params) do ks[i], fqns[i] = tostring(k - 1), g.params[k].fqn end
        note(b, "reduction %d%s: %s", r.index, r.part and " (a part)" or "", table.concat(fqns, ", "))
        code(b, "static const int group%d_reduction%d[] = {%s};", gi, r.index,
          table.concat(ks, ", "))
      end
      b:line("static const rt_model_reduction group%d_reductions[] = {", gi)
      b:indent()
      for _, r in ipairs(g.reductions) do
        local rows = r.rows and ", .rows = " .. C_ROWS[r.rows] or ""
        code(b, "{.nparams = %d, .params = group%d_reduction%d, .block_numel = %d%s%s},", #r.params,
          gi, r.index, r.layout.shard_numel, r.part and ", .part = 1" or "", rows)
      end
      b:dedent()
      b:line("};")
    end
  end
  b:line("")
  b:line("static const rt_model_group groups[] = {")
  b:indent()
  for _, g in ipairs(plan.groups) do
    local gi = g.index - 1
    local s = g.state
    local pf_world = g.post_forward_world ~= g.shard and g.post_forward_world or 0
    local f = { string.format(".name = %s, .nparams = %d, .params = group%d_params", cstr(g.name),
      #g.params, gi) }
    local placement = s.placement == "largest_dim" and "RT_SHARD_LARGEST_DIM" or "RT_SHARD_DIM0"
    f[#f + 1] = ".placement = " .. placement
    if pf_world > 0 then f[#f + 1] = ".pf_world = " .. pf_world end
    f[#f + 1] = string.format(".param_dtype = %s, .reduce_dtype = %s", C_DTYPE[g.param_dtype],
      C_DTYPE[g.reduce_dtype])
    if s.divide_factor then f[#f + 1] = ".divide_factor = " .. num(s.divide_factor) end
    if s.force_sum then f[#f + 1] = ".force_sum = 1" end
    if g.replicate > 1 and s.all_reduce_grads ~= false then f[#f + 1] = ".all_reduce = 1" end
    f[#f + 1] = string.format(".block_numel = %d, .padded_numel = %d, .unsharded_words = %d",
      g.layout.shard_numel, g.layout.padded_numel, g.unsharded_words)
    if g.layout.grad_numel ~= g.layout.shard_numel then
      f[#f + 1] = ".frozen_numel = " .. (g.layout.shard_numel - g.layout.grad_numel)
    end
    f[#f + 1] = string.format(".plan = group%d_plan", gi)
    if g.frozen then
      f[#f + 1] = string.format(".params_off = %s, .frozen = 1", names[g.params_buf])
    else
      f[#f + 1] = string.format(".params_off = %s, .grads_off = %s", names[g.params_buf],
        names[g.grads_buf])
      if opt_states > 0 then f[#f + 1] = ".state_off = " .. names[g.state_buf] end
    end
    if g.reductions then
      f[#f + 1] = string.format(".nreductions = %d, .reductions = group%d_reductions",
        #g.reductions, gi)
    end
    if g.packed_grads then f[#f + 1] = ".grads_packed = 1" end
    if plan.kept_across[g.index] then  -- plan/keep.lua persist
      f[#f + 1] = ".kept_across = 1" .. (g.kept_buf and ", .kept_off = " .. names[g.kept_buf] or "")
    end
    if s.offload then f[#f + 1] = ".offload = 1" end
    code(b, "{%s},", table.concat(f, ", "))
  end
  b:dedent()
  b:line("};")
end

-- The events and collective counts plan expects, as C arrays `<prefix>events` and
-- `<prefix>counts`; returns the program's rt_model_expect initializer (with its peak).
function M.expectations(b, plan, prefix)
  b:line("")
  b:line("static const rt_model_event %sevents[] = {", prefix)
  b:indent()
  for _, e in ipairs(plan.events) do
    b:line("{%s, %s, %s},", cstr(e.state), cstr(e.kind), cstr(e.group))
  end
  if #plan.events == 0 then b:line("{NULL, NULL, NULL},") end
  b:dedent()
  b:line("};")
  local keys = {}
  for k in pairs(plan.counts) do keys[#keys + 1] = k end
  table.sort(keys)
  b:line("")
  b:line("static const rt_model_count %scounts[] = {", prefix)
  b:indent()
  for _, k in ipairs(keys) do b:line("{%s, %d},", cstr(k), plan.counts[k]) end
  if #keys == 0 then b:line("{NULL, 0},") end
  b:dedent()
  b:line("};")
  return string.format("{.peak = %d, .nevents = %d, .events = %sevents, .ncounts = %d, "
    .. ".counts = %scounts}", plan.memory.peak, #plan.events, prefix, #keys, prefix)
end

return M
