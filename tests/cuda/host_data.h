// Random and copied host buffers for the CUDA test programs (C and C++, with or without
// the CUDA runtime): cuda_helpers.h builds on it, and the emulated kernel tests
// (test_flash*_emu.cc) use it alone. Static functions, one translation unit per test;
// a test that wants its own data sets rng_state first. A test of several translation units
// defines HOST_DATA_SHARED_RNG before including this, and one of its files defines
// rng_state (from HOST_DATA_SEED): its files then draw one stream, as one file would.
#ifndef FSDPGEN_TESTS_CUDA_HOST_DATA_H
#define FSDPGEN_TESTS_CUDA_HOST_DATA_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define HOST_DATA_SEED 0x9E3779B97F4A7C15ull
#ifdef HOST_DATA_SHARED_RNG
extern uint64_t rng_state;
#else
static uint64_t rng_state = HOST_DATA_SEED;
#endif

static inline float frand(void) {  // uniform in [-1, 1)
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

// n floats of scale * U[-1, 1) + shift.
static inline float* hrand(size_t n, float scale, float shift) {
    float* h = (float*)malloc((n ? n : 1) * sizeof(float));
    if (!h) abort();
    for (size_t i = 0; i < n; i++) h[i] = frand() * scale + shift;
    return h;
}

static inline float* hcopy(const float* src, size_t n) {
    float* h = (float*)malloc((n ? n : 1) * sizeof(float));
    if (!h) abort();
    memcpy(h, src, n * sizeof(float));
    return h;
}

#endif
