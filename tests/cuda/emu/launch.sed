# Rewrites CUDA's launch syntax for the emulator (tests/cuda/emu/include/cuda_runtime.h, run
# with sed -E): kernel<<<grid, block, smem, stream>>>(args), the kernel a name (a function, a
# function template or a pointer) or a template-id, becomes
#   emu_launch_at(emu_cfg(grid, block, smem, stream),
#                 [&](auto... emu_a) { return [=] { kernel(emu_a...); }; })(args)
# so the kernel call resolves (overloads, template arguments deduced from the arguments)
# as the launch would. One launch per line, as runtime/cuda writes them.
s/([A-Za-z_][A-Za-z_0-9]*(<[^<>]*>)?)<<<(.*)>>>\(/emu_launch_at(emu_cfg(\3), [\&](auto... emu_a) { return [=] { \1(emu_a...); }; })(/
# NULL as nullptr: a kernel argument NULL would otherwise reach the kernel call as an integer
s/\bNULL\b/nullptr/g
