// Times fsdpgen's CUDA norms as the generated step calls them (packed bf16 rows, input
// gradient assigned: rt_*norm_packed_forward / _backward) on the bench models' shapes, a
// row per warp (every pointer 16-byte aligned) against a block per row (the same call with
// the weight 4 bytes off alignment, which runtime/cuda/kernels/norm.cu's rtc_wrow_ok sends
// to the block kernels), both in one run on the same data.
//   norm_rows [iters]
// Prints per shape and pass the mean ms of each over `iters` calls after 3 warm-up calls,
// how many times faster the warp kernels are (x > 1: faster), their GB/s (each row read and
// written once: forward 4 bytes an element, backward 6), and #wrong as nccl-tests does: the
// elements where the two disagree by more than one bf16 ulp. The backward is the input
// gradient and the weight's (and LayerNorm's bias's) gradient, as the step computes them:
// the warp kernel adds the weight's terms from the rows it holds, the block path sums
// columns after its kernel (#wrong compares the input gradients).
// A second table times a residual add and the norm of its sum as the generated step calls
// them (rt_residual_*norm_packed_forward: one kernel, a warp per row) against the two calls
// it replaces (rt_residual_packed_forward, then the warp norm), with #wrong over the sum and
// the output (the bits must agree: any difference is wrong).
#include "bench.h"  // first: it sets _POSIX_C_SOURCE

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "rt_check.h"
#include "rt_kernels.h"

// The bench models' norms: GPT-2 124M's LayerNorm at 16 x 1024 tokens, Llama 1B's RMSNorm
// at 4 x 2048.
static const struct {
    const char* name;
    int layer, N, C;
} shapes[] = {{"gpt2_124m", 1, 16 * 1024, 768}, {"llama_1b", 0, 4 * 2048, 2048}};

// The forward (pass 0) or the backward (pass 1) of shape s into out, the weight w; the
// backward's weight (and bias) gradients accumulate into dw (2 C floats).
static float* dw;
static void call(int s, int pass, void* out, const void* x, const void* dout, const float* w,
                 float* mean, float* rstd) {
    const int N = shapes[s].N, C = shapes[s].C;
    const int fwd = RT_PACKED_OUT | RT_PACKED_INP, bwd = fwd | RT_PACKED_DINP;
    if (shapes[s].layer && pass == 0)
        rt_layernorm_packed_forward(out, mean, rstd, x, w, w, N, C, 1e-5f, fwd, RT_BF16);
    else if (shapes[s].layer)
        rt_layernorm_packed_backward(out, dw, dw + C, dout, x, w, mean, rstd, N, C, bwd, RT_BF16,
                                     RT_ASSIGN_1);
    else if (pass == 0)
        rt_rmsnorm_packed_forward(out, rstd, x, w, N, C, 1e-6f, fwd, RT_BF16);
    else
        rt_rmsnorm_packed_backward(out, dw, dout, x, w, rstd, N, C, bwd, RT_BF16, RT_ASSIGN_1);
}

// The residual add sum = a + b and the forward norm of the sum into out, in one call (one)
// or in the two calls it replaces; every buffer packed bf16.
static void call_add(int s, int one, void* sum, void* out, const void* a, const void* b,
                     const float* w, float* mean, float* rstd) {
    const int N = shapes[s].N, C = shapes[s].C;
    const int fwd = RT_PACKED_OUT | RT_PACKED_INP, add = fwd | RT_PACKED_INP2;
    if (one && shapes[s].layer)
        rt_residual_layernorm_packed_forward(sum, out, mean, rstd, a, b, w, w, N, C, 1e-5f, add,
                                             fwd, RT_BF16);
    else if (one)
        rt_residual_rmsnorm_packed_forward(sum, out, rstd, a, b, w, N, C, 1e-6f, add, fwd, RT_BF16);
    else {
        rt_residual_packed_forward(sum, a, b, (size_t)N * C, add, RT_BF16);
        call(s, 0, out, sum, NULL, w, mean, rstd);
    }
}

// Mean ms of `iters` calls of call (add < 0) or call_add(add), after 3 warm-up calls.
static double time_ms(int s, int pass, int add, int iters, void* sum, void* out, const void* x,
                      const void* dout, const float* w, float* mean, float* rstd) {
    double t0 = 0.0;
    for (int i = 0; i < 3 + iters; i++) {
        if (i == 3) {
            RT_CHECK_CUDA(cudaDeviceSynchronize());
            t0 = bench_now_s();
        }
        if (add < 0) call(s, pass, out, x, dout, w, mean, rstd);
        else call_add(s, add, sum, out, x, dout, w, mean, rstd);
    }
    RT_CHECK_CUDA(cudaDeviceSynchronize());
    return (bench_now_s() - t0) * 1e3 / iters;
}

int main(int argc, char** argv) {
    int iters;
    if (bench_iters(argc, argv, 50, &iters)) return 2;
    if (!bench_has_gpu("norm_rows")) return 0;
    rt_kernels_init();
    printf("%-10s %-9s %-8s %10s %10s %8s %8s %7s\n", "shape", "norm", "pass", "block ms",
           "warp ms", "warp x", "GB/s", "#wrong");
    long total_wrong = 0;
    enum { nshapes = sizeof shapes / sizeof shapes[0] };
    struct {
        double two, one;
        long wrong;
    } adds[nshapes];
    for (int s = 0; s < nshapes; s++) {
        const int N = shapes[s].N, C = shapes[s].C;
        const size_t n = (size_t)N * C;
        void *x = bench_dev_bf16(n, 2.0f, 1), *dout = bench_dev_bf16(n, 1.0f, 2);
        void *warp = bench_dev_zeros(n * 2), *block = bench_dev_zeros(n * 2);
        float* wa = bench_dev_zeros((size_t)C * sizeof(float));  // 16-byte aligned
        float* wbuf = bench_dev_zeros((size_t)(C + 1) * sizeof(float));
        float* wu = wbuf + 1;  // 4 bytes past 16-byte alignment
        float w[2048];
        for (int c = 0; c < C; c++) w[c] = 1.0f + (float)(c % 7) / 8.0f;
        RT_CHECK_CUDA(cudaMemcpy(wa, w, (size_t)C * sizeof(float), cudaMemcpyHostToDevice));
        RT_CHECK_CUDA(cudaMemcpy(wu, w, (size_t)C * sizeof(float), cudaMemcpyHostToDevice));
        float *mean = bench_dev_zeros((size_t)N * 4), *rstd = bench_dev_zeros((size_t)N * 4);
        dw = bench_dev_zeros((size_t)2 * C * sizeof(float));
        for (int pass = 0; pass < 2; pass++) {
            // the statistics the backward reads come from one forward, outside the timing
            if (pass == 1) call(s, 0, block, x, dout, wa, mean, rstd);
            const double bms = time_ms(s, pass, -1, iters, NULL, block, x, dout, wu, mean, rstd);
            const double wms = time_ms(s, pass, -1, iters, NULL, warp, x, dout, wa, mean, rstd);
            const long bad = bench_wrong_bf16(warp, block, n, 1);
            total_wrong += bad;
            const double bytes = (double)n * (pass ? 6 : 4);
            printf("%-10s %-9s %-8s %10.4f %10.4f %7.2fx %8.0f %7ld\n", shapes[s].name,
                   shapes[s].layer ? "layernorm" : "rmsnorm", pass ? "backward" : "forward", bms,
                   wms, bms / wms, bytes / (wms * 1e-3) / 1e9, bad);
        }
        // the add and the norm: the two calls (sum into block, out into warp) against the one
        void *sum1 = bench_dev_zeros(n * 2), *out1 = bench_dev_zeros(n * 2);
        adds[s].two = time_ms(s, 0, 0, iters, block, warp, x, dout, wa, mean, rstd);
        adds[s].one = time_ms(s, 0, 1, iters, sum1, out1, x, dout, wa, mean, rstd);
        adds[s].wrong = bench_wrong_bf16(sum1, block, n, 0) + bench_wrong_bf16(out1, warp, n, 0);
        total_wrong += adds[s].wrong;
        void* bufs[] = {x, dout, warp, block, wa, wbuf, mean, rstd, sum1, out1, dw};
        for (int i = 0; i < 11; i++) RT_CHECK_CUDA(cudaFree(bufs[i]));
    }
    printf("\n%-10s %-9s %-8s %10s %10s %8s %8s %7s\n", "shape", "norm", "pass", "2 calls ms",
           "1 call ms", "1 call x", "GB/s", "#wrong");
    for (int s = 0; s < nshapes; s++) {
        const double bytes = (double)shapes[s].N * shapes[s].C * 8;  // a, b read; sum, out written
        printf("%-10s %-9s %-8s %10.4f %10.4f %7.2fx %8.0f %7ld\n", shapes[s].name,
               shapes[s].layer ? "layernorm" : "rmsnorm", "add+fwd", adds[s].two, adds[s].one,
               adds[s].two / adds[s].one, bytes / (adds[s].one * 1e-3) / 1e9, adds[s].wrong);
    }
    return total_wrong ? 1 : 0;
}
