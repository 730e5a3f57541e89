// The control of tests/cuda/kernel_resources.py: a kernel that keeps 96 values live (all
// loaded before any is used), about 100 registers a thread, with no __launch_bounds__, so
// a 1024-thread launch would fail on a GPU; the check must report it. Compiled to PTX only.
__global__ void resources_control_kernel(float* out, const float* in) {
    float v[96];
#pragma unroll
    for (int i = 0; i < 96; i++) v[i] = in[threadIdx.x + i * 1024];
    float m = v[0];
#pragma unroll
    for (int i = 1; i < 96; i++) m = fmaxf(m, v[i]);
    float s = 0;
#pragma unroll
    for (int i = 0; i < 96; i++) s += __expf(v[i] - m);
    out[threadIdx.x] = s;
}
