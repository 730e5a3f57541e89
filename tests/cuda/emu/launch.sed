# Rewrites CUDA's launch syntax for the emulator (tests/cuda/emu/include/cuda_runtime.h, run
# with sed -E): kernel<<<grid, block, smem, stream>>>(args), the kernel a name (a function, a
# function template or a pointer) or a template-id, becomes
#   emu_launch_at(emu_cfg(grid, block, smem, stream), "kernel", emu_kernel_addr(PROBE),
#                 [&](auto... emu_a) { return [=] { kernel(emu_a...); }; })(args)
# so the kernel call resolves (overloads, template arguments deduced from the arguments)
# as the launch would; PROBE, a generic lambda that casts kernel to const void*, gives the
# kernel's address where the name has one (for its cudaFuncSetAttribute); "kernel", its
# name as written, names the graph's kernel nodes (CUDA_EMU_GRAPH_KERNELS). One launch per
# line, as runtime/cuda writes them.
s/([A-Za-z_][A-Za-z_0-9]*(<[^<>]*>)?)<<<(.*)>>>\(/emu_launch_at(emu_cfg(\3), "\1", emu_kernel_addr([\&](auto emu_t) -> decltype(reinterpret_cast<typename decltype(emu_t)::type>(\1)) { return reinterpret_cast<typename decltype(emu_t)::type>(\1); }), [\&](auto... emu_a) { return [=] { \1(emu_a...); }; })(/
# In a macro's body (a line that ends in a backslash) the kernel is a macro parameter: its
# name is the argument's, stringized (#name "<targs>")
/\\$/s/, "([A-Za-z_][A-Za-z_0-9]*)(<[^<>]*>)?", emu_kernel_addr\(/, #\1 "\2", emu_kernel_addr(/
# NULL as nullptr: a kernel argument NULL would otherwise reach the kernel call as an integer
s/\bNULL\b/nullptr/g
