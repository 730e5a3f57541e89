// Helpers shared by the CUDA test programs (tests/cuda/test_*.c): random host data, device
// copies, and comparisons that print the largest difference as |got - want| / max(1, |want|)
// through check.h. Static functions, included by each translation unit of a test (C, or
// C++ where nvcc builds the test: test_dtype_bits.cu; test_cuda_kernels: kernel_tests.h).
#ifndef FSDPGEN_TESTS_CUDA_HELPERS_H
#define FSDPGEN_TESTS_CUDA_HELPERS_H

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "host_data.h"  // rng_state, frand, hrand, hcopy
#include "rt_check.h"

#define TOL_EXACT 0.0
#define TOL_ELEM 2e-6
#define TOL_GEMM 1e-4

// ----------------------------------------------------------------------------
// no GPU

// 1 when no GPU is visible (as in CI), after the SKIP line naming `what` and the count line
// `0 passed, 0 failed`: the test then returns 0.
static inline int skip_without_gpu(const char* what) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaSuccess && count > 0) return 0;
    printf("SKIP %s: no GPU (cudaGetDeviceCount: %s)\n", what,
           e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    printf("0 passed, 0 failed\n");
    return 1;
}

// ----------------------------------------------------------------------------
// device copies, comparison (random host data: host_data.h)

static inline void* dalloc(size_t bytes) {
    void* d = NULL;
    RT_CHECK_CUDA(cudaMalloc(&d, bytes ? bytes : 4));
    return d;
}

static inline float* dup(const float* h, size_t n) {
    float* d = (float*)dalloc(n * sizeof(float));
    if (n) RT_CHECK_CUDA(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

// A device float holding v (the losses' dloss is read on the device); dfree it.
static inline float* dscalar(float v) { return dup(&v, 1); }

static inline int32_t* dup_i32(const int32_t* h, size_t n) {
    int32_t* d = (int32_t*)dalloc(n * sizeof(int32_t));
    if (n) RT_CHECK_CUDA(cudaMemcpy(d, h, n * sizeof(int32_t), cudaMemcpyHostToDevice));
    return d;
}

static inline float* down(const float* d, size_t n) {
    float* h = (float*)malloc((n ? n : 1) * sizeof(float));
    if (!h) abort();
    RT_CHECK_CUDA(cudaDeviceSynchronize());
    if (n) RT_CHECK_CUDA(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

// Compares n device values with n host values; NaN matches only NaN.
static inline void cmp(const char* name, const float* dgot, const float* want, size_t n,
                       double tol) {
    float* got = down(dgot, n);
    double maxabs = 0.0, maxerr = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double g = got[i], w = want[i];
        double err, abs;
        if (isnan(g) || isnan(w)) {
            err = abs = (isnan(g) && isnan(w)) ? 0.0 : INFINITY;
        } else {
            abs = fabs(g - w);
            err = abs / (fabs(w) > 1.0 ? fabs(w) : 1.0);
        }
        if (abs > maxabs) maxabs = abs;
        if (err > maxerr) maxerr = err;
    }
    free(got);
    CHECK(maxerr <= tol, "%s: %zu values, max diff %.3g (abs %.3g), tol %.3g", name, n, maxerr,
          maxabs, tol);
}

// Two device buffers (e.g. the probs and lowmem variants on the GPU).
static inline void cmp_dev(const char* name, const float* da, const float* db, size_t n,
                           double tol) {
    float* b = down(db, n);
    cmp(name, da, b, n, tol);
    free(b);
}

static inline void dfree(void* p) { RT_CHECK_CUDA(cudaFree(p)); }

#endif
