// The shared part of test_cuda_kernels' files (its contract: test_cuda_kernels.c's top comment;
// the tests: kernels_*.c, one concern each, which main runs in order): the includes, the CUDA
// backend rt_* and the CPU reference cpu_rt_* (the same headers, names renamed by
// build/cuda/gen/cpu_rename.h, tests/cuda/gen_symbols.sh), the helpers several files use
// (kernels_common.c) and each file's tests. Each file includes it first.
#ifndef FSDPGEN_TESTS_CUDA_KERNEL_TESTS_H
#define FSDPGEN_TESTS_CUDA_KERNEL_TESTS_H

#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// One count of checks and one random stream for the whole program (check.h's and
// host_data.h's opt-ins; kernels_common.c defines them), so that the data and the closing
// count are those of a single file.
#define CHECK_SHARED_COUNTS
#define HOST_DATA_SHARED_RNG
#include "check.h"

#include "../../runtime/common/dtype_bits.h"
#include "attention_tc_ref.h"
#include "cuda_helpers.h"
#include "rt_check.h"
#include "rt_cuda.h"

// the CUDA backend: rt_*
#include "packed_activations.h"
#include "rt_kernels.h"
#include "rt_optim.h"
// the CPU reference: cpu_rt_* (same headers, names renamed)
#undef FSDPGEN_RT_KERNELS_H
#undef FSDPGEN_RT_OPTIM_H
#include "cpu_rename.h"
#include "rt_kernels.h"
#include "rt_optim.h"
#include "cpu_unrename.h"

// ----------------------------------------------------------------------------
// kernels_common.c: the shared helpers

void round_to(float* x, size_t n, rt_dtype prec);
double ulp_in(double x, rt_dtype dt);
void cmp_dt(const char* name, const float* dgot, const float* want, size_t n, double tol,
            rt_dtype dt, int ulps);
void reset_out(float* h, float* d, const float* init, size_t n, int assigned);
void upload(float* d, const float* h, size_t n);
int dev_same(const float* da, const float* db, size_t n);
int dev_same16(const void* da, const void* db, size_t n);  // n 16-bit values, bit for bit
void put_vals(void* d, const float* h, size_t n, int es, rt_dtype dt);
int packed_same(const void* d16, const float* dx, int rows, int cols, rt_dtype dt, int* pad);
void* dev_packed(const float* x, int rows, int cols, rt_dtype dt);
void dev_grad16(void* d16, const float* g0, size_t n, int assigned, rt_dtype dt);
uint16_t* down16(const void* d, size_t n);
uint16_t* bits16(const float* x, size_t n, rt_dtype dt);
void wide_rows(uint16_t* w, int rows, int ld, int n, const int* off, const int* cols,
               uint16_t* const* src, uint16_t sentinel);

// an activation's CPU or CUDA forward and backward (kernels_activation.c, kernels_assign.c)
typedef void (*act_fwd)(float*, const float*, size_t, rt_dtype);
typedef void (*act_bwd)(float*, const float*, const float*, size_t, rt_dtype, int);

// ----------------------------------------------------------------------------
// the tests, by file

// kernels_linear.c
void test_linear(int N, int C, int OC, int use_bias, rt_dtype prec);
void test_threads(void);
// the scaled linear's alphas (powers of two and 1) and its tests' bit comparison
extern const float linear_alphas[4];
size_t bits_differ(const void* dgot, const void* dwant, size_t n, int es, rt_dtype dt,
                   double* maxdiff);
void test_linear_scaled(int N, int C, int OC, rt_dtype dt);

// kernels_norms.c
void test_layernorm(int N, int C, int affine, rt_dtype dt);
void test_rmsnorm(int N, int C, int affine, rt_dtype dt);
void test_norm_paths(int N, int C, int bias_only);
void test_last_block_sums(void);
void test_residual_norm(int ln, rt_dtype dt, int N, int C);

// kernels_elementwise.c
void test_embedding(int N, int C, int V, int pattern);
void test_embedding_packed(rt_dtype dt, int N, int C, int V);
void test_arange(void);
void test_rope(rt_dtype dt);
void test_elementwise(rt_dtype dt);
void test_scale_op(rt_dtype dt);
void test_dropout(void);

// kernels_activation.c
void test_activation(const char* name, act_fwd cf, act_fwd gf, act_bwd cb, act_bwd gb,
                     rt_dtype dt);
void test_swiglu(rt_dtype dt);
void test_vec_offsets(rt_dtype dt);

// kernels_assign.c
void test_assign(rt_dtype dt);

// kernels_attention.c
void test_attention(int B, int T, int NH, int NKV, int HD, int causal);
void test_attention_tc(int B, int T, int NH, int NKV, int HD, int causal, rt_dtype prec);
void test_packed_attention(rt_dtype dt, int B, int T, int NH, int NKV, int HD);

// kernels_attention_dropout.c
void test_attention_dropout(rt_dtype prec, int packed, int B, int T, int NH, int NKV, int HD,
                            int causal, float p);
void test_attention_dropout_zero(rt_dtype prec, int packed, int B, int T, int NH, int NKV,
                                 int HD, int causal);

// kernels_loss.c
void test_sum_loss(void);
void test_cross_entropy(int N, int V, int ignore_every, int all_ignored);
void test_cross_entropy_nan(void);
void test_packed(rt_dtype dt, int N, int C, int V);

// kernels_packed.c
void test_packed_inputs(rt_dtype dt, int N, int C, int OC);
void test_packed_weight(rt_dtype dt, int N, int C, int OC);
void test_packed_bias_no_terms(rt_dtype dt);
void test_packed_linear_scaled(rt_dtype dt, int N, int C, int OC, int off, int ld);

// kernels_packed_slices.c
void test_packed_grad_rows(rt_dtype dt, int B, int T, int NH, int NKV, int HD);
void test_linear_dout_slices(rt_dtype dt, int N, int C, int OC1, int OC2);
void test_linear_dinp_slices(rt_dtype dt, int N, int C, int OC);
void test_swiglu_grad_slices(rt_dtype dt, int R, int D);

// kernels_rope_pair.c
void test_rope_pair(rt_dtype dt, int B, int T, int NHa, int NHb, int HD);

// kernels_packed_dweight.c; on_emulator: set by main
extern int on_emulator;
void test_packed_dweight_linear(rt_dtype dt, int N, int C, int OC);
void test_packed_dweight_norms(rt_dtype dt, int N, int C);

// kernels_arg_checks.c; self_path: set by main, which runs arg_check_call for --kcheck NAME
extern const char* self_path;
void arg_check_call(const char* name);
void test_grad_rows_checked(void);

// kernels_optim.c
void test_optim(void);
void test_optim_grad_round(void);
void test_optim_rows(int64_t rows, int64_t vocab);
void test_optim_packed_grads(void);
void test_optim_cast(void);

#endif
