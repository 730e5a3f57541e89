// cublasLt.h of the CUDA emulator (tests/cuda/emu): the cuBLASLt matmul with the epilogues
// runtime/cuda uses: gemm16_bias's bias (D = op(A) op(B) + bias per row of the column-major
// D, summed in fp32, rounded once) and rtc_gemm16_bgrad's bias gradient (BGRADB: the sums of
// op(B)'s columns over k, one per column of D, in D's type), on the host
// (cuda_runtime_emu.cc).
#ifndef FSDPGEN_CUDA_EMU_CUBLASLT_H
#define FSDPGEN_CUDA_EMU_CUBLASLT_H

#include "cublas_v2.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct emu_blas_lt* cublasLtHandle_t;
typedef struct emu_lt_desc* cublasLtMatmulDesc_t;
typedef struct emu_lt_layout* cublasLtMatrixLayout_t;
typedef struct emu_lt_algo cublasLtMatmulAlgo_t;

typedef enum {
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
    CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET = 15,
} cublasLtMatmulDescAttributes_t;

typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_BGRADB = 512,
} cublasLtEpilogue_t;

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc,
                                        cublasComputeType_t computeType,
                                        cudaDataType_t scaleType);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                              const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                              const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                              const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspaceBytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
