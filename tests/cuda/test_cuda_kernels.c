// Tests of the CUDA kernels (runtime/cuda/, build/cuda/librt_kernels_cuda.a) against the
// CPU kernels, which are compiled into this test under renamed symbols (cpu_rt_*, see
// tests/cuda/gen_symbols.sh). Every function of rt_kernels.h and rt_optim.h is linked
// (all_symbols.c), so a missing CUDA implementation fails the build.
//
// Without a GPU (cudaGetDeviceCount reports none, as in CI) it prints a SKIP line and
// `0 passed, 0 failed`. With one, every kernel runs on random data of odd sizes on both
// backends and the results are compared: forward outputs, and backward gradients
// accumulated onto non-zero buffers (the += contract), with NULL gradients where they are
// nullable. Each check prints the largest difference, as |got - want| / max(1, |want|).
// Tolerances: 0 where the GPU does the CPU's float operations in the CPU's order
// (elementwise add/mul, dropout masks, embedding rows, optimizer steps, compiled with
// -fmad=false); ~1e-6 where only expf/erff or a double reduction order differ; ~1e-4 where
// cuBLAS and OpenBLAS sum GEMM products in different orders; for attention on tensor cores
// a per-element bound on its 16-bit rounding of P and dS (attention_tc_ref.h) on top. With
// dt = RT_BF16 (cmp_dt) the kernels round what they write to bf16 on both backends: where
// the fp32 values before the rounding agree exactly the rounded ones do too (tolerance 0);
// where they may differ (expf/erff, reduction or GEMM order) a rounding may go the other
// way, one bf16 ulp (two for SwiGLU, which rounds an intermediate too) on top.
//
// The tests are in kernels_*.c, one concern each (kernel_tests.h); main runs them in order.
#include "kernel_tests.h"

extern const int rt_all_symbols_count;

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    if (argc == 3 && !strcmp(argv[1], "--kcheck")) {  // one call its checks must stop
        arg_check_call(argv[2]);
        return 0;
    }
    self_path = argv[0];
    printf("linked: all %d functions of rt_kernels.h and rt_optim.h from the CUDA library\n",
           rt_all_symbols_count);
    if (skip_without_gpu("cuda kernels")) return 0;
    struct cudaDeviceProp prop;
    RT_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    printf("device 0: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    // On the CPU emulator (tests/cuda/emu) the fp32 attention of a GPT-2 layer at sequence
    // 1024 would take minutes more; the same kernels run there at the smaller shapes, and the
    // tensor-core attention's longest sequences are shorter there.
    const int emulated = strncmp(prop.name, "cuda_emu", 8) == 0;
    on_emulator = emulated;
    RT_CHECK_CUDA(cudaSetDevice(0));
    rt_kernels_init();
    cpu_rt_kernels_init();

    test_linear(37, 65, 29, 1, RT_F32);
    test_linear(256, 384, 512, 1, RT_F32);
    test_linear(33, 17, 9, 0, RT_F32);
    test_linear(37, 65, 29, 1, RT_BF16);
    test_linear(256, 384, 512, 1, RT_BF16);
    test_linear(256, 384, 512, 0, RT_F16);
    test_linear(2050, 64, 40, 1, RT_F32);  // bias gradient over 33 row chunks
    test_linear(33, 17, 9, 0, RT_F16);     // output stride not a multiple of 8: padded product
    test_linear(33, 17, 9, 1, RT_BF16);    // the same with a bias (cuBLASLt's epilogue)
    test_linear(40, 48, 1027, 1, RT_BF16);  // rows of 1027: per-row narrowing and widening
    // the scaled linear (alpha in the GEMMs) against the linear and the scale op, bit for bit:
    // C and OC not multiples of 8 (padded copies, dweight's tail rows), and larger
    for (int di = 0; di < 2; di++) {
        const rt_dtype dt = di ? RT_BF16 : RT_F32;
        test_linear_scaled(33, 5, 13, dt);
        test_linear_scaled(37, 64, 48, dt);
        test_linear_scaled(256, 384, 512, dt);
    }
    test_embedding(300, 70, 50, 0);
    test_embedding(5000, 300, 1000, 1);  // a 2500-row run, the rest 1-3 rows per id
    test_embedding_packed(RT_BF16, 37, 64, 50);
    test_embedding_packed(RT_F16, 9, 20, 11);
    test_arange();
    test_layernorm(67, 768, 1, RT_F32);
    test_layernorm(5, 33, 0, RT_F32);
    test_layernorm(3, 5000, 1, RT_F32);  // rows longer than 4096: not kept in registers
    test_layernorm(3, 5000, 0, RT_BF16);
    test_layernorm(67, 768, 1, RT_BF16);
    test_rmsnorm(67, 768, 1, RT_F32);
    test_rmsnorm(9, 31, 0, RT_F32);
    test_rmsnorm(67, 768, 1, RT_BF16);
    // rows of 256 V elements: a warp per row (norm.cu)
    test_rmsnorm(67, 2048, 1, RT_BF16);
    test_rmsnorm(9, 256, 0, RT_F32);
    test_layernorm(5, 512, 0, RT_BF16);
    test_norm_paths(33, 512, 0);
    test_norm_paths(1300, 256, 0);  // a warp takes several rows of the weight gradients
    test_norm_paths(70, 1024, 0);   // LayerNorm's two sums at the shared-memory limit
    test_norm_paths(40, 2048, 1);   // LayerNorm's over it: the column sums; dbias alone
    test_last_block_sums();
    for (int ln = 0; ln < 2; ln++) {
        test_residual_norm(ln, RT_BF16, 33, 2048);  // a warp per row (V = 8)
        test_residual_norm(ln, RT_F16, 5, 768);     // V = 3
        test_residual_norm(ln, RT_BF16, 7, 200);    // not 256 V: the two kernels
    }
    // many rows: the weight/bias gradients are summed in row chunks (column_sums.cuh)
    test_layernorm(4100, 96, 1, RT_F32);
    test_rmsnorm(3000, 200, 1, RT_BF16);
    test_rmsnorm(3, 5000, 1, RT_BF16);  // rows longer than 4096: not kept in registers
    for (int di = 0; di < 2; di++) {
        const rt_dtype dt = di ? RT_BF16 : RT_F32;
        test_activation("gelu", cpu_rt_gelu_forward, rt_gelu_forward, cpu_rt_gelu_backward,
                        rt_gelu_backward, dt);
        test_activation("relu", cpu_rt_relu_forward, rt_relu_forward, cpu_rt_relu_backward,
                        rt_relu_backward, dt);
        test_activation("silu", cpu_rt_silu_forward, rt_silu_forward, cpu_rt_silu_backward,
                        rt_silu_backward, dt);
    }
    test_swiglu(RT_F32);
    test_swiglu(RT_BF16);
    test_rope(RT_F32);
    test_rope(RT_BF16);
    test_attention(2, 37, 4, 2, 16, 1);
    test_attention(1, 64, 2, 2, 32, 0);
    test_attention(2, 130, 6, 1, 8, 1);
    test_attention(2, 64, 4, 4, 32, 1);     // gpt_bytes
    test_attention(1, 200, 4, 2, 64, 1);    // head dims of each flash tile configuration
    test_attention(1, 150, 2, 1, 128, 0);
    test_attention(1, 97, 2, 2, 200, 1);
    if (!emulated)
        test_attention(2, 1024, 12, 12, 64, 1);  // a GPT-2 layer
    else
        printf("SKIP fp32 attention at T = 1024 on the emulator (minutes; smaller shapes cover "
               "the same kernels)\n");
    // On the emulator the longer shapes below run half the heads (h = 2), GQA ratios kept:
    // each head is its own blocks running the same code, and emulated tensor-core attention
    // costs seconds per head
    const int h = emulated ? 2 : 1;
    test_attention_tc(2, 37, 4, 2, 16, 1, RT_BF16);  // tensor cores: each tile configuration
    test_attention_tc(1, 200, 4 / h, 2 / h, 64, 1, RT_BF16);
    test_attention_tc(1, 200, 4 / h, 2 / h, 64, 0, RT_F16);
    test_attention_tc(1, 150, 2, 1, 128, 0, RT_BF16);
    test_attention_tc(1, 97, 2, 2, 128, 1, RT_F16);
    // GPT-2's head dim at seq 1024, Llama 1B's GQA ratio (32/8) at HD 64; on the emulator at
    // a quarter and three eighths of the length: still several tiles of every kernel and the
    // causal diagonal, in seconds instead of minutes
    test_attention_tc(1, emulated ? 256 : 1024, 4 / h, 4 / h, 64, 1, RT_BF16);
    test_attention_tc(1, emulated ? 192 : 512, 8 / h, 2 / h, 64, 1, RT_BF16);
    // attention dropout against the CPU's masks: the fp32 kernels (prec RT_F32; HD 12 and 40
    // with 16-bit operands), the tensor cores (HD 16, 64, 128) in fp32 storage and packed; T
    // 1, 17 (odd: the pairs of a row straddle Philox blocks) and 100, causal or not, GQA or not
    test_attention_dropout(RT_F32, 0, 2, 17, 4, 2, 12, 1, 0.1f);
    test_attention_dropout(RT_F32, 0, 1, 100, 2, 2, 40, 0, 0.5f);
    test_attention_dropout(RT_F32, 0, 1, 1, 2, 1, 64, 1, 0.5f);
    test_attention_dropout(RT_BF16, 0, 2, 17, 4, 2, 16, 1, 0.1f);
    test_attention_dropout(RT_F16, 0, 1, 100, 2, 1, 64, 0, 0.5f);
    test_attention_dropout(RT_BF16, 0, 1, 100, 2, 2, 128, 1, 0.1f);
    test_attention_dropout(RT_BF16, 0, 1, 1, 2, 2, 64, 0, 0.5f);
    test_attention_dropout(RT_BF16, 1, 1, 100, 4, 2, 64, 1, 0.1f);
    test_attention_dropout(RT_F16, 1, 2, 17, 2, 2, 128, 0, 0.5f);
    test_attention_dropout(RT_BF16, 1, 1, 17, 2, 1, 40, 1, 0.5f);
    test_attention_dropout(RT_F16, 1, 1, 100, 4, 2, 12, 1, 0.1f);
    test_attention_dropout(RT_F16, 1, 1, 1, 2, 2, 16, 1, 0.5f);
    test_attention_dropout_zero(RT_F32, 0, 1, 37, 2, 1, 40, 1);
    test_attention_dropout_zero(RT_BF16, 0, 1, 37, 2, 1, 64, 1);
    test_attention_dropout_zero(RT_F16, 1, 1, 37, 2, 2, 16, 0);
    test_elementwise(RT_F32);
    test_elementwise(RT_BF16);
    test_scale_op(RT_F32);
    test_scale_op(RT_BF16);
    test_scale_op(RT_F16);
    test_vec_offsets(RT_F32);
    test_vec_offsets(RT_BF16);
    test_vec_offsets(RT_F16);
    test_dropout();
    test_sum_loss();
    test_cross_entropy(67, 1000, 5, 0);
    test_cross_entropy(8, 50257, 0, 0);
    test_cross_entropy(1500, 64, 3, 0);  // more rows than reduction partials
    test_cross_entropy(4, 100, 0, 1);    // every target ignored: NaN loss, no gradient
    test_cross_entropy_nan();
    test_packed(RT_BF16, 37, 24, 1027);  // odd vocabulary: padded rows
    test_packed(RT_F16, 16, 40, 64);
    // The fused loss stages rows in shared memory (loss.cu rtc_ce_stage): rows longer than a
    // block's (the emulator's 99 KiB, an H100's 227 KB), more rows than blocks, and 3
    // groups of each row staged, the rest read twice.
    test_packed(RT_BF16, 3, 8, 130001);
    test_packed(RT_BF16, 1500, 8, 72);
    rt_cuda_set_loss_stage(48);
    test_packed(RT_BF16, 37, 24, 1027);
    rt_cuda_set_loss_stage((size_t)-1);  // the device's opt-in maximum again
    test_packed_inputs(RT_BF16, 37, 24, 1027);  // OC odd: padded rows of a packed output
    test_packed_inputs(RT_F16, 64, 128, 96);
    test_packed_inputs(RT_BF16, 16, 256, 64);  // the norms' rows a warp each
    test_packed_weight(RT_F16, 64, 128, 96);
    test_packed_weight(RT_BF16, 40, 256, 512);
    test_packed_bias_no_terms(RT_BF16);
    test_packed_bias_no_terms(RT_F16);
    // the scaled linear on packed storage: dout also a slice of rows of 88 (and of 640)
    test_packed_linear_scaled(RT_BF16, 37, 64, 48, 16, 88);
    test_packed_linear_scaled(RT_BF16, 128, 256, 512, 64, 640);
    // tensor cores (T = 70: two query tiles, one partial; GQA); on the emulator one batch and
    // two heads, which keeps the GQA ratio and the tiles: its 31 storage combinations take
    // minutes there at B = 2, NH = 4
    test_packed_attention(RT_BF16, emulated ? 1 : 2, 70, emulated ? 2 : 4, emulated ? 1 : 2, 64);
    test_packed_attention(RT_F16, 1, 33, 2, 1, 136);   // the fp32 kernels, operands widened
    // gradients in rows of a wider matrix: the tensor cores (HD 64, 16), the fp32 kernels
    // (HD 20: rope a pair at a time; HD 136)
    test_packed_grad_rows(RT_BF16, emulated ? 1 : 2, 70, emulated ? 2 : 4, emulated ? 1 : 2, 64);
    test_packed_grad_rows(RT_F16, 1, 37, 2, 1, 16);
    test_packed_grad_rows(RT_F16, 2, 33, 4, 2, 20);
    test_packed_grad_rows(RT_BF16, 1, 33, 2, 1, 136);
    // q's and k's rotations in one call: groups of four pairs (HD 16, 64), pairs (HD 10)
    test_rope_pair(RT_BF16, 2, 37, 4, 1, 64);
    test_rope_pair(RT_F16, 3, 7, 3, 2, 16);
    test_rope_pair(RT_BF16, 1, 9, 2, 1, 10);
    // stacked linears (w1, w3): dout a column slice; a linear's packed dinp a column slice;
    // swiglu's gradients column slices (groups of 8, and one element at a time for C = 20)
    test_linear_dout_slices(RT_BF16, 37, 64, 48, 32);
    test_linear_dout_slices(RT_F16, 64, 128, 96, 64);
    test_linear_dinp_slices(RT_BF16, 37, 64, 48);
    test_linear_dinp_slices(RT_F16, 64, 128, 96);
    test_swiglu_grad_slices(RT_BF16, 33, 256);
    test_swiglu_grad_slices(RT_F16, 7, 20);
    // packed parameter gradients: the bias sums over several row chunks (N 300) and in one
    // (N 37), C and OC not multiples of 32; the norms' rows a warp each (C 256: the dw sums)
    // or a block each (C 200, and no dinp: the column sums in chunks)
    test_packed_dweight_linear(RT_BF16, 300, 72, 40);
    test_packed_dweight_linear(RT_F16, 37, 64, 48);
    test_packed_dweight_norms(RT_BF16, 300, 256);
    test_packed_dweight_norms(RT_F16, 300, 200);
    test_packed_dweight_norms(RT_BF16, 37, 24);
    test_grad_rows_checked();
    test_assign(RT_F32);
    test_assign(RT_BF16);
    test_optim();
    test_optim_grad_round();
    test_optim_rows(37, 30);
    test_optim_rows(4103, 4100);
    test_optim_packed_grads();
    test_optim_cast();
    test_threads();

    RT_CHECK_CUDA(cudaDeviceSynchronize());
    return check_summary();
}
