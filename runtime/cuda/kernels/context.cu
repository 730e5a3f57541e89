// Setup of the CUDA kernels: the per-thread context (stream, cuBLAS handle and workspace,
// reduction scratch), rt_kernels_init, rt_cuda_set_stream / rt_cuda_get_stream, the SMs
// its GEMMs plan for (rt_cuda_set_gemm_sms), the row-major SGEMM wrapper and the
// deterministic flat reductions.
//
// One context per host thread. Ranks are threads of one process (one GPU per thread with
// NCCL, or several ranks on one GPU in the local test mode), and a cuBLAS handle is neither
// safe to share between threads issuing work concurrently nor usable on another device, so
// each thread gets its own, created on its first call for the device that is current then.
// rt_kernels_init() creates the calling thread's context eagerly (so a missing GPU is
// reported there, not inside the first GEMM); other threads create theirs lazily. A thread
// must not change its current device afterwards: that is checked and reported. All device
// and pinned memory a context uses is allocated here, at creation, so no kernel call
// allocates (CUDA graph capture forbids it), except the 16-bit GEMM operand scratch: it
// grows to the largest call seen, which the first step (always eager) meets, and a capture
// that would need more stops with a message.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <pthread.h>

#include "cuda_common.cuh"

// ----------------------------------------------------------------------------
// cuBLAS hints

const char* rtc_cublas_hint(int status) {
    switch (status) {
        case CUBLAS_STATUS_NOT_INITIALIZED:
            return "cuBLAS could not initialise: check the driver (nvidia-smi) and that a GPU "
                   "is visible";
        case CUBLAS_STATUS_ALLOC_FAILED:
            return "cuBLAS could not allocate its workspace: the GPU is out of memory";
        case CUBLAS_STATUS_INVALID_VALUE:
            return "a GEMM argument is invalid: check the shapes and leading dimensions";
        case CUBLAS_STATUS_ARCH_MISMATCH:
            return "this GPU lacks a feature the call needs: check its compute capability";
        case CUBLAS_STATUS_EXECUTION_FAILED:
            return "a cuBLAS kernel failed: an earlier kernel may have faulted; rerun with "
                   "CUDA_LAUNCH_BLOCKING=1 or compute-sanitizer";
        case CUBLAS_STATUS_NOT_SUPPORTED:
            return "this combination of types or options is not supported by this cuBLAS";
        default:
            return "rerun with CUBLAS_LOGINFO_DBG=1 CUBLAS_LOGDEST_DBG=stderr";
    }
}

// ----------------------------------------------------------------------------
// per-thread context

static pthread_key_t ctx_key;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;

// Thread exit: release the handle, workspace and scratch. Errors are ignored here (the
// process may be tearing the device down); nothing is left to report them to.
static void ctx_free(void* p) {
    rtc_ctx* c = (rtc_ctx*)p;
    if (!c) return;
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur != c->device) (void)cudaSetDevice(c->device);
    (void)cublasDestroy(c->blas);
    (void)cublasLtDestroy(c->blas_lt);
    (void)cudaFree(c->blas_workspace);
    (void)cudaFree(c->scratch);
    (void)cudaFree(c->colsum_partials);
    (void)cudaFree(c->colsum_counts);
    (void)cudaFree(c->operands);
    for (int i = 0; i < c->nretired; i++) (void)cudaFree(c->retired[i]);
    free(c->retired);
    (void)cudaFreeHost(c->host_result);
    free(c);
}

// cuBLAS on the context's stream with the context's workspace: cublasSetStream resets the
// workspace to cuBLAS's own pool, so the workspace is set again after it every time.
static void blas_bind_stream(rtc_ctx* c) {
    RT_CHECK_CUBLAS(cublasSetStream(c->blas, c->stream));
    RT_CHECK_CUBLAS(cublasSetWorkspace(c->blas, c->blas_workspace, RTC_BLAS_WORKSPACE));
    c->blas_stream = c->stream;
}

// The cuBLAS handle, bound to the current stream. Bound here, at a GEMM, rather than by
// rt_cuda_set_stream: a switch to a stream that runs no GEMM (the step's optimizer stream,
// inside the captured step) and back leaves cuBLAS alone.
static cublasHandle_t blas(void) {
    rtc_ctx* c = rtc_get();
    if (c->blas_stream != c->stream) blas_bind_stream(c);
    return c->blas;
}

static void ctx_key_make(void) {
    int rc = pthread_key_create(&ctx_key, ctx_free);
    RT_CHECK_SYS(rc == 0, "pthread_key_create (CUDA kernel context)");
}

rtc_ctx* rtc_get(void) {
    pthread_once(&ctx_once, ctx_key_make);
    int dev = -1;
    RT_CHECK_CUDA(cudaGetDevice(&dev));
    rtc_ctx* c = (rtc_ctx*)pthread_getspecific(ctx_key);
    if (c) {
        if (c->device != dev) {
            char why[160];
            snprintf(why, sizeof why,
                     "this thread's kernel context belongs to device %d, current device is %d",
                     c->device, dev);
            rt_check_fail(__FILE__, __LINE__, "rtc_get", why,
                          "call cudaSetDevice once per rank thread, before its first kernel, "
                          "and keep it");
        }
        return c;
    }
    c = (rtc_ctx*)calloc(1, sizeof *c);
    RT_CHECK_SYS(c != NULL, "calloc (CUDA kernel context)");
    c->device = dev;
    c->stream = (cudaStream_t)0;  // the legacy default stream until rt_cuda_set_stream
    RT_CHECK_CUDA(cudaMalloc((void**)&c->scratch, RTC_SCRATCH_DOUBLES * sizeof(double)));
    RT_CHECK_CUDA(cudaMalloc(&c->blas_workspace, RTC_BLAS_WORKSPACE));
    RT_CHECK_CUDA(cudaMalloc((void**)&c->colsum_partials, RTC_COLSUM_PARTIAL_DOUBLES * sizeof(double)));
    // zeroed once: each kernel that counts on them sets them back to 0 (rtc_last_block)
    RT_CHECK_CUDA(cudaMalloc((void**)&c->colsum_counts, RTC_COLSUM_COUNTS * sizeof(unsigned)));
    RT_CHECK_CUDA(cudaMemset(c->colsum_counts, 0, RTC_COLSUM_COUNTS * sizeof(unsigned)));
    RT_CHECK_CUDA(cudaMallocHost((void**)&c->host_result, sizeof(double)));
    RT_CHECK_CUBLAS(cublasCreate(&c->blas));
    RT_CHECK_CUBLAS(cublasLtCreate(&c->blas_lt));
    // fp32 SGEMM without TF32 (the CPU backend's numbers within fp32 round-off); scalars
    // alpha and beta from host memory (each call site's constants)
    RT_CHECK_CUBLAS(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
    RT_CHECK_CUBLAS(cublasSetPointerMode(c->blas, CUBLAS_POINTER_MODE_HOST));
    blas_bind_stream(c);
    rtc_attention_init();
    rtc_norm_init(c);
    rtc_loss_init(c);
    int rc = pthread_setspecific(ctx_key, c);
    RT_CHECK_SYS(rc == 0, "pthread_setspecific (CUDA kernel context)");
    return c;
}

void rt_cuda_set_gemm_sms(int sms) {
    RT_KCHECK(sms >= 0, "0 (the device's SMs) or a positive count", "rt_cuda_set_gemm_sms(%d)",
              sms);
    rtc_ctx* c = rtc_get();
    RT_CHECK_CUBLAS(cublasSetSmCountTarget(c->blas, sms));
    c->gemm_sms = sms;  // the bias epilogue's descriptors take it at each call
}

void rt_cuda_set_bias_grad_epilogue(int epilogue) {
    rtc_get()->bgrad_declined = epilogue ? 0 : 3;  // 3: for both output types
}

// ----------------------------------------------------------------------------
// init

void rt_kernels_init(void) {
    // Creates this thread's context now: a missing GPU or driver problem is reported here
    // with its hint. Idempotent (the context is created once per thread).
    (void)rtc_get();
}

// ----------------------------------------------------------------------------
// streams (rt_cuda.h)

void rt_cuda_set_stream(void* stream) {
    rtc_ctx* c = rtc_get();
    if (c->stream == (cudaStream_t)stream) return;
    c->stream = (cudaStream_t)stream;
    if (!stream) blas_bind_stream(c);  // the streams may go now: cuBLAS lets go of them
}

void* rt_cuda_get_stream(void) { return (void*)rtc_get()->stream; }

// ----------------------------------------------------------------------------
// GEMM

// ---- 16-bit operands -----------------------------------------------------------------

// *p, *have bytes long, made at least `bytes` long (what: the scratch, for the message;
// *captured: a capture has used *p); true when it was reallocated. Grows only outside a
// capture. A buffer a capture used is kept until the thread exits: its graph (the CUDA step
// backend's step, replayed after an eager eval that needed more) still reads it; any other
// is freed first, so that the growths of the first, eager step hold one buffer at a time.
static bool scratch_grow(rtc_ctx* ctx, void** p, size_t* have, bool* captured, size_t bytes,
                         const char* what) {
    if (bytes <= *have && *captured) return false;
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    RT_CHECK_CUDA(cudaStreamIsCapturing(ctx->stream, &cap));
    if (bytes <= *have) {
        *captured = cap != cudaStreamCaptureStatusNone;
        return false;
    }
    RT_KCHECK(cap == cudaStreamCaptureStatusNone,
              "a kernel scratch grows on an eager step (the first step is one)",
              "a kernel captured into a CUDA graph needs %zu bytes of %s, %zu allocated (rerun "
              "with --no-graph, and report the spec)",
              bytes, what, *have);
    if (*p && *captured) {
        void** r = (void**)realloc(ctx->retired, (size_t)(ctx->nretired + 1) * sizeof *r);
        RT_KCHECK(r != NULL, "host memory for the list of retired scratches",
                  "out of host memory growing the %s", what);
        ctx->retired = r;
        r[ctx->nretired++] = *p;
    } else if (*p) {
        RT_CHECK_CUDA(cudaFree(*p));
    }
    *p = NULL;
    *have = 0;
    *captured = false;
    RT_CHECK_CUDA(cudaMalloc(p, bytes));
    *have = bytes;
    return true;
}

void rt_cuda_release_scratch(void) {
    rtc_ctx* ctx = rtc_get();
    if (!ctx->operands || ctx->operands_captured) return;
    RT_CHECK_CUDA(cudaFree(ctx->operands));
    ctx->operands = NULL;
    ctx->operand_bytes = 0;
}

// The context's operand scratch, at least `bytes` long.
void* rtc_operand_scratch(size_t bytes) {
    rtc_ctx* ctx = rtc_get();
    scratch_grow(ctx, &ctx->operands, &ctx->operand_bytes, &ctx->operands_captured, bytes,
                 "16-bit operand scratch");
    return ctx->operands;
}

// dst[r * ldp + c] = (16 bits) src[r * ld + c]: exact for bf16/fp16 values. Four columns
// per thread (one float4 load) when ld, cols and src allow it.
template <typename T, int V>
__global__ void narrow_kernel(T* __restrict__ dst, int ldp, const float* __restrict__ src, int ld,
                              int cols, size_t n) {
    const int vcols = cols / V;
    RTC_GRID_STRIDE(i, n) {
        const size_t r = i / (size_t)vcols;
        const int c = (int)(i % (size_t)vcols) * V;
        if (V == 4) {
            const float4 x = *(const float4*)(src + r * ld + c);
            T* d = dst + r * ldp + c;
            d[0] = (T)x.x, d[1] = (T)x.y, d[2] = (T)x.z, d[3] = (T)x.w;
        } else {
            dst[r * ldp + c] = (T)src[r * ld + c];
        }
    }
}

// Long rows that float4 cannot serve (GPT-2's logits, 50257 columns): a block per row at a
// time, threads along it, so no thread divides a 64-bit index per element (the flat
// kernel's one element per thread made both copies of the LM head run at about 2 TB/s).
template <typename T>
__global__ void narrow_long_rows_kernel(T* __restrict__ dst, int ldp, const float* __restrict__ src,
                                        int ld, int rows, int cols) {
    for (int r = blockIdx.x; r < rows; r += gridDim.x)
        for (int c = threadIdx.x; c < cols; c += blockDim.x)
            dst[(size_t)r * ldp + c] = (T)src[(size_t)r * ld + c];
}

enum { RTC_LONG_ROW = 1024 };  // columns from which the per-row kernels serve scalar copies

static unsigned long_row_blocks(int rows) { return (unsigned)(rows < 65535 ? rows : 65535); }

template <typename T>
static void narrow_rows(T* dst, int ldp, const float* src, int rows, int cols, int ld) {
    const int vec = cols % 4 == 0 && ld % 4 == 0 && ((uintptr_t)src & 15) == 0;
    const size_t n = (size_t)rows * (vec ? cols / 4 : cols);
    if (vec) {
        RTC_LAUNCH_FLAT((narrow_kernel<T, 4>), n, dst, ldp, src, ld, cols, n);
    } else if (cols >= RTC_LONG_ROW) {
        narrow_long_rows_kernel<T><<<long_row_blocks(rows), 256, 0, rtc_stream()>>>(dst, ldp, src,
                                                                                   ld, rows, cols);
        RTC_CHECK_LAUNCH(narrow_long_rows_kernel);
    } else {
        RTC_LAUNCH_FLAT((narrow_kernel<T, 1>), n, dst, ldp, src, ld, cols, n);
    }
}

rtc_operand16 rtc_narrow(void* dst, const float* src, int rows, int cols, int ld, rt_dtype prec) {
    rtc_operand16 o = {dst, rtc_ld16(cols)};
    if (rows <= 0 || cols <= 0) return o;
    if (prec == RT_BF16) narrow_rows((__nv_bfloat16*)dst, o.ld, src, rows, cols, ld);
    else narrow_rows((__half*)dst, o.ld, src, rows, cols, ld);
    if (o.ld != cols)  // the padding columns are zeros: a product may sum over them
        RT_CHECK_CUDA(cudaMemset2DAsync((char*)dst + (size_t)cols * 2, (size_t)o.ld * 2, 0,
                                        (size_t)(o.ld - cols) * 2, (size_t)rows, rtc_stream()));
    return o;
}

void rtc_narrow_into(void* dst, int ldd, const float* src, int rows, int cols, rt_dtype prec) {
    if (rows <= 0 || cols <= 0) return;
    if (prec == RT_BF16) narrow_rows((__nv_bfloat16*)dst, ldd, src, rows, cols, cols);
    else narrow_rows((__half*)dst, ldd, src, rows, cols, cols);
}

void rtc_zero_rows16(rtc_operand16 o, int from, int to) {
    if (to > from)
        RT_CHECK_CUDA(cudaMemsetAsync((char*)o.p + (size_t)from * o.ld * 2, 0,
                                      (size_t)(to - from) * o.ld * 2, rtc_stream()));
}

// dst[r * cols + c] = src[r * lds + c] widened (exact). Four columns per thread (one float4
// store) when cols and dst allow it.
template <typename T, int V>
__global__ void widen_kernel(float* __restrict__ dst, const T* __restrict__ src, int lds,
                             int cols, size_t n) {
    const int vcols = cols / V;
    RTC_GRID_STRIDE(i, n) {
        const size_t r = i / (size_t)vcols;
        const int c = (int)(i % (size_t)vcols) * V;
        const T* x = src + r * lds + c;
        if (V == 4)
            *(float4*)(dst + r * cols + c) =
                make_float4((float)x[0], (float)x[1], (float)x[2], (float)x[3]);
        else
            dst[r * cols + c] = (float)x[0];
    }
}

template <typename T>
__global__ void widen_long_rows_kernel(float* __restrict__ dst, const T* __restrict__ src, int lds,
                                       int rows, int cols) {
    for (int r = blockIdx.x; r < rows; r += gridDim.x)
        for (int c = threadIdx.x; c < cols; c += blockDim.x)
            dst[(size_t)r * cols + c] = (float)src[(size_t)r * lds + c];
}

template <typename T>
static void widen_rows(float* dst, const T* src, int rows, int cols, int lds) {
    const int vec = cols % 4 == 0 && ((uintptr_t)dst & 15) == 0;
    const size_t n = (size_t)rows * (vec ? cols / 4 : cols);
    if (vec) {
        RTC_LAUNCH_FLAT((widen_kernel<T, 4>), n, dst, src, lds, cols, n);
    } else if (cols >= RTC_LONG_ROW) {
        widen_long_rows_kernel<T><<<long_row_blocks(rows), 256, 0, rtc_stream()>>>(dst, src, lds,
                                                                                  rows, cols);
        RTC_CHECK_LAUNCH(widen_long_rows_kernel);
    } else {
        RTC_LAUNCH_FLAT((widen_kernel<T, 1>), n, dst, src, lds, cols, n);
    }
}

void rtc_widen(float* dst, const void* src, int rows, int cols, int lds, rt_dtype prec) {
    if (rows <= 0 || cols <= 0) return;
    if (prec == RT_BF16) widen_rows(dst, (const __nv_bfloat16*)src, rows, cols, lds);
    else widen_rows(dst, (const __half*)src, rows, cols, lds);
}

// cuBLAS on 16-bit operands; C fp32, or (c16) of prec's 16-bit type.
static void gemm16(int ta, int tb, int M, int N, int K, float alpha, rtc_operand16 A,
                   rtc_operand16 B, float beta, void* C, int c16, int ldc, rt_dtype prec) {
    if (M <= 0 || N <= 0) return;
    RT_KCHECK(prec == RT_BF16 || prec == RT_F16, "16-bit operands are RT_BF16 or RT_F16",
              "rtc_gemm16 with prec %d", (int)prec);
    const cudaDataType_t t16 = prec == RT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T (see rtc_gemm_rm).
    RT_CHECK_CUBLAS(cublasGemmEx(blas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B.p, t16, B.ld,
                                 A.p, t16, A.ld, &beta, C, c16 ? t16 : CUDA_R_32F, ldc,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void rtc_gemm16(int ta, int tb, int M, int N, int K, float alpha, rtc_operand16 A, rtc_operand16 B,
                float beta, float* C, int ldc, rt_dtype prec) {
    gemm16(ta, tb, M, N, K, alpha, A, B, beta, C, 0, ldc, prec);
}

// One cuBLASLt matmul of 16-bit operands, row-major D[M, N] (type td, row stride ldd) =
// op(A) op(B) (column-major, as gemm16: D^T = op(B)^T op(A)^T, each matrix as stored) with
// `epilogue` and its vector `vec` (a bias, or a bias gradient), summed in fp32, planned for
// the context's SMs. Returns cuBLASLt's status.
static cublasStatus_t lt_matmul16(int ta, int tb, int M, int N, int K, rtc_operand16 A,
                                  rtc_operand16 B, cublasLtEpilogue_t epilogue, const void* vec,
                                  void* D, cudaDataType_t td, int ldd, rt_dtype prec) {
    rtc_ctx* c = rtc_get();
    const cudaDataType_t t16 = prec == RT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    const cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDesc_t op;
    RT_CHECK_CUBLAS(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    RT_CHECK_CUBLAS(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    RT_CHECK_CUBLAS(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    RT_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                   sizeof epilogue));
    RT_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec,
                                                   sizeof vec));
    if (c->gemm_sms > 0)
        RT_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET,
                                                       &c->gemm_sms, sizeof c->gemm_sms));
    cublasLtMatrixLayout_t la, lb, ld;
    RT_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&la, t16, tb ? K : N, tb ? N : K, B.ld));
    RT_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&lb, t16, ta ? M : K, ta ? K : M, A.ld));
    RT_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&ld, td, N, M, ldd));
    const float one = 1.0f, zero = 0.0f;
    const cublasStatus_t st =
        cublasLtMatmul(c->blas_lt, op, &one, B.p, la, A.p, lb, &zero, D, ld, D, ld, NULL,
                       c->blas_workspace, RTC_BLAS_WORKSPACE, c->stream);
    (void)cublasLtMatrixLayoutDestroy(la);
    (void)cublasLtMatrixLayoutDestroy(lb);
    (void)cublasLtMatrixLayoutDestroy(ld);
    (void)cublasLtMatmulDescDestroy(op);
    return st;
}

// cuBLASLt's bias epilogue: D = op(A) op(B) + bias (per column of the row-major D, row
// stride ldd), summed in fp32 and rounded once to prec. Not cublasGemmEx with the bias rows
// as a 16-bit C and beta = 1: on an H100 (cuBLAS 13) that gave results up to 255 bf16 ulps
// off in place.
static void gemm16_bias(int ta, int tb, int M, int N, int K, rtc_operand16 A, rtc_operand16 B,
                        const void* bias, void* D, int ldd, rt_dtype prec) {
    const cudaDataType_t t16 = prec == RT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    RT_CHECK_CUBLAS(lt_matmul16(ta, tb, M, N, K, A, B, CUBLASLT_EPILOGUE_BIAS, bias, D, t16, ldd,
                                prec));
}

bool rtc_gemm16_bgrad(int M, int N, int K, rtc_operand16 A, rtc_operand16 B, void* C, int c16,
                      int ldc, void* bgrad, rt_dtype prec) {
    rtc_ctx* c = rtc_get();
    const int declined = c16 ? 2 : 1;
    if (c->bgrad_declined & declined) return false;
    // 16-byte operands and rows, as cuBLASLt's fast kernels want (else the column sums)
    if (!rtc_aligned16({A.p, B.p, C, bgrad}) || A.ld % 8 || B.ld % 8 || ldc % 8) return false;
    // A transposed (op T): the epilogue's "B" is our A, reduced over the product's K
    // (cuBLASLt BGRADB: one value per column of the column-major D, i.e. per row of our C,
    // of D's type)
    const cudaDataType_t tc = c16 ? (prec == RT_BF16 ? CUDA_R_16BF : CUDA_R_16F) : CUDA_R_32F;
    const cublasStatus_t st =
        lt_matmul16(1, 0, M, N, K, A, B, CUBLASLT_EPILOGUE_BGRADB, bgrad, C, tc, ldc, prec);
    // no kernel for it, or (said once) operands it refuses: nothing was launched. The
    // layouts are those the emulator checks (tests/cuda/emu), so the column sums are the
    // safe answer on a GPU either way.
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
        if (st == CUBLAS_STATUS_INVALID_VALUE)
            fprintf(stderr, "fsdpgen: note: cuBLASLt refused the bias-gradient epilogue (%s); "
                    "the linear backward sums dbias's columns instead\n",
                    cublasGetStatusString(st));
        c->bgrad_declined |= declined;
        return false;
    }
    RT_CHECK_CUBLAS(st);
    return true;
}

void rtc_gemm16_rounded(int ta, int tb, int M, int N, int K, float alpha, rtc_operand16 A,
                        rtc_operand16 B, const void* bias16, void* T, int ldt, float* C,
                        rt_dtype prec) {
    RT_KCHECK(!bias16 || alpha == 1.0f, "the bias epilogue's product is not scaled",
              "rtc_gemm16_rounded with a bias and alpha %g", (double)alpha);
    if (M <= 0 || N <= 0) return;
    const int np = rtc_ld16(N);  // the product's columns
    if (bias16) gemm16_bias(ta, tb, M, np, K, A, B, bias16, T, ldt, prec);
    else gemm16(ta, tb, M, np, K, alpha, A, B, 0.0f, T, 1, ldt, prec);
    if (C) rtc_widen(C, T, M, N, ldt, prec);
}

// ---- GEMM -------------------------------------------------------------------------------

void rtc_gemm_rm(int ta, int tb, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc, rt_dtype prec) {
    RT_KCHECK(prec == RT_F32 || prec == RT_BF16 || prec == RT_F16,
              "prec is the operands' dtype: RT_F32, RT_BF16 or RT_F16", "GEMM with prec %d",
              (int)prec);
    if (M <= 0 || N <= 0) return;
    if (prec != RT_F32 && K > 0) {
        const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
        const size_t na = rtc_elems16(ar, ac);
        char* s = (char*)rtc_operand_scratch((na + rtc_elems16(br, bc)) * 2);
        const rtc_operand16 a16 = rtc_narrow(s, A, ar, ac, lda, prec);
        const rtc_operand16 b16 = rtc_narrow(s + na * 2, B, br, bc, ldb, prec);
        rtc_gemm16(ta, tb, M, N, K, alpha, a16, b16, beta, C, ldc, prec);
        return;
    }
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands
    // and the M/N roles; a row-major matrix with row stride ld is its column-major
    // transpose with leading dimension ld, so the op flags carry over unchanged.
    RT_CHECK_CUBLAS(cublasGemmEx(blas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, CUDA_R_32F, ldb,
                                 A, CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
}

// ----------------------------------------------------------------------------
// flat reductions: pass 1 writes one double per block, pass 2 sums them in one block

__global__ void reduce_partial_kernel(double* partial, const float* x, size_t n, int squares) {
    double s = 0.0;
    RTC_GRID_STRIDE(i, n) {
        const double v = x[i];
        s += squares ? v * v : v;
    }
    s = rtc_block_sum(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void reduce_final_kernel(double* result, float* fout, double* dacc,
                                    const double* partial, int nparts) {
    double s = 0.0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) s += partial[i];
    s = rtc_block_sum(s);
    if (threadIdx.x == 0) {
        result[0] = s;
        if (fout) fout[0] = (float)s;
        if (dacc) dacc[0] = dacc[0] + s;
    }
}

void rtc_reduce_sum(rtc_ctx* ctx, const float* x, size_t n, int squares, float* fout,
                    double* dacc) {
    unsigned parts = 0;  // n == 0: the final kernel sums no partials (0.0)
    if (n > 0) {
        // ~8 values per thread before using more blocks, at most RTC_PARTIALS blocks
        const size_t per_block = (size_t)RTC_THREADS * 8;
        size_t b = (n + per_block - 1) / per_block;
        parts = (unsigned)(b < RTC_PARTIALS ? b : RTC_PARTIALS);
        reduce_partial_kernel<<<parts, RTC_THREADS, 0, ctx->stream>>>(ctx->scratch, x, n, squares);
        RTC_CHECK_LAUNCH(reduce_partial_kernel);
    }
    reduce_final_kernel<<<1, 1024, 0, ctx->stream>>>(ctx->scratch + RTC_RESULT_SLOT, fout, dacc,
                                                     ctx->scratch, (int)parts);
    RTC_CHECK_LAUNCH(reduce_final_kernel);
}
