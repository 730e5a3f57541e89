// packed_activations.h — the element-wise activations of rt_kernels.h with their packed
// twins, one row each, for the packed-storage tests of both backends (test_packed on the CPU,
// test_cuda_kernels on the GPU).
#ifndef FSDPGEN_TESTS_PACKED_ACTIVATIONS_H
#define FSDPGEN_TESTS_PACKED_ACTIVATIONS_H

#include <stddef.h>

#include "rt_kernels.h"

typedef struct packed_activation {
    const char* name;
    void (*forward)(float*, const float*, size_t, rt_dtype);
    void (*packed_forward)(void*, const void*, size_t, int, rt_dtype);
    void (*backward)(float*, const float*, const float*, size_t, rt_dtype, int);
    void (*packed_backward)(void*, const void*, const void*, size_t, int, rt_dtype, int);
} packed_activation;

static const packed_activation packed_activations[3] = {
    {"gelu", rt_gelu_forward, rt_gelu_packed_forward, rt_gelu_backward, rt_gelu_packed_backward},
    {"relu", rt_relu_forward, rt_relu_packed_forward, rt_relu_backward, rt_relu_packed_backward},
    {"silu", rt_silu_forward, rt_silu_packed_forward, rt_silu_backward, rt_silu_packed_backward},
};

#endif
