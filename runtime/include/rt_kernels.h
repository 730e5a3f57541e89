// rt_kernels.h — the compute kernels (forward and backward) that generated step code calls.
//
// Every kernel is fp32 on raw pointers with explicit dimensions (llm.c style). The
// generated code owns all memory: buffers come from the static per-rank arena, so a
// kernel never decides a shape, and allocates nothing but a per-thread scratch for copies
// of its operands, grown on first use and kept (the CUDA backend's 16-bit GEMM and
// attention operands, the CPU's widened packed logits).
//
// Mixed precision (`dt`, the last argument (before `assign`) of every kernel that writes
// activations or activation gradients: linear, layernorm, rmsnorm, gelu, relu, silu,
// swiglu, rope, residual, mul, scale, broadcast_add, dropout, lowmem attention; cross-entropy
// backward has its own, see there): the dtype of the op's activation tensors, i.e. the
// tensors' dtype under a bf16/fp16 MixedPrecisionPolicy (RT_BF16, RT_F16), else RT_F32.
// Compute buffers hold fp32 values; with a 16-bit dt
//   * the float inputs (activations, parameters, and the gradient buffers a backward
//     kernel accumulates into) hold values exact in dt;
//   * the kernel rounds (to nearest even) every activation value and activation-gradient
//     value it writes to dt, at the store: the bits are those of the same kernel with
//     RT_F32 followed by rounding those outputs in a separate pass (a backward kernel
//     rounds the accumulated value, dinp = round(dinp + ...));
//   * parameter gradients (dweight, dbias, broadcast_add's db) and saved statistics (norm
//     mean/rstd, attention stats) stay fp32: the generated code rounds parameter
//     gradients once, before the reduce-scatter (or a packed call writes them rounded:
//     RT_PACKED_DWEIGHT), and rounds the gradient of a non-parameter tensor that a kernel
//     treats as a parameter gradient after the call.
// Each kernel says which outputs it rounds. RT_F32: nothing is rounded. The kernels that
// take no dt (embedding, the probs attention, losses, buffer helpers) round nothing; the
// generated code rounds after them where their output is a 16-bit tensor.
//
// Operand precision: products of dt values are exact in fp32, so a 16-bit dt also lets
// the CUDA backend multiply the linear kernels' operands on tensor cores (16-bit inputs,
// fp32 accumulation) with results that differ from fp32 arithmetic only in summation
// order; RT_F32 keeps fp32 arithmetic (no TF32). The lowmem attention kernels take the
// same dtype as `prec` with this meaning only, and a `dt` of their own for the rounding
// of their outputs. The CPU backend multiplies in fp32 whatever dt or prec says.
//
// Conventions the generator relies on:
//   * Forward kernels OVERWRITE their outputs.
//   * Backward kernels ACCUMULATE (+=) into every gradient they write — input gradients
//     and parameter gradients alike — and never zero them. The generated code zeroes a
//     gradient buffer (rt_zero) before its first contribution. This is what lets one
//     buffer collect several contributions (residual branches, tied weights, several
//     forwards before one backward) without extra copies.
//   * Assign (`assign`, the last argument of the backward kernels that write activation
//     gradients: linear, layernorm, rmsnorm, gelu, relu, silu, swiglu, rope, residual,
//     mul, scale, broadcast_add, dropout, lowmem attention, sum loss, cross_entropy): a bitmask
//     naming the gradient outputs, counted in parameter order among the kernel's
//     ACTIVATION-gradient outputs (RT_ASSIGN_1 the first, RT_ASSIGN_2, RT_ASSIGN_3),
//     that the call ASSIGNS (=) instead of accumulating into: the output is written in
//     full without being read, with the bits of the same call accumulating onto a zeroed
//     buffer (0 + x, rounded to dt as usual; only a zero's sign may differ, -0 where
//     0 + -0 gives +0), so the generated code needs no rt_zero before a gradient's first
//     contribution. RT_ACCUMULATE (0) accumulates every output. Parameter gradients
//     have one bit for all of a call's: RT_ASSIGN_DWEIGHT, linear's dweight and dbias and
//     the norms' (the generator zeroes the rest of a group's gradient buffer around the
//     parameters it assigns); broadcast_add's db accumulates and has no bit. Two
//     gradient outputs that are one buffer (da == db below) ignore their bits and
//     accumulate. Each kernel names its bits.
//   * A gradient output documented as "nullable" may be NULL: that gradient is then not
//     computed at all (input that needs no grad, frozen parameter).
//   * Aliasing: elementwise forward kernels allow out == inp (in place). A backward
//     kernel's gradient outputs must not alias its inputs (dinp += f(dout) with
//     dinp == dout would double count). The two gradients of residual, mul and swiglu
//     backward may be one buffer (x + x, x * x, swiglu(x, x)): each element gets da's
//     contribution, then db's, and is rounded once. Other kernels: no aliasing.
//   * Kernels with dt abort on a dt other than RT_F32, RT_BF16 or RT_F16.
//   * Thread safety: kernels keep no mutable global state, so ranks (threads of one
//     process) may call them concurrently. Call rt_kernels_init() once per process.
//   * Kernels abort with a "file:line: error: ..." message on arguments that would
//     corrupt memory (token id out of range, odd head dim); these are generator or data
//     bugs, never recoverable conditions.
//
// Shape legend: B batch, T sequence, C channels, OC output channels, N rows (usually
// B*T), NH query heads, NKV key/value heads, HD head dim, V vocabulary, n flat count.
// Row-major everywhere; [B,T,C] means index (b*T + t)*C + c.
#ifndef FSDPGEN_RT_KERNELS_H
#define FSDPGEN_RT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "rt_dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

// `assign` bits (see "Assign" above).
#define RT_ACCUMULATE 0
#define RT_ASSIGN_1 1
#define RT_ASSIGN_2 2
#define RT_ASSIGN_3 4
#define RT_ASSIGN_DWEIGHT 8  // the parameter gradients (linear's and the norms')

// ----------------------------------------------------------------------------
// setup

// CPU: sets OpenBLAS to one thread: ranks already run as threads of one process, and
// OpenBLAS's own pool would oversubscribe the cores. CUDA (runtime/cuda): creates the
// calling thread's cuBLAS handle on its current device (other threads get theirs on first
// use; a thread keeps one device), and pointers are device pointers. Idempotent; call
// before any kernel.
void rt_kernels_init(void);

// ----------------------------------------------------------------------------
// linear: out[N,OC] = inp[N,C] · weight[OC,C]^T + bias[OC]   (nn.Linear layout)
// Rounds out (forward) and dinp (backward) to dt; dweight and dbias are parameter
// gradients (not rounded). The GEMM result is rounded after the GEMM (the CPU after the
// sgemm, CUDA in a kernel after cuBLAS), the same bits as a separate pass.

void rt_linear_forward(float* out, const float* inp, const float* weight,
                       const float* bias /*nullable*/, int N, int C, int OC, rt_dtype dt);
// dinp[N,C] += dout·weight; dweight[OC,C] += dout^T·inp; dbias[OC] += sum_rows(dout).
// dinp, dweight, dbias are each nullable. RT_ASSIGN_1: dinp = (beta = 0 in the GEMM);
// RT_ASSIGN_DWEIGHT: dweight = (beta = 0; zeros when N is 0) and dbias =.
void rt_linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, int N, int C, int OC,
                        rt_dtype dt, int assign);
// A linear times alpha, a power of two (a scale op folded into the linear whose output only
// it reads: generator/memory/scaled_linears.lua): out = alpha * inp·weight^T, no bias; its
// backward dinp (+)= alpha * dout·weight, dweight (+)= alpha * dout^T·inp (the products as
// alpha * dout would give them). Scaling by a power of two is exact, so the bits are those
// of the linear and then rt_scale_forward (and of rt_scale_backward, then the linear's
// backward) unless a value falls below 2^-126 or overflows; dt is RT_F32 or RT_BF16 (fp16's
// subnormals begin at 2^-14).
void rt_linear_scaled_forward(float* out, const float* inp, const float* weight, int N, int C,
                              int OC, float alpha, rt_dtype dt);
void rt_linear_scaled_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                               const float* weight, int N, int C, int OC, float alpha,
                               rt_dtype dt, int assign);

// ----------------------------------------------------------------------------
// embedding: out[N,C] = weight[ids[n], :], weight [V,C]; ids are int32 in [0, V).

void rt_embedding_forward(float* out, const int32_t* ids, const float* weight, int N, int C,
                          int V);
// dweight[ids[n], :] += dout[n, :] (repeated ids accumulate in order n = 0..N-1).
void rt_embedding_backward(float* dweight, const float* dout, const int32_t* ids, int N, int C,
                           int V);
// ids[i] = start + i for i in [0, n): position ids for a positional embedding.
void rt_arange_i32(int32_t* ids, int n, int32_t start);

// ----------------------------------------------------------------------------
// LayerNorm over the last dim (nn.LayerNorm(C), biased variance, eps inside the sqrt).
// mean[N], rstd[N] are saved for backward (nullable in forward when no backward follows).
// weight, bias nullable (treated as 1 and 0). PyTorch default eps is RT_LAYERNORM_EPS.
// Rounds out (forward) and dinp (backward) to dt; mean, rstd, dweight, dbias stay fp32.

#define RT_LAYERNORM_EPS 1e-5f
void rt_layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                          const float* weight, const float* bias, int N, int C, float eps,
                          rt_dtype dt);
// dinp, dweight, dbias nullable; mean, rstd are what forward saved. RT_ASSIGN_1: dinp;
// RT_ASSIGN_DWEIGHT: dweight and dbias.
void rt_layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                           const float* inp, const float* weight, const float* mean,
                           const float* rstd, int N, int C, rt_dtype dt, int assign);

// ----------------------------------------------------------------------------
// RMSNorm over the last dim: out = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) + eps).
// rstd[N] saved for backward (nullable in forward); weight nullable (treated as 1).
// Rounds out (forward) and dinp (backward) to dt; rstd and dweight stay fp32.

void rt_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N,
                        int C, float eps, rt_dtype dt);
// dinp, dweight nullable. RT_ASSIGN_1: dinp; RT_ASSIGN_DWEIGHT: dweight.
void rt_rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                         const float* weight, const float* rstd, int N, int C, rt_dtype dt,
                         int assign);

// ----------------------------------------------------------------------------
// elementwise activations over n values. Backward takes the forward INPUT. Each rounds
// out (forward) and dinp (backward) to dt. RT_ASSIGN_1: dinp (written in full, relu's
// zeros included).

// exact GELU (nn.GELU(), erf form): 0.5 * x * (1 + erf(x / sqrt(2))).
void rt_gelu_forward(float* out, const float* inp, size_t n, rt_dtype dt);
void rt_gelu_backward(float* dinp, const float* dout, const float* inp, size_t n, rt_dtype dt,
                      int assign);
// ReLU; gradient at 0 is 0 as PyTorch (dinp[i] is not written where inp[i] <= 0).
// Backward may be given the output instead of the input (out > 0 exactly when inp > 0).
void rt_relu_forward(float* out, const float* inp, size_t n, rt_dtype dt);
void rt_relu_backward(float* dinp, const float* dout, const float* inp, size_t n, rt_dtype dt,
                      int assign);
// SiLU: x * sigmoid(x).
void rt_silu_forward(float* out, const float* inp, size_t n, rt_dtype dt);
void rt_silu_backward(float* dinp, const float* dout, const float* inp, size_t n, rt_dtype dt,
                      int assign);
// SwiGLU gate: out = silu(a) * b (Llama FFN: w2(silu(w1 x) * w3 x)). da, db nullable (and
// may be one buffer). One kernel for the silu and the product, and nothing of size n kept
// for backward but a and b. Rounds out, da and db to dt, and the intermediates silu(a)
// and, in backward, dout * b exactly where separate silu and mul kernels would round
// their outputs, so the fused op gives their bits. RT_ASSIGN_1: da, RT_ASSIGN_2: db.
void rt_swiglu_forward(float* out, const float* a, const float* b, size_t n, rt_dtype dt);
void rt_swiglu_backward(float* da, float* db, const float* dout, const float* a, const float* b,
                        size_t n, rt_dtype dt, int assign);

// ----------------------------------------------------------------------------
// rotary position embeddings (Meta Llama): over x[B,T,NH,HD], the consecutive pair
// (x[2i], x[2i+1]) at position t is rotated by angle t * theta^(-2i/HD), i < HD/2.
// Backward applies the inverse rotation. HD must be even and <= RT_ROPE_MAX_HD.
// Forward allows out == inp. Llama's default theta is RT_ROPE_THETA. Rounds out
// (forward) and dinp (backward) to dt. RT_ASSIGN_1: dinp.

#define RT_ROPE_THETA 10000.0f
#define RT_ROPE_MAX_HD 1024
void rt_rope_forward(float* out, const float* inp, int B, int T, int NH, int HD, float theta,
                     rt_dtype dt);
void rt_rope_backward(float* dinp, const float* dout, int B, int T, int NH, int HD,
                      float theta, rt_dtype dt, int assign);

// ----------------------------------------------------------------------------
// scaled-dot-product attention, multi-head and grouped-query.
//   q [B,T,NH*HD], k and v [B,T,NKV*HD], out [B,T,NH*HD]; NH % NKV == 0, query head h
//   uses kv head h / (NH/NKV) (as repeat_interleave of kv heads); scale 1/sqrt(HD);
//   causal != 0 masks key positions > query position.
// Two variants; pick by memory (the generated code uses lowmem):
//   * probs: forward keeps the softmax probabilities in probs [B,NH,T,T]
//     (rt_attention_probs_floats); backward reads them and overwrites a scratch of
//     rt_attention_scratch_floats(T) floats.
//   * lowmem: forward keeps only each softmax row's (max, 1/sum) in stats [B,NH,T,2]
//     (rt_attention_stats_floats), O(T) instead of O(T^2) saved per head; backward
//     recomputes the probabilities from q, k and stats. Forward and backward each take a
//     scratch of rt_attention_lowmem_scratch_floats(B, NH, T) floats (one size for both
//     backends, so the memory plan does not depend on the backend): the CPU kernel works
//     per head on [T,T] matrices in it (recomputing S with one extra QK^T GEMM per head,
//     results bit-identical to the probs variant); the CUDA kernel is flash attention
//     (tiles in shared memory, nothing T x T in global memory) and keeps
//     D = rowsum(dout * out) [B,NH,T] in it during backward.
// Scratch buffers hold nothing between calls (any dead buffer of that size will do).

size_t rt_attention_probs_floats(int B, int NH, int T);
size_t rt_attention_scratch_floats(int T);
void rt_attention_forward(float* out, float* probs, const float* q, const float* k,
                          const float* v, int B, int T, int NH, int NKV, int HD, int causal);
// dq, dk, dv nullable; probs is what forward wrote.
void rt_attention_backward(float* dq, float* dk, float* dv, float* scratch, const float* dout,
                           const float* q, const float* k, const float* v, const float* probs,
                           int B, int T, int NH, int NKV, int HD, int causal);

size_t rt_attention_stats_floats(int B, int NH, int T);
// max(2*T*T, B*NH*T): the CPU kernel's two [T,T] matrices, the CUDA kernel's D.
size_t rt_attention_lowmem_scratch_floats(int B, int NH, int T);
// Rounds out to dt (the last store: the same bits as an rt_step_round after the call).
void rt_attention_lowmem_forward(float* out, float* stats, float* scratch, const float* q,
                                 const float* k, const float* v, int B, int T, int NH, int NKV,
                                 int HD, int causal, rt_dtype prec, rt_dtype dt);
// dq, dk, dv nullable; out and stats are what rt_attention_lowmem_forward wrote (the
// softmax backward needs rowsum(dP * P) per query row, which equals rowsum(dout * out): the
// CUDA kernel computes it from out, the CPU kernel from the whole [T] row of dP * P it has,
// without reading out). HD up to 256 on CUDA. Rounds dq, dk, dv to dt once, after all of
// the call's contributions. RT_ASSIGN_1: dq, RT_ASSIGN_2: dk, RT_ASSIGN_3: dv. Two of them
// may be one buffer (attention(x, x, x)) only with dt = RT_F32 (the CUDA backend adds dQ
// and dK/dV in two passes, rounding would come between them); they then accumulate.
void rt_attention_lowmem_backward(float* dq, float* dk, float* dv, float* scratch,
                                  const float* dout, const float* out, const float* q,
                                  const float* k, const float* v, const float* stats, int B,
                                  int T, int NH, int NKV, int HD, int causal, rt_dtype prec,
                                  rt_dtype dt, int assign);
// Attention dropout (scaled_dot_product_attention's dropout_p): the lowmem calls above with
// each probability P[b,h,i,j] (query head h, query row i, key j) kept iff
// rt_dropout_uniform(seed, stream, ((b*NH + h)*T + i)*T + j) >= p, as rt_dropout_forward
// decides an element, and kept ones scaled by 1/(1-p) (the float of the double) before the
// product with v: out = (P * Z) v. stats stay the undropped softmax's; backward draws the
// same Z again (no mask buffer): dv += (P * Z)^T dout, dS = P * (Z * (dout v^T) -
// rowsum(dout * out)). p in [0, 1); p == 0 is the call above, bit for bit.
void rt_attention_lowmem_dropout_forward(float* out, float* stats, float* scratch,
                                         const float* q, const float* k, const float* v, int B,
                                         int T, int NH, int NKV, int HD, int causal,
                                         rt_dtype prec, rt_dtype dt, float p, uint64_t seed,
                                         uint64_t stream);
void rt_attention_lowmem_dropout_backward(float* dq, float* dk, float* dv, float* scratch,
                                          const float* dout, const float* out, const float* q,
                                          const float* k, const float* v, const float* stats,
                                          int B, int T, int NH, int NKV, int HD, int causal,
                                          rt_dtype prec, rt_dtype dt, int assign, float p,
                                          uint64_t seed, uint64_t stream);

// ----------------------------------------------------------------------------
// binary elementwise ops (residual add, product, broadcast add) and a product by a number

// out = a + b. Backward: da += dout, db += dout (each nullable; may be one buffer).
// Rounds out, da and db to dt. RT_ASSIGN_1: da, RT_ASSIGN_2: db.
void rt_residual_forward(float* out, const float* a, const float* b, size_t n, rt_dtype dt);
void rt_residual_backward(float* da, float* db, const float* dout, size_t n, rt_dtype dt,
                          int assign);
// out = a * b. Backward: da += dout * b, db += dout * a (each nullable; may be one buffer).
// Rounds out, da and db to dt. RT_ASSIGN_1: da, RT_ASSIGN_2: db.
void rt_mul_forward(float* out, const float* a, const float* b, size_t n, rt_dtype dt);
void rt_mul_backward(float* da, float* db, const float* dout, const float* a, const float* b,
                     size_t n, rt_dtype dt, int assign);
// out = inp * s, a tensor times a number (PyTorch's x * 2.0). Backward: dinp += dout * s
// (nullable). Rounds out and dinp to dt. s is the number rounded to fp32 first: PyTorch
// multiplies a bf16/fp16/fp32 tensor by a Python float in fp32 (opmath), the scalar rounded
// to float, and rounds the product to the tensor's dtype, the gradient too (MulBackward0).
// RT_ASSIGN_1: dinp.
void rt_scale_forward(float* out, const float* inp, size_t n, float s, rt_dtype dt);
void rt_scale_backward(float* dinp, const float* dout, size_t n, float s, rt_dtype dt,
                       int assign);
// out[r,c] = a[r,c] + b[c] over a[rows,cols], b[cols] (e.g. positional embedding [T*C]
// added to every batch row, rows = B). Backward: da += dout, db += sum over rows of dout.
// Rounds out and da to dt; db, a reduction over rows like a bias gradient, is treated as
// a parameter gradient (not rounded). RT_ASSIGN_1: da (db always accumulates).
void rt_broadcast_add_forward(float* out, const float* a, const float* b, int rows, int cols,
                              rt_dtype dt);
void rt_broadcast_add_backward(float* da, float* db, const float* dout, int rows, int cols,
                               rt_dtype dt, int assign);

// ----------------------------------------------------------------------------
// buffer helpers

void rt_zero(float* x, size_t n);                                 // x = 0
void rt_copy(float* dst, const float* src, size_t n);             // dst = src
void rt_scale(float* out, const float* inp, size_t n, float s);   // out = s * inp (out == inp ok)
void rt_accumulate(float* dst, const float* src, size_t n);       // dst += src
void rt_axpy(float* dst, const float* src, size_t n, float alpha); // dst += alpha * src
// sum of x[i]^2 accumulated in double (per-rank part of a global grad norm).
double rt_sumsq(const float* x, size_t n);

// ----------------------------------------------------------------------------
// dropout with a counter-based RNG, so masks depend only on (seed, stream, element index):
// element i of this call has global index e = offset + i (its index in the full logical
// tensor), and draws u(e) in [0,1) from Philox4x32-10 with key (seed lo32, seed hi32) and
// counter (e/4 lo32, e/4 hi32, stream lo32, stream hi32), lane e%4, u = (x >> 8) * 2^-24.
// Kept iff u(e) >= p, kept values scaled by 1/(1-p). A sharded run passing each piece's
// offset draws exactly the masks of the unsharded run. p == 0 is an exact copy; p >= 1
// zeroes. Backward regenerates the same mask (no mask buffer), dinp += mask*scale*dout
// (p >= 1: dinp is not written, or zeroed with RT_ASSIGN_1). Rounds out (forward) and
// dinp (backward) to dt. RT_ASSIGN_1: dinp.

void rt_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
float rt_dropout_uniform(uint64_t seed, uint64_t stream, uint64_t index);
void rt_dropout_forward(float* out, const float* inp, size_t n, float p, uint64_t seed,
                        uint64_t stream, uint64_t offset, rt_dtype dt);
void rt_dropout_backward(float* dinp, const float* dout, size_t n, float p, uint64_t seed,
                         uint64_t stream, uint64_t offset, rt_dtype dt, int assign);

// ----------------------------------------------------------------------------
// losses (the scalar loss is written to loss[0]). dloss, the loss's incoming gradient, is a
// pointer to one float in the backend's memory (device memory on the GPU), read by the
// kernel: where the loss is summed with others (several forwards before one backward, a
// model with several outputs) it is the sum's backward's output, computed on the device;
// for the loss itself, rt_step_one(R).

// "sum" loss: loss = sum of all n logits (the PyTorch tests' model(inp).sum()),
// accumulated in double. Backward: dlogits[i] += *dloss (1 for loss.backward()).
// RT_ASSIGN_1: dlogits.
void rt_sum_loss_forward(float* loss, const float* logits, size_t n);
void rt_sum_loss_backward(float* dlogits, size_t n, const float* dloss, int assign);

// cross-entropy with mean reduction (F.cross_entropy(logits.view(-1,V), targets.view(-1))):
// logits [N,V], targets [N] int32 in [0,V) or RT_IGNORE_INDEX (skipped; the mean is over
// the M non-ignored rows, M = N when none is ignored, as PyTorch). Forward writes the
// per-row losses (nullable; 0 for ignored rows) and loss[0] = their mean. Backward
// recomputes the softmax from the logits (no probs buffer) and accumulates
// dlogits += (softmax - onehot(target)) * *dloss / M (ignored rows add 0), rounded to dt
// (the logits being a 16-bit tensor's fp32 view, whose gradient is the view's rounded).
// RT_ASSIGN_1: dlogits.
#define RT_IGNORE_INDEX (-100)
void rt_cross_entropy_forward(float* loss, float* losses, const float* logits,
                              const int32_t* targets, int N, int V);
void rt_cross_entropy_backward(float* dlogits, const float* logits, const int32_t* targets,
                               int N, int V, const float* dloss, rt_dtype dt, int assign);
// Both, when the loss's backward directly follows its forward: the bits of
// rt_cross_entropy_forward(loss, NULL, ...) then rt_cross_entropy_backward(dlogits, ...),
// with each row's softmax statistics computed once (one read of the logits less on a GPU).
// The gradient comes first, as in every backward (RT_ASSIGN_1: dlogits).
void rt_cross_entropy_forward_backward(float* dlogits, float* loss, const float* logits,
                                       const int32_t* targets, int N, int V, const float* dloss,
                                       rt_dtype dt, int assign);

// ----------------------------------------------------------------------------
// packed 16-bit storage: the generator stores some 16-bit tensors as dt's 16-bit type
// (RT_BF16 / RT_F16 bits) in rows of RT_LD16(cols) elements, the padding columns zeros:
// half the bytes of the fp32 storage and no narrowing or widening pass on the GPU, whose
// GEMMs read and write such rows directly.
//   * logits: a bias-free 16-bit linear's output that only feeds a cross-entropy (through
//     its fp32 view) computed with its gradient, i.e. a language model's head; the value
//     and its gradient are packed.
//   * activations between kernels that read and write them packed: a linear's, a norm's,
//     an activation's, a rotary embedding's, an attention's, a residual add's or a
//     scale's (a tensor times a number) 16-bit output that only linears (as their input),
//     norms, activations, rotary embeddings, attention (q, k, v), residual adds and scales
//     read, with a last dimension that is a multiple of 8 (dense rows); the value is
//     packed, and its gradient too when a linear, a norm, an activation, an attention, a
//     residual add or a scale made it (its backward reads a packed dout) and only linears,
//     norms, activations, rotary embeddings, attention, residual adds and scales read it,
//     each once (their backwards write their contributions packed). An attention's output
//     is packed only with its gradient.
//   * unsharded parameters that only linears read, as their weight (RT_PACKED_INP2), with
//     both dims multiples of 8, or as their bias (RT_PACKED_INP3), with a multiple of 8
//     values: the all-gather's copy-out writes param_dtype's bits, which the GEMMs (and
//     cuBLASLt's bias epilogue) read in place instead of a copy narrowed in every forward
//     and backward (rt_model.h `packed`).
//   * parameter gradients that one backward call assigns (RT_PACKED_DWEIGHT): a linear's
//     dweight and dbias, a norm's dweight and dbias, written rounded where they are
//     computed (the GPU's GEMM and column sums store 16-bit values) instead of fp32 values
//     rounded in a pass of their own (rt_model.h grads_packed; the optimizer reads them
//     packed: rt_cuda.h packed_grads).
// Each call gives the bits of its fp32-storage twin (the same name without "packed_") on
// the same values, every 16-bit value being exact in fp32. The CPU widens and narrows
// around those twins, in a per-thread scratch outside the memory plan (as the GPU's GEMM
// operand copies).

// Row length, in elements, of a packed [rows, cols] matrix: cols rounded up to 8 (16 bytes).
#define RT_LD16(cols) (((cols) + 7) & ~7)
// A packed call's packed operands (`packed`, any of them; the others are fp32 storage):
//   RT_PACKED_OUT    the output (forward) or its gradient dout (backward)
//   RT_PACKED_INP    the input's value (inp, swiglu's a, attention's q); RT_PACKED_INP2
//                    swiglu's b, attention's k, a linear's weight (dense [OC, C], both
//                    multiples of 8); RT_PACKED_INP3 attention's v, a linear's bias (OC
//                    values, a multiple of 8; read by the forward only)
//   RT_PACKED_DINP   the input's gradient (backward: dinp, swiglu's da, attention's dq);
//                    RT_PACKED_DINP2 swiglu's db, attention's dk; RT_PACKED_DINP3
//                    attention's dv: assigned or added to as the assign bits say, rounded
//                    once.
//   RT_PACKED_DWEIGHT the parameter gradients a linear's or a norm's backward writes
//                    (dweight, dbias; a linear's dweight dense [OC, C], OC and C multiples
//                    of 8): assigned only (RT_ASSIGN_DWEIGHT: an addition would round
//                    twice), the twin's rounded to dt (on a GPU a linear's dweight within an
//                    ulp: cuBLAS's kernel for a 16-bit output may sum in another order).
#define RT_PACKED_OUT 1
#define RT_PACKED_INP 2
#define RT_PACKED_INP2 4
#define RT_PACKED_DINP 8
#define RT_PACKED_DINP2 16
#define RT_PACKED_INP3 32
#define RT_PACKED_DINP3 64
#define RT_PACKED_DWEIGHT 128
void rt_linear_packed_forward(void* out, const void* inp, const void* weight,
                              const void* bias /*nullable*/, int N, int C, int OC, int packed,
                              rt_dtype dt);
// Backward: dout in rows of ld_dout elements and dinp in rows of ld_dinp ("Gradient row
// lengths" below), a packed dout possibly a column slice of a wider matrix: stacked linears
// make one call for their input's gradient (dweight and dbias NULL, OC the stack's width)
// and, where their weights' gradients do not lie one after another, one per linear for its
// weight's (dinp NULL) on its columns of the stack; an assigned packed dinp possibly a
// column slice too, so that a linear's input gradient is written into its place in a wider
// gradient.
void rt_linear_packed_backward(void* dinp, void* dweight, void* dbias, const void* dout,
                               const void* inp, const void* weight, int N, int C, int OC,
                               int packed, rt_dtype dt, int assign, int ld_dout, int ld_dinp);
// rt_linear_scaled_forward and _backward (above) on packed storage.
void rt_linear_scaled_packed_forward(void* out, const void* inp, const void* weight, int N,
                                     int C, int OC, float alpha, int packed, rt_dtype dt);
void rt_linear_scaled_packed_backward(void* dinp, void* dweight, const void* dout,
                                      const void* inp, const void* weight, int N, int C, int OC,
                                      float alpha, int packed, rt_dtype dt, int assign,
                                      int ld_dout, int ld_dinp);
void rt_cross_entropy_packed_forward_backward(void* dlogits16, float* loss, const void* logits16,
                                              const int32_t* targets, int N, int V,
                                              const float* dloss, rt_dtype dt, int assign);
// Norms: the forward's out and inp, the backward's dout, inp and dinp (C a multiple of 8:
// dense rows).
void rt_layernorm_packed_forward(void* out, float* mean, float* rstd, const void* inp,
                                 const float* weight, const float* bias, int N, int C, float eps,
                                 int packed, rt_dtype dt);
void rt_layernorm_packed_backward(void* dinp, void* dweight, void* dbias, const void* dout,
                                  const void* inp, const float* weight, const float* mean,
                                  const float* rstd, int N, int C, int packed, rt_dtype dt,
                                  int assign);
void rt_rmsnorm_packed_forward(void* out, float* rstd, const void* inp, const float* weight,
                               int N, int C, float eps, int packed, rt_dtype dt);
void rt_rmsnorm_packed_backward(void* dinp, void* dweight, const void* dout, const void* inp,
                                const float* weight, const float* rstd, int N, int C, int packed,
                                rt_dtype dt, int assign);
// Activations over n dense values.
void rt_gelu_packed_forward(void* out, const void* inp, size_t n, int packed, rt_dtype dt);
void rt_gelu_packed_backward(void* dinp, const void* dout, const void* inp, size_t n, int packed,
                             rt_dtype dt, int assign);
void rt_relu_packed_forward(void* out, const void* inp, size_t n, int packed, rt_dtype dt);
void rt_relu_packed_backward(void* dinp, const void* dout, const void* inp, size_t n, int packed,
                             rt_dtype dt, int assign);
void rt_silu_packed_forward(void* out, const void* inp, size_t n, int packed, rt_dtype dt);
void rt_silu_packed_backward(void* dinp, const void* dout, const void* inp, size_t n, int packed,
                             rt_dtype dt, int assign);
void rt_swiglu_packed_forward(void* out, const void* a, const void* b, size_t n, int packed,
                              rt_dtype dt);
// swiglu's backward: dout, a and b are n dense values in rows of C (n a multiple of C); da
// and db are in rows of ld_da and ld_db ("Gradient row lengths" below).
void rt_swiglu_packed_backward(void* da, void* db, const void* dout, const void* a,
                               const void* b, size_t n, int packed, rt_dtype dt, int assign,
                               int C, int ld_da, int ld_db);
// Residual add: the forward's out, a and b, the backward's dout, da and db; da == db only in
// fp32 storage.
void rt_residual_packed_forward(void* out, const void* a, const void* b, size_t n, int packed,
                                rt_dtype dt);
void rt_residual_packed_backward(void* da, void* db, const void* dout, size_t n, int packed,
                                 rt_dtype dt, int assign);
// A tensor times a number: the forward's out and inp, the backward's dout and dinp.
void rt_scale_packed_forward(void* out, const void* inp, size_t n, float s, int packed,
                             rt_dtype dt);
void rt_scale_packed_backward(void* dinp, const void* dout, size_t n, float s, int packed,
                              rt_dtype dt, int assign);
// A residual add and the RMSNorm of its sum (a block's add and the next norm) in one call:
// the bits of rt_residual_packed_forward(sum, a, b, N * C, packed_add, dt) followed by
// rt_rmsnorm_packed_forward(out, rstd, sum, weight, N, C, eps, packed_norm, dt);
// packed_norm's RT_PACKED_INP must say what packed_add's RT_PACKED_OUT says. The GPU
// normalises the sum as it writes it.
void rt_residual_rmsnorm_packed_forward(void* sum, void* out, float* rstd, const void* a,
                                        const void* b, const float* weight, int N, int C,
                                        float eps, int packed_add, int packed_norm, rt_dtype dt);
// The same with LayerNorm (GPT-2's add and the next block's ln_1): the bits of the add and
// then rt_layernorm_packed_forward(out, mean, rstd, sum, weight, bias, N, C, eps,
// packed_norm, dt).
void rt_residual_layernorm_packed_forward(void* sum, void* out, float* mean, float* rstd,
                                          const void* a, const void* b, const float* weight,
                                          const float* bias, int N, int C, float eps,
                                          int packed_add, int packed_norm, rt_dtype dt);
// Gradient row lengths (rope's ld_dinp, attention's ld_dq, ld_dk, ld_dv, swiglu's ld_da,
// ld_db, a linear's ld_dout and ld_dinp): a packed gradient of width W (NH*HD, or NKV*HD for
// dk, dv; swiglu's C; a linear's dout OC, its dinp C) may be a column slice of a wider
// 16-bit matrix whose rows hold ld elements (ld >= W, a multiple of 8), so that linears
// sharing an input (q, k and v's projections; w1 and w3 of a SwiGLU feed-forward) compute
// its gradient in one GEMM over their gradients side by side; the call reads and writes only
// the slice's W columns of each row, never the elements between them. 0: dense rows (W; a
// linear's packed dout RT_LD16(OC), packed dinp RT_LD16(C)). Rope's and attention's take a
// non-zero ld only for a packed gradient (its RT_PACKED_DINP* bit set), the linear's ld_dinp
// only for a packed dinp it assigns (RT_ASSIGN_1) of C a multiple of 8 (its bits those of
// the dense call); swiglu's and the linear's ld_dout also take the dense one itself (W in
// fp32 storage; packed, a multiple of 8 >= W: a slice, or the operand's own rows of
// RT_LD16(W), the only choice for a packed dout of OC not a multiple of 8, whose zero
// padding the GPU's dinp GEMM sums over).
// Embedding lookup with a 16-bit output (the weight in fp32 storage, as the shard it is read
// from): out[N,C] = weight[ids[n], :] rounded to dt, packed where RT_PACKED_OUT (C a multiple
// of 8: dense rows), else in fp32 storage; the bits of rt_embedding_forward and a rounding.
void rt_embedding_packed_forward(void* out, const int32_t* ids, const float* weight, int N, int C,
                                 int V, int packed, rt_dtype dt);
// Rotary embeddings: the forward's out and inp, the backward's dout and dinp.
void rt_rope_packed_forward(void* out, const void* inp, int B, int T, int NH, int HD,
                            float theta, int packed, rt_dtype dt);
void rt_rope_packed_backward(void* dinp, const void* dout, int B, int T, int NH, int HD,
                             float theta, int packed, rt_dtype dt, int assign, int ld_dinp);
// Two rotations at the same positions in one call (an attention's q and k:
// generator/memory/rope_pairs.lua): the bits of rt_rope_packed_forward(out_a, inp_a, B, T,
// NH_a, HD, theta, packed_a, dt) and of the same call for b. The GPU computes each
// position's angles once for both, in one launch (two where their storages differ). No
// buffer of one rotation is one of the other's (out_a == inp_a is allowed, as alone).
void rt_rope_pair_packed_forward(void* out_a, const void* inp_a, int NH_a, int packed_a,
                                 void* out_b, const void* inp_b, int NH_b, int packed_b, int B,
                                 int T, int HD, float theta, rt_dtype dt);
// The backwards: the bits of rt_rope_packed_backward(dinp_a, dout_a, B, T, NH_a, HD, theta,
// packed_a, dt, assign_a, ld_a) and of the same call for b.
void rt_rope_pair_packed_backward(void* dinp_a, const void* dout_a, int NH_a, int packed_a,
                                  int assign_a, int ld_a, void* dinp_b, const void* dout_b,
                                  int NH_b, int packed_b, int assign_b, int ld_b, int B, int T,
                                  int HD, float theta, rt_dtype dt);
// Lowmem attention with packed q, k, v and out (prec == dt; NH*HD and NKV*HD multiples of
// 8). In backward RT_PACKED_OUT says that both out and dout are packed, and dq, dk, dv are
// packed or not by their own bits (no two of them one buffer), in rows of ld_dq, ld_dk,
// ld_dv (above).
void rt_attention_lowmem_packed_forward(void* out, float* stats, float* scratch, const void* q,
                                        const void* k, const void* v, int B, int T, int NH,
                                        int NKV, int HD, int causal, rt_dtype prec, int packed,
                                        rt_dtype dt);
void rt_attention_lowmem_packed_backward(void* dq, void* dk, void* dv, float* scratch,
                                         const void* dout, const void* out, const void* q,
                                         const void* k, const void* v, const float* stats, int B,
                                         int T, int NH, int NKV, int HD, int causal,
                                         rt_dtype prec, int packed, rt_dtype dt, int assign,
                                         int ld_dq, int ld_dk, int ld_dv);
// The same with attention dropout (rt_attention_lowmem_dropout_forward above).
void rt_attention_lowmem_packed_dropout_forward(void* out, float* stats, float* scratch,
                                                const void* q, const void* k, const void* v,
                                                int B, int T, int NH, int NKV, int HD,
                                                int causal, rt_dtype prec, int packed,
                                                rt_dtype dt, float p, uint64_t seed,
                                                uint64_t stream);
void rt_attention_lowmem_packed_dropout_backward(void* dq, void* dk, void* dv, float* scratch,
                                                 const void* dout, const void* out,
                                                 const void* q, const void* k, const void* v,
                                                 const float* stats, int B, int T, int NH,
                                                 int NKV, int HD, int causal, rt_dtype prec,
                                                 int packed, rt_dtype dt, int assign,
                                                 int ld_dq, int ld_dk, int ld_dv, float p,
                                                 uint64_t seed, uint64_t stream);

#ifdef __cplusplus
}
#endif

#endif
